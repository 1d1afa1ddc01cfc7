import Foundation
import Testing

import ShareSyncCore
@testable import ShareSyncStore

@Suite("On disk")
struct PersistenceTests {
    @Test("owners, records, tokens and the outbox survive closing and reopening")
    func reopen() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path("shared.sqlite")
        let milk = try fetchedRecord("milk", ["title": "Milk"])
        var edit = Record(recordType: "Note", recordID: Record.ID(recordName: "eggs", zoneID: zone()))
        edit["title"] = "Eggs"
        let ids: [Int64]
        let before: ReplicaSnapshot
        do {
            let replica = try SharedDatabaseReplica(path: path)
            try replica.setOwner(alice)
            try replica.setOwner(bob)
            try replica.apply(page(saving: [milk], token: token(3)), owner: alice.ownerName)
            try replica.apply(databaseChanges: DatabaseChanges(changedZoneIDs: [zone()], deletedZoneIDs: [], changeToken: token(4), moreComing: false), owner: alice.ownerName)
            ids = [
                try replica.enqueue(owner: alice.ownerName, operation: OutboxOperation(zoneName: "Topics", saving: [edit], savePolicy: .changedKeys)).id,
                try replica.enqueue(owner: alice.ownerName, operation: OutboxOperation(zoneName: "Topics", deleting: ["milk"])).id,
            ]
            before = try ReplicaSnapshot(replica)
        }

        let reopened = try SharedDatabaseReplica(path: path)
        #expect(try ReplicaSnapshot(reopened) == before)
        #expect(try reopened.owners() == [alice, bob])
        #expect(try reopened.fetchRecord(milk.recordID) == milk)
        #expect(try reopened.zoneChangeToken(owner: alice.ownerName, zoneName: "Topics") == token(3))
        #expect(try reopened.databaseChangeToken(owner: alice.ownerName) == token(4))
        let pending = try reopened.pendingOperations(owner: alice.ownerName)
        #expect(pending.map(\.id) == ids)
        #expect(pending.first?.saving.first?.changedKeys == ["title"])
        #expect(pending.first?.savePolicy == .changedKeys)
        #expect(pending.last?.deleting == ["milk"])

        // New operations go after the old ones, even after the last one was removed.
        try reopened.removeOperation(id: ids[1])
        let next = try reopened.enqueue(owner: alice.ownerName, operation: OutboxOperation(zoneName: "Topics", deleting: ["x"]))
        #expect(next.id > ids[1])
        #expect(try reopened.pendingOperations(owner: alice.ownerName).map(\.id) == [ids[0], next.id])
    }

    @Test("the replica's files are readable by their user only")
    func fileMode() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path("shared.sqlite")
        let replica = try SharedDatabaseReplica(path: path)
        try replica.setOwner(alice)
        try replica.apply(page(saving: [try fetchedRecord("milk")], token: token(1)), owner: alice.ownerName)
        for suffix in ["", "-wal", "-shm"] where FileManager.default.fileExists(atPath: path + suffix) {
            let mode = try FileManager.default.attributesOfItem(atPath: path + suffix)[.posixPermissions] as? Int
            #expect(mode == 0o600, "\(path + suffix) has mode \(String(mode ?? 0, radix: 8))")
        }
        #expect(FileManager.default.fileExists(atPath: path))
    }

    @Test("a replica file is separate from a private database: its migrations are its own")
    func ownMigrations() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path("shared.sqlite")
        _ = try SharedDatabaseReplica(path: path)
        let reopened = try SharedDatabaseReplica(path: path)
        let applied = try reopened.writer.read { db in try String.fetchAll(db, sql: "SELECT identifier FROM grdb_migrations") }
        #expect(applied == [
            "replica-v1", "replica-v2-outbox-state", "replica-v3-change-journal", "replica-v4-pending-leaves",
            "replica-v5-owner-announced-address", "replica-v6-journal-dirty-keys", "replica-v7-query-indexes",
            "replica-v8-journal-triggers-on-use", "replica-v9-journal-deletion-index",
            "replica-v10-record-zone-key", "replica-v11-zones-to-refetch", "replica-v12-journal-record-types",
            "replica-v13-journal-record-types-filled", "replica-v14-owner-last-synced", "replica-v15-outbox-answers",
        ])
    }
}
