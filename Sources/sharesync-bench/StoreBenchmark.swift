import Foundation
import GRDB
import ShareSyncCore
import ShareSyncStore

// The owner's database, in process: write throughput in batches of 400, the cost of keeping one
// participant's view, reading that view from nil, and the machine's limit (a bare SQLite upsert of
// the same rows in one transaction).

private let words = [
    "milk", "eggs", "bread", "call", "plan", "trip", "book", "garden", "paint", "review", "draft", "ship",
    "fix", "order", "water", "plants", "meeting", "notes", "list", "ideas",
]

/// A Note of about 200 bytes of JSON: title, a body of words, a date and a parent.
private func note(_ i: Int, zone: RecordZone.ID) -> ShareSyncCore.Record {
    var r = ShareSyncCore.Record(recordType: "Note", recordID: .init(recordName: "note-\(i)", zoneID: zone))
    r["title"] = .string("Note \(i)")
    r["body"] = .string((0..<12).map { words[($0 * 7 + i) % words.count] }.joined(separator: " "))
    r["date"] = .date(Date(timeIntervalSince1970: 1_700_000_000 + Double(i)))
    r.setParent(.init(recordName: "topic-\(i % 10)", zoneID: zone))
    return r
}

private func seconds(_ body: () throws -> Void) rethrows -> Double {
    let start = DispatchTime.now().uptimeNanoseconds
    try body()
    return Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
}

func runStoreBenchmark(count: Int, writesOnly: Bool = false) throws {
    let dir = FileManager.default.temporaryDirectory.appending(path: "sharesync-bench-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: dir) }
    let zone = RecordZone.ID(zoneName: "Topics")
    let notes = (0..<count).map { note($0, zone: zone) }
    let jsonBytes = try notes.reduce(0) { $0 + (try $1.jsonData().count) }
    var results: [(String, Double, String)] = []

    // 1. Owner writes, no shares.
    let plain = try PrivateDatabase(path: dir.appending(path: "plain.sqlite").path, ownerName: "_owner")
    try plain.saveZone(RecordZone(zoneID: zone))
    let t1 = try seconds {
        for start in stride(from: 0, to: count, by: 400) {
            _ = try plain.modifyRecords(saving: Array(notes[start..<min(start + 400, count)]), savePolicy: .allKeys).get()
        }
    }
    results.append(("owner saves, batches of 400, no share", Double(count) / t1, "records/s"))

    // 2. Owner writes into a zone shared with one accepted participant (their view is kept as it goes).
    let shared = try PrivateDatabase(path: dir.appending(path: "shared.sqlite").path, ownerName: "_owner")
    try shared.saveZone(RecordZone(zoneID: zone))
    var share = Share(recordZoneID: zone)
    try share.addParticipant(Participant(lookupInfo: .init(userRecordName: "_b"), permission: .readWrite))
    let saved = Share(try shared.modifyRecords(saving: [share.record]).get()[0])!
    try shared.acceptShare(url: saved.url!, as: Caller(userRecordName: "_b"))
    let t2 = try seconds {
        for start in stride(from: 0, to: count, by: 400) {
            _ = try shared.modifyRecords(saving: Array(notes[start..<min(start + 400, count)]), savePolicy: .allKeys).get()
        }
    }
    results.append(("owner saves, batches of 400, zone shared with 1 participant", Double(count) / t2, "records/s"))

    // 2a. The same records edited (a new title, the same parent), batches of 400: updates in place.
    let edits = notes.map { note -> ShareSyncCore.Record in
        var edited = note
        edited["title"] = .string("Edited \(note.recordID.recordName)")
        return edited
    }
    let t2a = try seconds {
        for start in stride(from: 0, to: count, by: 400) {
            _ = try shared.modifyRecords(saving: Array(edits[start..<min(start + 400, count)]), savePolicy: .allKeys).get()
        }
    }
    results.append(("owner edits (same parent), batches of 400, zone shared with 1 participant", Double(count) / t2a, "records/s"))
    if writesOnly {
        // What the same records reach with SQLite's own upsert on the owner's schema, in the same
        // minutes: the write path's figures are read against it (the machine's speed moves).
        let sqliteOnSchema = try MachineLimits.ownerSchemaUpsert(notes, directory: dir.path)
        results.append(("SQLite's own upsert on the owner's schema, batches of 400, same records", sqliteOnSchema, "records/s"))
        results.append(("owner saves (no share) / SQLite on the owner's schema", 100 * Double(count) / t1 / sqliteOnSchema, "%"))
        return print(table(results))
    }

    // 2b. Single-record saves into the shared zone (the owner editing one note), latency of each.
    var single: [Double] = []
    for i in 0..<1_000 {
        var edited = notes[i % 100]
        edited["title"] = .string("Edited \(i)")
        single.append(try seconds { _ = try shared.modifyRecords(saving: [edited], savePolicy: .allKeys).get() })
    }
    results.append(("owner saves 1 record (update), zone shared with 1 participant, p50", percentile(single, 50) * 1e6, "µs"))
    results.append(("owner saves 1 record (update), zone shared with 1 participant, p99", percentile(single, 99) * 1e6, "µs"))

    // 2c. The same edits by the read-write participant, through their shared database view.
    let participantView = shared.sharedDatabase(for: Caller(userRecordName: "_b"))
    let sharedZone = RecordZone.ID(zoneName: "Topics", ownerName: "_owner")
    var byParticipant: [Double] = []
    for i in 0..<1_000 {
        var edited = notes[i % 100].relocated(to: sharedZone)
        edited["title"] = .string("Edited by B \(i)")
        byParticipant.append(try seconds {
            _ = try participantView.modifyRecords(saving: [edited], savePolicy: .allKeys).saveResults[edited.recordID]!.get()
        })
    }
    results.append(("participant saves 1 record (update) through its view, p50", percentile(byParticipant, 50) * 1e6, "µs"))

    // 3. The participant's view read from nil, pages of 400.
    let view = shared.sharedDatabase(for: Caller(userRecordName: "_b"))
    var fetched = 0
    let t3 = try seconds {
        var token: ServerChangeToken?
        var more = true
        while more {
            let page = try view.fetchZoneChanges(RecordZone.ID(zoneName: "Topics", ownerName: "_owner"), since: token)
            fetched += page.changes.count
            token = page.changeToken
            more = page.moreComing
        }
    }
    results.append(("shared view read from nil, pages of 400 (\(fetched) items)", Double(fetched) / t3, "records/s"))

    // 4. Accepting a 100k-record zone share (the participant's view is built).
    let late = try PrivateDatabase(path: dir.appending(path: "late.sqlite").path, ownerName: "_owner")
    try late.saveZone(RecordZone(zoneID: zone))
    for start in stride(from: 0, to: count, by: 400) {
        _ = try late.modifyRecords(saving: Array(notes[start..<min(start + 400, count)]), savePolicy: .allKeys).get()
    }
    var lateShare = Share(recordZoneID: zone)
    try lateShare.addParticipant(Participant(lookupInfo: .init(userRecordName: "_c"), permission: .readOnly))
    let t4a = try seconds { _ = try late.modifyRecords(saving: [lateShare.record]).get() }
    let lateSaved = Share(try late.fetchRecord(lateShare.recordID))!
    let t4 = try seconds { try late.acceptShare(url: lateSaved.url!, as: Caller(userRecordName: "_c")) }
    results.append(("share an existing zone of \(count) records", t4a * 1000, "ms"))
    results.append(("accept a zone share of \(count) records", t4 * 1000, "ms"))

    // 4b. The replica's change journal (what `sharesync changes --shared` and the Swift API's shared
    // feeds read) after one record changed, in a replica of `count` records: the incremental
    // comparison against comparing the whole replica.
    let replica = try SharedDatabaseReplica(path: dir.appending(path: "replica.sqlite").path)
    try replica.setOwner(OwnerInfo(ownerName: "_owner", host: "127.0.0.1", port: 1, fingerprint: String(repeating: "0", count: 32)))
    let replicaZone = RecordZone.ID(zoneName: "Topics", ownerName: "_owner")
    var tags = 0
    func tagged(_ i: Int) -> ShareSyncCore.Record {
        tags += 1
        var record = notes[i].relocated(to: replicaZone)
        record.recordChangeTag = String(tags, radix: 36)
        return record
    }
    // The replica's apply alone (what bounds the initial sync): pages of 400 records already encoded,
    // as the sync engine hands them over, each in its own transaction.
    let pages = try stride(from: 0, to: count, by: 400).map { start in
        try EncodedZoneChanges(
            ZoneChanges(
                zoneID: replicaZone, changes: (start..<min(start + 400, count)).map { .changed(tagged($0)) },
                changeToken: ServerChangeToken(stringValue: "t\(start)"), moreComing: false))
    }
    let tApply = try seconds { for page in pages { try replica.apply(page, owner: "_owner") } }
    results.append(("replica: apply \(count) records in pages of 400", Double(count) / tApply, "records/s"))
    _ = try replica.journalChanges()
    var incremental: [Double] = []
    var full: [Double] = []
    for i in 0..<20 {
        let one = ZoneChanges(zoneID: replicaZone, changes: [.changed(tagged(i))], changeToken: ServerChangeToken(stringValue: "e\(i)"), moreComing: false)
        try replica.apply(one, owner: "_owner")
        if i % 2 == 0 {
            incremental.append(try seconds { _ = try replica.journalChanges() })
        } else {
            full.append(try seconds { _ = try replica.journalChanges(fullScan: true) })
        }
    }
    results.append(("replica journal after 1 changed record (\(count) records), incremental, p50", percentile(incremental, 50) * 1e6, "µs"))
    results.append(("replica journal after 1 changed record (\(count) records), whole replica compared, p50", percentile(full, 50) * 1e6, "µs"))

    // 5. The machine's limit: a bare SQLite upsert of the same rows, one transaction, prepared statement.
    let bare = try DatabasePool(path: dir.appending(path: "bare.sqlite").path)
    try bare.write { db in
        try db.execute(sql: "CREATE TABLE r (zone TEXT, name TEXT, seq INTEGER, json BLOB, PRIMARY KEY (zone, name))")
    }
    let rows = try notes.map { ($0.recordID.recordName, try $0.jsonData()) }
    let t5 = try seconds {
        try bare.write { db in
            let statement = try db.makeStatement(
                sql: "INSERT INTO r (zone, name, seq, json) VALUES ('Topics', ?, ?, ?) ON CONFLICT DO UPDATE SET seq = excluded.seq, json = excluded.json")
            for (i, row) in rows.enumerated() { try statement.execute(arguments: [row.0, i, row.1]) }
        }
    }
    results.append(("machine: bare SQLite upsert, one transaction", Double(count) / t5, "records/s"))

    print("store benchmark: \(count) Note records, \(jsonBytes / count) bytes of JSON each on average")
    print(table(results))
    let json = results.map { "{\"scenario\":\"\($0.0)\",\"value\":\(String(format: "%.1f", $0.1)),\"unit\":\"\($0.2)\"}" }
    print("JSON: [\(json.joined(separator: ","))]")
}

private func table(_ results: [(String, Double, String)]) -> String {
    (["| scenario | figure | unit |", "| --- | ---: | --- |"] + results.map { "| \($0.0) | \(String(format: "%.0f", $0.1)) | \($0.2) |" })
        .joined(separator: "\n")
}
