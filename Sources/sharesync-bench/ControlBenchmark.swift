import Foundation
import ShareSyncCore
import ShareSyncNode

// `sharesync-bench control`: the owner daemon's control path alone, to see what a change's latency
// spends before it leaves the owner. One connection; per call, the time until the answer:
// a `status` (no database work), then single-record saves into a zone shared with nobody and
// into a zone shared publicly (its view kept for one accepted participant).
// --calls sets the number of calls of each kind (default 2,000).
func runControlBenchmark(calls: Int) async throws {
    let root = FileManager.default.temporaryDirectory.appending(path: "sharesync-control-\(getpid())").path
    try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: root) }
    let owner = try NodeDaemon(name: "owner", root: root)
    try owner.start()
    defer { owner.stop() }
    print("owner daemon pid \(owner.pid)")
    let client = try await ControlClient.connect(path: owner.controlPath)
    _ = try await client.call(.zoneCreate(name: "Plain"), as: ZoneInfo.self)

    func timed(_ label: String, _ body: (Int) async throws -> Void) async throws {
        var samples: [Double] = []
        for i in 0..<(calls + 50) {
            let start = now()
            try await body(i)
            if i >= 50 { samples.append((now() - start) * 1e6) }
        }
        print("| \(label) | \(Int(percentile(samples, 50))) | \(Int(percentile(samples, 99))) |")
    }
    print("| control call | p50 µs | p99 µs |")
    print("| --- | ---: | ---: |")
    try await timed("zone list (a small read: the control path's floor)") { _ in _ = try await client.call(.zoneList, as: [ZoneInfo].self) }
    try await timed("status (shares, replicas, outbox)") { _ in _ = try await client.call(.status, as: NodeStatus.self) }
    let plain = RecordZone.ID(zoneName: "Plain")
    try await timed("save 1 record, unshared zone") { i in
        let record = DataSet.note(1, topic: 0, zone: plain, revision: Int64(i))
        _ = try await client.call(.recordImport(zone: "Plain", records: [record]), as: ImportResult.self)
    }
    _ = try await client.call(.zoneCreate(name: "Shared"), as: ZoneInfo.self)
    let share = try await client.call(
        .shareCreate(zone: "Shared", root: nil, title: "Bench", publicPermission: .readOnly, allowsAccessRequests: false),
        as: ShareInfo.self)
    let participant = try NodeDaemon(name: "participant", root: root)
    try participant.start()
    defer { participant.stop() }
    try sharesync(["accept", share.url!, "--home", participant.home, "--json", "--timeout", "60"])
    let shared = RecordZone.ID(zoneName: "Shared")
    try await timed("save 1 record, zone shared with 1 participant (connected)") { i in
        let record = DataSet.note(1, topic: 0, zone: shared, revision: Int64(i))
        _ = try await client.call(.recordImport(zone: "Shared", records: [record]), as: ImportResult.self)
    }
    await client.close()
}
