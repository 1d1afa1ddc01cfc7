// sharesync-bench: micro-benchmarks, one scenario per first argument.
//   swift run -c release sharesync-bench wire|store
import NIOCore
import ShareSyncWire

#if canImport(Glibc)
import Glibc
#endif

let scenarios: [String: () throws -> Void] = [
    "wire": runWireBenchmark,
    "store": runStoreBenchmark,
]

let arguments = CommandLine.arguments.dropFirst()
guard let name = arguments.first, let scenario = scenarios[name] else {
    print("usage: sharesync-bench <scenario>   scenarios: \(scenarios.keys.sorted().joined(separator: ", "))")
    exit(2)
}
try scenario()
