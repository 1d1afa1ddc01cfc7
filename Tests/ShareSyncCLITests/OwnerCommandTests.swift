import Foundation
import ShareSyncTestSupport
import Testing

@Suite("Owner-side commands through the daemon")
struct OwnerCommandTests {
    @Test func zonesCanBeCreatedListedAndDeleted() async throws {
        try await blocking {
            let node = try RunningNode()
            defer { node.stop() }
            let created = try #require(try node.json(["zone", "create", "Groceries"]) as? [String: Any])
            #expect(created["zoneName"] as? String == "Groceries")
            let zones = try #require(try node.json(["zone", "list"]) as? [[String: Any]])
            #expect(zones.compactMap { $0["zoneName"] as? String } == ["_defaultZone", "Groceries"])
            _ = try node.json(["zone", "delete", "Groceries"])
            let after = try #require(try node.json(["zone", "list"]) as? [[String: Any]])
            #expect(after.compactMap { $0["zoneName"] as? String } == ["_defaultZone"])

            let human = try node.run(["zone", "list"])
            #expect(human.stdout == "_defaultZone\n")
        }
    }

    @Test func deletingTheDefaultZoneIsRefusedWith65() async throws {
        try await blocking {
            let node = try RunningNode()
            defer { node.stop() }
            let outcome = try node.run(["zone", "delete", "_defaultZone"])
            #expect(outcome.status == 65)
            #expect(outcome.stderr.hasPrefix("sharesync: invalidArguments: the default zone cannot be deleted"))
            #expect(outcome.stderr.split(separator: "\n").count == 1)
        }
    }

    @Test("a --parent that does not exist is refused (a typo took the record out of its share); an existing one is kept")
    func aMissingParentIsRefused() async throws {
        try await blocking {
            let node = try RunningNode()
            defer { node.stop() }
            _ = try node.json(["zone", "create", "Z"])
            _ = try node.json(["record", "save", "--zone", "Z", "--type", "List", "--name", "list-1"])
            _ = try node.json(["record", "save", "--zone", "Z", "--type", "Item", "--name", "milk", "--parent", "list-1"])
            let typo = try cli(["record", "save", "--zone", "Z", "--name", "milk", "--parent", "lits-1", "--home", node.home])
            #expect(typo.status == 65 && typo.stderr.contains("parentNotFound") && typo.stderr.contains("lits-1"), "\(typo.stderr)")
            // The error names the record refused (its recordName), as every other refusal does; the
            // message names the parent. Before, recordName was the missing parent's.
            let typoJSON = try cli(["record", "save", "--zone", "Z", "--name", "milk", "--parent", "lits-1", "--home", node.home, "--json"])
            let error = try #require(try JSONSerialization.jsonObject(with: Data(typoJSON.stderr.utf8)) as? [String: Any])["error"] as? [String: Any]
            #expect(error?["recordName"] as? String == "milk", "\(typoJSON.stderr)")
            let milk = try #require(try node.json(["record", "get", "--zone", "Z", "--name", "milk"]) as? [String: Any])
            #expect((milk["parent"] as? [String: Any])?["recordName"] as? String == "list-1", "\(milk)")
            // Saving again under the parent it has, or a field alone, needs nothing more.
            _ = try node.json(["record", "save", "--zone", "Z", "--name", "milk", "--parent", "list-1", "--field", "n=int64:1"])
        }
    }

    @Test func recordsRoundTripEveryFieldType() async throws {
        try await blocking {
            let node = try RunningNode()
            defer { node.stop() }
            _ = try node.json(["zone", "create", "Z"])
            _ = try node.json(["record", "save", "--zone", "Z", "--type", "List", "--name", "list-1", "--field", "title=string:Week"])
            let saved = try #require(try node.json([
                "record", "save", "--zone", "Z", "--type", "Item", "--name", "milk", "--parent", "list-1",
                "--field", "title=string:Milk: 2 l", "--field", "count=int64:2", "--field", "price=double:1.25",
                "--field", "done=bool:false", "--field", "due=date:2026-11-21T10:00:00Z", "--field", "note=bytes:aGk=",
                "--field", "list=reference:list-1", "--field", "where=location:48.85,2.35",
            ]) as? [String: Any])
            let fields = try #require(saved["fields"] as? [String: [String: Any]])
            #expect(fields["title"]?["value"] as? String == "Milk: 2 l")
            #expect(fields["count"]?["type"] as? String == "INT64")
            #expect(fields["price"]?["value"] as? Double == 1.25)
            #expect(fields["done"]?["value"] as? Bool == false)
            #expect(fields["due"]?["value"] as? Int == 1_795_255_200_000)
            #expect(fields["note"]?["value"] as? String == "aGk=")
            #expect(fields["list"]?["type"] as? String == "REFERENCE")
            #expect(fields["where"]?["type"] as? String == "LOCATION")
            #expect((saved["parent"] as? [String: Any])?["recordName"] as? String == "list-1")

            // Saving again sets the given fields and keeps the others.
            _ = try node.json(["record", "save", "--zone", "Z", "--type", "Item", "--name", "milk", "--field", "done=bool:true"])
            let fetched = try #require(try node.json(["record", "get", "--zone", "Z", "--name", "milk"]) as? [String: Any])
            let after = try #require(fetched["fields"] as? [String: [String: Any]])
            #expect(after["done"]?["value"] as? Bool == true)
            #expect(after["title"]?["value"] as? String == "Milk: 2 l")

            let listed = try #require(try node.json(["record", "list", "--zone", "Z"]) as? [[String: Any]])
            #expect(listed.compactMap { $0["recordName"] as? String } == ["list-1", "milk"])

            _ = try node.json(["record", "delete", "--zone", "Z", "--name", "milk"])
            let missing = try node.run(["record", "get", "--zone", "Z", "--name", "milk"])
            #expect(missing.status == 65)
            #expect(missing.stderr.contains("unknownItem"))
            let missingDelete = try node.run(["record", "delete", "--zone", "Z", "--name", "milk"])
            #expect(missingDelete.status == 65)

            let human = try node.run(["record", "get", "--zone", "Z", "--name", "list-1"])
            #expect(human.stdout.contains("list-1  (List, zone Z"))
            #expect(human.stdout.contains(#"title = "Week""#))
        }
    }

    @Test func aRecordInAMissingZoneIsRefused() async throws {
        try await blocking {
            let node = try RunningNode()
            defer { node.stop() }
            let outcome = try node.run(["record", "save", "--zone", "Nope", "--type", "T", "--name", "n"])
            #expect(outcome.status == 65)
            #expect(outcome.stderr.contains("zoneNotFound"))
        }
    }

    @Test func sharesInvitationsAndParticipants() async throws {
        try await blocking {
            let node = try RunningNode()
            defer { node.stop() }
            _ = try node.json(["zone", "create", "Groceries"])
            let share = try #require(try node.json(["share", "create", "--zone", "Groceries", "--title", "Weekly"]) as? [String: Any])
            #expect(share["shareName"] as? String == "cloudkit.zoneshare")
            #expect(share["title"] as? String == "Weekly")
            let url = try #require(share["url"] as? String)
            let fingerprint = String(node.userRecordName.dropFirst())
            #expect(url.hasPrefix("sharesync://127.0.0.1:\(node.listening.split(separator: ":").last!)/share/"))
            #expect(url.hasSuffix("?owner=\(fingerprint)"))
            let owner = try #require((share["participants"] as? [[String: Any]])?.first)
            #expect(owner["role"] as? String == "owner")

            let plainURL = try node.run(["share", "url", "--zone", "Groceries"])
            #expect(plainURL.stdout == url + "\n")

            let invited = try #require(try node.json([
                "share", "invite", "--zone", "Groceries", "--email", "bob@example.org", "--permission", "readWrite",
            ]) as? [String: Any])
            let participantID = try #require(invited["participantID"] as? String)
            #expect(invited["acceptanceStatus"] as? String == "pending")
            #expect(invited["permission"] as? String == "readWrite")
            #expect((invited["invitationURL"] as? String)?.contains("&invite=") == true)

            let humanInvite = try node.run([
                "share", "invite", "--zone", "Groceries", "--user", "_0123456789abcdef0123456789abcdef", "--permission", "readOnly",
            ])
            #expect(humanInvite.status == 0)
            #expect(humanInvite.stdout.hasPrefix("sharesync://") && humanInvite.stdout.contains("invite="))

            let participants = try #require(try node.json(["share", "participants", "--zone", "Groceries"]) as? [[String: Any]])
            #expect(participants.count == 3)

            let changed = try #require(try node.json([
                "share", "permission", "--zone", "Groceries", "--participant", participantID, "--permission", "readOnly",
            ]) as? [String: Any])
            #expect(changed["permission"] as? String == "readOnly")

            _ = try node.json(["share", "remove", "--zone", "Groceries", "--participant", participantID])
            let remaining = try #require(try node.json(["share", "participants", "--zone", "Groceries"]) as? [[String: Any]])
            #expect(remaining.count == 2)

            let unknown = try node.run(["share", "remove", "--zone", "Groceries", "--participant", "nobody"])
            #expect(unknown.status == 65)

            // A public share takes no private participants.
            _ = try node.json(["share", "public", "--zone", "Groceries", "--permission", "readOnly"])
            let mixed = try node.run(["share", "invite", "--zone", "Groceries", "--email", "c@example.org", "--permission", "readOnly"])
            #expect(mixed.status == 65)
            #expect(mixed.stderr.contains("publicAndPrivateDoNotMix"))

            _ = try node.json(["share", "stop", "--zone", "Groceries"])
            let gone = try node.run(["share", "url", "--zone", "Groceries"])
            #expect(gone.status == 65)
            #expect(gone.stderr.contains("has no share"))
        }
    }

    @Test func hierarchySharesAndTheirRules() async throws {
        try await blocking {
            let node = try RunningNode()
            defer { node.stop() }
            _ = try node.json(["zone", "create", "P"])
            _ = try node.json(["record", "save", "--zone", "P", "--type", "Project", "--name", "p1"])
            _ = try node.json(["record", "save", "--zone", "P", "--type", "Project", "--name", "p2"])
            let first = try #require(try node.json(["share", "create", "--zone", "P", "--root", "p1"]) as? [String: Any])
            #expect(first["rootRecordName"] as? String == "p1")
            _ = try node.json(["share", "create", "--zone", "P", "--root", "p2", "--public", "readOnly"])

            let ambiguous = try node.run(["share", "url", "--zone", "P"])
            #expect(ambiguous.status == 65)
            #expect(ambiguous.stderr.contains("--share"))
            let named = try node.run(["share", "url", "--zone", "P", "--share", first["shareName"] as! String, "--json"])
            #expect(named.status == 0)

            let defaultZone = try node.run(["share", "create", "--zone", "_defaultZone"])
            #expect(defaultZone.status == 65)
            #expect(defaultZone.stderr.contains("defaultZoneNotShareable"))
        }
    }

    @Test func accessRequestsCanBeApprovedDeniedAndBlocked() async throws {
        try await blocking {
            let owner = try RunningNode(name: "Alice")
            defer { owner.stop() }
            _ = try owner.json(["zone", "create", "Z"])
            let share = try #require(try owner.json(["share", "create", "--zone", "Z", "--allow-access-requests"]) as? [String: Any])
            let url = try #require(share["url"] as? String)

            let bobFolder = try TemporaryFolder()
            defer { bobFolder.remove() }
            let bobHome = bobFolder.path + "/home"
            // Bob's node would listen on the default 7420, held here by another program: without a
            // daemon, request-access asks the owner straight away and starts nothing of the node (it
            // ran the whole node before, and failed with "cannot listen" while the port was held).
            #expect(try cli(["init", "--home", bobHome, "--name", "Bob"]).status == 0)
            let holder = holdPort(7420)
            defer { if holder >= 0 { close(holder) } }
            let settings = try String(contentsOfFile: bobHome + "/settings.json", encoding: .utf8)
            let asked = try cli(["request-access", url, "--home", bobHome, "--json"])
            #expect(asked.status == 0, "\(asked.stderr)")
            #expect(try String(contentsOfFile: bobHome + "/settings.json", encoding: .utf8) == settings)
            let bob = try #require((try json(asked.stdout) as? [String: Any])?["userRecordName"] as? String)

            let requesters = try #require(try owner.json(["share", "requesters", "--zone", "Z"]) as? [[String: Any]])
            #expect(requesters.compactMap { $0["userRecordName"] as? String } == [bob])
            #expect(requesters.first?["displayName"] as? String == "Bob")

            let approved = try #require(try owner.json([
                "share", "approve", "--zone", "Z", "--user", bob, "--permission", "readOnly",
            ]) as? [String: Any])
            #expect(approved["userRecordName"] as? String == bob)
            #expect(try #require(try owner.json(["share", "requesters", "--zone", "Z"]) as? [Any]).isEmpty)

            let notWaiting = try owner.run(["share", "deny", "--zone", "Z", "--user", bob])
            #expect(notWaiting.status == 65)

            _ = try owner.json(["share", "block", "--zone", "Z", "--user", bob])
            let participants = try #require(try owner.json(["share", "participants", "--zone", "Z"]) as? [[String: Any]])
            #expect(participants.count == 1)
            let blocked = try cli(["request-access", url, "--home", bobHome])
            #expect(blocked.status == 65)
        }
    }

    @Test func participantSideCommandsNeedTheDaemon() async throws {
        try await blocking {
            let folder = try TemporaryFolder()
            defer { folder.remove() }
            let home = folder.path + "/home"
            #expect(try cli(["init", "--home", home, "--name", "Stopped", "--listen", "127.0.0.1:0"]).status == 0)
            for arguments in [
                ["accept", "sharesync://127.0.0.1:7420/share/abc?owner=00"], ["zone", "list", "--shared"],
                ["record", "list", "--shared", "--zone", "Z"], ["changes", "--shared"], ["watch"],
            ] {
                let outcome = try cli(arguments + ["--home", home])
                #expect(outcome.status == 69, "\(arguments)")
                #expect(outcome.stderr.contains("not running"), "\(arguments)")
            }
        }
    }
}

/// Listens on `port` on every interface (another program holding it); -1 if it is taken already,
/// which holds it as well.
func holdPort(_ port: UInt16) -> Int32 {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { return -1 }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = port.bigEndian
    address.sin_addr.s_addr = INADDR_ANY
    let bound = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    guard bound == 0, listen(fd, 1) == 0 else {
        close(fd)
        return -1
    }
    return fd
}

