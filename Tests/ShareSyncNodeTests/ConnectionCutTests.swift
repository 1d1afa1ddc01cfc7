import Foundation
import ShareSyncCore
import ShareSyncNode
import ShareSyncStore
import ShareSyncTestSupport
import Testing

// Connection cuts (issue 10, the harness): a proxy between a participant engine and the owner cuts
// connections at random byte offsets during the initial sync, pushes and outbox flushes. After the
// cuts stop, everything converges: the replica equals the owner's view, and every write the
// participant queued reached the owner exactly once. `reliability/run.sh` runs the same with many more
// cuts (SHARESYNC_CUTS, SHARESYNC_CUT_SEEDS).

private func environment(_ name: String, default value: Int) -> Int {
    ProcessInfo.processInfo.environment[name].flatMap(Int.init) ?? value
}

@Suite("Connections cut at random byte offsets")
struct ConnectionCutTests {
    static let seeds: [UInt64] = (1...UInt64(environment("SHARESYNC_CUT_SEEDS", default: 2))).map { $0 }

    /// What the participant is invited to: the topic's hierarchy (a feed copied per viewer), or the
    /// whole zone (the zone's own feed).
    enum Shared: CaseIterable, CustomTestStringConvertible {
        case hierarchy, wholeZone
        var testDescription: String { self == .hierarchy ? "a hierarchy" : "the whole zone" }
    }

    @Test(
        "after cuts during the initial sync, pushes and outbox flushes, the replica and the owner converge",
        arguments: seeds, Shared.allCases)
    func convergesAfterCuts(seed: UInt64, shared: Shared) async throws {
        let cuts = environment("SHARESYNC_CUTS", default: 6)
        let owner = try await TestOwner.start()
        try owner.saveNotes("initial", count: 300)
        let b = try TestParticipant()
        defer { b.remove() }
        let proxy = try await FaultyProxy.start(to: owner.server.port, cuts: cuts, cutAfter: 200...6_000, seed: seed)
        // The share's URL names the proxy: the participant reaches the owner only through it.
        owner.db.setShareURLBase(ShareURLBase(host: "127.0.0.1", port: proxy.port, ownerFingerprint: owner.identity.fingerprint))
        let invite = [(b.identity, Participant.Permission.readWrite)]
        let (url, _) = try shared == .hierarchy ? owner.shareTopic(invite: invite) : owner.shareZone(invite: invite)
        let sync = try b.makeSync(pageSize: 25)
        try sync.start()
        // Accepting may itself be cut: it is safe to repeat.
        var accepted = false
        for _ in 0..<(cuts + 5) where !accepted {
            do {
                try await sync.accept(url: url, timeout: .seconds(60))
                accepted = true
            } catch {
                continue
            }
        }
        try #require(accepted, "the share could not be accepted through the proxy")

        // Owner writes (pushes) and participant writes (the outbox) while the cuts go on.
        let ownerName = owner.identity.userRecordName
        let zone = RecordZone.ID(zoneName: "Topics", ownerName: ownerName)
        var written: [String] = []
        var rounds = 0
        // Until every cut happened (bounded): the traffic is what the cuts fall on.
        for round in 0..<40 where round < 8 || proxy.cutsDone < cuts {
            rounds += 1
            try owner.saveNotes("owner\(round)-", count: 20)
            for i in 0..<5 {
                let name = "mine\(round)-\(i)"
                var note = Record(recordType: "Note", recordID: Record.ID(recordName: name, zoneID: zone))
                note["title"] = .string("from b \(round) \(i)")
                note.setParent(Record.ID(recordName: "topic", zoneID: zone))
                _ = try await sync.modifyRecords(owner: ownerName, zoneName: "Topics", saving: [note])
                written.append(name)
            }
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(proxy.cutsDone == cuts, "only \(proxy.cutsDone) of \(cuts) cuts happened")
        proxy.stopCutting()
        try await sync.waitUntilSynced(owner: ownerName, timeout: .seconds(60))
        try await expectEventually(sync, "the outbox is sent", timeout: 60) {
            try sync.replica.pendingOperations(owner: ownerName).isEmpty
        }
        try await sync.waitUntilSynced(owner: ownerName, timeout: .seconds(60))
        try await expectReplicaMatches(sync, owner, timeout: 60)
        let onOwner = try owner.db.fetchRecords(written.map { owner.id($0) })
        #expect(onOwner.values.allSatisfy { (try? $0.get()) != nil }, "every queued write reached the owner")
        #expect(try owner.sharedView(for: b.identity)["Topics"]?.count == 1 + 300 + rounds * 25 + 1)
        print("connection cuts: seed \(seed), \(proxy.cutsDone) cuts over \(proxy.connections) connections, \(shared.testDescription) shared")
        await sync.stop()
        await proxy.stop()
        try await owner.stop()
    }
}
