import Foundation
import ShareSyncTestSupport
import Testing

@Suite("A CLI that speaks in people's names (CLI, daemons as processes)")
struct NamesCLITests {
    @Test("accept, zone list --shared, participants and changes show names; --owner takes a name or email; --share a root's name")
    func namesEverywhere() async throws {
        try await blocking {
            let a = try E2ENode(name: "Alice", initArguments: ["--email", "alice@example.org"])
            defer { a.stop() }
            let b = try E2ENode(name: "Bob")
            defer { b.stop() }
            let c = try E2ENode(name: "Alice")  // another Alice
            defer { c.stop() }
            try makeTopics(on: a)
            try a.ok(["share", "create", "--zone", "Topics", "--root", "topic-1", "--title", "Topics"])
            // --share takes the root record's name.
            let invited = try #require(
                try a.ok(["share", "invite", "--zone", "Topics", "--share", "topic-1", "--user", b.userRecordName, "--permission", "readWrite"])
                    as? [String: Any])
            let url = try #require(invited["invitationURL"] as? String)
            let accepted = try cli(["accept", url, "--home", b.home])
            #expect(accepted.status == 0, "\(accepted.stderr)")
            #expect(accepted.stdout.contains("from Alice <alice@example.org> (\(a.userRecordName))"), "\(accepted.stdout)")

            let zones = try cli(["zone", "list", "--shared", "--home", b.home])
            #expect(zones.stdout.contains("Alice <alice@example.org> (\(a.userRecordName))  Topics"), "\(zones.stdout)")
            let listed = try #require(try b.ok(["zone", "list", "--shared"]) as? [[String: Any]])
            #expect(listed.first?["ownerDisplayName"] as? String == "Alice" && listed.first?["ownerEmail"] as? String == "alice@example.org")

            for owner in ["Alice", "alice@example.org", "ALICE@example.org", a.userRecordName] {
                let records = try #require(try b.ok(["record", "list", "--shared", "--zone", "Topics", "--owner", owner]) as? [[String: Any]])
                #expect(records.contains { $0["recordName"] as? String == "topic-1" }, "--owner \(owner)")
            }
            let changes = try cli(["changes", "--shared", "--home", b.home])
            #expect(changes.stdout.contains("changed Topics/topic-1 (Topic) from Alice (\(a.userRecordName))"), "\(changes.stdout)")

            let participants = try cli(["share", "participants", "--zone", "Topics", "--share", "topic-1", "--home", a.home])
            #expect(participants.stdout.contains("Bob (\(b.userRecordName))"), "\(participants.stdout)")
            #expect(participants.stdout.contains("Alice <alice@example.org> (\(a.userRecordName))"), "\(participants.stdout)")

            // A second owner called Alice: the name is ambiguous, and the candidates are listed.
            try c.ok(["zone", "create", "Topics"])
            try c.ok(["record", "save", "--zone", "Topics", "--type", "Topic", "--name", "other"])
            let (otherURL, _) = try invite(b, to: "Topics", of: c)
            try b.ok(["accept", otherURL])
            let ambiguous = try b.run(["record", "list", "--shared", "--zone", "Topics", "--owner", "Alice"])
            #expect(ambiguous.status == 65, "\(ambiguous.stderr)")
            let error = try jsonError(ambiguous)
            #expect(error["rule"] as? String == "ambiguousOwner", "\(error)")
            let message = error["message"] as? String ?? ""
            #expect(message.contains(a.userRecordName) && message.contains(c.userRecordName), "\(message)")
            let byEmail = try #require(try b.ok(["record", "list", "--shared", "--zone", "Topics", "--owner", "alice@example.org"]) as? [[String: Any]])
            #expect(byEmail.contains { $0["recordName"] as? String == "topic-1" })
        }
    }
}
