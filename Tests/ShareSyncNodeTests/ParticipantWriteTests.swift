import Foundation
import ShareSyncCore
import ShareSyncNode
import ShareSyncStore
import ShareSyncWire
import Testing

@Suite("Participant writes and revocation over TCP")
struct ParticipantWriteTests {
    @Test("writes go to the owner at once when connected; made offline they wait in the persistent outbox; conflicts go through the merge hook")
    func outboxAndConflicts() async throws {
        let owner = try await TestOwner.start()
        let b = try TestParticipant()
        defer { b.remove() }
        try owner.saveNotes("n", count: 5)
        let (url, _) = try owner.shareTopic(invite: [(b.identity, .readWrite)])
        let merge: @Sendable (Record, Record) -> Record? = { local, server in
            var merged = server
            merged["title"] = local["title"]
            merged["resolvedBy"] = "hook"
            return merged
        }
        let ownerName = owner.identity.userRecordName
        let zone = RecordZone.ID(zoneName: "Topics", ownerName: ownerName)
        let first = try b.makeSync(merge: merge)
        try first.start()
        try await first.accept(url: url)

        // Online: sent now, the result comes back, the push brings the record into the replica.
        var online = Record(recordType: "Note", recordID: Record.ID(recordName: "online", zoneID: zone))
        online["title"] = "sent at once"
        online.setParent(Record.ID(recordName: "topic", zoneID: zone))
        guard case .sent(let result) = try await first.modifyRecords(owner: ownerName, zoneName: "Topics", saving: [online]) else {
            Issue.record("expected the write to be sent")
            return
        }
        #expect(try result.get().map(\.recordID.recordName) == ["online"])
        try await expectEventually(first, "the pushed write") {
            try first.replica.fetchRecord(online.recordID) != nil
        }

        // Offline: queued.
        let port = owner.server.port
        try await owner.stop()
        try await expectEventually(first, "disconnected") { first.status(owner: ownerName) != .following }
        var edited = try #require(try first.replica.fetchRecord(Record.ID(recordName: "n1", zoneID: zone)))
        edited["title"] = "participant edit"
        var created = Record(recordType: "Note", recordID: Record.ID(recordName: "p1", zoneID: zone))
        created["title"] = "from b"
        created.setParent(Record.ID(recordName: "topic", zoneID: zone))
        guard case .queued = try await first.modifyRecords(owner: ownerName, zoneName: "Topics", saving: [edited]),
            case .queued = try await first.modifyRecords(owner: ownerName, zoneName: "Topics", saving: [created])
        else {
            Issue.record("expected the writes to be queued")
            return
        }
        // Meanwhile the owner edits the same record: a conflict waits.
        var ownerCopy = try owner.db.fetchRecord(owner.id("n1"))
        ownerCopy["title"] = "owner edit"
        _ = try owner.db.modifyRecords(saving: [ownerCopy]).get()
        await first.stop()

        // A restarted node finds its outbox on disk and sends it once the owner is back.
        let second = try b.makeSync(merge: merge)
        let log = EventLog(second)
        #expect(try second.replica.pendingOperations(owner: ownerName).count == 2)
        try second.start()
        let server = try await owner.restartServer(port: port)
        try await expectEventually(second, "the outbox sent") {
            try second.replica.pendingOperations(owner: ownerName).isEmpty
        }
        #expect(try owner.db.fetchRecord(owner.id("p1"))["title"] == "from b")
        let n1 = try owner.db.fetchRecord(owner.id("n1"))
        #expect(n1["title"] == "participant edit")
        #expect(n1["resolvedBy"] == "hook")
        try await eventually { log.count { if case .conflict(_, let id, true) = $0 { id.recordName == "n1" } else { false } } == 1 }
        #expect(log.count { if case .error = $0 { true } else { false } } == 0)
        try await expectReplicaMatches(second, owner)

        await second.stop()
        try await server.shutdown()
    }

    @Test("a queued write the owner refuses is kept in the outbox as refused and reported")
    func refusedWriteIsReported() async throws {
        let owner = try await TestOwner.start()
        let b = try TestParticipant()
        defer { b.remove() }
        let (url, shareName) = try owner.shareTopic(invite: [(b.identity, .readWrite)])
        let ownerName = owner.identity.userRecordName
        let zone = RecordZone.ID(zoneName: "Topics", ownerName: ownerName)
        let sync = try b.makeSync()
        try sync.start()
        try await sync.accept(url: url)
        let port = owner.server.port
        try await owner.stop()
        try await expectEventually(sync, "disconnected") { sync.status(owner: ownerName) != .following }
        // Made read-only while away: the replica still says read-write, so the write is queued.
        var share = try #require(Share(try owner.db.fetchRecord(Record.ID(recordName: shareName, zoneID: owner.zone))))
        let entry = try #require(share.participants.first { $0.userIdentity.userRecordName == b.identity.userRecordName })
        try share.setPermission(.readOnly, forParticipantID: entry.participantID)
        _ = try owner.db.modifyRecords(saving: [share.record]).get()

        var topic = try #require(try sync.replica.fetchRecord(Record.ID(recordName: "topic", zoneID: zone)))
        topic["title"] = "not allowed"
        guard case .queued = try await sync.modifyRecords(owner: ownerName, zoneName: "Topics", saving: [topic]) else {
            Issue.record("expected the write to be queued")
            return
        }
        let log = EventLog(sync)
        let server = try await owner.restartServer(port: port)
        try await expectEventually(sync, "nothing pending") { try sync.replica.pendingOperations(owner: ownerName).isEmpty }
        try await expectEventually(sync, "an error event") {
            log.count { if case .error = $0 { true } else { false } } >= 1
        }
        let kept = try sync.replica.outboxOperations(owner: ownerName).map(\.operation)
        #expect(kept.map(\.state) == [.refused])
        #expect(kept.first?.error?.code == .permissionFailure)
        try await eventually { log.count { if case .operationKept(_, let operation) = $0 { operation.state == .refused } else { false } } == 1 }
        #expect(try owner.db.fetchRecord(owner.id("topic"))["title"] == "Groceries")
        try await expectReplicaMatches(sync, owner)

        await sync.stop()
        try await server.shutdown()
    }

    @Test("the zone is purged when the participant leaves, is removed, or the owner stops the share")
    func revocationPurges() async throws {
        let owner = try await TestOwner.start()
        try owner.saveNotes("n", count: 10)
        let (b, c, d) = (try TestParticipant(), try TestParticipant(), try TestParticipant())
        defer { for p in [b, c, d] { p.remove() } }
        let (url, shareName) = try owner.shareTopic(
            invite: [(b.identity, .readWrite), (c.identity, .readWrite), (d.identity, .readOnly)])
        let ownerName = owner.identity.userRecordName
        var syncs: [ParticipantSync] = []
        for p in [b, c, d] {
            let sync = try p.makeSync()
            try sync.start()
            try await sync.accept(url: url)
            #expect(try sync.replica.recordCount(owner: ownerName, zoneName: "Topics") == 12)
            syncs.append(sync)
        }
        let (syncB, syncC, syncD) = (syncs[0], syncs[1], syncs[2])

        // c leaves.
        try await syncC.leaveShare(owner: ownerName, zoneName: "Topics", shareRecordName: shareName)
        #expect(try syncC.replica.fetchAllZones(owner: ownerName).isEmpty)
        #expect(try syncC.replica.recordCount(owner: ownerName, zoneName: "Topics") == 0)

        // The owner removes d.
        var share = try #require(Share(try owner.db.fetchRecord(owner.id(shareName))))
        let participantD = try #require(share.participants.first { $0.userIdentity.userRecordName == d.identity.userRecordName })
        try share.removeParticipant(participantD)
        _ = try owner.db.modifyRecords(saving: [share.record]).get()
        try await expectEventually(syncD, "d's zone purged") { try syncD.replica.fetchAllZones(owner: ownerName).isEmpty }
        #expect(try syncD.replica.recordCount(owner: ownerName, zoneName: "Topics") == 0)
        try await expectReplicaMatches(syncB, owner)

        // The owner stops sharing.
        _ = try owner.db.modifyRecords(deleting: [owner.id(shareName)]).get()
        try await expectEventually(syncB, "b's zone purged") { try syncB.replica.fetchAllZones(owner: ownerName).isEmpty }
        #expect(try syncB.replica.recordCount(owner: ownerName, zoneName: "Topics") == 0)
        for sync in syncs {
            try await expectReplicaMatches(sync, owner)
            await sync.stop()
        }
        try await owner.stop()
    }
}

@Suite("A participant's request with a new child before its new parent")
struct ChildBeforeParentInOneRequestTests {
    @Test("one request with new children before their new parent (a client that does not order them) saves them all, atomically or not")
    func childrenBeforeTheirParentInOneRequest() async throws {
        let owner = try await TestOwner.start()
        let b = NodeIdentity.generate()
        let (url, _) = try owner.shareTopic(invite: [(b, .readWrite)])
        let connection = try await OwnerConnection.connect(url: url, identity: b)
        _ = try await connection.acceptShare(url: url)
        let zone = RecordZone.ID(zoneName: "Topics", ownerName: owner.identity.userRecordName)
        for atomically in [true, false] {
            let folder = "folder-\(atomically)"
            // Children (and a grandchild) first, their new folder under the shared topic last: as a
            // client that does not order a write sends it.
            var records: [Record] = (0..<3).map { i in
                var note = Record(recordType: "Note", recordID: Record.ID(recordName: "\(folder)-n\(i)", zoneID: zone))
                note.setParent(Record.ID(recordName: i == 2 ? "\(folder)-n0" : folder, zoneID: zone))
                return note
            }
            var parent = Record(recordType: "Folder", recordID: Record.ID(recordName: folder, zoneID: zone))
            parent.setParent(Record.ID(recordName: "topic", zoneID: zone))
            records.append(parent)
            // OwnerConnection orders a write only for deleteSelf references: these go as given.
            let result = try await connection.modifyRecords(zoneName: "Topics", saving: records, atomically: atomically)
            let failures = result.saveResults.compactMap { id, outcome -> String? in
                if case .failure(let error) = outcome { "\(id.recordName): \(error)" } else { nil }
            }
            #expect(failures.isEmpty, "atomically \(atomically): \(failures)")
            #expect(try owner.db.fetchRecord(owner.id("\(folder)-n2")).parent?.recordID.recordName == "\(folder)-n0")
        }
        // A child whose parent is neither in the request nor in the view is still refused.
        var stray = Record(recordType: "Note", recordID: Record.ID(recordName: "stray", zoneID: zone))
        stray.setParent(Record.ID(recordName: "elsewhere", zoneID: zone))
        let refused = try await connection.modifyRecords(zoneName: "Topics", saving: [stray], atomically: false)
        guard case .failure(let error)? = refused.saveResults[stray.recordID] else {
            Issue.record("the stray child was saved")
            return
        }
        #expect(error.code == .permissionFailure && error.rule == .outsideView, "\(error)")
        await connection.close()
        try await owner.stop()
    }
}
