import Foundation
import ShareSyncCore
import ShareSyncNode
import ShareSyncStore
import ShareSyncWire
import Testing

@Suite("Participant sync engine over TCP")
struct ParticipantSyncTests {
    @Test("accepting a share fetches it in pages; the owner's later writes arrive as pushes")
    func initialSyncThenPushes() async throws {
        let owner = try await TestOwner.start()
        let b = try TestParticipant()
        defer { b.remove() }
        try owner.saveNotes("n", count: 300)
        let (url, _) = try owner.shareTopic(invite: [(b.identity, .readWrite)])
        let sync = try b.makeSync(pageSize: 40)
        let log = EventLog(sync)
        try sync.start()

        let metadata = try await sync.accept(url: url)
        #expect(metadata.participantStatus == .accepted)
        let ownerName = owner.identity.userRecordName
        // Done means done: no waiting needed after accept.
        #expect(try replicaView(sync.replica, owner: ownerName) == owner.sharedView(for: b.identity))
        #expect(try sync.replica.recordCount(owner: ownerName, zoneName: "Topics") == 302)  // topic, share, 300 notes
        try await eventually { log.count { if case .zoneChanged(_, "Topics", _, _) = $0 { true } else { false } } >= 8 }  // 302 / 40 pages

        // Pushes, no polling: the engine stays subscribed.
        try await expectEventually(sync, "following") { sync.status(owner: ownerName) == .following }
        let received = sync.recordsReceived
        try owner.saveNote("late", title: "pushed")
        _ = try owner.db.modifyRecords(deleting: [owner.id("n7")]).get()
        try await expectReplicaMatches(sync, owner)
        #expect(try sync.replica.fetchRecord(owner.id("n7").inSharedZone(of: ownerName)) == nil)
        #expect(try sync.replica.fetchRecord(owner.id("late").inSharedZone(of: ownerName))?["title"] == "pushed")
        #expect(sync.recordsReceived - received <= 4)  // the two changes, maybe repeated once

        await sync.stop()
        try await owner.stop()
    }

    @Test("shares from two owners with the same zone name are kept apart, each on its own connection")
    func severalOwners() async throws {
        let alice = try await TestOwner.start()
        let carol = try await TestOwner.start()
        let b = try TestParticipant()
        defer { b.remove() }
        try alice.saveNotes("a", count: 30)
        try carol.saveNotes("c", count: 20)
        let (aliceURL, _) = try alice.shareTopic(invite: [(b.identity, .readWrite)])
        let (carolURL, _) = try carol.shareTopic(invite: [(b.identity, .readOnly)])
        let sync = try b.makeSync()
        try sync.start()
        try await sync.accept(url: aliceURL)
        try await sync.accept(url: carolURL)

        let zones = try sync.replica.allZones()
        #expect(Set(zones) == [
            RecordZone.ID(zoneName: "Topics", ownerName: alice.identity.userRecordName),
            RecordZone.ID(zoneName: "Topics", ownerName: carol.identity.userRecordName),
        ])
        try await expectReplicaMatches(sync, alice)
        try await expectReplicaMatches(sync, carol)

        try alice.saveNote("alice-late", title: "a")
        try carol.saveNote("carol-late", title: "c")
        try await expectReplicaMatches(sync, alice)
        try await expectReplicaMatches(sync, carol)
        #expect(try sync.replica.recordCount(owner: alice.identity.userRecordName, zoneName: "Topics") == 33)
        #expect(try sync.replica.recordCount(owner: carol.identity.userRecordName, zoneName: "Topics") == 23)
        #expect(alice.server.connectionCount == 1)
        #expect(carol.server.connectionCount == 1)

        await sync.stop()
        try await alice.stop()
        try await carol.stop()
    }

    @Test("after the owner's node restarts, the participant reconnects and catches up; the replica stays readable")
    func reconnectAfterOwnerRestart() async throws {
        let owner = try await TestOwner.start()
        let b = try TestParticipant()
        defer { b.remove() }
        try owner.saveNotes("n", count: 50)
        let (url, _) = try owner.shareTopic(invite: [(b.identity, .readWrite)])
        let sync = try b.makeSync()
        try sync.start()
        try await sync.accept(url: url)
        let ownerName = owner.identity.userRecordName
        let port = owner.server.port

        try await owner.stop()
        try await expectEventually(sync, "disconnected") { sync.status(owner: ownerName) != .following }
        try owner.saveNotes("offline", count: 10)
        _ = try owner.db.modifyRecords(deleting: [owner.id("n1"), owner.id("n2")]).get()
        // Offline: the replica still answers, with what it had.
        #expect(try sync.replica.recordCount(owner: ownerName, zoneName: "Topics") == 52)
        #expect(try sync.replica.fetchRecord(owner.id("n1").inSharedZone(of: ownerName)) != nil)

        let server = try await owner.restartServer(port: port)
        try await expectReplicaMatches(sync, owner)
        #expect(try sync.replica.recordCount(owner: ownerName, zoneName: "Topics") == 60)
        try await expectEventually(sync, "following again") { sync.status(owner: ownerName) == .following }

        await sync.stop()
        try await server.shutdown()
    }

    @Test("while the owner is away the engine retries with capped exponential backoff")
    func backoffIsCappedAndExponential() async throws {
        let owner = try await TestOwner.start()
        let b = try TestParticipant()
        defer { b.remove() }
        let (url, _) = try owner.shareTopic(invite: [(b.identity, .readWrite)])
        let sync = try b.makeSync()  // 20 ms doubling, capped at 200 ms
        try sync.start()
        try await sync.accept(url: url)
        let log = EventLog(sync)
        try await owner.stop()
        func waits() -> [Duration] {
            log.all.compactMap { if case .disconnected(_, _, let wait) = $0 { wait } else { nil } }
        }
        // Up to 120 s: the waits are read from the events, not timed, and a starved full run on two
        // cores once made only five attempts within 15 s (about 1 s alone).
        try await expectEventually(sync, "seven attempts", timeout: 120) { waits().count >= 7 }
        #expect(Array(waits().prefix(7)) == [20, 40, 80, 160, 200, 200, 200].map { Duration.milliseconds($0) })
        // Readable meanwhile.
        #expect(try sync.replica.recordCount(owner: owner.identity.userRecordName, zoneName: "Topics") == 2)
        await sync.stop()
        #expect(sync.status(owner: owner.identity.userRecordName) == nil)
    }

    @Test("after the owner compacts its history, the participant refetches the zone and drops deleted records")
    func tokenExpiry() async throws {
        let owner = try await TestOwner.start()
        let b = try TestParticipant()
        defer { b.remove() }
        try owner.saveNotes("n", count: 80)
        let (url, _) = try owner.shareTopic(invite: [(b.identity, .readWrite)])
        try await b.acceptAndStop(url: url)

        // While the participant is away: deletions, then the tombstones are forgotten.
        _ = try owner.db.modifyRecords(deleting: (0..<30).map { owner.id("n\($0)") }).get()
        try owner.saveNote("new", title: "after compaction")
        try owner.db.compactHistory()

        let (second, log) = try await b.restartAndCatchUp(with: owner)
        #expect(try replicaView(second.replica, owner: owner.identity.userRecordName) == owner.sharedView(for: b.identity))
        #expect(try second.replica.recordCount(owner: owner.identity.userRecordName, zoneName: "Topics") == 53)
        try await eventually { log.count { if case .zoneReplaced(_, "Topics", _) = $0 { true } else { false } } == 1 }
        #expect(log.count { if case .disconnected(_, .some, _) = $0 { true } else { false } } == 0, "\(log.all)")

        await second.stop()
        try await owner.stop()
    }

    @Test("a restarted participant knows when its replica last was caught up: its status says so, and its lag counts from then")
    func lastSyncedSurvivesARestart() async throws {
        let owner = try await TestOwner.start()
        let b = try TestParticipant()
        defer { b.remove() }
        let (url, _) = try owner.shareTopic(invite: [(b.identity, .readWrite)])
        let first = try b.makeSync()
        try first.start()
        try await first.accept(url: url)
        try await Task.sleep(for: .milliseconds(300))  // following for a moment
        await first.stop()
        let stoppedAt = Date()
        try await owner.stop()
        try await Task.sleep(for: .milliseconds(500))

        // Restarted while the owner is away. Before, the status said "never", and the lag counted
        // from the restart: a node down for a day looked a second behind.
        let second = try b.makeSync()
        try second.start()
        let ownerName = owner.identity.userRecordName
        let last = try #require(second.lastSynced(owner: ownerName))
        #expect(last <= stoppedAt && stoppedAt.timeIntervalSince(last) < 30, "\(last) against \(stoppedAt)")
        let lag = try #require(second.syncLag(owner: ownerName))
        #expect(lag >= .milliseconds(500), "\(lag)")
        await second.stop()
    }

    @Test("a restarted participant resumes from its stored tokens instead of fetching everything again")
    func restartResumesFromTokens() async throws {
        let owner = try await TestOwner.start()
        let b = try TestParticipant()
        defer { b.remove() }
        try owner.saveNotes("n", count: 200)
        let (url, _) = try owner.shareTopic(invite: [(b.identity, .readWrite)])
        let first = try b.makeSync()
        try first.start()
        try await first.accept(url: url)
        #expect(first.recordsReceived >= 202)
        await first.stop()

        try owner.saveNotes("more", count: 3)
        let second = try b.makeSync()
        try second.start()
        try await second.waitUntilSynced(owner: owner.identity.userRecordName, timeout: .seconds(15))
        #expect(try replicaView(second.replica, owner: owner.identity.userRecordName) == owner.sharedView(for: b.identity))
        #expect(second.recordsReceived == 3)

        await second.stop()
        try await owner.stop()
    }
}

extension Record.ID {
    /// The same record as a participant addresses it: in the owner's shared zone.
    func inSharedZone(of ownerName: String) -> Record.ID {
        Record.ID(recordName: recordName, zoneID: RecordZone.ID(zoneName: zoneID.zoneName, ownerName: ownerName))
    }
}
