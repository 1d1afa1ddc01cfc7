import Foundation
import ShareSyncTestSupport
import Testing
import ShareSyncCore

/// The participants of a share as `share participants` prints them (`--shared`: as this node sees the share it accepted).
private func participants(_ node: E2ENode, zone: String = "Topics", shared: Bool = false) throws -> [[String: Any]] {
    try #require(try node.ok(["share", "participants", "--zone", zone] + (shared ? ["--shared"] : [])) as? [[String: Any]])
}

private func participantID(_ list: [[String: Any]], user: String) throws -> String {
    try #require(list.first { $0["userRecordName"] as? String == user }?["participantID"] as? String, "\(list)")
}

/// Expects a command to be refused (exit 65) with this code and rule, and returns its stderr.
/// Invites `participant` by user record name to the existing share of `zone` of `owner`: (invitation URL, participant ID).
private func invite(
    _ participant: E2ENode, to zone: String, of owner: E2ENode, permission: String = "readWrite", create: Bool
) throws -> (url: String, participantID: String) {
    if create { try owner.ok(["share", "create", "--zone", zone]) }
    let invited = try #require(
        try owner.ok(["share", "invite", "--zone", zone, "--user", participant.userRecordName, "--permission", permission])
            as? [String: Any])
    return (try #require(invited["invitationURL"] as? String), try #require(invited["participantID"] as? String))
}

@discardableResult
private func refused(
    _ node: E2ENode, _ arguments: [String], code: String, rule: Rule?, sourceLocation: SourceLocation = #_sourceLocation
) throws -> String {
    let outcome = try node.run(arguments)
    #expect(outcome.status == 65, "\(arguments): \(outcome.status) \(outcome.stdout) \(outcome.stderr)", sourceLocation: sourceLocation)
    #expect(outcome.stderr.contains(code), "\(arguments): \(outcome.stderr)", sourceLocation: sourceLocation)
    if let rule { #expect(outcome.stderr.contains(rule.rawValue), "\(arguments): \(outcome.stderr)", sourceLocation: sourceLocation) }
    return outcome.stderr
}

@Suite("Sharing features through the CLI: administrators, metadata, one-time links, properties, the participant's view")
struct ShareManagementCLITests {
    @Test func anAdministratorManagesParticipantsFromTheirNodeAndAPlainParticipantIsRefused() async throws {
        try await blocking {
            let a = try E2ENode(name: "Alice")
            defer { a.stop() }
            let b = try E2ENode(name: "Bob")
            defer { b.stop() }
            let c = try E2ENode(name: "Carol")
            defer { c.stop() }
            try makeTopics(on: a)
            try a.ok(["share", "create", "--zone", "Topics", "--title", "Topics", "--allow-access-requests"])
            let bInvite = try #require(try a.ok([
                "share", "invite", "--zone", "Topics", "--user", b.userRecordName, "--permission", "readWrite", "--role", "administrator",
            ]) as? [String: Any])
            #expect(bInvite["role"] as? String == "administrator")
            try b.ok(["accept", try #require(bInvite["invitationURL"] as? String)])
            let (cURL, cID) = try invite(c, to: "Topics", of: a, permission: "readOnly", create: false)
            try c.ok(["accept", cURL])
            let shareURL = try #require(try a.ok(["share", "show", "--zone", "Topics"]) as? [String: Any])["url"] as! String
            let ownerID = try participantID(try participants(a), user: a.userRecordName)
            let bID = try participantID(try participants(a), user: b.userRecordName)

            // A plain participant can manage nothing: the owner refuses each change.
            for command in [
                ["share", "invite", "--zone", "Topics", "--shared", "--one-time", "--permission", "readOnly"],
                ["share", "remove", "--zone", "Topics", "--shared", "--participant", cID],
                ["share", "permission", "--zone", "Topics", "--shared", "--participant", cID, "--permission", "readWrite"],
                // Someone this participant does not see: refused as a change it may not make, not as
                // a participant that does not exist.
                ["share", "permission", "--zone", "Topics", "--shared", "--participant", bID, "--permission", "readOnly"],
                ["share", "remove", "--zone", "Topics", "--shared", "--participant", bID],
            ] {
                try refused(c, command, code: "permissionFailure", rule: .shareEditOwnerOrAdministrator)
            }
            // ...and sees only the owner and themselves.
            let cView = try participants(c, shared: true)
            #expect(Set(cView.compactMap { $0["userRecordName"] as? String }) == [a.userRecordName, c.userRecordName], "\(cView)")

            // The administrator sees everyone, changes a participant's permission and invites with a one-time link.
            #expect(eventually { (try? participants(b, shared: true).count) == 3 })
            let changed = try #require(try b.ok([
                "share", "permission", "--zone", "Topics", "--shared", "--participant", cID, "--permission", "readWrite",
            ]) as? [String: Any])
            #expect((changed["participant"] as? [String: Any])?["permission"] as? String == "readWrite", "\(changed)")
            #expect(try participants(a).first { $0["participantID"] as? String == cID }?["permission"] as? String == "readWrite")
            let invited = try #require(try b.ok(["share", "invite", "--zone", "Topics", "--shared", "--one-time", "--permission", "readOnly"])
                as? [String: Any])
            let oneTimeLink = try #require((invited["participant"] as? [String: Any])?["invitationURL"] as? String, "\(invited)")
            #expect(oneTimeLink.contains("&invite="))
            #expect(try participants(a).count == 4)

            // What an administrator may not do: the owner refuses it and nothing changes.
            try refused(b, ["share", "role", "--zone", "Topics", "--shared", "--participant", bID, "privateUser"],
                        code: "permissionFailure", rule: .adminSelfEdit)
            try refused(b, ["share", "role", "--zone", "Topics", "--shared", "--participant", cID, "administrator"],
                        code: "permissionFailure", rule: .administratorRoleOwnerOnly)
            try refused(b, ["share", "invite", "--zone", "Topics", "--shared", "--user", "_0123456789abcdef0123456789abcdef", "--permission", "readOnly",
                            "--role", "administrator"], code: "permissionFailure", rule: .administratorRoleOwnerOnly)
            try refused(b, ["share", "remove", "--zone", "Topics", "--shared", "--participant", ownerID], code: "invalidArguments", rule: .oneOwner)
            #expect(try b.run(["share", "public", "--zone", "Topics", "--shared", "--permission", "readOnly"]).status == 64)
            let afterRefusals = try participants(a)
            #expect(afterRefusals.count == 4)
            #expect(afterRefusals.first { $0["participantID"] as? String == bID }?["role"] as? String == "administrator")
            #expect(afterRefusals.first { $0["participantID"] as? String == cID }?["role"] as? String == "privateUser")

            // The administrator removes Carol; she loses the share. She asks for access; he approves her.
            try b.ok(["share", "remove", "--zone", "Topics", "--shared", "--participant", cID])
            #expect(!(try participants(a)).contains { $0["participantID"] as? String == cID })
            #expect(eventually { (try? c.ok(["zone", "list", "--shared"])).flatMap { $0 as? [Any] }?.isEmpty == true })
            try c.ok(["request-access", shareURL])
            #expect(eventually {
                let requesters = (try? b.ok(["share", "requesters", "--zone", "Topics", "--shared"])).flatMap { $0 as? [[String: Any]] }
                return requesters?.contains { $0["userRecordName"] as? String == c.userRecordName } == true
            })
            try b.ok(["share", "approve", "--zone", "Topics", "--shared", "--user", c.userRecordName, "--permission", "readOnly"])
            let approved = try participants(a).first { $0["userRecordName"] as? String == c.userRecordName }
            #expect(approved?["acceptanceStatus"] as? String == "pending", "\(String(describing: approved))")
            try c.ok(["accept", shareURL])
            #expect(try c.recordNames(zone: "Topics", shared: true).contains("topic-1"))

            // The owner demotes Bob: from then on the owner refuses his changes, and he no longer sees Carol.
            try a.ok(["share", "role", "--zone", "Topics", "--participant", bID, "privateUser"])
            try refused(b, ["share", "invite", "--zone", "Topics", "--shared", "--one-time", "--permission", "readOnly"],
                        code: "permissionFailure", rule: .shareEditOwnerOrAdministrator)
            #expect(eventually { (try? participants(b, shared: true).count) == 2 })
            #expect(try participants(a).count == 4)
        }
    }

    @Test func shareInfoShowsTheMetadataWithoutAcceptingAndAOneTimeLinkAdmitsOneIdentity() async throws {
        try await blocking {
            let a = try E2ENode(name: "Alice", initArguments: ["--email", "alice@example.org"])
            defer { a.stop() }
            let b = try E2ENode(name: "Bob")
            defer { b.stop() }
            let c = try E2ENode(name: "Carol")
            defer { c.stop() }
            try makeTopics(on: a)
            try a.ok(["record", "save", "--zone", "Topics", "--type", "Note", "--name", "note-1", "--parent", "topic-1"])
            try a.ok(["share", "create", "--zone", "Topics", "--root", "topic-1", "--title", "Groceries", "--type", "com.example.list"])
            let invited = try #require(try a.ok(["share", "invite", "--zone", "Topics", "--one-time", "--permission", "readWrite"])
                as? [String: Any])
            let link = try #require(invited["invitationURL"] as? String)
            #expect(invited["userRecordName"] == nil && invited["emailAddress"] == nil)
            // --one-time with a name is a usage error.
            let both = try a.run(["share", "invite", "--zone", "Topics", "--one-time", "--user", b.userRecordName, "--permission", "readOnly"])
            #expect(both.status == 64, "\(both.stderr)")

            // Metadata first: what the link offers, and nothing accepted or stored.
            let info = try #require(try b.ok(["share", "info", link]) as? [String: Any])
            #expect(info["ownerName"] as? String == a.userRecordName)
            #expect(info["ownerDisplayName"] as? String == "Alice")
            #expect(info["title"] as? String == "Groceries")
            #expect(info["shareType"] as? String == "com.example.list")
            #expect(info["zoneName"] as? String == "Topics")
            #expect(info["rootRecordName"] as? String == "topic-1")
            #expect(info["role"] as? String == "privateUser")
            #expect(info["permission"] as? String == "readWrite")
            #expect(info["status"] as? String == "pending")
            #expect(info["participantCount"] as? Int == 2)
            #expect(info["recordCount"] as? Int == 3)
            let human = try cli(["share", "info", link, "--home", b.home])
            #expect(human.status == 0 && human.stdout.contains("Groceries") && human.stdout.contains("Alice"), "\(human.stdout)")
            let owner = "from Alice <alice@example.org> (\(a.userRecordName))"
            #expect(human.stdout.contains(owner), "\(human.stdout)")
            #expect(try #require(try b.ok(["zone", "list", "--shared"]) as? [Any]).isEmpty)
            #expect(try b.run(["record", "list", "--zone", "Topics", "--shared"]).status != 0)
            let stillPending = try participants(a).first { $0["participantID"] as? String == invited["participantID"] as? String }
            #expect(stillPending?["acceptanceStatus"] as? String == "pending")
            #expect(stillPending?["userRecordName"] == nil)

            // The first identity to accept becomes the participant; a second one is refused.
            // `accept` names the owner as `share info` did.
            let accepted = try cli(["accept", link, "--home", b.home])
            #expect(accepted.status == 0 && accepted.stdout.contains(owner), "\(accepted.stdout) \(accepted.stderr)")
            #expect(try b.recordNames(zone: "Topics", shared: true).contains("note-1"))
            let bound = try participants(a).first { $0["participantID"] as? String == invited["participantID"] as? String }
            #expect(bound?["userRecordName"] as? String == b.userRecordName)
            #expect(bound?["acceptanceStatus"] as? String == "accepted")
            for command in [["accept", link], ["share", "info", link]] {
                let stderr = try refused(c, command, code: "participantMayNeedVerification", rule: .invitationSpent)
                #expect(stderr.contains("already used"), "\(stderr)")
            }
            #expect(try #require(try c.ok(["zone", "list", "--shared"]) as? [Any]).isEmpty)
            #expect(try participants(a).count == 2)
        }
    }

    @Test func sharePropertiesReachParticipantsWhoSeeTheShareAsItsRecordGivesIt() async throws {
        try await blocking {
            let a = try E2ENode(name: "Alice")
            defer { a.stop() }
            let b = try E2ENode(name: "Bob")
            defer { b.stop() }
            try a.ok(["zone", "create", "Topics"])
            try a.ok(["record", "save", "--zone", "Topics", "--type", "Topic", "--name", "topic-1"])
            let image = Data((0..<3000).map { UInt8($0 % 251) })
            let imagePath = a.folder.path + "/thumb.png"
            try image.write(to: URL(fileURLWithPath: imagePath))
            let created = try #require(try a.ok([
                "share", "create", "--zone", "Topics", "--title", "Groceries", "--thumbnail", imagePath, "--type", "public.image",
            ]) as? [String: Any])
            #expect(created["thumbnailImageData"] as? String == image.base64EncodedString())
            let (url, _) = try invite(b, to: "Topics", of: a, create: false)
            // A third party the owner invited but who has not accepted: Bob, a plain participant, does not see them.
            try a.ok(["share", "invite", "--zone", "Topics", "--email", "dave@example.org", "--permission", "readOnly"])
            try b.ok(["accept", url])

            let seen = try #require(try b.ok(["share", "show", "--zone", "Topics", "--shared"]) as? [String: Any])
            #expect(seen["ownerName"] as? String == a.userRecordName)
            #expect(seen["title"] as? String == "Groceries")
            #expect(seen["shareType"] as? String == "public.image")
            #expect(seen["thumbnailImageData"] as? String == image.base64EncodedString())
            let people = try #require(seen["participants"] as? [[String: Any]])
            #expect(Set(people.compactMap { $0["userRecordName"] as? String }) == [a.userRecordName, b.userRecordName], "\(people)")
            #expect(people.allSatisfy { $0["invitationURL"] == nil })
            let me = people.first { $0["userRecordName"] as? String == b.userRecordName }
            #expect(me?["permission"] as? String == "readWrite" && me?["role"] as? String == "privateUser")
            #expect(seen["currentUserParticipantID"] as? String == me?["participantID"] as? String)
            // The share record in the replica carries the system fields.
            let record = try #require(try b.ok(["record", "get", "--zone", "Topics", "--shared", "--name",
                                                seen["shareName"] as! String]) as? [String: Any])
            let fields = try #require(record["fields"] as? [String: Any])
            #expect((fields["cloudkit.title"] as? [String: Any])?["value"] as? String == "Groceries")
            #expect((fields["cloudkit.type"] as? [String: Any])?["value"] as? String == "public.image")
            #expect((fields["cloudkit.thumbnailImageData"] as? [String: Any])?["value"] as? String == image.base64EncodedString())
            let human = try cli(["share", "show", "--zone", "Topics", "--shared", "--home", b.home])
            #expect(human.stdout.contains("(you)") && human.stdout.contains("thumbnail: 3000 bytes"), "\(human.stdout)")

            // Edited later; participants get the new values.
            try a.ok(["share", "set", "--zone", "Topics", "--title", "Weekly groceries", "--clear", "thumbnail"])
            #expect(eventually {
                let now = (try? b.ok(["share", "show", "--zone", "Topics", "--shared"])).flatMap { $0 as? [String: Any] }
                return now?["title"] as? String == "Weekly groceries" && now?["thumbnailImageData"] == nil
            })

            // Access requests switched on, then off again.
            try a.ok(["share", "set", "--zone", "Topics", "--allow-access-requests"])
            #expect((try a.ok(["share", "show", "--zone", "Topics"]) as? [String: Any])?["allowsAccessRequests"] as? Bool == true)
            try a.ok(["share", "set", "--zone", "Topics", "--no-allow-access-requests"])
            #expect((try a.ok(["share", "show", "--zone", "Topics"]) as? [String: Any])?["allowsAccessRequests"] as? Bool != true)

            // Bad input: a clear error, and nothing changes.
            let big = a.folder.path + "/big.png"
            try Data(count: 256 * 1024 + 1).write(to: URL(fileURLWithPath: big))
            try refused(a, ["share", "set", "--zone", "Topics", "--thumbnail", big], code: "limitExceeded", rule: .thumbnailSize)
            try refused(a, ["share", "set", "--zone", "Topics", "--type", "not a type"], code: "invalidArguments", rule: .shareTypeSyntax)
            let missing = try a.run(["share", "set", "--zone", "Topics"])
            #expect(missing.status == 64, "\(missing.stderr)")
            let after = try #require(try a.ok(["share", "show", "--zone", "Topics"]) as? [String: Any])
            #expect(after["title"] as? String == "Weekly groceries" && after["thumbnailImageData"] == nil)
            #expect(after["shareType"] as? String == "public.image")
            // A participant cannot set them: `share set` is the owner's.
            let notOwner = try b.run(["share", "set", "--zone", "Topics", "--shared", "--title", "Mine"])
            #expect(notOwner.status == 64, "\(notOwner.stderr)")

            // A participant deleting the share record leaves the share, and is told so (it printed "sent").
            let left = try cli(["record", "delete", "--shared", "--zone", "Topics", "--name", seen["shareName"] as! String, "--home", b.home])
            #expect(left.status == 0 && left.stdout.contains("you left the share"), "\(left.stdout) \(left.stderr)")
            #expect(eventually { ((try? b.ok(["zone", "list", "--shared"])) as? [Any])?.isEmpty == true })
        }
    }
}
