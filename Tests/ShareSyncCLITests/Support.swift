import Foundation
import ShareSyncTestSupport
import Testing

/// The built `sharesync` binary.
let sharesync = ChildProcess.sharesyncBinary()

/// A temporary folder, removed by ``remove()``.
struct TemporaryFolder {
    let path: String

    init() throws {
        // Short paths: a Unix socket path must fit in about 100 bytes.
        path = "/tmp/ss-cli-" + UUID().uuidString.prefix(8).lowercased()
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    func remove() { try? FileManager.default.removeItem(atPath: path) }
}

/// Runs `sharesync` to its end.
func cli(_ arguments: [String], timeout: Double = 60) throws -> ChildProcess.Outcome {
    try ChildProcess.run(sharesync, arguments, timeout: timeout)
}

/// Decodes JSON output into loose objects.
func json(_ text: String) throws -> Any {
    try JSONSerialization.jsonObject(with: Data(text.utf8), options: [.fragmentsAllowed])
}

/// A node home with its daemon running; ``stop()`` kills whatever still runs and removes the home.
final class RunningNode {
    let folder: TemporaryFolder
    let home: String
    let daemon: ChildProcess
    /// The `listening on` address.
    let listening: String
    let userRecordName: String

    init(name: String = "Alice") throws {
        folder = try TemporaryFolder()
        home = folder.path + "/home"
        let created = try cli(["init", "--home", home, "--name", name, "--listen", "127.0.0.1:0", "--json"])
        guard created.status == 0, let object = try ShareSyncCLITests.json(created.stdout) as? [String: Any],
            let user = object["userRecordName"] as? String
        else {
            folder.remove()
            throw ChildProcessError.exitedEarly(status: created.status, stdout: created.stdout, stderr: created.stderr)
        }
        userRecordName = user
        do {
            daemon = try ChildProcess.start(sharesync, ["run", "--home", home])
            let line = try daemon.waitForLine(containing: "listening on", timeout: 30)
            listening = String(line.dropFirst("listening on ".count))
        } catch {
            folder.remove()
            throw error
        }
    }

    /// Runs a subcommand against this node.
    func run(_ arguments: [String]) throws -> ChildProcess.Outcome {
        try cli(arguments + ["--home", home])
    }

    /// Runs a subcommand with --json, expects success, and returns the parsed output.
    func json(_ arguments: [String], sourceLocation: SourceLocation = #_sourceLocation) throws -> Any {
        let outcome = try run(arguments + ["--json"])
        #expect(outcome.status == 0, "sharesync \(arguments) failed: \(outcome.stderr)", sourceLocation: sourceLocation)
        return try ShareSyncCLITests.json(outcome.stdout)
    }

    func stop() {
        daemon.kill()
        folder.remove()
    }
}
