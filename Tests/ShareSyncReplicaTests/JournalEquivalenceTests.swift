import Foundation
import class GRDB.Row
import Testing

import ShareSyncCore
@testable import ShareSyncStore
import ShareSyncTestSupport

/// The journal compares only the keys written since its last call (noted by triggers). Two replicas
/// get the same random writes, of every kind that changes the live records (pages, pushes, deleted
/// zones, purges, zone replacements, an owner removed and added again); one journals incrementally,
/// the other compares the whole replica each time. Their journals must be the same, entry for entry.
@Suite("The incremental journal against the full comparison")
struct JournalEquivalenceTests {
    struct Entry: Equatable, CustomStringConvertible {
        var sequence: Int64, owner: String, zone: String, name: String?, kind: ReplicaJournalEntry.Kind
        var description: String { "\(sequence) \(kind) \(owner)/\(zone)/\(name ?? "-")" }
    }

    static func entries(_ replica: SharedDatabaseReplica) throws -> [Entry] {
        let position = try replica.journalChanges().position
        return try replica.journalEntries(after: 0, through: position.sequence).map {
            Entry(sequence: $0.sequence, owner: $0.owner, zone: $0.zoneName, name: $0.recordName, kind: $0.kind)
        }
    }

    @Test("random writes give the same journal either way", arguments: [1, 2, 3, 4])
    func incrementalMatchesFullComparison(seed: UInt64) async throws {
        // Seconds of CPU: run on the blocking threads, not on the cooperative pool the async tests need.
        try await blocking {
            try withReplica(.inMemory) { incremental in
                try withReplica(.onDisk) { full in
                    var random = SeededGenerator(seed: seed)
                    var tokens: Int64 = 0
                    let owners = [alice, bob]
                    let zones = ["Topics", "Lists", "Trips"]
                    func nextToken(_ owner: OwnerInfo) -> ServerChangeToken {
                        tokens += 1
                        return token(tokens, of: owner)
                    }
                    func records(_ zoneID: RecordZone.ID) throws -> [Record] {
                        try (0..<Int.random(in: 1...4, using: &random)).map { _ in
                            var record = try fetchedRecord("r\(Int.random(in: 0..<8, using: &random))", in: zoneID, ["n": .int64(tokens)])
                            record.recordChangeTag = "t\(tokens)-\(Int.random(in: 0..<1000, using: &random))"
                            return record
                        }
                    }
                    var checks = 0
                    for step in 0..<300 {
                        let owner = owners.randomElement(using: &random)!
                        let zoneID = zone(zones.randomElement(using: &random)!, of: owner)
                        let write: (SharedDatabaseReplica) throws -> Void
                        switch Int.random(in: 0..<100, using: &random) {
                        case 0..<45:
                            let saving = try records(zoneID)
                            let deleting = (0..<Int.random(in: 0...2, using: &random)).map { _ in "r\(Int.random(in: 0..<8, using: &random))" }
                                .filter { name in !saving.contains { $0.recordID.recordName == name } }
                            let changes = page(zoneID, saving: saving, deleting: Array(Set(deleting)).sorted(), token: nextToken(owner))
                            write = { try $0.apply(changes, owner: owner.ownerName) }
                        case 45..<60:
                            let changes = page(zoneID, saving: try records(zoneID), token: nextToken(owner))
                            let database = DatabaseChanges(
                                changedZoneIDs: [zoneID], deletedZoneIDs: [], changeToken: nextToken(owner), moreComing: false)
                            let pushToken = nextToken(owner)
                            write = { try $0.apply(databaseChanges: database, zoneChanges: [changes], token: pushToken, owner: owner.ownerName) }
                        case 60..<70:
                            let database = DatabaseChanges(
                                changedZoneIDs: [], deletedZoneIDs: [zoneID], changeToken: nextToken(owner), moreComing: false)
                            write = { try $0.apply(databaseChanges: database, owner: owner.ownerName) }
                        case 70..<78:
                            write = { try $0.purgeZone(owner: owner.ownerName, zoneName: zoneID.zoneName) }
                        case 78..<90:
                            let pages = [page(zoneID, saving: try records(zoneID), token: nextToken(owner))]
                            write = { try $0.replaceZone(owner: owner.ownerName, zoneName: zoneID.zoneName, with: pages) }
                        case 90..<94:
                            write = { replica in
                                try replica.removeOwner(owner.ownerName)
                                try replica.setOwner(owner)
                            }
                        default:
                            // Journal now: a call that finds nothing must agree too.
                            #expect(try Self.entries(incremental) == Self.entries(full), "step \(step)")
                            checks += 1
                            continue
                        }
                        try write(incremental)
                        try write(full)
                        if Int.random(in: 0..<3, using: &random) == 0 {
                            let a = try incremental.journalChanges().position
                            let b = try full.journalChanges(fullScan: true).position
                            #expect(a.sequence == b.sequence, "step \(step)")
                            checks += 1
                        }
                    }
                    _ = try full.journalChanges(fullScan: true)
                    let a = try Self.entries(incremental)
                    let b = try Self.entries(full)
                    #expect(a == b)
                    #expect(a.contains { $0.kind == .zoneDeleted } && a.contains { $0.kind == .deleted } && a.contains { $0.kind == .changed })
                    #expect(checks > 50)
                }
            }
        }
    }

    @Test("a replica file from before the noted keys: its journal finds what changed since it last looked")
    func upgradedFileIsComparedInFull() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path("shared.sqlite")
        var record = try fetchedRecord("a", ["title": .string("new")])
        record.recordChangeTag = "2"
        // The journal saw the zone and the record at tag 1; the record is at tag 2 now.
        try ReplicaSchema.createOlderFile(
            path: path, upTo: "replica-v5-owner-announced-address",
            sql: """
                \(try olderFileRows(holding: record))
                INSERT INTO replicaFeedState (id, epoch) VALUES (1, 'old');
                INSERT INTO replicaFeedSeen (owner, zone, name, tag) VALUES ('\(alice.ownerName)', 'Topics', '', ''), ('\(alice.ownerName)', 'Topics', 'a', '1');
                INSERT INTO replicaFeedEntry (owner, zone, name, kind) VALUES ('\(alice.ownerName)', 'Topics', '', 'zoneAdded'), ('\(alice.ownerName)', 'Topics', 'a', 'changed');
                """)
        let replica = try SharedDatabaseReplica(path: path)
        let found = try replica.journalChanges()
        #expect(found.added == 1)
        #expect(try replica.journalEntries(after: 2, through: found.position.sequence).map(\.recordName) == ["a"])
        #expect(try replica.journalChanges().added == 0)
    }

    /// The dirty-key triggers of a replica, with their SQL.
    static func triggers(_ replica: SharedDatabaseReplica) throws -> [String: String] {
        try replica.read { db in
            Dictionary(uniqueKeysWithValues: try Row.fetchAll(db, sql: "SELECT name, sql FROM sqlite_master WHERE type = 'trigger'").map {
                ($0["name"] as String, $0["sql"] as String)
            })
        }
    }

    @Test("the triggers that note keys exist only once the journal is used, and without a condition run per row")
    func triggersFromFirstUse() throws {
        try withReplica(.inMemory) { replica in
            try replica.apply(page(saving: [try fetchedRecord("a")], token: token(1)), owner: alice.ownerName)
            #expect(try Self.triggers(replica).isEmpty)
            let unnoted = try replica.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM replicaFeedDirty") }
            #expect(unnoted == 0)
            #expect(try replica.journalChanges().added == 2)  // the zone and the record
            let triggers = try Self.triggers(replica)
            #expect(Set(triggers.keys) == Set(ReplicaSchema.journalTriggerNames.map { "replicaFeedDirty_\($0)" }))
            #expect(!triggers.values.contains { $0.contains("WHEN") })
            var edited = try fetchedRecord("a", ["title": .string("edited")])
            edited.recordChangeTag = "2"
            try replica.apply(page(saving: [edited, try fetchedRecord("b")], token: token(2)), owner: alice.ownerName)
            let noted = try replica.read { db in try String.fetchSet(db, sql: "SELECT DISTINCT name FROM replicaFeedDirty") }
            #expect(noted == ["a", "b"])
            #expect(try replica.journalChanges().added == 2)
        }
    }

    @Test("migration v8: a replica whose journal is in use keeps noting keys, one that never used it gets no triggers",
          arguments: [true, false])
    func migrationKeepsJournalTriggers(journalInUse: Bool) throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path("shared.sqlite")
        try ReplicaSchema.createOlderFile(
            path: path, upTo: "replica-v7-query-indexes",
            sql: """
                INSERT INTO replicaOwner (owner, host, port, fingerprint) VALUES ('\(alice.ownerName)', 'h', 1, '\(alice.fingerprint)');
                \(journalInUse ? "INSERT INTO replicaFeedState (id, epoch, scanned) VALUES (1, 'old', 1);" : "")
                """)
        let replica = try SharedDatabaseReplica(path: path)
        let triggers = try Self.triggers(replica)
        #expect(triggers.count == (journalInUse ? ReplicaSchema.journalTriggerNames.count : 0))
        #expect(!triggers.values.contains { $0.contains("WHEN") })
        try replica.apply(page(saving: [try fetchedRecord("a")], token: token(1)), owner: alice.ownerName)
        let noted = try replica.read { db in try String.fetchSet(db, sql: "SELECT DISTINCT name FROM replicaFeedDirty") }
        #expect(noted == (journalInUse ? ["", "a"] : []))
        let found = try replica.journalChanges()
        #expect(found.added == 2)
        #expect(try replica.journalChanges().added == 0)
    }

    @Test("a journal kept by an older version compares the whole replica once, then only what changed")
    func olderJournalIsScannedOnce() throws {
        try withReplica(.inMemory) { replica in
            try replica.apply(page(saving: [try fetchedRecord("a"), try fetchedRecord("b")], token: token(1)), owner: alice.ownerName)
            let first = try replica.journalChanges()
            #expect(first.added == 3)  // the zone and two records
            // As an older version left it: nothing noted, and not marked as scanned.
            try replica.write { db in
                try db.execute(sql: "UPDATE replicaFeedState SET scanned = 0")
                try db.execute(sql: "DELETE FROM replicaFeedDirty")
                try db.execute(sql: "DROP TRIGGER replicaFeedDirty_recordUpdate")
            }
            var edited = try fetchedRecord("a", ["title": .string("edited")])
            edited.recordChangeTag = "2"
            try replica.apply(page(saving: [edited], token: token(2)), owner: alice.ownerName)
            let second = try replica.journalChanges()
            #expect(second.added == 1, "the edit made without a trigger was not found")
            let entries = try replica.journalEntries(after: first.position.sequence, through: second.position.sequence)
            #expect(entries.map(\.recordName) == ["a"])
        }
    }
}
