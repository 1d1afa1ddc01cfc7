import Foundation
import Testing
import ShareSyncTestSupport

// Issue 11, "Wrong today", through the CLI against running daemons: public users' permission follows
// `share public`; a publicPermission change removes pending invitations; blocking, listing blocked users
// and `share unblock`; `record delete` of a missing record; `accept` prints the accepted share's zone;
// `zone create` of an existing zone; tokens from the future; one form of rule suffix.
@Suite("Sharing rules through the CLI: public permission, blocking, messages")
struct SharingRulesCLITests {
    /// A participant's write to the shared zone through the owner.
    func write(_ node: E2ENode, _ name: String) throws -> ChildProcess.Outcome {
        try node.run(
            ["record", "save", "--shared", "--zone", "Topics", "--type", "Note", "--name", name, "--parent", "topic-1",
             "--field", "text=string:\(name)"], timeout: 120)
    }

    @Test func publicUsersFollowThePublicPermission() async throws {
        try await blocking {
            let a = try E2ENode(name: "Alice")
            defer { a.stop() }
            let b = try E2ENode(name: "Bob")
            defer { b.stop() }
            try makeTopics(on: a)
            let share = try #require(try a.ok(["share", "create", "--zone", "Topics", "--public", "readOnly"]) as? [String: Any])
            let url = try #require(share["url"] as? String)

            // Bob joins while the link gives readOnly: refused.
            let accepted = try #require(try b.ok(["accept", url], timeout: 180) as? [String: Any])
            #expect(accepted["permission"] as? String == "readOnly")
            let refused = try write(b, "note-1")
            #expect(refused.status == 65, "\(refused.stdout) \(refused.stderr)")
            #expect(refused.stderr.contains("permissionFailure") && refused.stderr.contains("readOnlyParticipant"), "\(refused.stderr)")

            // readWrite: Bob, who joined while it was readOnly, may write now.
            let readWrite = try #require(try a.ok(["share", "public", "--zone", "Topics", "--permission", "readWrite"]) as? [String: Any])
            let bob = (readWrite["participants"] as? [[String: Any]])?.first { $0["userRecordName"] as? String == b.userRecordName }
            #expect(bob?["role"] as? String == "publicUser")
            #expect(bob?["permission"] as? String == "readWrite")
            let sent = try write(b, "note-2")
            #expect(sent.status == 0, "\(sent.stdout) \(sent.stderr)")
            #expect(try a.recordNames(zone: "Topics", shared: false).contains("note-2"))

            // readOnly again ("anyone with the link can view"): Bob, who wrote with readWrite, no longer can.
            try a.ok(["share", "public", "--zone", "Topics", "--permission", "readOnly"])
            let refusedAgain = try write(b, "note-3")
            #expect(refusedAgain.status == 65, "\(refusedAgain.stdout) \(refusedAgain.stderr)")
            #expect(refusedAgain.stderr.contains("readOnlyParticipant"), "\(refusedAgain.stderr)")
            #expect(try !a.recordNames(zone: "Topics", shared: false).contains("note-3"))
            // And `share permission` cannot give one public user more than the link gives.
            let publicID = try #require(bob?["participantID"] as? String)
            let single = try a.run(["share", "permission", "--zone", "Topics", "--participant", publicID, "--permission", "readWrite"])
            #expect(single.status == 65)
            #expect(single.stderr.contains("publicUserPermission"), "\(single.stderr)")
        }
    }

    @Test func goingPublicDropsPendingInvitationsAndBlockedUsersAreListedAndUnblocked() async throws {
        try await blocking {
            let a = try E2ENode(name: "Alice")
            defer { a.stop() }
            let b = try E2ENode(name: "Bob")
            defer { b.stop() }
            try makeTopics(on: a)
            let (url, _) = try invite(b, to: "Topics", of: a)

            // Public, then private again: Bob's pending invitation is gone; his link no longer admits him.
            let opened = try #require(try a.ok(["share", "public", "--zone", "Topics", "--permission", "readOnly"]) as? [String: Any])
            #expect((opened["participants"] as? [[String: Any]])?.map { $0["role"] as? String } == ["owner"])
            try a.ok(["share", "public", "--zone", "Topics", "--permission", "none"])
            let refused = try b.run(["accept", url], timeout: 120)
            #expect(refused.status == 65, "\(refused.stdout) \(refused.stderr)")
            #expect(refused.stderr.contains("participantMayNeedVerification"), "\(refused.stderr)")

            // Blocked: listed by `share show`, and an invitation says what to do instead of failing inside.
            try a.ok(["share", "block", "--zone", "Topics", "--user", b.userRecordName])
            let shown = try #require(try a.ok(["share", "show", "--zone", "Topics"]) as? [String: Any])
            #expect((shown["blocked"] as? [[String: Any]])?.compactMap { $0["userRecordName"] as? String } == [b.userRecordName])
            let text = try cli(["share", "show", "--zone", "Topics", "--home", a.home])
            #expect(text.stdout.contains("blocked") && text.stdout.contains(b.userRecordName), "\(text.stdout)")
            let invited = try a.run(["share", "invite", "--zone", "Topics", "--user", b.userRecordName, "--permission", "readOnly"])
            #expect(invited.status == 65)
            #expect(invited.stderr.contains("invalidArguments") && invited.stderr.contains("identityBlocked"), "\(invited.stderr)")
            #expect(invited.stderr.contains(b.userRecordName) && invited.stderr.contains("share unblock"), "\(invited.stderr)")
            #expect(!invited.stderr.contains("internalError"), "\(invited.stderr)")

            // Unblocked: the list is empty, a second unblock says he is not blocked, and he can be invited.
            let unblocked = try cli(["share", "unblock", "--zone", "Topics", "--user", b.userRecordName, "--home", a.home])
            #expect(unblocked.status == 0 && unblocked.stdout == "unblocked \(b.userRecordName)\n", "\(unblocked.stderr)")
            let after = try #require(try a.ok(["share", "show", "--zone", "Topics"]) as? [String: Any])
            #expect((after["blocked"] as? [Any])?.isEmpty == true)
            let again = try a.run(["share", "unblock", "--zone", "Topics", "--user", b.userRecordName])
            #expect(again.status == 65)
            #expect(again.stderr.contains("unknownItem") && again.stderr.contains("is not blocked"), "\(again.stderr)")
            let reinvited = try #require(
                try a.ok(["share", "invite", "--zone", "Topics", "--user", b.userRecordName, "--permission", "readOnly"]) as? [String: Any])
            let link = try #require(reinvited["invitationURL"] as? String)
            try b.ok(["accept", link], timeout: 180)
            #expect(try eventually(timeout: 60) { try b.recordNames(zone: "Topics", shared: true).contains("topic-1") })
        }
    }

    @Test func acceptZoneCreateRecordDeleteTokensAndRuleSuffixes() async throws {
        try await blocking {
            let a = try E2ENode(name: "Alice")
            defer { a.stop() }
            let b = try E2ENode(name: "Bob")
            defer { b.stop() }
            try a.ok(["zone", "create", "Topics"])
            try a.ok(["zone", "create", "Photos"])
            try a.ok(["record", "save", "--zone", "Topics", "--type", "Topic", "--name", "topic-1"])
            try a.ok(["record", "save", "--zone", "Photos", "--type", "Photo", "--name", "photo-1"])
            let topics = try invite(b, to: "Topics", of: a)
            let photos = try invite(b, to: "Photos", of: a)
            try b.ok(["accept", topics.url], timeout: 180)

            // `accept` names the zone of the share accepted, not every zone the owner shares with this node.
            let accepted = try #require(try b.ok(["accept", photos.url], timeout: 180) as? [String: Any])
            #expect((accepted["zones"] as? [[String: Any]])?.map { $0["zoneName"] as? String } == ["Photos"])
            #expect((try #require(try b.ok(["zone", "list", "--shared"]) as? [Any])).count == 2)

            // `zone create` of a zone that exists does not say "created"; the default zone is refused.
            let existing = try cli(["zone", "create", "Topics", "--home", a.home])
            #expect(existing.status == 0 && existing.stdout == "zone Topics already exists\n", "\(existing.stdout)")
            #expect((try #require(try a.ok(["zone", "create", "Topics"]) as? [String: Any]))["created"] as? Bool == false)
            #expect((try #require(try a.ok(["zone", "create", "Fresh"]) as? [String: Any]))["created"] as? Bool == true)
            let defaultZone = try a.run(["zone", "create", "_defaultZone"])
            #expect(defaultZone.status == 65)
            #expect(!defaultZone.stdout.contains("created"))
            #expect(defaultZone.stderr.contains("invalidArguments") && defaultZone.stderr.contains("always exists"), "\(defaultZone.stderr)")

            // Error messages (in text; with --json the rule is a field) carry the rule one way: "; rule X".
            let defaultZoneText = try cli(["zone", "create", "_defaultZone", "--home", a.home])
            #expect(defaultZoneText.stderr.hasSuffix("; rule defaultZone\n"), "\(defaultZoneText.stderr)")
            #expect(!defaultZoneText.stderr.contains("[rule"))
            #expect((try json(defaultZone.stderr) as? [String: [String: Any]])?["error"]?["rule"] as? String == "defaultZone")

            // `record delete` of a record that does not exist: unknownItem, as CloudKit answers.
            let missing = try a.run(["record", "delete", "--zone", "Topics", "--name", "ghost"])
            #expect(missing.status == 65)
            #expect(missing.stderr.contains("unknownItem") && missing.stderr.contains("ghost"), "\(missing.stderr)")

            // The private database's tokens seal their position: one altered is refused as malformed (a
            // token ahead of the history, from a database restored from an older copy, is tested in
            // the store's ChangeFeedTests). The shared database's, local to the node, says "ahead".
            let privateToken = try #require((try a.ok(["changes"]) as? [String: Any])?["token"] as? String)
            #expect(privateToken.hasPrefix("private:2."), "\(privateToken)")
            let sealed = try #require(privateToken.split(separator: ".").last)
            let altered = privateToken.dropLast(sealed.count) + (sealed.first == "A" ? "B" : "A") + sealed.dropFirst()
            let alteredPrivate = try a.run(["changes", "--since", String(altered)])
            #expect(alteredPrivate.status == 65)
            #expect(alteredPrivate.stderr.contains("invalidArguments") && alteredPrivate.stderr.contains("changeTokenFormat"), "\(alteredPrivate.stderr)")
            let sharedToken = try #require((try b.ok(["changes", "--shared"]) as? [String: Any])?["token"] as? String)
            var sharedParts = sharedToken.split(separator: ":").map(String.init)
            sharedParts[sharedParts.count - 1] = String(Int(sharedParts[sharedParts.count - 1])! + 1000)
            let futureShared = try b.run(["changes", "--shared", "--since", sharedParts.joined(separator: ":")])
            #expect(futureShared.status == 65)
            #expect(futureShared.stderr.contains("changeTokenExpired") && futureShared.stderr.contains("ahead"), "\(futureShared.stderr)")
            #expect(!futureShared.stderr.contains("older"), "\(futureShared.stderr)")
        }
    }
}
