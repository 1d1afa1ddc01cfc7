import Foundation
import Testing

import ShareSyncCore
@testable import ShareSyncStore

/// A zone left locally whose leave the owner now has is fetched again from the start at the next
/// catch-up (another share of it may still be this node's); until then pushes leave it alone.
@Suite("Zones to fetch again after a resolved leave")
struct ZoneRefetchTests {
    @Test("a resolved leave marks the zone; a push of it is left out; the catch-up's pages from the start bring it back")
    func pushesWaitForTheRefetch() throws {
        let replica = try SharedDatabaseReplica(inMemory: ())
        try replica.setOwner(alice)
        let old = try fetchedRecord("kept", tag: "1")
        try replica.apply(ZoneChanges(zoneID: zone(), changes: [.changed(old)], changeToken: token(5), moreComing: false), owner: alice.ownerName)

        let leave = PendingLeave(owner: alice.ownerName, zoneName: "Topics", shareName: "first")
        try replica.leaveLocally(leave)
        try replica.resolvePendingLeave(leave)
        #expect(try replica.zonesToRefetch(owner: alice.ownerName) == ["Topics"])
        #expect(try replica.fetchAllZones(owner: alice.ownerName).isEmpty, "not shown, even empty")

        // A push of the zone, before the catch-up: it carries only the latest change. Applied, it
        // stored a current token, and the catch-up went on from there without "kept".
        let newer = try fetchedRecord("new", tag: "2")
        try replica.apply(
            databaseChanges: DatabaseChanges(changedZoneIDs: [zone()], deletedZoneIDs: [], changeToken: token(9), moreComing: false),
            zoneChanges: [ZoneChanges(zoneID: zone(), changes: [.changed(newer)], changeToken: token(9), moreComing: false)],
            token: token(9), owner: alice.ownerName)
        #expect(try replica.fetchAllZones(owner: alice.ownerName).isEmpty)
        #expect(try replica.zoneChangeToken(owner: alice.ownerName, zoneName: "Topics") == nil)
        #expect(try replica.databaseChangeToken(owner: alice.ownerName) == token(9))

        // The catch-up's page from the start, then the mark goes.
        try replica.apply(
            ZoneChanges(zoneID: zone(), changes: [.changed(old), .changed(newer)], changeToken: token(9), moreComing: false),
            owner: alice.ownerName)
        try replica.refetched(owner: alice.ownerName, zoneName: "Topics")
        #expect(try replica.records(owner: alice.ownerName, zoneName: "Topics").map(\.recordID.recordName) == ["kept", "new"])
        #expect(try replica.zonesToRefetch(owner: alice.ownerName).isEmpty)
        // A late second resolution of the same leave (the link's, after an accept's) leaves the zone
        // fetched again in place: it purged it and marked it again before.
        try replica.resolvePendingLeave(leave)
        #expect(try replica.recordCount(owner: alice.ownerName, zoneName: "Topics") == 2)
        #expect(try replica.zonesToRefetch(owner: alice.ownerName).isEmpty)
    }
}

/// Deletions in the shared database's journal carry their record's type (migrations v12, v13).
@Suite("Record types in the journal")
struct JournalRecordTypeTests {
    @Test("a replica from before types were kept: the types are filled in, and a deletion reports its record's")
    func olderReplicaGetsTypes() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path("shared.sqlite")
        let note = try fetchedRecord("n1", tag: "1")
        // As v11 left it: the journal in use and scanned, having seen the zone and the note (no types).
        try ReplicaSchema.createOlderFile(
            path: path, upTo: "replica-v11-zones-to-refetch",
            sql: """
                INSERT INTO replicaOwner (owner, host, port, fingerprint) VALUES ('\(alice.ownerName)', 'h', 1, '\(alice.fingerprint)');
                INSERT INTO replicaZone (owner, zone, token) VALUES ('\(alice.ownerName)', 'Topics', 't');
                INSERT INTO replicaRecord (zoneKey, name, type, json) VALUES (1, 'n1', 'Note', X'\(try hexJSON(note))');
                INSERT INTO replicaFeedState (id, epoch, scanned) VALUES (1, 'old', 1);
                INSERT INTO replicaFeedSeen (owner, zone, name, tag) VALUES ('\(alice.ownerName)', 'Topics', '', ''), ('\(alice.ownerName)', 'Topics', 'n1', '1');
                """)
        let replica = try SharedDatabaseReplica(path: path)
        // The triggers of a journal in use (the rows above were written without them).
        try replica.writer.write { try ReplicaSchema.installJournalTriggers($0) }
        let before = try replica.journalChanges().position
        try replica.apply(
            ZoneChanges(zoneID: zone(), changes: [.deleted(DeletedRecord(recordID: note.recordID, recordType: "Note"))], changeToken: token(9), moreComing: false),
            owner: alice.ownerName)
        let end = try replica.journalChanges().position
        let entries = try replica.journalEntries(after: before.sequence, through: end.sequence)
        #expect(entries.map(\.kind) == [.deleted])
        #expect(entries.first?.recordType == "Note", "\(entries)")
    }
}
