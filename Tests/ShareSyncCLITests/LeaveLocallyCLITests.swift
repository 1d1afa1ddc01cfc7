import Foundation
import ShareSyncTestSupport
import Testing

@Suite("leave --local: leaving while the owner is gone (CLI, daemons as processes)")
struct LeaveLocallyCLITests {
    @Test("owner stopped: the participant leaves locally, its replica empties at once; the owner learns it on reconnect")
    func leaveWhileOwnerIsDown() async throws {
        try await blocking {
            let a = try E2ENode(name: "Alice", listen: "127.0.0.1:\(try freeLoopbackPort())")
            defer { a.stop() }
            let b = try E2ENode(name: "Bob")
            defer { b.stop() }
            try a.ok(["zone", "create", "Topics"])
            try a.ok(["record", "save", "--zone", "Topics", "--type", "Topic", "--name", "t1", "--field", "title=string:Hello"])
            let (url, participantID) = try invite(b, to: "Topics", of: a)
            try b.ok(["accept", url])

            try a.kill()
            // Without --local the owner is needed.
            let refused = try b.run(["leave", "--owner", a.userRecordName, "--zone", "Topics"], timeout: 120)
            #expect(refused.status != 0, "\(refused.stderr)")
            #expect(refused.stderr.contains("--local"), "the refusal names the way out: \(refused.stderr)")
            // A write queued while the owner is away: the leave says the owner will refuse it.
            let queued = try #require(
                try b.ok(["record", "save", "--shared", "--zone", "Topics", "--type", "Note", "--name", "late", "--field", "text=string:x"])
                    as? [String: Any])
            #expect(queued["outcome"] as? String == "queued")
            let left = try cli(["leave", "--owner", a.userRecordName, "--zone", "Topics", "--local", "--home", b.home])
            #expect(left.status == 0 && left.stdout.contains("1 write to zone Topics still queued will be refused by the owner"),
                    "\(left.stdout) \(left.stderr)")
            #expect(try #require(try b.ok(["zone", "list", "--shared"]) as? [Any]).isEmpty)
            let gone = try b.run(["record", "list", "--shared", "--zone", "Topics"])
            #expect(gone.status == 65 && gone.stderr.contains("zoneNotFound"), "\(gone.stderr)")
            let text = try cli(["leave", "--owner", a.userRecordName, "--zone", "Nothing", "--local", "--home", b.home])
            #expect(text.status == 65 && text.stderr.contains("zoneNotFound"), "a zone not shared: \(text.stderr)")

            // The pending leave outlives the participant's daemon.
            try b.restart()
            try a.restart()
            func status() throws -> String? {
                let participants = try #require(try a.ok(["share", "participants", "--zone", "Topics"]) as? [[String: Any]])
                return participants.first { $0["participantID"] as? String == participantID }?["acceptanceStatus"] as? String
            }
            #expect(try eventually(timeout: 90) { try status() == "removed" }, "the owner marks the participant as having left")
            Thread.sleep(forTimeInterval: 1)
            #expect(try #require(try b.ok(["zone", "list", "--shared"]) as? [Any]).isEmpty, "the zone stays out of the replica")
            // The queued write went after the leave, and was refused; it stays, and so does the owner,
            // until it is discarded: then nothing of the owner is left, and the node forgets it.
            func outbox() throws -> [[String: Any]] { try #require(try b.ok(["outbox", "list"]) as? [[String: Any]]) }
            let writeRefused = try eventually(timeout: 60) { try outbox().first?["state"] as? String == "refused" }
            let writes = try outbox()
            #expect(writeRefused && writes.count == 1, "\(writes)")
            func owners() throws -> [[String: Any]] {
                let status = try #require(try b.ok(["status"]) as? [String: Any])
                return try #require(status["owners"] as? [[String: Any]])
            }
            #expect(try owners().map { $0["ownerName"] as? String } == [a.userRecordName])
            let id = try #require(writes.first?["id"] as? Int)
            try b.ok(["outbox", "discard", "\(id)"])
            let forgotten = try eventually(timeout: 30) { try owners().isEmpty }
            let remaining = try owners()
            #expect(forgotten, "\(remaining)")
        }
    }

    @Test("owner connected: leave --local purges at once and the owner is told without a reconnect; later owner writes stay out")
    func leaveWhileOwnerIsConnected() async throws {
        try await blocking {
            let a = try E2ENode(name: "Alice")
            defer { a.stop() }
            let b = try E2ENode(name: "Bob")
            defer { b.stop() }
            try a.ok(["zone", "create", "Topics"])
            try a.ok(["record", "save", "--zone", "Topics", "--type", "Topic", "--name", "t1"])
            let (url, participantID) = try invite(b, to: "Topics", of: a)
            try b.ok(["accept", url])
            // A name that is no share (nor a record shared by one) is refused, and the zone stays.
            let typo = try b.run(["leave", "--owner", "Alice", "--zone", "Topics", "--share", "nope", "--local"])
            #expect(typo.status == 65 && typo.stderr.contains("unknownItem") && typo.stderr.contains("nope"), "\(typo.stderr)")
            #expect(try #require(try b.ok(["record", "list", "--shared", "--zone", "Topics"]) as? [Any]).count == 2, "t1 and the share")
            try b.ok(["leave", "--owner", "Alice", "--zone", "Topics", "--local"])
            #expect(try #require(try b.ok(["zone", "list", "--shared"]) as? [Any]).isEmpty)
            #expect(try eventually(timeout: 60) {
                let participants = try #require(try a.ok(["share", "participants", "--zone", "Topics"]) as? [[String: Any]])
                return participants.first { $0["participantID"] as? String == participantID }?["acceptanceStatus"] as? String == "removed"
            })
            try a.ok(["record", "save", "--zone", "Topics", "--type", "Topic", "--name", "t2"])
            Thread.sleep(forTimeInterval: 1)
            #expect(try #require(try b.ok(["zone", "list", "--shared"]) as? [Any]).isEmpty)
        }
    }
}
