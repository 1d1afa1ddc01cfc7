import Foundation
import GRDB
import ShareSyncCore
import ShareSyncNode
@testable import ShareSyncStore
import Testing

// A full disk says so (issue 15, observation 5): `quotaExceeded`, rule `diskFull`, naming the file,
// instead of `networkFailure`; the engine keeps retrying and resumes when there is space again. The
// disk is made "full" with SQLite's page limit (`PRAGMA max_page_count`), which fails writes with the
// same SQLITE_FULL a full file system gives.

/// Limits the replica's file to its current size plus `extraPages` pages (4 KiB each); nil lifts it.
func limitReplicaSize(_ replica: SharedDatabaseReplica, extraPages: Int?) throws {
    try replica.writer.writeWithoutTransaction { db in
        let used = try Int.fetchOne(db, sql: "PRAGMA page_count") ?? 0
        let limit = extraPages.map { used + $0 } ?? 1_073_741_823
        _ = try Int.fetchOne(db, sql: "PRAGMA max_page_count = \(limit)")
    }
}

@Suite("A full disk is reported as such")
struct DiskFullTests {
    @Test("a replica write that finds the disk full is quotaExceeded/diskFull naming the file, and changes nothing")
    func replicaWrite() throws {
        let b = try TestParticipant()
        defer { b.remove() }
        let replica = try SharedDatabaseReplica(path: b.replicaPath)
        try replica.setOwner(OwnerInfo(ownerName: "_owner", host: "127.0.0.1", port: 1, fingerprint: "owner"))
        try limitReplicaSize(replica, extraPages: 5)
        let zone = RecordZone.ID(zoneName: "Topics", ownerName: "_owner")
        let records: [RecordChange] = (0..<40).map { i in
            var note = Record(recordType: "Note", recordID: Record.ID(recordName: "n\(i)", zoneID: zone))
            note["body"] = .string(incompressibleText(4_000, index: i))
            return .changed(note)
        }
        let page = ZoneChanges(
            zoneID: zone, changes: records, changeToken: ServerChangeToken(stringValue: "1.x.40"), moreComing: false)
        do {
            try replica.apply(page, owner: "_owner")
            Issue.record("the write should fail")
        } catch {
            #expect(error.code == .quotaExceeded)
            #expect(error.rule == .diskFull)
            #expect(error.message.contains(b.replicaPath))
        }
        #expect(try replica.recordCount(owner: "_owner", zoneName: "Topics") == 0)
        #expect(try replica.zoneChangeToken(owner: "_owner", zoneName: "Topics") == nil)
        try limitReplicaSize(replica, extraPages: nil)
        try replica.apply(page, owner: "_owner")
        #expect(try replica.recordCount(owner: "_owner", zoneName: "Topics") == 40)
    }

    @Test("accept on a full disk fails with diskFull, not networkFailure; with space again the sync completes")
    func acceptOnAFullDisk() async throws {
        let owner = try await TestOwner.start()
        let notes = (0..<150).map { i in
            var note = Record(recordType: "Note", recordID: owner.id("n\(i)"))
            note["body"] = .string(incompressibleText(4_000, index: i))
            note.setParent(owner.id("topic"))
            return note
        }
        _ = try owner.db.modifyRecords(saving: notes, savePolicy: .allKeys).get()
        let b = try TestParticipant()
        defer { b.remove() }
        let (url, _) = try owner.shareTopic(invite: [(b.identity, .readOnly)])
        let sync = try b.makeSync(pageSize: 50)
        try limitReplicaSize(sync.replica, extraPages: 40)
        try sync.start()
        do {
            try await sync.accept(url: url, timeout: .seconds(60))
            Issue.record("accept should fail on a full disk")
        } catch {
            #expect(error.code == .quotaExceeded, "\(error)")
            #expect(error.rule == .diskFull)
            #expect(error.message.contains(b.replicaPath), "\(error.message)")
            // The owner took the accept: the message says so, not only the local failure.
            #expect(error.message.hasPrefix("the share is accepted, but its first sync failed"), "\(error.message)")
        }
        // Space again: the engine, still running, completes the sync from its tokens.
        try limitReplicaSize(sync.replica, extraPages: nil)
        try await sync.waitUntilSynced(owner: owner.identity.userRecordName, timeout: .seconds(60))
        try await expectReplicaMatches(sync, owner)
        await sync.stop()
        try await owner.stop()
    }

    @Test("a leave the owner took, whose catch-up then fails, says the owner took it rather than reading as refused")
    func leaveTakenThenCatchUpFails() async throws {
        let owner = try await TestOwner.start()
        try owner.saveNotes("n", count: 3)
        let b = try TestParticipant()
        defer { b.remove() }
        let (url, shareName) = try owner.shareTopic(invite: [(b.identity, .readWrite)])
        let ownerName = owner.identity.userRecordName
        let sync = try b.makeSync()
        try sync.start()
        try await sync.accept(url: url)
        // The replica cannot be read (a failing disk): the owner hears the leave, the catch-up fails.
        sync.replica.readFailures.store(1_000_000, ordering: .relaxed)
        do {
            try await sync.leaveShare(owner: ownerName, zoneName: "Topics", shareRecordName: shareName, timeout: .seconds(10))
            Issue.record("the catch-up should fail")
        } catch {
            #expect(error.message.hasPrefix("the owner took the leave, but this node's replica has not caught up"), "\(error.message)")
            #expect(error.message.contains("do not run the command again"))
        }
        sync.replica.readFailures.store(0, ordering: .relaxed)
        let share = try #require(Share(try owner.db.fetchRecord(owner.id(shareName))))
        #expect(share.participants.first { $0.userIdentity.userRecordName == b.identity.userRecordName }?.acceptanceStatus == .removed)
        // Readable again: the catch-up purges the zone, and the owner, of whom nothing is left then,
        // is forgotten.
        try await expectEventually(sync, "the zone purged and the owner forgotten", timeout: 30) { try sync.replica.owners().isEmpty }
        #expect(try sync.replica.fetchAllZones(owner: ownerName).isEmpty)
        await sync.stop()
        try await owner.stop()
    }
}
