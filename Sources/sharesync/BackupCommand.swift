import ArgumentParser
import Foundation
import ShareSyncNode

/// `sharesync backup`: a copy of the private database, or of the shared database's replica, taken
/// while the node runs.
struct BackupCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "backup",
        abstract: "Copy the private database (or, with --shared, the shared database) to a new file while the node runs.",
        discussion: """
            The running daemon writes the copy (one SQLite file, mode 0600) as the database is at that \
            moment: reads go on meanwhile (participants' fetches and pushes too), writes wait until the \
            copy is made. An existing file is not replaced, and a name SQLite keeps for a database's \
            side files (ending in -journal, -wal or -shm) is refused. Copy the home's files themselves \
            only while the node is stopped (after a crash, the -wal files with them): a node \
            restored from a copy made here refuses every change token and change tag of what happened \
            after the copy (its participants fetch again and miss nothing), which a copy of the files \
            taken while the node runs cannot ensure.

            With --shared, the copy is of the replica: the zones and records shared with this node, \
            the change tokens they were fetched to, and this node's writes waiting in the outbox. \
            Restored, it catches up from those tokens; writes queued after the copy are not in it, and \
            writes of its outbox that went out after the copy are sent again (the owner applies none \
            of at least a participant's newest 64 writes twice; an older one may run again: a save \
            then meets a conflict, or with --policy allKeys or changedKeys overwrites, a deletion \
            deletes again).

            To restore: stop the node, put the copy in place of the home's private.sqlite (with \
            --shared: replica.sqlite), removing its -wal and -shm files beside it, start the node.

            Examples:
              sharesync backup /var/backups/alice-private.sqlite
              sharesync backup --shared /var/backups/alice-replica.sqlite
            """)

    @OptionGroup var options: NodeOptions

    @Flag(help: "Copy the shared database (the replica of what others share with this node) instead.")
    var shared = false

    @Argument(help: ArgumentHelp("The new file (relative to this directory, or absolute).", valueName: "path"))
    var path: String

    func validate() throws {
        guard !path.isEmpty else { throw ValidationError("the copy's path is empty") }
    }

    func run() async throws {
        let absolute = absolutePath(path)
        let what = shared ? "the shared database" : "the private database"
        try await callNode(options, .backup(path: absolute, shared: shared ? true : nil), as: BackupResult.self) { result in
            "copied \(what) to \(result.path) (\(result.bytes) bytes)"
        }
    }
}
