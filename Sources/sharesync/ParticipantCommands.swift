import ArgumentParser
import Foundation
import ShareSync
import ShareSyncNode

// The participant side: accepting and leaving shares, and following what changes. Reading and writing
// shared records is `sharesync record … --shared`; `sharesync zone list --shared` lists shared zones.

struct AcceptCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "accept",
        abstract: "Accept a share by its URL and keep a synced replica of it.",
        discussion: """
            Waits until the share's records are in this node's replica, then prints the owner, the \
            share's zone and its record count. On a terminal it shows how many records have arrived while \
            it waits. The daemon keeps the replica in step from then on, across restarts. The URL must \
            carry the owner's key fingerprint (`owner=`): the node checks that the owner it reaches \
            proves that key, and refuses a URL without one (exit 65, rule ownerFingerprintMissing).

            Example:
              sharesync accept 'sharesync://alice.example.org:7420/share/…?owner=…&invite=…'
            """)
    @OptionGroup var options: NodeOptions
    @Argument(help: "The share URL or invitation link.") var url: String
    @Option(parsing: .unconditional, help: "How long to wait for the initial sync, in seconds (at most 3600).") var timeout: Double = 300

    func validate() throws {
        try checkShareURL(url)
        guard timeout > 0, timeout <= 3600 else { throw ValidationError("--timeout must be more than 0 and at most 3600 seconds") }
    }

    func run() async throws {
        let showProgress = !options.json && isatty(1) == 1
        let url = self.url
        let progress = showProgress ? Task { await Self.showProgress(options, url: url) } : nil
        defer { progress?.cancel() }
        do {
            let timeout = Duration.milliseconds(Int64(self.timeout * 1000))
            let accepted = try await onNode(options) { try await $0.accept(url, timeout: timeout) }
            progress?.cancel()
            _ = await progress?.value
            Output.emit(accepted, json: options.json) { share in
                let owner = PersonName.describe(userRecordName: share.ownerName, displayName: share.ownerDisplayName, email: share.ownerEmail)
                var lines = ["accepted share \(share.title.map { "\"\($0)\"" } ?? share.shareName) from \(owner) (\(share.permission.rawValue))"]
                lines += share.zones.map { "  zone \($0.zoneName): \($0.records) records" }
                return lines.joined(separator: "\n")
            }
        } catch {
            progress?.cancel()
            _ = await progress?.value
            throw Output.fail(error)
        }
    }

    /// Until cancelled, on stderr: a progress bar of the records that arrived in the replica since it
    /// started, against what the owner says the share holds (a plain count if the owner does not say).
    static func showProgress(_ options: NodeOptions, url: String) async {
        func total() async -> Int? {
            guard let zones = try? await onNode(options, { try await $0.send(.sharedZoneList, as: [SharedZoneInfo].self) }) else {
                return nil
            }
            return zones.reduce(0) { $0 + $1.records }
        }
        let baseline = await total() ?? 0
        let expected = try? await onNode(options) { try await $0.shareMetadata(for: url) }.recordCount
        var tick = 0
        var shown = false
        while !Task.isCancelled {
            try? await Task.sleep(for: .milliseconds(250))
            guard !Task.isCancelled, let now = await total() else { continue }
            tick += 1
            let line = "\r" + SyncProgress.line(received: max(0, now - baseline), expected: expected, tick: tick)
            FileHandle.standardError.write(Data(line.utf8))
            shown = true
        }
        if shown { FileHandle.standardError.write(Data("\r\u{1B}[K".utf8)) }
    }

}

struct LeaveCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "leave",
        abstract: "Leave a share you accepted; its records leave this node's replica.",
        discussion: """
            Needs the owner's node to be reachable, unless --local: then the share's zone leaves the \
            replica at once (whether or not the owner is ever reachable again), and the daemon tells \
            the owner when it next reaches its node; the owner then lists you as removed. Until then \
            nothing the owner sends brings the zone back. Writes to the zone still queued are refused \
            by the owner after the leave (the command says how many; `sharesync outbox` lists them). \
            Once nothing of an owner is left on this node, it forgets the owner and stops connecting \
            to it, until you accept one of its shares again.

            --owner is the owner's user record name, or their name or email when no other owner \
            has it (`sharesync zone list --shared` shows them); --share is the share's record name or \
            its root record's name.

            Example:
              sharesync leave --owner Alice --zone Groceries
              sharesync leave --owner _a1b2… --zone Groceries --local
            """)
    @OptionGroup var options: NodeOptions
    @Option(help: "The owner: user record name, name or email (see `sharesync zone list --shared`).") var owner: String
    @Option(help: "The shared zone.") var zone: String
    @Option(help: "The share's record name or its root record's name (default: the zone's only share).") var share: String?
    @Flag(help: "Leave now without the owner: purge the replica, tell the owner when it is next reachable.")
    var local = false

    func run() async throws {
        try await callNode(options, .leave(owner: owner, zone: zone, share: share, local: local ? true : nil), as: LeftShare.self) {
            left in
            let done = local
                ? "left the share of zone \(zone) from \(owner) locally; the owner is told when its node is next reached"
                : "left the share of zone \(zone) from \(owner)"
            guard left.queuedWrites > 0 else { return done }
            let (writes, them) = left.queuedWrites == 1 ? ("1 write", "it") : ("\(left.queuedWrites) writes", "them")
            return done + "\n\(writes) to zone \(zone) still queued will be refused by the owner, as you left: "
                + "`sharesync outbox` lists \(them) (copy what you need, then `sharesync outbox discard ID`)"
        }
    }
}

/// How changes print: one line each, as people read them or (with --json) one JSON object per line.
enum ChangeLines {
    /// One change: `changed Topics/topic-1 (Topic) title="Hello"`, and in the shared database
    /// `… from Alice (_a1b2…)` (the owner's name next to its user record name, when known).
    static func human(_ change: ChangeInfo) -> String {
        let place = change.zoneName
        let from = change.ownerName.map {
            " from " + PersonName.describe(userRecordName: $0, displayName: change.ownerDisplayName, email: nil)
        } ?? ""
        switch change.kind {
        case .recordChanged:
            let fields = change.record.map { record in
                record.allKeys.map { "\($0)=\(Output.describe(record.fields[$0]!))" }.joined(separator: " ")
            } ?? ""
            return "changed \(place)/\(change.recordName ?? "?") (\(change.recordType ?? "?"))\(from)" + (fields.isEmpty ? "" : " " + fields)
        case .recordDeleted:
            return "deleted \(place)/\(change.recordName ?? "?")\(from)"
        case .zoneDeleted:
            return "zone deleted \(place)\(from)"
        }
    }

    static func json<T: Encodable>(_ value: T) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .iso8601
        return String(decoding: (try? encoder.encode(value)) ?? Data("null".utf8), as: UTF8.self)
    }
}

struct ChangesCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "changes",
        abstract: "Print the changes of the private (or, with --shared, the shared) database since a token.",
        discussion: """
            Three views, as CloudKit has them:
              (default)     every record changed or deleted, in every zone (merged)
              --zone Z      the records of one zone (CKFetchRecordZoneChangesOperation)
              --database    the zones changed and deleted (CKFetchDatabaseChangesOperation)
            Without --since, prints everything there is. Ends with the token to pass as --since next \
            time (a token goes with the view that gave it). --limit N prints at most N changes (zones \
            with --database) and, when there are more, says `more coming`: run again with the token \
            printed to go on (JSON: "moreComing": true). In the private database --limit goes with \
            --zone or --database.

            Private-database tokens last until the node compacts its history. Shared-database \
            tokens survive daemon restarts: the replica keeps a journal of what changed in it (what \
            changed while the daemon was down comes with the next read). A token expires (exit 65, \
            changeTokenExpired) only if the replica was made afresh or the journal dropped the \
            deletions after it; then read again without --since.

            Example:
              sharesync changes --shared --json
              sharesync changes --shared --since shared:1f2e3d4c:42
              sharesync changes --zone Groceries --limit 100
              sharesync changes --shared --database --since shared:1f2e3d4c:42
            """)
    @OptionGroup var options: NodeOptions
    @Flag(help: "The shared database (what others share with this node).") var shared = false
    @Option(help: "The token printed by the previous `changes`.") var since: String?
    @Flag(help: "Print the zones changed and deleted, not their records.") var database = false
    @Option(help: "Print the changes of this zone only.") var zone: String?
    @Option(help: "With --shared --zone: the owner (user record name, name or email) when several owners share the zone name.")
    var owner: String?
    // `.unconditional`: `--limit -5` is a value the check below refuses, not a missing one.
    @Option(parsing: .unconditional, help: "At most this many changes (zones with --database); the rest comes from the token printed.")
    var limit: Int?

    func validate() throws {
        if database, zone != nil { throw ValidationError("--database and --zone are two views: give one") }
        if owner != nil, !shared || zone == nil { throw ValidationError("--owner goes with --shared --zone") }
        if let limit, limit < 1 { throw ValidationError("--limit must be 1 or more") }
        if limit != nil, !shared, !database, zone == nil {
            throw ValidationError("in the private database --limit goes with --zone or --database")
        }
    }

    func run() async throws {
        if database {
            try await callNode(options, .databaseChanges(shared: shared, since: since, limit: limit), as: DatabaseChangesPage.self) {
                page in
                func name(_ zone: ZoneRef) -> String {
                    zone.zoneName
                        + (zone.ownerName.map {
                            " from " + PersonName.describe(userRecordName: $0, displayName: zone.ownerDisplayName, email: nil)
                        } ?? "")
                }
                return (page.changedZones.map { "zone changed \(name($0))" } + page.deletedZones.map { "zone deleted \(name($0))" }
                    + (page.moreComing ? ["more coming"] : []) + ["token: \(page.token)"]).joined(separator: "\n")
            }
            return
        }
        try await callNode(
            options, .changes(shared: shared, since: since, waitSeconds: nil, zone: zone, owner: owner, limit: limit),
            as: ChangesPage.self
        ) { page in
            (page.changes.map(ChangeLines.human) + (page.moreComing ? ["more coming"] : []) + ["token: \(page.token)"])
                .joined(separator: "\n")
        }
    }
}

struct WatchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "watch",
        abstract: "Print changes as they arrive, one line each, until interrupted.",
        discussion: """
            Starts from now (or from --since). With --json, each line is one JSON object (a change). \
            When the daemon stops (a restart), watch says so on standard error and goes on from its last \
            token once the daemon is back, so no change is missed; after 5 minutes without it, it fails.

            Example:
              sharesync watch --shared --json
            """)
    @OptionGroup var options: NodeOptions
    @Flag(help: "The shared database (what others share with this node).") var shared = false
    @Option(help: "Start from this token (see `sharesync changes`) rather than from now.") var since: String?

    func run() async throws {
        do {
            try await onNode(options) { container in
                var token: String
                if let since {
                    token = since
                } else {
                    token = try await container.send(.currentChangeToken(shared: shared), as: ChangesPage.self).token
                }
                var away: ContinuousClock.Instant?
                var pause = Duration.milliseconds(200)
                while !Task.isCancelled {
                    let page: ChangesPage
                    do {
                        // Back from an absence, the first request does not wait for a change, so that
                        // "the node is back" shows when it is (it showed at the first change, or 30 s on).
                        page = try await container.send(
                            .changes(shared: shared, since: token, waitSeconds: away == nil ? 30 : 0), as: ChangesPage.self)
                    } catch let error as ShareSyncError where Self.daemonAway(error) {
                        // The daemon stopped (or restarts): wait for it, then go on from the same token.
                        // Before, watch ended, and a script following it lost what came meanwhile.
                        let since = away ?? .now
                        // (Not the error's own text: it speaks of a request to check before sending
                        // it again, which a watch, reading only, never needs.)
                        if away == nil {
                            Output.error(
                                "the node stopped; waiting up to \(Self.maximumAway.components.seconds / 60) minutes for it to come back, "
                                    + "to watch on from the last token")
                        }
                        away = since
                        guard ContinuousClock.now - since < Self.maximumAway else { throw error }
                        try await Task.sleep(for: pause)
                        pause = min(pause * 2, .seconds(5))
                        continue
                    }
                    if away != nil { Output.error("the node is back; watching from the last token") }
                    (away, pause) = (nil, .milliseconds(200))
                    for change in page.changes {
                        print(options.json ? ChangeLines.json(change) : ChangeLines.human(change))
                    }
                    fflush(nil)  // every stream: one line per change reaches a pipe at once
                    token = page.token
                }
            }
        } catch {
            throw Output.fail(error)
        }
    }

    /// How long watch waits for a daemon that stopped before it fails.
    static let maximumAway = Duration.seconds(300)

    /// Whether an error means the daemon is not there now (stopped, restarting), not a refusal.
    static func daemonAway(_ error: ShareSyncError) -> Bool {
        error.rule == .nodeNotRunning || error.code == .networkFailure || error.code == .networkUnavailable
    }
}

struct RequestAccessCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "request-access",
        abstract: "Ask a share's owner to let you in (the share must allow access requests).",
        discussion: """
            Connects to the owner named in the URL with this node's identity, through the daemon when \
            it runs; without one, straight from this command (with the home's key and name; nothing \
            else of the node starts). The URL must carry the owner's key fingerprint (`owner=`).

            Example:
              sharesync request-access 'sharesync://alice.example.org:7420/share/…?owner=…'
            """)
    @OptionGroup var options: NodeOptions
    @Argument(help: "The share URL.") var url: String

    func validate() throws {
        try checkShareURL(url)
    }

    func run() async throws {
        do {
            // Through the daemon when it runs; else straight to the owner with the home's identity.
            // (Before, the whole node ran for the request: its owner server took the home's listen
            // port, failing the request when another program held it, and its sync started.)
            let asked: AccessRequested
            do {
                let container = try await Container.connected(home: options.homePath)
                do {
                    asked = try await container.requestAccess(to: url)
                } catch {
                    await container.close()
                    throw error
                }
                await container.close()
            } catch let error as ShareSyncError where error.rule == .nodeNotRunning {
                let home = try NodeHome.open(at: options.homePath)
                var configuration = ParticipantSync.Configuration()
                configuration.displayName = home.settings.displayName
                try await ParticipantSync.requestAccess(url: url, identity: home.identity, configuration: configuration)
                asked = AccessRequested(userRecordName: home.identity.userRecordName)
            }
            Output.emit(asked, json: options.json) {
                "asked for access as \($0.userRecordName); the owner sees you in `sharesync share requesters`"
            }
        } catch {
            throw Output.fail(error)
        }
    }
}
