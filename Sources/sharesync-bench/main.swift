// sharesync-bench: the benchmark suite and micro-benchmarks, one scenario per first argument.
//   benchmarks/run.sh [--quick] [--scale]            (builds in release, then `sharesync-bench suite`)
//   swift run -c release sharesync-bench wire|store|codec|control|tls
import Foundation
import NIOCore
import ShareSyncWire

#if canImport(Glibc)
import Glibc
#endif

let scenarios: [String: () throws -> Void] = [
    "wire": runWireBenchmark,
    "store": runStoreBenchmark,
    "codec": runCodecBenchmark,
]

let arguments = Array(CommandLine.arguments.dropFirst())
if arguments.first == "control" {
    try await runControlBenchmark()
    exit(0)
}
if arguments.first == "connections" {
    try await runConnectionsBenchmark(Array(arguments.dropFirst()))
    exit(0)
}
if arguments.first == "stalled" {
    try await runStalledSubscriberBenchmark(Array(arguments.dropFirst()))
    exit(0)
}
if arguments.first == "tls" {
    try await runTLSBenchmark()
    exit(0)
}
if arguments.first == "suite" {
    do {
        try await runSuite(Array(arguments.dropFirst()))
    } catch {
        FileHandle.standardError.write(Data("sharesync-bench suite: \(error)\n".utf8))
        exit(1)
    }
    exit(0)
}
guard let name = arguments.first, let scenario = scenarios[name] else {
    print("usage: sharesync-bench suite [--quick] [--scale] [--scale-only] [--out FILE] | control | tls | stalled [--records N] | connections [--count N] | \(scenarios.keys.sorted().joined(separator: " | "))")
    exit(2)
}
try scenario()
