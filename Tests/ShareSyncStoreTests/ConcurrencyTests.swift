import Foundation
import Testing

import ShareSyncCore
@testable import ShareSyncStore

@Suite("Using one database from many threads")
struct ConcurrencyTests {
    @Test("concurrent writers all succeed and every change gets its own place in the feed", .timeLimit(.minutes(1)), arguments: Storage.allCases)
    func concurrentWriters(storage: Storage) throws {
        try withDatabase(storage) { db in
            try db.saveZone(RecordZone(zoneID: topics))
            let start = try db.currentChangeToken()
            let writers = 4
            let requests = 20
            let perRequest = 5
            let failures = Failures()
            DispatchQueue.concurrentPerform(iterations: writers) { writer in
                for request in 0..<requests {
                    let records = (0..<perRequest).map { makeRecord("w\(writer)-\(request)-\($0)", ["writer": .int64(Int64(writer))]) }
                    do {
                        let result = try db.modifyRecords(saving: records)
                        if !result.errors.isEmpty { failures.add("\(result.errors)") }
                        // Reads run alongside the writes.
                        _ = try db.fetchZoneChanges(topics, since: start, resultsLimit: 50)
                    } catch {
                        failures.add("\(error)")
                    }
                }
            }
            #expect(failures.all.isEmpty)

            let total = writers * requests * perRequest
            let feed = try db.allZoneChanges(topics, since: start)
            #expect(feed.changes.count == total)
            #expect(Set(feed.changes.map(\.recordName)).count == total)
            let tags = feed.changes.compactMap { if case .changed(let r) = $0 { r.recordChangeTag } else { nil } }
            #expect(Set(tags).count == total)
            // Each request's records are contiguous in commit order: requests do not interleave.
            let requestsInOrder = feed.changes.map { $0.recordName.split(separator: "-").prefix(2).joined(separator: "-") }
            var runs = 0
            for (i, request) in requestsInOrder.enumerated() where i == 0 || requestsInOrder[i - 1] != request { runs += 1 }
            #expect(runs == writers * requests)
        }
    }
}

/// Failures collected from several threads.
final class Failures: @unchecked Sendable {
    private let lock = NSLock()
    private var messages: [String] = []
    func add(_ message: String) { lock.withLock { messages.append(message) } }
    var all: [String] { lock.withLock { messages } }
}
