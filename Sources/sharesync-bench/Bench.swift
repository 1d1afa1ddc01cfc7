import ArgumentParser
import Foundation

// sharesync-bench: the benchmark suite and one measurement per layer, one subcommand each.
//   benchmarks/run.sh [suite options]      (builds in release, then `sharesync-bench suite`)
//   .build/release/sharesync-bench store|codec|wire|control|tls|stalled|connections

@main
struct SharesyncBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sharesync-bench",
        abstract: "ShareSync's benchmarks: the suite, and narrower measurements one layer each.",
        discussion: """
            Build in release mode first (benchmarks/run.sh does, then runs the suite). The scenarios that \
            start daemons run the sharesync executable named by $SHARESYNC_BINARY, else the one next to \
            this program.
            """,
        subcommands: [
            SuiteCommand.self, CompareCommand.self, StoreCommand.self, QueryCommand.self, APICommand.self, CodecCommand.self, WireCommand.self, ControlCommand.self, TLSCommand.self,
            StalledCommand.self, ConnectionsCommand.self,
        ])
}

struct SuiteCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "suite",
        abstract: "Every scenario on loopback against real `sharesync run` daemons, with this machine's limits.",
        discussion: """
            Prints a table (scenario, figure, value, unit, ratio to the machine limit measured in the same \
            run, target, met?) and writes the figures as JSON. With --compare, also prints each figure's \
            change against an earlier results file.

            Examples:
              sharesync-bench suite --quick
              sharesync-bench suite --only initial-sync --records 50000
              sharesync-bench suite --only latency --records 10000 --changes 5000
              sharesync-bench suite --compare bench-results/before.json
            """)

    @Flag(help: "Smaller counts: a smoke test of every scenario (about a minute).")
    var quick = false

    @Flag(help: "Also the 1,000,000-record import and daemon-to-daemon sync (several minutes more).")
    var scale = false

    @Flag(help: "Only the 1,000,000-record sync.")
    var scaleOnly = false

    @Option(help: ArgumentHelp(
        "Only one group of scenarios: initial-sync (the owner's import and the two initial syncs), fan-out (both fan-outs) "
            + "or latency (the owner's import, the in-process initial sync, change latency and participant writes).",
        valueName: "group"))
    var only: SuiteOptions.Group?

    @Option(help: "Records of the initial sync (default 100,000; 10,000 with --quick).")
    var records: Int?

    @Option(help: "Changes timed for change latency, and writes for participant writes (default 1,000; 200 with --quick).")
    var changes: Int?

    @Option(help: "Records of the --scale sync (default 1,000,000).")
    var scaleRecords: Int?

    @Option(help: ArgumentHelp("Connections of the large fan-out (default 1,000; 200 with --quick; 0 skips it).", valueName: "n"))
    var fanOutConnections: Int?

    @Option(help: ArgumentHelp("Where the JSON results go.", valueName: "file"))
    var out = "bench-results/results.json"

    @Option(help: ArgumentHelp("An earlier results file: print the change of each figure against it.", valueName: "file"))
    var compare: String?

    func validate() throws {
        for (name, value) in [("--records", records), ("--scale-records", scaleRecords)] {
            if let value, value < 100 { throw ValidationError("\(name) \(value) is too small; at least 100") }
        }
        if let fanOutConnections, fanOutConnections < 0 { throw ValidationError("--fan-out-connections cannot be negative") }
        if let changes, changes < 100 { throw ValidationError("--changes \(changes) is too small; at least 100") }
        if let compare, !FileManager.default.fileExists(atPath: compare) {
            throw ValidationError("--compare \(compare): no such file")
        }
    }

    func run() async throws {
        var options = SuiteOptions(quick: quick)
        options.scale = scale || scaleOnly
        options.onlyScale = scaleOnly
        options.onlyInitialSync = only == .initialSync
        options.onlyFanOut = only == .fanOut
        options.onlyLatency = only == .latency
        if let records { options.records = records }
        if let changes {
            options.changes = changes
            options.writes = changes
        }
        if let scaleRecords { options.scaleRecords = scaleRecords }
        if let fanOutConnections { options.largeFanOutConnections = fanOutConnections }
        options.out = out
        options.compare = compare
        try await runSuite(options)
    }
}

struct CompareCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "compare", abstract: "Print the change of each figure between two results files of the suite.")

    @Argument(help: "The earlier results file.") var before: String
    @Argument(help: "The later results file.") var after: String

    func run() throws {
        func load(_ path: String) throws -> SuiteReport {
            do {
                return try JSONDecoder().decode(SuiteReport.self, from: Data(contentsOf: URL(fileURLWithPath: path)))
            } catch {
                throw ValidationError("\(path) is not a results file of sharesync-bench suite: \(error)")
            }
        }
        print(try load(after).comparison(with: try load(before)))
    }
}

struct StoreCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "store", abstract: "The owner's database in process: write throughput, views, sharing a big zone.")

    @Option(help: "Records to write.") var records = 100_000
    @Flag(help: "Only the two write-throughput figures (for profiling the write path).") var writesOnly = false

    func run() throws { try runStoreBenchmark(count: records, writesOnly: writesOnly) }
}

struct APICommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "api", abstract: "The ShareSync library on an embedded container: p50 and p99 per call.")

    @Option(help: "Calls of each kind.") var calls = 2000

    func run() async throws { try await runAPIBenchmark(calls: calls) }
}

struct QueryCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "query", abstract: "Queries on a zone of N records in the owner's database: p50 and p99 per query shape.")

    @Option(help: "Notes in the zone.") var records = 100_000

    func run() throws { try runQueryBenchmark(count: records) }
}

struct CodecCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "codec", abstract: "Record JSON, hand-written against Foundation: records/s and MB/s.")

    @Option(help: "Records to encode and decode.") var records = 100_000

    func run() throws { try runCodecBenchmark(count: records) }
}

struct WireCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "wire", abstract: "Frame encodings: bytes and MB/s.")

    func run() throws { try runWireBenchmark() }
}

struct ControlCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "control", abstract: "A daemon's control path, per call (starts a daemon).")

    @Option(help: "Calls of each kind.") var calls = 2_000

    func run() async throws { try await runControlBenchmark(calls: calls) }
}

struct TLSCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tls",
        abstract: "TLS against the loopback cleartext mode: set-up, initial fetch, change latency, fan-out.")

    @Option(help: "Connections set up.") var connections = TransportCounts().connections
    @Option(help: "Records of the initial fetch.") var records = TransportCounts().records
    @Option(help: "Changes timed for latency.") var changes = TransportCounts().latencySamples
    @Option(help: "Identities of the fan-out (two connections each).") var fanOutIdentities = TransportCounts().fanOutIdentities
    @Option(help: "Changes of the fan-out.") var fanOutChanges = TransportCounts().fanOutChanges

    func run() async throws {
        var counts = TransportCounts()
        counts.connections = connections
        counts.records = records
        counts.latencySamples = changes
        counts.fanOutIdentities = fanOutIdentities
        counts.fanOutChanges = fanOutChanges
        try await runTLSBenchmark(counts)
    }
}

struct StalledCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "stalled", abstract: "Owner memory with a subscriber that stopped reading while the owner writes.")

    @Option(help: "Records the owner writes.") var records = 100_000

    func run() async throws { try await runStalledSubscriberBenchmark(count: records) }
}

struct ConnectionsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "connections", abstract: "Owner memory with N slowloris peers, then N idle authenticated peers.")

    @Option(help: "Peers of each kind.") var count = 1_000

    func run() async throws { try await runConnectionsBenchmark(count: count) }
}
