import ArgumentParser
import Foundation
import ShareSyncNode

/// `sharesync backup`: a copy of the private database taken while the node runs.
struct BackupCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "backup",
        abstract: "Copy the private database to a new file while the node runs.",
        discussion: """
            The running daemon writes the copy (one SQLite file, mode 0600) as the database is at that \
            moment: reads go on meanwhile (participants' fetches and pushes too), writes wait until the \
            copy is made. An existing file is not replaced, and a name SQLite keeps for a database's \
            side files (ending in -journal, -wal or -shm) is refused. Copy the home's files themselves \
            only while the node is stopped (after a crash, the -wal files with them): a node \
            restored from a copy made here refuses every change token and change tag of what happened \
            after the copy (its participants fetch again and miss nothing), which a copy of the files \
            taken while the node runs cannot ensure.

            To restore: stop the node, put the copy in place of the home's private.sqlite (removing \
            private.sqlite-wal and private.sqlite-shm beside it), start the node.

            Example:
              sharesync backup /var/backups/alice-private.sqlite
            """)

    @OptionGroup var options: NodeOptions

    @Argument(help: ArgumentHelp("The new file (relative to this directory, or absolute).", valueName: "path"))
    var path: String

    func validate() throws {
        guard !path.isEmpty else { throw ValidationError("the copy's path is empty") }
    }

    func run() async throws {
        let absolute = URL(fileURLWithPath: path, relativeTo: URL(fileURLWithPath: FileManager.default.currentDirectoryPath))
            .standardizedFileURL.path
        try await callNode(options, .backup(path: absolute), as: BackupResult.self) { result in
            "copied the private database to \(result.path) (\(result.bytes) bytes)"
        }
    }
}
