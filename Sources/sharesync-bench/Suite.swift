import ArgumentParser
import Foundation
import Logging
import ShareSyncCore
import ShareSyncNode
import ShareSyncStore
import ShareSyncWire
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

// `sharesync-bench suite [--quick] [--scale] [--only initial-sync] [--records N] [--out FILE] [--compare FILE]`:
// every scenario on loopback, with real `sharesync run` daemons, each figure next to the matching limit
// of this machine measured in the same run (a bare SQLite upsert of the same rows, a loopback TCP round
// trip), as a ratio. See the Benchmarks section of README.md for what each measures.
//
// Who is who:
// - The owner is always a `sharesync run` daemon (temp home); the bench writes to it through its
//   control socket (`recordImport`, as `sharesync record import` does).
// - Initial sync (100k), change latency, participant writes and wire bytes: the bench process is the
//   participant (ParticipantSync + SharedDatabaseReplica in a file), so a replica commit is timed by
//   the replica's change observer, in process.
// - Fan-out: 100 in-process ParticipantSync engines (in-memory replicas, one identity and one TCP
//   connection each) in the bench process.
// - Daemon-to-daemon sync (100k and, with --scale, 1M): a second `sharesync run` daemon accepts
//   through `sharesync accept`; peak RSS is VmHWM of each daemon. The 1M sync's linearity is its
//   time over the median of three syncs of its first 100k records from the same owner daemon, taken
//   before the rest is imported.

struct SuiteOptions {
    /// `--only`: one group of scenarios.
    enum Group: String, ExpressibleByArgument, CaseIterable {
        /// The owner's import, the in-process initial sync and the daemon sync.
        case initialSync = "initial-sync"
        /// The two fan-outs (100 connections, and the large one), each against an owner of its own.
        case fanOut = "fan-out"
        /// The owner's import and the in-process participant: its initial sync, change latency and
        /// participant writes (`--changes` of each).
        case latency = "latency"
    }

    var quick: Bool
    var scale = false
    var out = "bench-results/results.json"
    var compare: String?
    var records: Int
    var changes: Int
    var writes: Int
    var fanParticipants: Int
    var fanChanges: Int
    /// Connections of the large fan-out (0: none), each change to all of them.
    var largeFanOutConnections: Int
    var largeFanOutChanges: Int
    var scaleRecords = 1_000_000
    var roundTrips: Int
    var onlyScale = false
    /// `--only initial-sync`: only the owner's import, the in-process initial sync and the daemon sync.
    var onlyInitialSync = false
    /// `--only fan-out`: only the two fan-outs.
    var onlyFanOut = false
    /// `--only latency`: only the owner's import and the in-process participant (initial sync, change
    /// latency, participant writes).
    var onlyLatency = false

    init(quick: Bool) {
        self.quick = quick
        records = quick ? 10_000 : 100_000
        changes = quick ? 200 : 1_000
        writes = quick ? 200 : 1_000
        fanParticipants = quick ? 10 : 100
        fanChanges = quick ? 100 : 1_000
        largeFanOutConnections = quick ? 200 : 1_000
        largeFanOutChanges = quick ? 20 : 200
        roundTrips = quick ? 2_000 : 10_000
        if quick { scaleRecords = 100_000 }
    }
}

/// Arrival times of one revision of a record at each of several replicas (set by replica observers).
final class Arrivals: Sendable {
    private struct State {
        var target: Int64 = -1
        var times: [Double?]
        var remaining = 0
        var waiter: CheckedContinuation<Bool, Never>?
    }

    private let state: Mutex<State>

    init(count: Int) { state = Mutex(State(times: Array(repeating: nil, count: count))) }

    func expect(_ revision: Int64) {
        state.withLock { s in
            s.target = revision
            s.times = Array(repeating: nil, count: s.times.count)
            s.remaining = s.times.count
        }
    }

    func report(_ index: Int, revision: Int64, at time: Double) {
        let waiter: CheckedContinuation<Bool, Never>? = state.withLock { s in
            guard revision == s.target, s.times[index] == nil else { return nil }
            s.times[index] = time
            s.remaining -= 1
            guard s.remaining == 0 else { return nil }
            defer { s.waiter = nil }
            return s.waiter
        }
        waiter?.resume(returning: true)
    }

    /// Waits until every replica has the revision; the arrival times, or nil after `timeout`.
    func wait(timeout: Duration) async -> [Double]? {
        let watchdog = Task {
            guard (try? await Task.sleep(for: timeout)) != nil else { return }  // cancelled: the change arrived
            let waiter = self.state.withLock { s in defer { s.waiter = nil }; return s.waiter }
            waiter?.resume(returning: false)
        }
        let arrived = await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
            let done = state.withLock { s in
                if s.remaining == 0 { return true }
                s.waiter = continuation
                return false
            }
            if done { continuation.resume(returning: true) }
        }
        watchdog.cancel()
        guard arrived else { return nil }
        return state.withLock { $0.times.map { $0 ?? .nan } }
    }

    /// Calls `report` after each commit of `replica` that holds `id` with a `rev` field.
    func observe(_ replica: SharedDatabaseReplica, index: Int, id: Record.ID) -> UInt64 {
        replica.addChangeObserver { [self] in
            let time = now()
            if let record = (try? replica.fetchRecord(id)) ?? nil, case .int64(let revision)? = record["rev"] {
                self.report(index, revision: revision, at: time)
            }
        }
    }
}

func runSuite(_ options: SuiteOptions) async throws {
    LoggingSystem.bootstrap { _ in SwiftLogNoOpLogHandler() }
    suiteStart = now()
    let results = Results()
    let root = FileManager.default.temporaryDirectory.appending(path: "sharesync-suite-\(getpid())").path
    try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
    var daemons: [NodeDaemon] = []
    defer {
        for daemon in daemons { daemon.stop() }
        try? FileManager.default.removeItem(atPath: root)
    }
    progress("suite: \(options.quick ? "quick" : "full"), \(options.records) records, sharesync at \(sharesyncBinary())")
    // The machine's limits first: every figure after them is also a ratio to its limit.
    try machineLimits(results, options: options, root: root)

    if options.onlyFanOut {
        let owner = try NodeDaemon(name: "owner", root: root)
        daemons.append(owner)
        try owner.start()
        let ownerName = try await owner.call(.status, as: NodeStatus.self).userRecordName
        try await fanOut(
            results, scenario: "fan-out \(options.fanParticipants) connections", owner: owner, ownerName: ownerName,
            connections: options.fanParticipants, changes: options.fanChanges, p99Target: 25)
        owner.stop()
        if options.largeFanOutConnections > 0 { try await largeFanOut(results, options: options, root: root, daemons: &daemons) }
    } else if !options.onlyScale {
        if !options.onlyInitialSync && !options.onlyLatency { try nodeStart(results, root: root) }
        let owner = try NodeDaemon(name: "owner", root: root)
        daemons.append(owner)
        try owner.start()
        let url = try await populate(results, owner: owner, count: options.records)
        let ownerName = try await owner.call(.status, as: NodeStatus.self).userRecordName
        try await inProcessParticipant(results, options: options, owner: owner, ownerName: ownerName, url: url, root: root)
        if !options.onlyLatency {
            if !options.onlyInitialSync {
                try await fanOut(
                    results, scenario: "fan-out \(options.fanParticipants) connections", owner: owner, ownerName: ownerName,
                    connections: options.fanParticipants, changes: options.fanChanges, p99Target: 25)
            }
            try await daemonSync(results, label: "daemon sync \(options.records / 1000)k", owner: owner, url: url,
                                 count: options.records, root: root, daemons: &daemons)
        }
        owner.stop()
        if !options.onlyInitialSync && !options.onlyLatency {
            if options.largeFanOutConnections > 0 { try await largeFanOut(results, options: options, root: root, daemons: &daemons) }
            try storeOnly(results, count: options.records, root: root)
            try await transportCost(results, options: options)
        }
    }
    if options.scale {
        // Linearity: the big sync against a sync of the first `records` of the same records, from the
        // same owner daemon, in the same sitting. That baseline is the median of three syncs, each
        // to a new participant: a sync of 100k takes under a second, and one run of it moved by
        // 10-20 % from one sitting to the next (the ratio with it, against the 100k sync of the other
        // owner earlier in the suite, came out 9.9 and 11.0 in two runs of one build).
        let scenario = "scale \(options.scaleRecords / 1000)k"
        let owner = try NodeDaemon(name: "owner-scale", root: root)
        daemons.append(owner)
        try owner.start()
        let url = try await createSharedZone(owner)
        let baseCount = min(options.records, options.scaleRecords)
        var busy = try await importRecords(owner: owner, 0..<baseCount, of: options.scaleRecords, batch: 2000, scenario: "scale: owner import")
        var baseline: [Double] = []
        for run in 1...3 {
            progress("\(scenario): the first \(baseCount / 1000)k records, sync \(run) of 3")
            baseline.append(try await daemonSync(
                results, label: "scale baseline \(run)", owner: owner, url: url, count: baseCount, root: root, daemons: &daemons,
                reporting: false))
        }
        busy += try await importRecords(
            owner: owner, baseCount..<options.scaleRecords, of: options.scaleRecords, batch: 2000, scenario: "scale: owner import")
        reportImport(results, count: options.scaleRecords, seconds: busy, batch: 2000, scenario: "scale: owner import")
        let big = try await daemonSync(results, label: scenario, owner: owner, url: url, count: options.scaleRecords, root: root, daemons: &daemons)
        let base = percentile(baseline, 50)
        results.add(scenario, "the first \(baseCount / 1000)k of the same records, the same owner: sync, median of 3", base, "s")
        let linear = Double(options.scaleRecords) / Double(baseCount)
        results.add(scenario, "time vs that \(baseCount / 1000)k sync (linear = \(format(linear)))", big / base, "x", atMost: linear * 1.05)
        owner.stop()
    }

    let table = results.table()
    print(table)
    let report = SuiteReport(
        date: ISO8601DateFormatter().string(from: Date()), quick: options.quick, records: options.records,
        cores: ProcessInfo.processInfo.activeProcessorCount, limits: results.limits, figures: results.figures,
        notes: results.notes)
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
    let outURL = URL(fileURLWithPath: options.out)
    try FileManager.default.createDirectory(at: outURL.deletingLastPathComponent(), withIntermediateDirectories: true)
    try encoder.encode(report).write(to: outURL)
    print("wrote \(options.out) (\(String(format: "%.0f", now() - suiteStart)) s)")
    if let compare = options.compare {
        let earlier = try JSONDecoder().decode(SuiteReport.self, from: Data(contentsOf: URL(fileURLWithPath: compare)))
        print("")
        print("Against \(compare) (\(earlier.date)):")
        print(report.comparison(with: earlier))
    }
}

struct SuiteReport: Codable {
    var date: String
    var quick: Bool
    var records: Int
    var cores: Int
    /// The machine's limits measured in the same run (absent in results from before they were kept).
    var limits: MachineLimitsOfRun?
    var figures: [Figure]
    var notes: [String]
}

// MARK: Scenarios

/// Node start until it serves: `sharesync run` on a fresh home, spawn to `listening on`.
func nodeStart(_ results: Results, root: String) throws {
    var samples: [Double] = []
    for i in 0..<5 {
        let node = try NodeDaemon(name: "start-\(i)", root: root)
        try node.start()
        samples.append(node.startSeconds * 1000)
        node.stop()
    }
    results.add("node start", "fresh home, spawn to listening (median of 5)", percentile(samples, 50), "ms", atMost: 50)
    results.add("node start", "fresh home, slowest of 5", samples.max() ?? .nan, "ms")
}

/// Creates the zone and a public readWrite zone share, then saves `count` records through the
/// daemon's control socket in batches (owner write throughput). Returns the share URL.
func populate(
    _ results: Results, owner: NodeDaemon, count: Int, batch: Int = 400, scenario: String = "owner writes"
) async throws -> String {
    let url = try await createSharedZone(owner)
    let busy = try await importRecords(owner: owner, 0..<count, of: count, batch: batch, scenario: scenario)
    reportImport(results, count: count, seconds: busy, batch: batch, scenario: scenario)
    return url
}

/// Creates the zone "Topics" and a public readWrite zone share of it; returns the share's URL.
func createSharedZone(_ owner: NodeDaemon) async throws -> String {
    _ = try await owner.call(.zoneCreate(name: "Topics"), as: ZoneInfo.self)
    let share = try await owner.call(
        .shareCreate(zone: "Topics", root: nil, title: "Bench", publicPermission: .readWrite, allowsAccessRequests: false),
        as: ShareInfo.self)
    guard let url = share.url else { throw BenchError("the share has no URL") }
    return url
}

/// Saves the records `range` of the data set of `total` records through the daemon's control socket
/// in batches; returns the seconds spent waiting for the saves.
func importRecords(owner: NodeDaemon, _ range: Range<Int>, of total: Int, batch: Int, scenario: String) async throws -> Double {
    let zone = RecordZone.ID(zoneName: "Topics")
    var busy = 0.0
    // One control connection, as an application driving its node keeps.
    let client = try await ControlClient.connect(path: owner.controlPath)
    defer { Task { await client.close() } }
    for start in stride(from: range.lowerBound, to: range.upperBound, by: batch) {
        let records = (start..<min(start + batch, range.upperBound)).map { DataSet.record($0, total: total, zone: zone) }
        let t0 = now()
        let saved = try await client.call(.recordImport(zone: "Topics", records: records), as: ImportResult.self).saved
        busy += now() - t0
        guard saved == records.count else { throw BenchError("saved \(saved) of \(records.count)") }
        if start % 100_000 == 0 && start > 0 { progress("\(scenario): \(start) records") }
    }
    return busy
}

/// The owner's write throughput of an import of `count` records that took `seconds`.
func reportImport(_ results: Results, count: Int, seconds busy: Double, batch: Int, scenario: String) {
    results.add(scenario, "batches of \(batch) via the daemon (zone shared)", Double(count) / busy, "records/s",
                ratio: results.upsertRatio(atLeast: 0.5))
    if batch == 400 {
        results.add(scenario, "the same, next to SQLite's own upsert into the owner's record table", Double(count) / busy, "records/s",
                    ratio: results.ownerSchemaRatio())
    }
}

/// The bench process as the participant: initial sync, wire bytes, change latency, write round trip.
func inProcessParticipant(
    _ results: Results, options: SuiteOptions, owner: NodeDaemon, ownerName: String, url: String, root: String
) async throws {
    let replica = try SharedDatabaseReplica(path: root + "/participant-a.sqlite")
    let sync = ParticipantSync(replica: replica, identity: NodeIdentity.generate(), configuration: .init(displayName: "bench-a"))
    let cpu0 = (owner: cpuSeconds(pid: owner.pid), participant: cpuSeconds(pid: getpid()))
    let t0 = now()
    try await sync.accept(url: url, timeout: .seconds(1800))
    let elapsed = now() - t0
    let cpu = (owner: cpuSeconds(pid: owner.pid) - cpu0.owner, participant: cpuSeconds(pid: getpid()) - cpu0.participant)
    let received = tcpBytesReceived(fromPort: owner.port)
    let held = try replica.recordCount(owner: ownerName, zoneName: "Topics")
    let scenario = "initial sync \(options.records / 1000)k"
    results.add(scenario, "accept until replica holds all (\(held) records)", Double(options.records) / elapsed,
                "records/s", ratio: results.upsertRatio(atLeast: 0.7), target: results.initialSyncTarget)
    results.add(scenario, "elapsed", elapsed, "s")
    results.add(scenario, "CPU time, owner daemon", cpu.owner, "s")
    results.add(scenario, "CPU time, bench process as participant", cpu.participant, "s")
    if held < options.records { results.notes.append("initial sync: replica holds \(held) of \(options.records)") }
    if options.onlyInitialSync {
        results.add("peak RSS", "bench process as participant (\(options.records / 1000)k replica, plus the bench's data)",
                    peakRSS(pid: getpid()), "MB")
        await sync.stop()
        return
    }

    // Wire bytes vs the same records as plain JSON (JSON Lines of Record.jsonData()).
    let zone = RecordZone.ID(zoneName: "Topics")
    var plain = 0
    for i in 0..<options.records { plain += try DataSet.record(i, total: options.records, zone: zone).jsonData().count + 1 }
    if let received {
        results.add("wire bytes", "initial sync received / plain JSON (\(received) / \(plain) B)",
                    Double(received) * 100 / Double(plain), "%", atMost: 25)
    } else {
        results.add("wire bytes", "initial sync received (ss gave no bytes_received)", .nan, "%", atMost: 25)
    }

    // Change latency: the owner saves one record (control socket), until this replica committed it.
    let probeID = Record.ID(recordName: "note-\(DataSet.topicCount(options.records))", zoneID: .init(zoneName: "Topics", ownerName: ownerName))
    let arrivals = Arrivals(count: 1)
    let observer = arrivals.observe(replica, index: 0, id: probeID)
    var latencies: [Double] = []
    var acks: [Double] = []
    var missing = 0
    let client = try await ControlClient.connect(path: owner.controlPath)
    for i in 0..<(options.changes + 20) {
        let revision = Int64(i + 1)
        let record = DataSet.note(DataSet.topicCount(options.records), topic: 0, zone: zone, revision: revision)
        arrivals.expect(revision)
        let start = now()
        _ = try await client.call(.recordImport(zone: "Topics", records: [record]), as: ImportResult.self)
        let acked = now()
        guard let times = await arrivals.wait(timeout: .seconds(10)) else {
            missing += 1
            results.notes.append("change latency: revision \(revision) not committed by the participant within 10 s")
            continue
        }
        if i >= 20 {  // the first 20 warm up
            latencies.append((times[0] - start) * 1000)
            acks.append((acked - start) * 1000)
        }
    }
    replica.removeChangeObserver(observer)
    await client.close()
    let lat = "change latency"
    results.add(lat, "owner save → participant replica commit, p50 (\(latencies.count) changes)", percentile(latencies, 50), "ms",
                atMost: 0.5, ratio: results.roundTripRatio(.p50))
    results.add(lat, "p99", percentile(latencies, 99), "ms", atMost: 3, ratio: results.roundTripRatio(.p99))
    results.add(lat, "owner save acknowledged by its daemon (control socket), p50", percentile(acks, 50), "ms")
    if missing > 0 {
        results.add(lat, "changes not seen within 10 s", Double(missing), "changes", atMost: 0)
    }

    // Participant write round trip: ParticipantSync.modifyRecords until the owner answers.
    let sharedZone = RecordZone.ID(zoneName: "Topics", ownerName: ownerName)
    var failed = 0
    /// One write of a record, timed in milliseconds until the owner answers; nil (and counted as
    /// failed) if it was not sent or the owner refused it.
    func timedWrite(_ i: Int, revision: Int64) async throws -> Double? {
        let index = DataSet.topicCount(options.records) + 1 + i % 1000
        let record = DataSet.note(index, topic: index % DataSet.topicCount(options.records), zone: sharedZone, revision: revision)
        let start = now()
        let outcome = try await sync.modifyRecords(owner: ownerName, zoneName: "Topics", saving: [record], savePolicy: .allKeys)
        let end = now()
        guard case .sent(let result) = outcome, case .success? = result.saveResults[record.recordID] else {
            failed += 1
            return nil
        }
        return (end - start) * 1000
    }
    var writes: [Double] = []
    for i in 0..<(options.writes + 20) {
        if let ms = try await timedWrite(i, revision: Int64(i)), i >= 20 { writes.append(ms) }  // the first 20 warm up
    }
    // The same writes one at a time, 3 ms apart, as an app's come: the loop above keeps the cores
    // busy, and a write after a pause also pays for the threads on its path waking from idle.
    var spaced: [Double] = []
    for i in 0..<max(options.writes / 4, 20) {
        try await Task.sleep(for: .milliseconds(3))
        if let ms = try await timedWrite(i, revision: Int64(10_000 + i)) { spaced.append(ms) }
    }
    let w = "participant write"
    results.add(w, "save 1 record until the owner acknowledges, p50 (\(writes.count) writes)", percentile(writes, 50), "ms",
                atMost: 0.6, ratio: results.roundTripRatio(.p50))
    results.add(w, "p99", percentile(writes, 99), "ms")
    results.add(w, "one write every 3 ms (idle between), p50 (\(spaced.count) writes)", percentile(spaced, 50), "ms")
    results.add(w, "one write every 3 ms, p99", percentile(spaced, 99), "ms")
    if failed > 0 { results.add(w, "writes not sent or refused", Double(failed), "writes", atMost: 0) }
    results.add("peak RSS", "bench process as participant (\(options.records / 1000)k replica, plus the bench's data)",
                peakRSS(pid: getpid()), "MB")
    await sync.stop()
}

/// How a fan-out spreads its connections over identities: a share has at most 100 participants,
/// the owner included, so 99 identities at most, each with the same number of devices (connections,
/// replicas), two at least, as a user with a laptop and a desktop.
func fanOutLayout(connections: Int) -> (identities: Int, devices: Int) {
    let devices = max(2, (connections + 98) / 99)
    return ((connections + devices - 1) / devices, devices)
}

/// 1 owner daemon, N in-process participants (in-memory replicas, one TCP connection each); the owner
/// saves one record `changes` times; per change, the time until every participant's replica committed it.
func fanOut(
    _ results: Results, scenario s: String, owner: NodeDaemon, ownerName: String, connections n: Int, changes: Int,
    p99Target: Double?
) async throws {
    _ = try await owner.call(.zoneCreate(name: "Fanout"), as: ZoneInfo.self)
    let share = try await owner.call(
        .shareCreate(zone: "Fanout", root: nil, title: "Fan-out", publicPermission: .readOnly, allowsAccessRequests: false),
        as: ShareInfo.self)
    let zone = RecordZone.ID(zoneName: "Fanout")
    let seed = (0..<20).map { DataSet.record($0, total: 20, zone: zone) }
    _ = try await owner.call(.recordImport(zone: "Fanout", records: seed), as: ImportResult.self)
    let probeID = Record.ID(recordName: "note-1", zoneID: .init(zoneName: "Fanout", ownerName: ownerName))
    let arrivals = Arrivals(count: n)
    var engines: [ParticipantSync] = []
    let t0 = now()
    let layout = fanOutLayout(connections: n)
    let identities = (0..<layout.identities).map { _ in NodeIdentity.generate() }
    for k in 0..<n {
        let replica = try SharedDatabaseReplica(inMemory: ())
        let sync = ParticipantSync(replica: replica, identity: identities[k / layout.devices], configuration: .init(displayName: "fan-\(k)"))
        try await sync.accept(url: share.url!, timeout: .seconds(60))
        _ = arrivals.observe(replica, index: k, id: probeID)
        engines.append(sync)
    }
    progress("\(s): \(n) participants accepted in \(String(format: "%.1f", now() - t0)) s")
    var perChange: [Double] = []
    var deliveries: [Double] = []
    var missing = 0
    let client = try await ControlClient.connect(path: owner.controlPath)
    defer { Task { await client.close() } }
    let warmUp = min(10, changes / 10)
    var cpu0 = (owner: 0.0, participants: 0.0)
    for i in 0..<(changes + warmUp) {
        if i == warmUp { cpu0 = (cpuSeconds(pid: owner.pid), cpuSeconds(pid: getpid())) }
        let revision = Int64(i + 1)
        let record = DataSet.note(1, topic: 0, zone: zone, revision: revision)
        arrivals.expect(revision)
        let start = now()
        _ = try await client.call(.recordImport(zone: "Fanout", records: [record]), as: ImportResult.self)
        guard let times = await arrivals.wait(timeout: .seconds(30)) else { missing += 1; continue }
        if i >= warmUp {
            let ms = times.map { ($0 - start) * 1000 }
            perChange.append(ms.max()!)
            deliveries += ms
        }
    }
    results.add(s, "every connection converged (\(layout.identities) identities x \(layout.devices)), changes of \(changes)",
                Double(perChange.count), "changes", atLeast: Double(changes))
    results.add(s, "until the last participant committed, p50", percentile(perChange, 50), "ms", ratio: results.roundTripRatio(.p50))
    results.add(s, "until the last participant committed, p99", percentile(perChange, 99), "ms", atMost: p99Target,
                ratio: results.roundTripRatio(.p99))
    results.add(s, "each delivery, p50", percentile(deliveries, 50), "ms")
    results.add(s, "each delivery, p99", percentile(deliveries, 99), "ms")
    // CPU per change, steadier than the latencies from run to run: on two cores, the owner and the
    // participants together are most of what a change waits for.
    let timed = Double(max(perChange.count, 1))
    results.add(s, "CPU per change, owner daemon", (cpuSeconds(pid: owner.pid) - cpu0.owner) / timed * 1000, "ms")
    results.add(s, "CPU per change, the participants (this process)", (cpuSeconds(pid: getpid()) - cpu0.participants) / timed * 1000, "ms")
    if missing > 0 { results.notes.append("\(s): \(missing) changes did not reach every participant within 30 s") }
    for engine in engines { await engine.stop() }
}

/// The fan-out with many connections (1,000 by default) against an owner daemon of its own, so its
/// peak RSS is what serving them costs.
func largeFanOut(_ results: Results, options: SuiteOptions, root: String, daemons: inout [NodeDaemon]) async throws {
    let n = options.largeFanOutConnections
    let owner = try NodeDaemon(name: "owner-fan-out", root: root)
    daemons.append(owner)
    try owner.start(extraArguments: ["--connections-per-identity", String(fanOutLayout(connections: n).devices)])
    defer { owner.stop() }
    let ownerName = try await owner.call(.status, as: NodeStatus.self).userRecordName
    let s = "fan-out \(n) connections"
    try await fanOut(results, scenario: s, owner: owner, ownerName: ownerName, connections: n, changes: options.largeFanOutChanges, p99Target: nil)
    results.add(s, "peak RSS owner daemon", owner.peakRSSMegabytes, "MB", atMost: 150)
}

/// Daemon to daemon: restarts the owner (its VmHWM then covers serving the sync), starts a fresh
/// participant daemon, and times `sharesync accept`.
@discardableResult
func daemonSync(
    _ results: Results, label: String, owner: NodeDaemon, url: String, count: Int, root: String,
    daemons: inout [NodeDaemon], reporting: Bool = true
) async throws -> Double {
    // Three restarts, the last one serving the sync: one start is a single sample of tens of
    // milliseconds on a shared machine (the 1,000,000-record owner's one start read 31 ms in one
    // full run and 61 ms in another).
    var starts: [Double] = []
    for _ in 0..<3 {
        owner.stop()
        try owner.start()
        starts.append(owner.startSeconds * 1000)
    }
    // Not reporting (a baseline): only the time, and a replica that does not hold everything fails the run.
    let results = reporting ? results : Results(printing: false)
    results.add(label, "owner node start with \(count / 1000)k records, spawn to listening", percentile(starts, 50), "ms", atMost: 50)
    results.add(label, "owner node start with \(count / 1000)k records, slowest of 3 restarts (the figure above is their median)", starts.max() ?? .nan, "ms")
    let participant = try NodeDaemon(name: "participant-\(label.filter { $0.isLetter || $0.isNumber })", root: root)
    daemons.append(participant)
    try participant.start()
    let cpu0 = (owner: cpuSeconds(pid: owner.pid), participant: cpuSeconds(pid: participant.pid))
    let t0 = now()
    try sharesync(["accept", url, "--home", participant.home, "--json", "--timeout", "3600"])
    let elapsed = now() - t0
    results.add(label, "CPU time, owner daemon", cpuSeconds(pid: owner.pid) - cpu0.owner, "s")
    results.add(label, "CPU time, participant daemon", cpuSeconds(pid: participant.pid) - cpu0.participant, "s")
    let zones = try await participant.call(.sharedZoneList, as: [SharedZoneInfo].self)
    let held = zones.first(where: { $0.zoneName == "Topics" })?.records ?? 0
    results.add(label, "accept, end to end", elapsed, "s")
    results.add(label, "records/s (replica holds \(held))", Double(count) / elapsed, "records/s",
                ratio: results.upsertRatio(atLeast: 0.7), target: results.initialSyncTarget)
    results.add(label, "peak RSS owner daemon (restart + serving the sync)", owner.peakRSSMegabytes, "MB", atMost: 100)
    results.add(label, "peak RSS participant daemon", participant.peakRSSMegabytes, "MB", atMost: 100)
    if held < count {
        guard reporting else { throw BenchError("\(label): participant replica holds \(held) of \(count)") }
        results.notes.append("\(label): participant replica holds \(held) of \(count)")
    }
    participant.stop()
    return elapsed
}

/// The store alone, in process: batches of 400 into a zone shared with one accepted participant.
func storeOnly(_ results: Results, count: Int, root: String) throws {
    let db = try PrivateDatabase(path: root + "/store-only.sqlite", ownerName: "_owner")
    let zone = RecordZone.ID(zoneName: "Topics")
    _ = try db.saveZone(RecordZone(zoneID: zone))
    var share = Share(recordZoneID: zone)
    try share.addParticipant(Participant(lookupInfo: .init(userRecordName: "_b"), permission: .readWrite))
    let saved = Share(try db.modifyRecords(saving: [share.record]).get()[0])!
    _ = try db.acceptShare(url: saved.url!, as: Caller(userRecordName: "_b"))
    let records = DataSet.records(count, zone: zone)
    let t0 = now()
    for start in stride(from: 0, to: count, by: 400) {
        _ = try db.modifyRecords(saving: Array(records[start..<min(start + 400, count)]), savePolicy: .allKeys).get()
    }
    results.add("owner writes", "batches of 400, store only in process (zone shared with 1)", Double(count) / (now() - t0), "records/s",
                ratio: results.upsertRatio())
}

func machineLimits(_ results: Results, options: SuiteOptions, root: String) throws {
    let records = DataSet.records(options.records, zone: RecordZone.ID(zoneName: "Topics"))
    let m = "machine"
    let upsert = try MachineLimits.sqliteUpsert(records, directory: root)
    results.limits.upsert = upsert
    results.add(m, "SQLite bulk upsert, same rows, one transaction", upsert, "records/s")
    if !options.onlyFanOut {
        let ownerSchema = try MachineLimits.ownerSchemaUpsert(records, directory: root)
        results.limits.ownerSchemaUpsert = ownerSchema
        results.add(m, "SQLite upsert into the owner's record table (its schema and indexes), batches of 400, synced",
                    ownerSchema, "records/s", ratio: results.upsertRatio())
    }
    let rtt = try MachineLimits.tcpRoundTrips(options.roundTrips)
    results.limits.roundTripP50 = percentile(rtt, 50)  // ms
    results.limits.roundTripP99 = percentile(rtt, 99)
    results.add(m, "loopback TCP round trip 100 B, p50", percentile(rtt, 50) * 1000, "µs")
    results.add(m, "loopback TCP round trip 100 B, p99", percentile(rtt, 99) * 1000, "µs")
    let syncs = try MachineLimits.diskSyncs(500, directory: root)
    results.add(m, "4 KiB overwrite and fdatasync (an owner commit's disk sync), p50", percentile(syncs, 50) * 1000, "µs")
    results.add(m, "4 KiB overwrite and fdatasync, p99", percentile(syncs, 99) * 1000, "µs")
    guard !options.onlyInitialSync, !options.onlyFanOut, !options.onlyLatency else { return }
    let z = try MachineLimits.zlib(records)
    results.add(m, "zlib deflate, same bytes (pages of 400, sync flush, default level 6)", z.deflate, "MB/s")
    results.add(m, "zlib inflate, same bytes", z.inflate, "MB/s")
    results.add(m, "zlib compressed size / plain (level 6)", z.ratio * 100, "%")
    let fast = try MachineLimits.zlib(records, level: FrameEncoder.defaultCompressionLevel)
    results.add(m, "zlib deflate at level 1 (what nodes send)", fast.deflate, "MB/s")
    results.add(m, "zlib compressed size / plain (level 1)", fast.ratio * 100, "%")
}

/// What TLS costs against the loopback cleartext debug mode (`sharesync-bench tls`, with fewer
/// connections and changes): set-up, initial fetch, change latency and fan-out, each as a percentage.
func transportCost(_ results: Results, options: SuiteOptions) async throws {
    var counts = TransportCounts()
    counts.connections = options.quick ? 30 : 100
    counts.records = options.quick ? 5_000 : 50_000
    counts.latencySamples = options.quick ? 50 : 300
    counts.fanOutIdentities = options.quick ? 10 : 50
    counts.fanOutChanges = options.quick ? 30 : 200
    progress("TLS cost: \(counts.records) records, \(counts.latencySamples) changes, \(counts.fanOutIdentities * 2) fan-out connections")
    let rows = try await measureTransports(counts)
    let (tls, clear) = (rows[0], rows[1])
    let s = "TLS cost"
    results.add(s, "connection set-up until welcome, p50, TLS 1.3", tls.connectP50, "ms")
    results.add(s, "connection set-up until welcome, p50, cleartext", clear.connectP50, "ms")
    results.add(s, "initial fetch of \(counts.records) records, TLS slower by", tls.initialFetchCost(against: clear), "%", atMost: 10)
    results.add(s, "change latency p50, TLS slower by (both on the same saves)", tls.latencyCost(against: clear), "%", atMost: 10)
    results.add(s, "fan-out to \(counts.fanOutIdentities * 2) connections p50, TLS slower by", tls.fanOutCost(against: clear), "%", atMost: 10)
}
