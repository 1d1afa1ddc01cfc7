import Foundation
import ShareSync

// The ShareSync library's calls on an embedded container (the node in this process): what one call
// costs an app, without the control socket. `control` measures the same handler through a daemon's socket.

func runAPIBenchmark(calls: Int) async throws {
    let folder = "/tmp/ss-bench-api-" + UUID().uuidString.prefix(8).lowercased()
    defer { try? FileManager.default.removeItem(atPath: folder) }
    try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
    try Container.createHome(at: folder + "/home", displayName: "Bench", listen: HostAndPort(host: "127.0.0.1", port: 0))
    let container = try await Container.embedded(home: folder + "/home", controlSocket: false)
    let db = container.privateDatabase
    let zoneID = RecordZone.ID(zoneName: "Bench")
    try await db.save(RecordZone(zoneID: zoneID))
    func timed(_ label: String, _ body: (Int) async throws -> Void) async throws {
        var samples: [Double] = []
        for i in 0..<(calls + 50) {
            let start = DispatchTime.now().uptimeNanoseconds
            try await body(i)
            if i >= 50 { samples.append(Double(DispatchTime.now().uptimeNanoseconds - start) / 1e3) }
        }
        print("| \(label) | \(Int(percentile(samples, 50))) | \(Int(percentile(samples, 99))) |")
    }
    print("| embedded container call | p50 µs | p99 µs |")
    print("| --- | ---: | ---: |")
    try await timed("allRecordZones") { _ in _ = try await db.allRecordZones() }
    var last: Record?
    try await timed("save 1 record (new)") { i in
        var record = Record(recordType: "Note", recordID: Record.ID(recordName: "n\(i)", zoneID: zoneID))
        record["title"] = .string("Note \(i)")
        record.setParent(Record.ID(recordName: "topic-\(i % 10)", zoneID: zoneID))
        last = try await db.save(record)
    }
    try await timed("record(for:)") { i in _ = try await db.record(for: Record.ID(recordName: "n\(i % 100)", zoneID: zoneID)) }
    try await timed("query: children of a record (10 of them)") { i in
        _ = try await db.records(
            matching: Query(recordType: "Note", predicate: [.parent(is: Record.ID(recordName: "topic-\(i % 10)", zoneID: zoneID))]),
            inZoneWith: zoneID, resultsLimit: 10)
    }
    _ = last
    await container.close()
}
