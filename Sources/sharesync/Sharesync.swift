import ArgumentParser
import Foundation
import ShareSyncNode

/// The `sharesync` command: one root command, nested subcommands.
@main
struct Sharesync: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sharesync",
        abstract: "CloudKit-style sharing between Linux nodes.",
        discussion: """
            A node keeps its user's private database and serves it to the people it shares with. \
            `sharesync init` creates a node home, `sharesync run` starts its daemon, and every other \
            command talks to that daemon through the control socket in the home.

            Example:
              sharesync init --home ~/.sharesync --name Alice --listen 0.0.0.0:7420 --advertise alice.example.org:7420
              sharesync run --home ~/.sharesync &
              export SHARESYNC_HOME=~/.sharesync        # the other commands find the node through it
              sharesync zone create Groceries
              sharesync record save --zone Groceries --type Item --name milk --field title=string:Milk
              sharesync share create --zone Groceries --title "Weekly groceries"
              sharesync share invite --zone Groceries --email bob@example.org --permission readWrite

            Exit codes: 0 success; 64 usage error; 65 the node refused or could not do the operation \
            (its error code is printed: a refusal such as permissionFailure, or a failure of the node's own, such as \
            quotaExceeded for a full disk or internalError; also a --home that is not a node home, rule noHome); 69 \
            the node is not running; 70 a failure of this command \
            itself; 73 the folder already is a node home (init).

            With --json, a failure prints one JSON object (one line) on standard error instead of the \
            message, with the same exit code: {"error": {"code", "message", "rule", "recordName", \
            "zoneName", "serverRecord", "exitCode"}} (code is the node's error code, or usage, \
            nodeNotRunning, malformedResponse, internalError).
            """,
        subcommands: [
            InitCommand.self, RunCommand.self, StatusCommand.self, ZoneCommand.self, RecordCommand.self,
            ShareCommand.self, AcceptCommand.self, RequestAccessCommand.self, LeaveCommand.self,
            OutboxCommand.self, ChangesCommand.self, WatchCommand.self, AdvertiseCommand.self, OwnerCommand.self,
            BackupCommand.self,
        ]
    )

    /// Parses and runs the command; with `--json` anywhere on the command line, failures (usage
    /// errors included) print as JSON on standard error (see ``Output/fail(_:)``).
    static func main() async {
        let arguments = Array(CommandLine.arguments.dropFirst())
        Output.jsonErrors = arguments.prefix { $0 != "--" }.contains("--json")
        do {
            var command = try parseAsRoot(arguments)
            if var command = command as? AsyncParsableCommand {
                try await command.run()
            } else {
                try command.run()
            }
        } catch {
            let code = exitCode(for: error)
            guard Output.jsonErrors, code != .success, !(error is ExitCode) else { exit(withError: error) }
            let message = fullMessage(for: error).trimmingCharacters(in: .whitespacesAndNewlines)
            Output.emitJSONError(
                code: code == Exit.usage ? "usage" : "internalError",
                message: message.replacingOccurrences(of: "Error: ", with: ""), exit: code)
            exit(withError: ExitCode(code.rawValue))
        }
    }
}

/// Options every subcommand shares.
struct NodeOptions: ParsableArguments {
    @Option(help: ArgumentHelp("The node home folder (default: $SHARESYNC_HOME, else ./.sharesync).", valueName: "dir"))
    var home: String = ProcessInfo.processInfo.environment["SHARESYNC_HOME"] ?? ".sharesync"

    @Flag(help: "Print the result as JSON.")
    var json = false

    /// The home as an absolute path.
    var homePath: String { absolutePath((home as NSString).expandingTildeInPath) }
}

/// `path` as an absolute path: one that is not is taken from this process's current directory (the
/// daemon's is not the caller's).
func absolutePath(_ path: String) -> String {
    if path.hasPrefix("/") { return (path as NSString).standardizingPath }
    return ((FileManager.default.currentDirectoryPath as NSString).appendingPathComponent(path) as NSString).standardizingPath
}
