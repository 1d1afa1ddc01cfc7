import Foundation
import ShareSyncTestSupport
import Testing

import ShareSyncCore
@testable import ShareSyncStore

// Feed pages are bounded by bytes as well as by count (Limits.maximumResponseSize): compared with the
// count-only paging of the same zone, byte-bounded pages hold the same changes in the same order.

@Suite("Pages bounded by bytes")
struct ByteBudgetTests {
    /// Records of random sizes between 10 bytes and 60 kB, some deleted, in random commit order.
    static func fill(_ db: PrivateDatabase, seed: UInt64) throws -> Int {
        try db.saveZone(RecordZone(zoneID: topics))
        var generator = SeededGenerator(seed: seed)
        var names: [String] = []
        for batch in 0..<12 {
            let records = (0..<25).map { i in
                let size = Int.random(in: 10...60_000, using: &generator)
                return makeRecord("r\(batch)-\(i)", ["body": .string(String(repeating: "x", count: size))])
            }
            _ = try db.modifyRecords(saving: records.shuffled(using: &generator), savePolicy: .allKeys).get()
            names += records.map(\.recordID.recordName)
        }
        let deleted = names.shuffled(using: &generator).prefix(40).map { Record.ID(recordName: $0, zoneID: topics) }
        _ = try db.modifyRecords(deleting: Array(deleted)).get()
        return names.count
    }

    /// Every page from nil until `moreComing` is false.
    static func pages(_ db: PrivateDatabase) throws -> [ZoneChanges] {
        var pages: [ZoneChanges] = []
        var token: ServerChangeToken?
        repeat {
            let page = try db.fetchZoneChanges(topics, since: token)
            pages.append(page)
            token = page.changeToken
        } while pages.last!.moreComing && pages.count < 10_000
        return pages
    }

    static func size(_ change: RecordChange) throws -> Int {
        switch change {
        case .changed(let record): try record.jsonData().count + Limits.responseOverheadPerItem
        case .deleted: Limits.responseOverheadPerItem
        }
    }

    @Test("byte-bounded pages hold the same changes in the same order as count-bounded ones, each within the budget",
          arguments: [1, 2, 3] as [UInt64])
    func sameChangesWithinBudget(seed: UInt64) async throws {
        // Seconds of CPU: run on the blocking threads, not on the cooperative pool the async tests need.
        try await blocking {
            var small = Limits()
            small.maximumRecordSize = 100_000
            small.maximumResponseSize = 150_000
            try withDatabase(.inMemory, limits: small) { bounded in
                try withDatabase(.inMemory) { unbounded in
                    _ = try Self.fill(bounded, seed: seed)
                    _ = try Self.fill(unbounded, seed: seed)
                    let boundedPages = try Self.pages(bounded)
                    let unboundedPages = try Self.pages(unbounded)
                    #expect(boundedPages.count > unboundedPages.count, "the budget must cut pages")
                    for page in boundedPages {
                        let bytes = try page.changes.map(Self.size).reduce(0, +)
                        // A page passes the budget only when it is one record (which always comes).
                        #expect(bytes <= small.maximumResponseSize + 200 || page.changes.count == 1)
                        #expect(!page.changes.isEmpty || !page.moreComing)
                    }
                    let names = { (pages: [ZoneChanges]) in
                        pages.flatMap(\.changes).map { "\($0.recordName)/\($0.isDeletion)" }
                    }
                    #expect(names(boundedPages) == names(unboundedPages))
                }
            }
        }
    }

    @Test("a record larger than the rest of the budget still comes, alone, at the start of a page")
    func firstRecordAlwaysComes() throws {
        var small = Limits()
        small.maximumRecordSize = 100_000
        small.maximumResponseSize = 100_000
        try withDatabase(.inMemory, limits: small) { db in
            try db.saveZone(RecordZone(zoneID: topics))
            for (name, size) in [("a", 60_000), ("b", 60_000), ("c", 99_000), ("d", 10)] {
                _ = try db.modifyRecords(saving: [makeRecord(name, ["body": .string(String(repeating: "y", count: size))])]).get()
            }
            let pages = try Self.pages(db).map { $0.changes.map(\.recordName) }
            #expect(pages == [["a"], ["b"], ["c"], ["d"]])
        }
    }
}
