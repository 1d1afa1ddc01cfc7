import Foundation
import ShareSync
import Testing

/// Queries through the public API: predicates, order, pages, and refusals.
@Suite struct QueryTests {
    static let zoneID = RecordZone.ID(zoneName: "Topics")

    /// Topics t1, t2 and notes n0…n9 (n0–n4 under t1, n5–n9 under t2) with title, rank, done and tags.
    static func fill(_ db: Database) async throws {
        try await db.save(RecordZone(zoneID: zoneID))
        var records: [Record] = []
        for topic in ["t1", "t2"] {
            var r = Record(recordType: "Topic", recordID: Record.ID(recordName: topic, zoneID: zoneID))
            r["title"] = .string("Topic \(topic)")
            records.append(r)
        }
        let titles = ["Milk", "Mint", "Bread", "milk powder", "Eggs", "Mild cheese", "Apples", "Oats", "Mustard", "Tea"]
        for (i, title) in titles.enumerated() {
            var r = Record(recordType: "Note", recordID: Record.ID(recordName: "n\(i)", zoneID: zoneID))
            r["title"] = .string(title)
            r["rank"] = .int64(Int64(10 - i))
            r["done"] = .bool(i % 2 == 0)
            r["tags"] = .list(.string(i % 3 == 0 ? ["dairy", "weekly"] : ["other"]))
            r.setParent(Record.ID(recordName: i < 5 ? "t1" : "t2", zoneID: zoneID))
            records.append(r)
        }
        try await db.modifyRecords(saving: records, deleting: []).get()
    }

    static func names(_ results: QueryResults) -> [String] { results.records.map(\.recordID.recordName) }

    @Test(arguments: bothModes)
    func predicatesAndOrder(mode: Container.Mode) async throws {
        try await withNode(mode) { node in
            let db = node.container.privateDatabase
            try await Self.fill(db)
            func run(_ predicate: [Query.Condition], sort: [Query.SortDescriptor] = [], type: String = "Note") async throws -> [String] {
                Self.names(try await db.records(
                    matching: Query(recordType: type, predicate: predicate, sortDescriptors: sort), inZoneWith: Self.zoneID))
            }
            // Every record of the type, by name; the type filters.
            #expect(try await run([]) == (0..<10).map { "n\($0)" })
            #expect(try await run([], type: "Topic") == ["t1", "t2"])
            // Prefix: case-sensitive.
            #expect(try await run([.field("title", .beginsWith, "Mi")]) == ["n0", "n1", "n5"])
            // Comparisons, sorted by a field.
            #expect(try await run([.field("rank", .greaterThan, 7)], sort: [.init(key: "rank")]) == ["n2", "n1", "n0"])
            #expect(try await run([.field("rank", .lessThanOrEquals, 2)], sort: [.init(key: "rank", ascending: false)]) == ["n8", "n9"])
            #expect(try await run([.field("title", .equals, "Tea")]) == ["n9"])
            #expect(try await run([.field("done", .equals, true), .field("rank", .lessThan, 5)]) == ["n6", "n8"])
            #expect(try await run([.field("title", .notEquals, "Tea"), .parent(is: Record.ID(recordName: "t2", zoneID: Self.zoneID))])
                == ["n5", "n6", "n7", "n8"])
            // parent == X: the children of a record.
            #expect(try await run([.parent(is: Record.ID(recordName: "t1", zoneID: Self.zoneID))]) == ["n0", "n1", "n2", "n3", "n4"])
            // A list field holding a value; a field in a list of values.
            #expect(try await run([.field("tags", .contains, "dairy")]) == ["n0", "n3", "n6", "n9"])
            #expect(try await run([.field("title", .in, .list(.string(["Oats", "Tea", "Nothing"])))]) == ["n7", "n9"])
            // A field no record has matches nothing.
            #expect(try await run([.field("colour", .equals, "red")]).isEmpty)
            // Sorted by title, descending (binary order: lowercase after uppercase).
            #expect(try await run([.field("rank", .greaterThan, 6)], sort: [.init(key: "title", ascending: false)]) == ["n3", "n1", "n0", "n2"])
        }
    }

    @Test(arguments: bothModes)
    func pagesWithCursor(mode: Container.Mode) async throws {
        try await withNode(mode) { node in
            let db = node.container.privateDatabase
            try await Self.fill(db)
            let query = Query(recordType: "Note", sortDescriptors: [.init(key: "rank")])
            var seen: [String] = []
            var cursor: QueryResults.Cursor?
            var pages = 0
            repeat {
                let page = try await db.records(matching: query, inZoneWith: Self.zoneID, resultsLimit: 4, cursor: cursor)
                seen += Self.names(page)
                cursor = page.cursor
                pages += 1
            } while cursor != nil && pages < 10
            #expect(pages == 3)
            #expect(seen == (0..<10).reversed().map { "n\($0)" })
        }
    }

    @Test(arguments: bothModes)
    func malformedQueriesAreRefused(mode: Container.Mode) async throws {
        try await withNode(mode) { node in
            let db = node.container.privateDatabase
            try await Self.fill(db)
            let bad: [Query] = [
                Query(recordType: "no such type!"),
                Query(recordType: "Note", predicate: [.field("bad key", .equals, "x")]),
                Query(recordType: "Note", predicate: [.field("title", .beginsWith, 3)]),
                Query(recordType: "Note", predicate: [.field("title", .lessThan, true)]),
                Query(recordType: "Note", predicate: [.field("photo", .equals, .bytes(Data([1])))]),
                Query(recordType: "Note", predicate: [Query.Condition(key: "parent", .greaterThan, "t1")]),
                Query(recordType: "Note", sortDescriptors: [.init(key: "'; DROP TABLE record; --")]),
            ]
            for query in bad {
                let error = await shareSyncError { _ = try await db.records(matching: query, inZoneWith: Self.zoneID) }
                #expect(error?.code == .invalidArguments, "\(query)")
                #expect(error?.rule == .querySyntax, "\(query)")
            }
            let missing = await shareSyncError {
                _ = try await db.records(matching: Query(recordType: "Note"), inZoneWith: RecordZone.ID(zoneName: "Nowhere"))
            }
            #expect(missing?.code == .zoneNotFound)
            // Nothing was changed by the refusals.
            #expect(try await db.records(matching: Query(recordType: "Note"), inZoneWith: Self.zoneID).records.count == 10)
        }
    }

    @Test(arguments: bothModes)
    func theSharedDatabaseAnswersTheSameQueries(mode: Container.Mode) async throws {
        try await withNode(mode, name: "Alice") { alice in
            try await withNode(mode, name: "Bob") { bob in
                let db = alice.container.privateDatabase
                try await Self.fill(db)
                let share = try await db.createShare(forZone: Self.zoneID)
                try await bob.join(share, of: db, permission: .readOnly)

                // Bob's queries read his replica of Alice's zone, named by her user record name.
                let sharedZone = RecordZone.ID(zoneName: "Topics", ownerName: alice.userRecordName)
                func run(_ predicate: [Query.Condition], sort: [Query.SortDescriptor] = [], type: String = "Note") async throws -> [String] {
                    Self.names(try await bob.container.sharedDatabase.records(
                        matching: Query(recordType: type, predicate: predicate, sortDescriptors: sort), inZoneWith: sharedZone))
                }
                #expect(try await run([]) == (0..<10).map { "n\($0)" })
                #expect(try await run([], type: "Topic") == ["t1", "t2"])
                #expect(try await run([.field("title", .equals, "Tea")]) == ["n9"])
                #expect(try await run([.field("rank", .greaterThan, 7)], sort: [.init(key: "rank")]) == ["n2", "n1", "n0"])
                #expect(try await run([.field("rank", .lessThan, 3)]) == ["n8", "n9"])
                #expect(try await run([.field("title", .beginsWith, "Mi")]) == ["n0", "n1", "n5"])
                #expect(try await run([.parent(is: Record.ID(recordName: "t1", zoneID: sharedZone))]) == ["n0", "n1", "n2", "n3", "n4"])
                #expect(try await run([.parent(is: Record.ID(recordName: "t2", zoneID: sharedZone)), .field("done", .equals, true)])
                    == ["n6", "n8"])

                // Pages, as in the private database.
                let first = try await bob.container.sharedDatabase.records(
                    matching: Query(recordType: "Note", sortDescriptors: [.init(key: "rank")]), inZoneWith: sharedZone, resultsLimit: 4)
                #expect(Self.names(first) == ["n9", "n8", "n7", "n6"])
                let second = try await bob.container.sharedDatabase.records(
                    matching: Query(recordType: "Note", sortDescriptors: [.init(key: "rank")]), inZoneWith: sharedZone, resultsLimit: 4,
                    cursor: first.cursor)
                #expect(Self.names(second) == ["n5", "n4", "n3", "n2"])

                // A zone not shared with him is zoneNotFound.
                let other = RecordZone.ID(zoneName: "Nowhere", ownerName: alice.userRecordName)
                let missing = await shareSyncError { _ = try await bob.container.sharedDatabase.records(matching: Query(recordType: "Note"), inZoneWith: other) }
                #expect(missing?.code == .zoneNotFound)
            }
        }
    }
}
