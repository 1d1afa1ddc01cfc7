import ArgumentParser
import Foundation
import ShareSync
import ShareSyncNode

// The outbox: this node's writes to shared zones that the owner has not accepted. Pending writes go
// out on their own; conflicts and refusals stay here until the user resolves them.

struct OutboxCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "outbox",
        abstract: "List and resolve your writes to shared zones that the owner has not accepted.",
        discussion: """
            A write to a shared zone made while the owner is offline waits here (pending) and goes out \
            when the owner is back. If the owner's record changed in the meantime, the write stays as a \
            conflict, with the owner's version; if the owner refuses it (say you became read-only), it \
            stays as refused, with the error. Neither is sent again until you choose: \
            `outbox resolve ID --keep mine|theirs` for a conflict (or a write refused because its record \
            was deleted: mine saves it again), `outbox discard ID` to drop a write.

            Example:
              sharesync outbox
              sharesync outbox resolve 3 --keep mine
              sharesync outbox discard 4
            """,
        subcommands: [List.self, Resolve.self, Discard.self],
        defaultSubcommand: List.self)

    static func describe(_ item: OutboxItem) -> String {
        var what: [String] = item.records.map { "save \($0)" } + item.deleting.map { "delete \($0)" }
        if what.isEmpty { what = ["nothing"] }
        var lines = [
            "\(item.id)  \(item.state.rawValue)  \(item.ownerName)/\(item.zoneName)  \(what.joined(separator: ", "))"
                + (item.savePolicy == .ifServerRecordUnchanged ? "" : "  (policy \(item.savePolicy.rawValue))")
        ]
        if let error = item.error { lines.append("  error: \(error.description)") }
        for record in item.saving {
            // What the write changes, named: `--keep mine` sends those fields, not the whole record as
            // shown. Before, "mine" showed every field, and a field another write changed looked as
            // if this one would send it (discarding that other write then lost it).
            let name = record.recordID.recordName
            let moves = item.parentChanged?.contains(name) == true
            if item.savePolicy == .allKeys {
                lines.append("  mine (the whole record, policy allKeys):")
            } else if let changed = item.changedKeys?[name] {
                let what = changed.map { "field \($0)" } + (moves ? ["its parent"] : [])
                lines.append("  mine (this write changes " + what.joined(separator: ", ") + "; the rest as you last saw it):")
            } else if item.changedKeys != nil {
                lines.append("  mine (the whole record: this write does not say which fields it changes):")
            } else {
                lines.append("  mine:")
            }
            lines += Output.describe(record).split(separator: "\n").map { "    " + Self.shortened($0) }
            if let server = item.serverRecords.first(where: { $0.recordID.recordName == record.recordID.recordName }) {
                lines.append("  theirs (the owner's record):")
                lines += Output.describe(server).split(separator: "\n").map { "    " + Self.shortened($0) }
            }
        }
        return lines.joined(separator: "\n")
    }

    /// A listing line of at most 240 characters: a field of a megabyte filled the terminal
    /// (`record get` shows a record whole).
    static func shortened(_ line: Substring) -> String {
        guard line.count > 240 else { return String(line) }
        return line.prefix(200) + "… (\(line.count - 200) more characters)"
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "list",
            abstract: "List the writes in the outbox: ID, state (pending, conflict, refused), owner, zone, records, error.",
            discussion: """
                For a conflict, shows your version and the owner's of each record.

                Example:
                  sharesync outbox
                  sharesync outbox list --json
                """)
        @OptionGroup var options: NodeOptions

        func run() async throws {
            try await runOnNode(options) { items in
                items.isEmpty ? "the outbox is empty" : items.map(OutboxCommand.describe).joined(separator: "\n")
            } _: { try await $0.outbox() }
        }
    }

    struct Resolve: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "resolve",
            abstract: "Resolve a conflict: keep your write (send it again over the owner's) or theirs.",
            discussion: """
                --keep mine sends your write again over the owner's version: the fields you changed \
                take your values, and the owner's changes to other fields stay. If the owner's record \
                changed once more, it is a conflict again. \
                --keep theirs drops your write: the owner's version stays, as your replica holds it. \
                A write refused because its record was deleted on the owner's side (unknownItem) is \
                resolved the same way: --keep mine saves the record again, whole, as a new record; \
                --keep theirs drops your write. Any other refused write can only be discarded. \
                A write that is in conflict again, or refused, is printed as it now stands and the command \
                exits 65 (a script sees that nothing was settled).

                Example:
                  sharesync outbox resolve 3 --keep mine
                  sharesync outbox resolve 5 --keep theirs
                """)
        @OptionGroup var options: NodeOptions
        @Argument(help: "The write's ID (see `sharesync outbox`).") var id: Int64
        @Option(help: "mine or theirs.") var keep: ParticipantSync.ConflictChoice

        func run() async throws {
            try await runOnNode(options, human: { (resolution: OutboxResolution) in
                switch resolution.outcome {
                case .sent: "write \(resolution.id) sent again: the owner accepted it"
                case .dropped: "write \(resolution.id) dropped: the owner's version stays"
                case .pending: "write \(resolution.id) will be sent again when the owner is connected"
                case .conflict, .refused:
                    "write \(resolution.id) sent again and \(resolution.outcome == .conflict ? "in conflict again" : "refused"):\n"
                        + (resolution.item.map(OutboxCommand.describe) ?? "")
                }
            }, failingIf: { resolution in
                // Not settled: said on standard error, and the exit status says so (it was 0 before).
                switch resolution.outcome {
                case .conflict:
                    ShareSyncError(
                        .serverRecordChanged, "write \(resolution.id) is in conflict again: the owner's record changed once more; see `sharesync outbox`")
                case .refused:
                    ShareSyncError(.permissionFailure, "write \(resolution.id) is refused by the owner; see `sharesync outbox`")
                case .sent, .dropped, .pending: nil
                }
            }) { [id, keep] in try await $0.resolveOutboxItem(withID: id, keeping: keep) }
        }
    }

    struct Discard: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "discard",
            abstract: "Drop a write from the outbox (a refused one, or a pending one you no longer want).",
            discussion: """
                A pending write may already be on its way if the owner is connected: what the owner \
                applied of it stays, and a write sent in several requests stops at its next answer \
                (its other requests are not sent).

                Example:
                  sharesync outbox discard 4
                """)
        @OptionGroup var options: NodeOptions
        @Argument(help: "The write's ID (see `sharesync outbox`).") var id: Int64

        func run() async throws {
            try await runOnNode(options) { _ in "write \(id) discarded" } _: { [id] in
                try await $0.discardOutboxItem(withID: id)
                return Done()
            }
        }
    }
}
