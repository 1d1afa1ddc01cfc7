import Foundation
import ShareSyncTestSupport
import Testing

@Suite("--json errors: one JSON object on standard error, the same exit codes (CLI)")
struct JSONErrorCLITests {
    @Test("usage errors, refusals, a node not running and an existing home all answer JSON with --json")
    func everyKindOfFailure() async throws {
        try await blocking {
            let a = try E2ENode(name: "Alice")
            defer { a.stop() }
            // Refused by the node (65), with the rule.
            let refused = try a.run(["zone", "delete", "_defaultZone"])
            #expect(refused.status == 65)
            let error = try jsonError(refused)
            #expect(error["code"] as? String == "invalidArguments" && error["rule"] as? String == "defaultZone", "\(error)")
            #expect(error["message"] is String && error["exitCode"] as? Int == 65)
            #expect(refused.stdout.isEmpty, "results only on standard output")
            // Usage errors found by the parser (64): a missing option, an unknown flag, a bad value.
            for arguments in [["record", "get", "--zone", "Z"], ["zone", "list", "--bogus"], ["changes", "--limit", "0"],
                              ["record", "save", "--zone", "Z", "--name", "n", "--field", "nonsense"]] {
                let usage = try a.run(arguments)
                #expect(usage.status == 64, "\(arguments): \(usage.stderr)")
                let body = try jsonError(usage)
                #expect(body["code"] as? String == "usage" && body["exitCode"] as? Int == 64, "\(arguments): \(body)")
            }
            // Without --json the same failures stay text.
            let text = try cli(["zone", "delete", "_defaultZone", "--home", a.home])
            #expect(text.status == 65 && text.stderr.hasPrefix("sharesync: invalidArguments"), "\(text.stderr)")
            // A node that is not running (69).
            let folder = try TemporaryFolder()
            defer { folder.remove() }
            #expect(try cli(["init", "--home", folder.path + "/stopped", "--name", "Stopped", "--listen", "127.0.0.1:0"]).status == 0)
            let down = try cli(["status", "--home", folder.path + "/stopped", "--json"])
            #expect(down.status == 69)
            #expect(try jsonError(down)["code"] as? String == "nodeNotRunning", "\(down.stderr)")
            // A folder that is not a node home (65, rule noHome).
            let nothing = try cli(["status", "--home", folder.path + "/nothing", "--json"])
            #expect(nothing.status == 65)
            #expect(try jsonError(nothing)["rule"] as? String == "noHome", "\(nothing.stderr)")
            // A home that exists already (73).
            let again = try cli(["init", "--home", a.home, "--name", "Again", "--json"])
            #expect(again.status == 73)
            #expect(try jsonError(again)["rule"] as? String == "homeExists", "\(again.stderr)")
            // --help with --json is still help.
            let help = try cli(["zone", "--help", "--json"])
            #expect(help.status == 0 && help.stdout.contains("Example"), "\(help.stderr)")
        }
    }
}
