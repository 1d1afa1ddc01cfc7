import Foundation
import ShareSyncTestSupport
import Testing

import ShareSyncCore
@testable import ShareSyncStore

@Suite("Paging a large zone")
struct PagingTests {
    static let recordCount = 10_000
    static let batchSize = 400

    static func name(_ i: Int) -> String { "r" + String(i).leftPadded(to: 5) }

    /// Saves `recordCount` records in batches, shuffled within each batch so commit order is not name order.
    static func fill(_ db: PrivateDatabase) throws -> [String] {
        try db.saveZone(RecordZone(zoneID: topics))
        var generator = SeededGenerator(seed: 42)
        var order: [String] = []
        for start in stride(from: 0, to: recordCount, by: batchSize) {
            let batch = (start..<min(start + batchSize, recordCount)).shuffled(using: &generator).map { i in
                makeRecord(name(i), ["index": .int64(Int64(i)), "title": .string("Record \(i)")])
            }
            let result = try db.modifyRecords(saving: batch)
            #expect(result.errors.isEmpty)
            order += batch.map(\.recordID.recordName)
        }
        return order
    }

    @Test(
        "paging 10,000 records returns each once, in commit order, then only later changes",
        .timeLimit(.minutes(10)), arguments: Storage.allCases)
    func pageLargeZone(storage: Storage) async throws {
        // Seconds of CPU: run on the blocking threads, not on the cooperative pool the async tests need.
        // (The limit counts the wait for one of them behind CLI tests: 2 minutes were exceeded in a full
        // run on a slow day. On a pool of its own, its CPU ran beside the network tests, which then
        // timed out.)
        try await blocking {
            try withDatabase(storage) { db in
                let commitOrder = try Self.fill(db)
                #expect(commitOrder.count == Self.recordCount)

                var finalTokens: [ServerChangeToken] = []
                for limit in [100, 333] {
                    var token: ServerChangeToken?
                    var names: [String] = []
                    var pages = 0
                    while true {
                        let page = try db.fetchZoneChanges(topics, since: token, resultsLimit: limit)
                        pages += 1
                        #expect(page.changes.count <= limit)
                        #expect(page.deletedRecords.isEmpty)
                        if page.moreComing { #expect(page.changes.count == limit) }
                        names += page.changes.map(\.recordName)
                        token = page.changeToken
                        if !page.moreComing { break }
                        try #require(pages <= Self.recordCount / limit + 1, "too many pages")
                    }
                    #expect(pages == (Self.recordCount + limit - 1) / limit)
                    #expect(names.count == Self.recordCount)
                    #expect(Set(names).count == Self.recordCount)
                    #expect(names == commitOrder)
                    finalTokens.append(try #require(token))
                }
                #expect(finalTokens[0] == finalTokens[1])
                let finalToken = finalTokens[0]
                #expect(try db.fetchZoneChanges(topics, since: finalToken).changes.isEmpty)

                // A larger limit than the database allows is capped at maximumResultsPerFetch.
                let capped = try db.fetchZoneChanges(topics, since: nil, resultsLimit: 5_000)
                #expect(capped.changes.count == db.limits.maximumResultsPerFetch)
                #expect(capped.moreComing)

                // Further changes: only they come back from the final token.
                var r7 = try db.fetchRecord(recordID(Self.name(7)))
                r7["title"] = "Changed"
                try db.save(r7)
                try db.delete([recordID(Self.name(9_999)), recordID(Self.name(0))])
                try db.save(makeRecord("late"))
                let later = try db.fetchZoneChanges(topics, since: finalToken, resultsLimit: 100)
                #expect(!later.moreComing)
                #expect(later.changes.map(\.recordName) == [Self.name(7), Self.name(9_999), Self.name(0), "late"])
                #expect(later.changedRecords.first?["title"] == "Changed")
                #expect(later.deletedRecords.map(\.recordType) == ["Note", "Note"])
            }
        }
    }
}

extension String {
    func leftPadded(to length: Int) -> String {
        count >= length ? self : String(repeating: "0", count: length - count) + self
    }
}

/// A small deterministic random number generator (SplitMix64), so shuffles repeat.
struct SeededGenerator: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
