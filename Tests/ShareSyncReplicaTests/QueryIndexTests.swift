import Foundation
import GRDB
import Testing

import ShareSyncCore
@testable import ShareSyncStore

/// Queries of the replica: the private database's comparisons, walked through an index.
@Suite("Queries")
struct QueryIndexTests {
    /// Topic t1 with notes n0…n5 under it (n0–n2) or under t2 (n3–n5), and a note of Bob's zone of the
    /// same name, which no query of Alice's zone may return.
    static func fill(_ replica: SharedDatabaseReplica) throws {
        var topic = Record(recordType: "Topic", recordID: Record.ID(recordName: "t1", zoneID: zone()))
        topic["title"] = "Topic"
        var records = [try Record(jsonData: topic.jsonData())]
        let titles = ["Milk", "Mint", "Bread", "Eggs", "Mild cheese", "Tea"]
        for (i, title) in titles.enumerated() {
            var note = Record(recordType: "Note", recordID: Record.ID(recordName: "n\(i)", zoneID: zone()))
            note["title"] = .string(title)
            note["rank"] = .int64(Int64(10 - i))
            note.setParent(Record.ID(recordName: i < 3 ? "t1" : "t2", zoneID: zone()))
            records.append(try Record(jsonData: note.jsonData()))
        }
        try replica.apply(page(saving: records, token: token(1)), owner: alice.ownerName)
        var other = Record(recordType: "Note", recordID: Record.ID(recordName: "b0", zoneID: zone(of: bob)))
        other["title"] = "Milk"
        other.setParent(Record.ID(recordName: "t1", zoneID: zone(of: bob)))
        try replica.apply(page(zone(of: bob), saving: [try Record(jsonData: other.jsonData())], token: token(1, of: bob)), owner: bob.ownerName)
    }

    static func names(_ replica: SharedDatabaseReplica, _ predicate: [Query.Condition], type: String = "Note") throws -> [String] {
        try replica.records(matching: Query(recordType: type, predicate: predicate), inZoneWith: zone()).records.map(\.recordID.recordName)
    }

    /// SQLite's plan for the statement the replica runs for `query`, one detail per line.
    static func plan(_ replica: SharedDatabaseReplica, _ query: Query) throws -> [String] {
        let (sql, arguments) = SharedDatabaseReplica.querySQL(query, inZoneWith: zone(), limit: 11, offset: 0)
        return try replica.writer.read { db in
            try Row.fetchAll(db, sql: "EXPLAIN QUERY PLAN " + sql, arguments: arguments).map { $0["detail"] as String }
        }
    }

    @Test("equality, order, parent and prefix select what the private database would", arguments: Storage.allCases)
    func comparisons(storage: Storage) throws {
        try withReplica(storage) { replica in
            try Self.fill(replica)
            #expect(try Self.names(replica, []) == ["n0", "n1", "n2", "n3", "n4", "n5"])
            #expect(try Self.names(replica, [], type: "Topic") == ["t1"])
            #expect(try Self.names(replica, [.field("title", .equals, "Milk")]) == ["n0"])
            #expect(try Self.names(replica, [.field("rank", .lessThan, 7)]) == ["n4", "n5"])
            #expect(try Self.names(replica, [.field("rank", .greaterThan, 8)]) == ["n0", "n1"])
            #expect(try Self.names(replica, [.field("title", .beginsWith, "Mi")]) == ["n0", "n1", "n4"])
            #expect(try Self.names(replica, [.parent(is: Record.ID(recordName: "t1", zoneID: zone()))]) == ["n0", "n1", "n2"])
            #expect(try Self.names(replica, [.parent(is: Record.ID(recordName: "t2", zoneID: zone())), .field("title", .beginsWith, "Mi")]) == ["n4"])
        }
    }

    @Test("a query walks the type index, parent == included, never the whole table", arguments: Storage.allCases)
    func queriesUseTheIndexes(storage: Storage) throws {
        try withReplica(storage) { replica in
            try Self.fill(replica)
            let byType = try Self.plan(replica, Query(recordType: "Note", predicate: [.field("rank", .lessThan, 7)]))
            #expect(byType.contains { $0.hasPrefix("SEARCH replicaRecord USING INDEX replicaRecord_type (zoneKey=? AND type=?)") }, "\(byType)")
            // The index is in name order: no sort for the default order.
            #expect(!byType.contains { $0.contains("TEMP B-TREE") }, "\(byType)")

            let byParent = try Self.plan(
                replica, Query(recordType: "Note", predicate: [.parent(is: Record.ID(recordName: "t1", zoneID: zone()))]))
            #expect(byParent.contains { $0.hasPrefix("SEARCH replicaRecord USING INDEX replicaRecord_type (zoneKey=? AND type=?)") }, "\(byParent)")
            for plan in [byType, byParent] { #expect(!plan.contains { $0.hasPrefix("SCAN") }, "\(plan)") }
        }
    }

    @Test("a replica made before the index gains it when opened, and its queries use it")
    func olderReplicaGainsTheIndexes() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path("shared.sqlite")
        try ReplicaSchema.createOlderFile(path: path, upTo: "replica-v6-journal-dirty-keys", sql: "SELECT 1")
        let replica = try SharedDatabaseReplica(path: path)
        let indexes = try replica.writer.read { db in
            try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'replicaRecord' AND sql IS NOT NULL ORDER BY name")
        }
        #expect(indexes == ["replicaRecord_type"])
        try replica.setOwner(alice)
        try replica.setOwner(bob)
        try Self.fill(replica)
        #expect(try Self.names(replica, [.parent(is: Record.ID(recordName: "t1", zoneID: zone()))]) == ["n0", "n1", "n2"])
    }
}
