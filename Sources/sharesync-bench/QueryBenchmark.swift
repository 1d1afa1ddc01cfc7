import Foundation
import ShareSyncCore
import ShareSyncStore

// Queries in the owner's database, in process: how long a query takes on a zone of N records, for the
// shapes an app asks (the children of a record, which the parent index serves; a field's equality and
// prefix, which SQLite evaluates on the stored JSON while it walks the zone; a sort with a page).

func runQueryBenchmark(count: Int) throws {
    let dir = FileManager.default.temporaryDirectory.appending(path: "sharesync-bench-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: dir) }
    let zone = RecordZone.ID(zoneName: "Topics")
    let db = try PrivateDatabase(path: dir.appending(path: "query.sqlite").path, ownerName: "_owner")
    try db.saveZone(RecordZone(zoneID: zone))
    var batch: [ShareSyncCore.Record] = []
    for i in 0..<count {
        // One Topic per 100 notes; notes carry a title, a rank and a done flag.
        if i % 100 == 0 {
            batch.append(ShareSyncCore.Record(recordType: "Topic", recordID: .init(recordName: "topic-\(i / 100)", zoneID: zone)))
        }
        var note = ShareSyncCore.Record(recordType: "Note", recordID: .init(recordName: "note-\(i)", zoneID: zone))
        note["title"] = .string("Note \(i % 1000) of \(i / 1000)")
        note["rank"] = .int64(Int64(i % 977))
        note["done"] = .bool(i % 3 == 0)
        note.setParent(.init(recordName: "topic-\(i / 100)", zoneID: zone))
        batch.append(note)
        if batch.count >= 399 {
            _ = try db.modifyRecords(saving: batch, savePolicy: .allKeys).get()
            batch = []
        }
    }
    if !batch.isEmpty { _ = try db.modifyRecords(saving: batch, savePolicy: .allKeys).get() }

    let queries: [(String, Query, Int)] = [
        ("children of a record (parent ==, 100 of them)", Query(recordType: "Note", predicate: [.parent(is: .init(recordName: "topic-7", zoneID: zone))]), 1000),
        ("a field equal to a value (1 match)", Query(recordType: "Note", predicate: [.field("title", .equals, "Note 7 of 3")]), 1000),
        ("a text prefix (\(count / 1000) matches)", Query(recordType: "Note", predicate: [.field("title", .beginsWith, "Note 42 ")]), 1000),
        ("a comparison and a flag, first page of 100 by rank", Query(recordType: "Note", predicate: [.field("rank", .lessThan, 50), .field("done", .equals, true)], sortDescriptors: [.init(key: "rank")]), 100),
        ("every topic (\(count / 100) of them)", Query(recordType: "Topic"), 1000),
    ]
    print("query benchmark: a zone of \(count) Notes and \(count / 100) Topics")
    print("| query | p50 | p99 | unit | results |")
    print("| --- | ---: | ---: | --- | ---: |")
    for (name, query, limit) in queries {
        var times: [Double] = []
        var found = 0
        for _ in 0..<20 {
            let start = DispatchTime.now().uptimeNanoseconds
            found = try db.records(matching: query, inZoneWith: zone, resultsLimit: limit).records.count
            times.append(Double(DispatchTime.now().uptimeNanoseconds - start) / 1e6)
        }
        print("| \(name) | \(String(format: "%.2f", percentile(times, 50))) | \(String(format: "%.2f", percentile(times, 99))) | ms | \(found) |")
    }
}
