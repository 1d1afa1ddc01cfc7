import Foundation
import ShareSyncTestSupport
import Testing

/// Every `sharesync` command names itself in its configuration. A command without a `commandName`
/// gets one from swift-argument-parser's `String(describing: Self.self)`, and the first such call
/// for each type scans all of the binary's protocol conformance records (three protocols each):
/// measured with perf, those scans were 27 % of `sharesync run`'s CPU from spawn to listening, and
/// naming the 24 commands that lacked it took the daemon's start (spawn to `listening on`, empty
/// home, release) from a median of 52-61 ms to 47-52 ms in 3 interleaved sets of 7 starts, and from
/// 72 to 56 ms in 18 interleaved starts on a busier minute. The whole command tree is built on every
/// start, so one unnamed command costs every run of every command.
@Suite("CLI: every command is named explicitly (the daemon's start time)")
struct CommandNamesTests {
    static var sources: URL {
        var url = URL(fileURLWithPath: #filePath)
        for _ in 0..<3 { url.deleteLastPathComponent() }
        return url.appending(path: "Sources/sharesync")
    }

    /// (file, type, whether its configuration's first argument is `commandName:`) for every type
    /// declared as a `ParsableCommand` or `AsyncParsableCommand` in the executable's sources (every
    /// folder). A conformance added in an extension is reported: the scan would not see its configuration.
    static func commands() throws -> [(file: String, type: String, named: Bool)] {
        let enumerator = try #require(FileManager.default.enumerator(atPath: sources.path))
        let files = enumerator.compactMap { $0 as? String }.filter { $0.hasSuffix(".swift") }.sorted()
        var found: [(String, String, Bool)] = []
        for file in files {
            let source = try String(contentsOf: sources.appending(path: file), encoding: .utf8)
            let declaration = /(?:struct|enum|class)\s+(\w+)\s*:[^{]*\b(?:Async)?ParsableCommand\b[^{]*\{/
            for match in source.matches(of: /extension\s+[\w.]+\s*:[^{]*\bParsableCommand\b/) {
                Issue.record("\(file): \(match.output) adds the conformance in an extension, which this scan does not follow")
            }
            for match in source.matches(of: declaration) {
                let rest = source[match.range.upperBound...]
                let configuration = try #require(
                    rest.firstRange(of: "static let configuration = CommandConfiguration("),
                    "\(file): \(match.output.1) has no `static let configuration`")
                // Its configuration, not a nested command's further down.
                #expect(rest[..<configuration.lowerBound].contains("struct ") == false, "\(file): \(match.output.1)")
                let arguments = rest[configuration.upperBound...].drop { $0.isWhitespace }
                found.append((file, String(match.output.1), arguments.hasPrefix("commandName:")))
            }
        }
        return found
    }

    @Test("every command's configuration gives its commandName")
    func everyCommandIsNamed() async throws {
        let commands = try Self.commands()
        // The scan finds every command: each one `--experimental-dump-help` lists (46 when this was
        // written, not counting the parser's own help command) is declared where the scan looks.
        let listed = try await blocking { try Self.listedCommandCount() }
        #expect(commands.count == listed, "scanned \(commands.map(\.type)), the CLI lists \(listed)")
        for command in commands where !command.named {
            Issue.record("\(command.file): \(command.type) has no commandName (it would be derived at every start)")
        }
    }

    /// How many commands the built CLI has, from `sharesync --experimental-dump-help` (the root and
    /// every subcommand, the parser's own `help` left out).
    static func listedCommandCount() throws -> Int {
        let dump = try cli(["--experimental-dump-help"])
        let json = try #require(try JSONSerialization.jsonObject(with: Data(dump.stdout.utf8)) as? [String: Any])
        func count(_ command: [String: Any]) -> Int {
            let name = command["commandName"] as? String
            let children = (command["subcommands"] as? [[String: Any]]) ?? []
            return (name == "help" ? 0 : 1) + children.reduce(0) { $0 + count($1) }
        }
        return count(try #require(json["command"] as? [String: Any]))
    }
}
