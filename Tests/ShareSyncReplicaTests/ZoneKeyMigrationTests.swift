import Foundation
import Testing

import ShareSyncCore
@testable import ShareSyncStore

/// Migration v10: records name their zone by the zone row's id. A replica file from v9 (records keyed
/// by owner and zone name, two owners with a zone of the same name, its journal in use) keeps every
/// record where it was, and everything that reads or writes records by zone works on it afterwards.
@Suite("Records keyed by their zone row (migration v10)")
struct ZoneKeyMigrationTests {
    @Test("a v9 file keeps each owner's records apart; reads, queries, pages, purges and the journal work after")
    func upgradedFile() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path("shared.sqlite")
        let a = alice.ownerName
        let b = bob.ownerName
        let aliceRecords = try (0..<3).map { try fetchedRecord("n\($0)", in: zone(of: alice), ["title": .string("alice \($0)")], tag: "1") }
        let bobRecords = try (0..<2).map { try fetchedRecord("n\($0)", in: zone(of: bob), ["title": .string("bob \($0)")], tag: "1") }
        func row(_ owner: String, _ record: Record) throws -> String {
            "('\(owner)', 'Topics', '\(record.recordID.recordName)', 'Note', X'\(try hexJSON(record))')"
        }
        // The journal saw both zones and every record (scanned), so later calls compare noted keys only.
        let seen = (aliceRecords.map { "('\(a)', 'Topics', '\($0.recordID.recordName)', '1')" }
            + bobRecords.map { "('\(b)', 'Topics', '\($0.recordID.recordName)', '1')" }).joined(separator: ", ")
        try ReplicaSchema.createOlderFile(
            path: path, upTo: "replica-v9-journal-deletion-index",
            sql: """
                INSERT INTO replicaOwner (owner, host, port, fingerprint) VALUES
                    ('\(a)', 'h', 1, '\(alice.fingerprint)'), ('\(b)', 'h', 2, '\(bob.fingerprint)');
                INSERT INTO replicaZone (owner, zone, token) VALUES ('\(b)', 'Topics', 'tb'), ('\(a)', 'Topics', 'ta');
                INSERT INTO replicaRecord (owner, zone, name, type, json) VALUES
                    \(try (aliceRecords.map { try row(a, $0) } + bobRecords.map { try row(b, $0) }).joined(separator: ", "));
                INSERT INTO replicaFeedState (id, epoch, scanned) VALUES (1, 'old', 1);
                INSERT INTO replicaFeedSeen (owner, zone, name, tag) VALUES ('\(a)', 'Topics', '', ''), ('\(b)', 'Topics', '', ''), \(seen);
                """)
        let replica = try SharedDatabaseReplica(path: path)
        #expect(try replica.records(owner: a, zoneName: "Topics") == aliceRecords)
        #expect(try replica.records(owner: b, zoneName: "Topics") == bobRecords)
        #expect(try replica.recordCount(owner: a, zoneName: "Topics") == 3)
        #expect(try replica.fetchRecord(bobRecords[1].recordID) == bobRecords[1])
        #expect(try replica.zoneChangeToken(owner: a, zoneName: "Topics")?.stringValue == "ta")
        let notes = try replica.records(matching: Query(recordType: "Note"), inZoneWith: zone(of: bob))
        #expect(notes.records.map(\.recordID.recordName) == ["n0", "n1"])
        #expect(try Set(JournalEquivalenceTests.triggers(replica).keys) == Set(ReplicaSchema.journalTriggerNames.map { "replicaFeedDirty_\($0)" }))

        // A page edits one of alice's records and adds one: the journal notes exactly those two.
        let start = try replica.journalChanges().position
        let edited = try fetchedRecord("n1", in: zone(of: alice), ["title": .string("alice edited")], tag: "2")
        let added = try fetchedRecord("n9", in: zone(of: alice), ["title": .string("alice new")], tag: "1")
        try replica.apply(page(zone(of: alice), saving: [edited, added], token: token(5)), owner: a)
        let afterPage = try replica.journalChanges()
        #expect(afterPage.added == 2)
        let entries = try replica.journalEntries(after: start.sequence, through: afterPage.position.sequence)
        #expect(entries.map(\.recordName) == ["n1", "n9"])
        #expect(entries.allSatisfy { $0.owner == a && $0.kind == .changed })
        #expect(try replica.records(owner: b, zoneName: "Topics") == bobRecords)

        // Purging alice's zone takes her records and only hers; the journal says the zone is gone.
        try replica.purgeZone(owner: a, zoneName: "Topics")
        #expect(try replica.recordCount(owner: a, zoneName: "Topics") == 0)
        #expect(try replica.records(owner: b, zoneName: "Topics") == bobRecords)
        let afterPurge = try replica.journalChanges()
        let purged = try replica.journalEntries(after: afterPage.position.sequence, through: afterPurge.position.sequence)
        #expect(purged.map(\.kind) == [.zoneDeleted])
        #expect(purged.first?.owner == a)
        // The incremental journal agrees with comparing the whole replica.
        #expect(try replica.journalChanges(fullScan: true).added == 0)
    }
}
