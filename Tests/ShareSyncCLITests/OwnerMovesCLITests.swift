import Foundation
import ShareSyncTestSupport
import Testing

// Owners that can move (issue 10, observation 4): an owner announces its new address and the
// participants connected then follow it; a participant that was offline meanwhile is repointed with
// `owner address` (or by accepting any URL of the owner), keeping its replica and its outbox.

/// The title of a record in `node`'s replica, or nil while it is not there (polled: not an issue).
private func sharedTitle(_ node: E2ENode, _ name: String) -> String? {
    guard let outcome = try? node.run(["record", "get", "--shared", "--zone", "Topics", "--name", name]), outcome.status == 0,
        let record = try? json(outcome.stdout) as? [String: Any]
    else { return nil }
    return ((record["fields"] as? [String: [String: Any]])?["title"])?["value"] as? String
}

@Suite("Owners that move: participants follow the announced address, or are repointed by hand (CLI)")
struct OwnerMovesCLITests {
    @Test func aConnectedParticipantIsToldTheNewAddressAndFollowsTheOwnerThere() async throws {
        try await blocking {
            let oldPort = try freeLoopbackPort()
            let a = try E2ENode(name: "Alice", listen: "127.0.0.1:\(oldPort)")
            defer { a.stop() }
            let b = try E2ENode(name: "Bob")
            defer { b.stop() }
            try a.ok(["zone", "create", "Topics"])
            try a.ok(["record", "save", "--zone", "Topics", "--type", "Topic", "--name", "t1", "--field", "title=string:before"])
            let (url, _) = try invite(b, to: "Topics", of: a)
            try b.ok(["accept", url])
            #expect(sharedTitle(b, "t1") == "before")
            let shareURL = { (try? a.ok(["share", "show", "--zone", "Topics"]) as? [String: Any])?["url"] as? String }
            let before = try #require(shareURL())

            // A listen address this host does not have is refused, and nothing changes: saved, it made
            // the next start fail, and only a running daemon takes `advertise`.
            let settingsBefore = try String(contentsOfFile: a.home + "/settings.json", encoding: .utf8)
            let refused = try a.run(["advertise", "alice.example.org:7421", "--listen", "192.0.2.1:7421"])
            #expect(refused.status == 65 && refused.stderr.contains("cannot listen on 192.0.2.1:7421"), "\(refused.stderr)")
            #expect(try String(contentsOfFile: a.home + "/settings.json", encoding: .utf8) == settingsBefore)
            #expect(try shareURL() == before)

            // Alice moves to another port: she announces it while B is connected, then restarts there.
            let newPort = try freeLoopbackPort()
            let told = try #require(
                try a.ok(["advertise", "127.0.0.1:\(newPort)", "--listen", "127.0.0.1:\(newPort)"]) as? [String: Any])
            #expect(told["participantsTold"] as? Int ?? 0 >= 1, "\(told)")
            // Share URLs now name the new address (only the address part changed).
            let after = try #require(shareURL())
            #expect(after.contains("127.0.0.1:\(newPort)/"), "\(after)")
            #expect(after.replacingOccurrences(of: "127.0.0.1:\(newPort)", with: "127.0.0.1:\(oldPort)") == before, "\(after) vs \(before)")

            try a.kill()
            try a.restart()
            let status = try #require(try a.ok(["status"]) as? [String: Any])
            #expect((status["listen"] as? [String: Any])?["port"] as? Int == newPort, "\(status)")

            // B reconnects to the new address by itself and receives what Alice saves there.
            try a.ok(["record", "save", "--zone", "Topics", "--type", "Topic", "--name", "t2", "--field", "title=string:after the move"])
            #expect(eventually(timeout: 60) { sharedTitle(b, "t2") == "after the move" }, "B did not follow the owner to its new address")
            // And B's writes reach Alice there.
            try b.ok(["record", "save", "--shared", "--zone", "Topics", "--type", "Topic", "--name", "t3", "--field", "title=string:from B"])
            #expect(eventually(timeout: 30) { (try? a.run(["record", "get", "--zone", "Topics", "--name", "t3"]))?.status == 0 })
        }
    }

    @Test func aParticipantOfflineDuringTheMoveIsRepointedByHandAndKeepsItsReplicaAndOutbox() async throws {
        try await blocking {
            let a = try E2ENode(name: "Alice", listen: "127.0.0.1:\(try freeLoopbackPort())")
            defer { a.stop() }
            let b = try E2ENode(name: "Bob")
            defer { b.stop() }
            try a.ok(["zone", "create", "Topics"])
            try a.ok(["record", "save", "--zone", "Topics", "--type", "Topic", "--name", "t1", "--field", "title=string:before"])
            let (url, _) = try invite(b, to: "Topics", of: a)
            try b.ok(["accept", url])

            // B goes offline; Alice moves meanwhile (B cannot hear the announcement).
            try b.kill()
            let newPort = try freeLoopbackPort()
            try a.ok(["advertise", "127.0.0.1:\(newPort)", "--listen", "127.0.0.1:\(newPort)"])
            try a.kill()
            try a.restart()
            try a.ok(["record", "save", "--zone", "Topics", "--type", "Topic", "--name", "t2", "--field", "title=string:after the move"])

            // B comes back, still pointing at the old address: its replica reads, its write is queued.
            try b.restart()
            #expect(sharedTitle(b, "t1") == "before")
            let queued = try #require(
                try b.ok(["record", "save", "--shared", "--zone", "Topics", "--type", "Topic", "--name", "t3", "--field", "title=string:queued by B"])
                    as? [String: Any])
            #expect(queued["outcome"] as? String == "queued", "\(queued)")

            // A wrong owner name or a bad address is refused and changes nothing.
            let unknown = try b.run(["owner", "address", "_0000", "127.0.0.1:\(newPort)"])
            #expect(unknown.status == 65)
            #expect(unknown.stdout.contains("ownerUnknown") || unknown.stderr.contains("ownerUnknown"), "\(unknown.stdout) \(unknown.stderr)")
            let bad = try b.run(["owner", "address", a.userRecordName, "nowhere"])
            #expect(bad.status == 64, "\(bad.stderr)")

            // Repointed by hand, naming the owner by display name as other --owner options allow (it
            // took only the user record name, and said the owner shared nothing): B connects, sends
            // its outbox and catches up; nothing was fetched again from scratch.
            try b.ok(["owner", "address", "Alice", "127.0.0.1:\(newPort)"])
            #expect(eventually(timeout: 60) { sharedTitle(b, "t2") == "after the move" }, "B did not reach the moved owner")
            #expect(eventually(timeout: 30) { (try? a.run(["record", "get", "--zone", "Topics", "--name", "t3"]))?.status == 0 },
                    "B's queued write did not reach the owner at its new address")
            #expect(sharedTitle(b, "t1") == "before")
        }
    }
}
