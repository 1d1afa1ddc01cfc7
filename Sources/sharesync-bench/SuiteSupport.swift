import Foundation
import ShareSyncCore
import ShareSyncNode
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

// Shared pieces of the suite: clocks, percentiles, the records, child daemons, /proc readings, results.

/// Monotonic seconds.
func now() -> Double {
    var time = timespec()
    clock_gettime(CLOCK_MONOTONIC, &time)
    return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
}

/// The `p`-th percentile (0...100) of samples, nearest rank.
func percentile(_ samples: [Double], _ p: Double) -> Double {
    guard !samples.isEmpty else { return .nan }
    let sorted = samples.sorted()
    let rank = Int((p / 100 * Double(sorted.count)).rounded(.up)) - 1
    return sorted[min(max(rank, 0), sorted.count - 1)]
}

func progress(_ text: String) {
    FileHandle.standardError.write(Data("[bench \(String(format: "%7.1f", now() - suiteStart))s] \(text)\n".utf8))
}

nonisolated(unsafe) var suiteStart = now()

// MARK: Records

private let noteWords = (
    "lorem ipsum dolor sit amet garden river cloud kettle paper orange window bridge meeting budget draft "
        + "review travel summer winter project launch idea recipe coffee market milk eggs bread call plan trip "
        + "book paint ship fix order water plants notes list ideas"
).split(separator: " ").map(String.init)

/// The shared data set: a Topic/Note hierarchy. One Topic per 100 records, then Notes parented to
/// them; a Note is about 200 bytes of JSON (a title, a body of words, a date and a parent).
enum DataSet {
    static func topicCount(_ total: Int) -> Int { max(1, total / 100) }

    static func record(_ index: Int, total: Int, zone: RecordZone.ID, revision: Int64? = nil) -> Record {
        let topics = topicCount(total)
        if index < topics {
            var r = Record(recordType: "Topic", recordID: .init(recordName: "topic-\(index)", zoneID: zone))
            r["title"] = .string("Topic \(index): " + noteWords[index % noteWords.count])
            r["date"] = .date(Date(timeIntervalSince1970: 1_700_000_000 + Double(index)))
            return r
        }
        return note(index, topic: index % topics, zone: zone, revision: revision)
    }

    static func note(_ index: Int, topic: Int, zone: RecordZone.ID, revision: Int64? = nil) -> Record {
        var r = Record(recordType: "Note", recordID: .init(recordName: "note-\(index)", zoneID: zone))
        var seed = UInt64(truncatingIfNeeded: index &* 2_654_435_761 &+ Int(revision ?? 0))
        func nextWord() -> String {
            seed = seed &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return noteWords[Int((seed >> 33) % UInt64(noteWords.count))]
        }
        r["title"] = .string((0..<3).map { _ in nextWord() }.joined(separator: " ").capitalized)
        r["body"] = .string((0..<14).map { _ in nextWord() }.joined(separator: " "))
        r["date"] = .date(Date(timeIntervalSince1970: 1_700_000_000 + Double(index) * 37))
        if let revision { r["rev"] = .int64(revision) }
        r.setParent(.init(recordName: "topic-\(topic)", zoneID: zone))
        return r
    }

    static func records(_ total: Int, zone: RecordZone.ID) -> [Record] {
        (0..<total).map { record($0, total: total, zone: zone) }
    }
}

// MARK: Processes

/// The path of the `sharesync` executable: `$SHARESYNC_BINARY`, else next to this program.
func sharesyncBinary() -> String {
    if let path = ProcessInfo.processInfo.environment["SHARESYNC_BINARY"] { return path }
    let me = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
    return me.deletingLastPathComponent().appending(path: "sharesync").path
}

/// A free TCP port on 127.0.0.1 (bound and released), so a restarted daemon keeps its share URLs.
func freePort() -> Int {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = 0
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    _ = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) } }
    _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
    return Int(UInt16(bigEndian: address.sin_port))
}

/// Runs `sharesync` to its end; returns its standard output. Throws on a non-zero exit.
@discardableResult
func sharesync(_ arguments: [String]) throws -> String {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: sharesyncBinary())
    process.arguments = arguments
    let out = Pipe()
    let err = Pipe()
    process.standardOutput = out
    process.standardError = err
    process.standardInput = FileHandle(forReadingAtPath: "/dev/null")
    try process.run()
    let data = out.fileHandleForReading.readDataToEndOfFile()
    let errors = err.fileHandleForReading.readDataToEndOfFile()
    guard waitForExit(process, upTo: 30) else {
        kill(process.processIdentifier, SIGKILL)
        throw BenchError("sharesync \(arguments.joined(separator: " ")) closed its output but did not exit within 30 s; killed")
    }
    guard process.terminationStatus == 0 else {
        throw BenchError("sharesync \(arguments.joined(separator: " ")) exited \(process.terminationStatus): "
            + String(decoding: errors, as: UTF8.self))
    }
    return String(decoding: data, as: UTF8.self)
}

/// Waits, sleeping, until `process` has exited; false if it still runs after `seconds`.
///
/// Not `Process.waitUntilExit()`: on Linux it polls the run loop, which returns at once on a thread
/// without run-loop sources, so it spins a core for as long as the child runs (one of the machine's
/// two, next to the daemons being measured), and without end for a child that never exits.
func waitForExit(_ process: Process, upTo seconds: Double) -> Bool {
    let deadline = now() + seconds
    while process.isRunning {
        if now() > deadline { return false }
        usleep(2_000)
    }
    return true
}

struct BenchError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// A node home with its daemon (`sharesync run`), in a temporary folder.
final class NodeDaemon: @unchecked Sendable {
    let home: String
    let port: Int
    private(set) var process: Process?
    private(set) var startSeconds: Double = 0

    /// `sharesync init` in a new temporary home listening on 127.0.0.1:<a free port>.
    init(name: String, root: String) throws {
        home = root + "/" + name
        port = freePort()
        try sharesync(["init", "--home", home, "--name", name, "--listen", "127.0.0.1:\(port)"])
    }

    var pid: Int32 { process?.processIdentifier ?? 0 }
    var controlPath: String { NodeHome.controlSocketPath(home: home) }

    /// Starts the daemon and returns once it printed `listening on` (the time it took is `startSeconds`).
    func start(extraArguments: [String] = []) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: sharesyncBinary())
        process.arguments = ["run", "--home", home, "--log-level", "warning"] + extraArguments
        let out = Pipe()
        process.standardOutput = out
        _ = FileManager.default.createFile(atPath: home + "/daemon.log", contents: nil)
        process.standardError = FileHandle(forWritingAtPath: home + "/daemon.log")
        process.standardInput = FileHandle(forReadingAtPath: "/dev/null")
        let t0 = now()
        try process.run()
        var seen = Data()
        while !String(decoding: seen, as: UTF8.self).contains("listening on") {
            let chunk = out.fileHandleForReading.availableData
            if chunk.isEmpty {
                throw BenchError("daemon in \(home) exited before listening: "
                    + ((try? String(contentsOfFile: home + "/daemon.log", encoding: .utf8)) ?? ""))
            }
            seen.append(chunk)
        }
        startSeconds = now() - t0
        self.process = process
    }

    /// SIGTERM and wait.
    func stop() {
        guard let process, process.isRunning else { return }
        kill(process.processIdentifier, SIGTERM)
        if !waitForExit(process, upTo: 30) {
            progress("\(home): the daemon did not stop within 30 s of SIGTERM; killed")
            kill(process.processIdentifier, SIGKILL)
            _ = waitForExit(process, upTo: 10)
        }
    }

    /// VmHWM (peak resident set) of the daemon, in MB.
    var peakRSSMegabytes: Double { peakRSS(pid: pid) }

    /// One control call on a fresh connection.
    func call<T: Codable & Sendable>(_ request: ControlRequest, as type: T.Type) async throws -> T {
        let client = try await ControlClient.connect(path: controlPath)
        return try await client.call(request, as: type)
    }
}

/// VmHWM of a process in MB (`/proc/PID/status`).
func peakRSS(pid: Int32) -> Double {
    guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return .nan }
    for line in status.split(separator: "\n") where line.hasPrefix("VmHWM:") {
        let kb = line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first.flatMap { Double($0) }
        return (kb ?? .nan) / 1024
    }
    return .nan
}

/// CPU time (user + system) a process has used so far, in seconds (`/proc/PID/stat`). On a machine
/// shared with other work, wall-clock figures vary with the load; CPU seconds much less.
func cpuSeconds(pid: Int32) -> Double {
    guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
        let close = stat.lastIndex(of: ")")
    else { return .nan }
    // After "pid (comm)": state is field 3; utime and stime are fields 14 and 15.
    let fields = stat[stat.index(after: close)...].split(separator: " ")
    guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) else { return .nan }
    return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
}

/// TCP payload bytes received by this process on established connections to a local port, from
/// `ss -tinp` (`bytes_received`), or nil if `ss` does not tell.
func tcpBytesReceived(fromPort port: Int) -> Int? {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/ss")
    process.arguments = ["-tinpH", "state", "established", "( dport = :\(port) )"]
    let out = Pipe()
    process.standardOutput = out
    guard (try? process.run()) != nil else { return nil }
    let text = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    guard waitForExit(process, upTo: 10) else { return nil }
    let me = "pid=\(getpid()),"
    var total = 0
    var found = false
    // Each connection: a line with the addresses and users:(...), then an indented line with tcp info.
    var mine = false
    for line in text.split(separator: "\n") {
        if !line.hasPrefix(" ") && !line.hasPrefix("\t") {
            mine = line.contains(me)
        }
        guard mine, let range = line.range(of: "bytes_received:") else { continue }
        let digits = line[range.upperBound...].prefix { $0.isNumber }
        if let value = Int(digits) {
            total += value
            found = true
            mine = false
        }
    }
    return found ? total : nil
}

// MARK: Results

/// The limits of this machine measured in the same run, which figures are compared with.
struct MachineLimitsOfRun: Codable, Sendable {
    /// Rows per second of a bare SQLite upsert of the suite's rows in one transaction.
    var upsert: Double?
    /// Rows per second of the owner's own upsert into its record table, batches of 400, synced: what
    /// owner writes could reach on the owner's schema (absent in results from before it was measured).
    var ownerSchemaUpsert: Double?
    /// Loopback TCP round trip of 100 bytes, p50 and p99, in ms.
    var roundTripP50: Double?
    var roundTripP99: Double?
}

/// A figure next to a machine limit: `value / limit`, with an optional target on that ratio.
struct Ratio {
    var limitName: String
    var limit: Double
    var atLeast: Double?
    var atMost: Double?
}

struct Figure: Codable, Sendable {
    var scenario: String
    var figure: String
    var value: Double
    var unit: String
    /// The figure divided by the matching machine limit of the same run (nil: none matches).
    var ratio: Double?
    /// Which limit `ratio` is of.
    var ratioOf: String?
    var target: String
    /// nil: no target.
    var met: Bool?
}

final class Results: @unchecked Sendable {
    private(set) var figures: [Figure] = []
    var notes: [String] = []
    var limits = MachineLimitsOfRun()
    /// Whether each figure is printed as it is added (not for figures only measured to compute another).
    let printing: Bool

    init(printing: Bool = true) { self.printing = printing }

    enum Percentile { case p50, p99 }

    /// The ratio to this run's bare SQLite upsert, with a target on it.
    func upsertRatio(atLeast: Double? = nil) -> Ratio? {
        limits.upsert.map { Ratio(limitName: "SQLite upsert", limit: $0, atLeast: atLeast) }
    }

    /// The ratio to this run's upsert into the owner's record table.
    func ownerSchemaRatio() -> Ratio? {
        limits.ownerSchemaUpsert.map { Ratio(limitName: "SQLite on the owner's schema", limit: $0) }
    }

    /// The ratio to this run's loopback TCP round trip (a latency in ms).
    func roundTripRatio(_ p: Percentile) -> Ratio? {
        switch p {
        case .p50: limits.roundTripP50.map { Ratio(limitName: "TCP round trip p50", limit: $0) }
        case .p99: limits.roundTripP99.map { Ratio(limitName: "TCP round trip p99", limit: $0) }
        }
    }

    /// The initial sync's target: 0.7 of the upsert, and 100,000 records/s when the upsert allows it.
    var initialSyncTarget: String {
        guard let upsert = limits.upsert else { return "≥ 0.7 × SQLite upsert" }
        return "≥ 0.7 × SQLite upsert (\(format(0.7 * upsert)))" + (0.7 * upsert >= 100_000 ? ", ≥ 100000" : "")
    }

    /// Adds a figure; `atMost`/`atLeast` set a target on the value, `ratio` one on its ratio to a
    /// machine limit. The figure meets its target when every one given holds.
    func add(_ scenario: String, _ figure: String, _ value: Double, _ unit: String, atMost: Double? = nil,
             atLeast: Double? = nil, ratio: Ratio? = nil, target: String? = nil) {
        var conditions: [Bool] = []
        var texts: [String] = []
        if let atMost {
            conditions.append(value <= atMost)
            texts.append("≤ \(format(atMost))")
        }
        if let atLeast {
            conditions.append(value >= atLeast)
            texts.append("≥ \(format(atLeast))")
        }
        let ratioValue = ratio.map { value / $0.limit }
        if let ratio, let r = ratioValue {
            if let least = ratio.atLeast {
                conditions.append(r >= least)
                texts.append("≥ \(format(least)) × \(ratio.limitName)")
            }
            if let most = ratio.atMost {
                conditions.append(r <= most)
                texts.append("≤ \(format(most)) × \(ratio.limitName)")
            }
        }
        let met: Bool? = conditions.isEmpty ? nil : !conditions.contains(false)
        figures.append(Figure(
            scenario: scenario, figure: figure, value: value, unit: unit, ratio: ratioValue, ratioOf: ratio?.limitName,
            target: target ?? texts.joined(separator: ", "), met: met))
        let ratioText = ratioValue.map { " (\(format($0)) × \(ratio!.limitName))" } ?? ""
        if printing { progress("\(scenario) / \(figure): \(format(value)) \(unit)\(ratioText) \(met.map { $0 ? "(met)" : "(MISSED)" } ?? "")") }
    }

    func table() -> String {
        markdownTable(
            header: ["scenario", "figure", "value", "unit", "ratio to machine limit", "target", "met?"], rightAligned: [2, 4],
            rows: figures.map { f in
                [f.scenario, f.figure, format(f.value), f.unit, f.ratio.map { "\(format($0)) × \(f.ratioOf ?? "")" } ?? "",
                 f.target, f.met.map { $0 ? "yes" : "NO" } ?? "-"]
            })
    }
}

extension SuiteReport {
    /// Each figure of this report next to the same figure of an earlier one: both values, the change,
    /// and whether it is better or worse by more than 5 %. Ratios to the machine limits are compared
    /// too, as they hold better than absolute figures across runs on a shared machine.
    func comparison(with earlier: SuiteReport) -> String {
        var exact: [String: Figure] = [:]
        var loose: [String: Figure] = [:]
        for figure in earlier.figures {
            exact[figure.scenario + " / " + figure.figure] = figure
            loose[Self.looseKey(figure)] = figure
        }
        var rows: [[String]] = []
        var unmatched = 0
        for figure in figures {
            guard let old = exact[figure.scenario + " / " + figure.figure] ?? loose[Self.looseKey(figure)] else {
                unmatched += 1
                continue
            }
            // A percentage changes by points; anything else by its own percent.
            let points = figure.unit == "%"
            let change = points ? figure.value - old.value : old.value == 0 ? Double.nan : (figure.value - old.value) / abs(old.value) * 100
            let higherIsBetter = figure.unit.hasSuffix("/s") || figure.unit == "changes"
            var verdict = ""
            if change.isFinite, abs(change) >= 5, figure.scenario != "machine" {
                verdict = (change > 0) == higherIsBetter ? "better" : "WORSE"
            }
            let ratios = (old.ratio, figure.ratio)
            let ratioText = ratios.0.flatMap { a in ratios.1.map { b in "\(format(a)) → \(format(b))" } } ?? ""
            rows.append([
                figure.scenario, figure.figure, format(old.value), format(figure.value), figure.unit,
                change.isFinite ? String(format: points ? "%+.1f points" : "%+.1f %%", change) : "", ratioText, verdict,
            ])
        }
        var text = markdownTable(
            header: ["scenario", "figure", "before", "now", "unit", "change", "ratio to machine limit", ""], rightAligned: [2, 3, 5],
            rows: rows)
        if unmatched > 0 { text += "\n(\(unmatched) figures have no counterpart in the earlier file)" }
        return text
    }

    /// Figures match by scenario and name; failing that, with what is in parentheses aside (a run
    /// whose replica held 100001 records compares with one that held 100000).
    private static func looseKey(_ figure: Figure) -> String {
        (figure.scenario + " / " + figure.figure).replacing(/\([^)]*\)/, with: "()")
    }
}

/// A Markdown table with columns padded to their widest cell.
func markdownTable(header: [String], rightAligned: Set<Int>, rows: [[String]]) -> String {
    let all = [header] + rows
    let widths = header.indices.map { c in all.map { $0[c].count }.max() ?? 0 }
    var lines: [String] = []
    for (i, row) in all.enumerated() {
        lines.append("| " + row.enumerated().map { c, cell in
            let pad = String(repeating: " ", count: widths[c] - cell.count)
            return rightAligned.contains(c) ? pad + cell : cell + pad
        }.joined(separator: " | ") + " |")
        if i == 0 {
            lines.append("|" + widths.enumerated().map { c, w in
                rightAligned.contains(c) ? String(repeating: "-", count: w + 1) + ":" : String(repeating: "-", count: w + 2)
            }.joined(separator: "|") + "|")
        }
    }
    return lines.joined(separator: "\n")
}

func format(_ value: Double) -> String {
    if value.isNaN { return "n/a" }
    let magnitude = abs(value)
    if magnitude >= 1000 { return String(format: "%.0f", value) }
    if magnitude >= 100 { return String(format: "%.1f", value) }
    if magnitude >= 1 { return String(format: "%.2f", value) }
    return String(format: "%.3f", value)
}
