import ArgumentParser
import Foundation
import ShareSyncCore
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
    @Option(help: "How long to wait for the initial sync, in seconds.") var timeout: Double = 300

    func validate() throws {
        guard ShareURL(string: url) != nil else { throw ValidationError("\(url.debugDescription) is not a share URL") }
        guard timeout > 0 else { throw ValidationError("--timeout must be positive") }
    }

    func run() async throws {
        let showProgress = !options.json && isatty(1) == 1
        let url = self.url
        let progress = showProgress ? Task { await Self.showProgress(options, url: url) } : nil
        defer { progress?.cancel() }
        do {
            let client = try await ControlClient.connect(path: NodeHome.controlSocketPath(home: options.homePath))
            let accepted = try await client.call(.accept(url: url, timeoutSeconds: timeout), as: AcceptedShare.self)
            progress?.cancel()
            _ = await progress?.value
            Output.emit(accepted, json: options.json) { share in
                var lines = ["accepted share \(share.title.map { "\"\($0)\"" } ?? share.shareName) from \(share.ownerName) (\(share.permission.rawValue))"]
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
            guard let client = try? await ControlClient.connect(path: NodeHome.controlSocketPath(home: options.homePath)),
                let zones = try? await client.call(.sharedZoneList, as: [SharedZoneInfo].self)
            else { return nil }
            return zones.reduce(0) { $0 + $1.records }
        }
        let baseline = await total() ?? 0
        let expected = try? await ControlClient.connect(path: NodeHome.controlSocketPath(home: options.homePath))
            .call(.shareMetadata(url: url), as: ShareMetadataInfo.self).recordCount
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
            Needs the owner's node to be reachable.

            Example:
              sharesync leave --owner _a1b2… --zone Groceries
            """)
    @OptionGroup var options: NodeOptions
    @Option(help: "The owner's user record name (see `sharesync zone list --shared`).") var owner: String
    @Option(help: "The shared zone.") var zone: String
    @Option(help: "The share's record name (default: the zone's only share).") var share: String?

    func run() async throws {
        try await callNode(options, .leave(owner: owner, zone: zone, share: share), as: Done.self) { _ in
            "left the share of zone \(zone) from \(owner)"
        }
    }
}

/// How changes print: one line each, as people read them or (with --json) one JSON object per line.
enum ChangeLines {
    static func human(_ change: ChangeInfo) -> String {
        let place = (change.ownerName.map { $0 + "/" } ?? "") + change.zoneName
        switch change.kind {
        case .recordChanged:
            let fields = change.record.map { record in
                record.allKeys.map { "\($0)=\(Output.describe(record.fields[$0]!))" }.joined(separator: " ")
            } ?? ""
            return "changed \(place)/\(change.recordName ?? "?") (\(change.recordType ?? "?"))" + (fields.isEmpty ? "" : " " + fields)
        case .recordDeleted:
            return "deleted \(place)/\(change.recordName ?? "?")"
        case .zoneDeleted:
            return "zone deleted \(place)"
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
            Without --since, prints every record there is. Ends with the token to pass as --since next \
            time. Private-database tokens last until the node compacts its history; shared-database \
            tokens last while the daemon runs (after a restart, read again without --since).

            Example:
              sharesync changes --shared --json
              sharesync changes --shared --since shared:1f2e3d4c:42
            """)
    @OptionGroup var options: NodeOptions
    @Flag(help: "The shared database (what others share with this node).") var shared = false
    @Option(help: "The token printed by the previous `changes`.") var since: String?

    func run() async throws {
        try await callNode(options, .changes(shared: shared, since: since, waitSeconds: nil), as: ChangesPage.self) { page in
            (page.changes.map(ChangeLines.human) + ["token: \(page.token)"]).joined(separator: "\n")
        }
    }
}

struct WatchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "watch",
        abstract: "Print changes as they arrive, one line each, until interrupted.",
        discussion: """
            Starts from now (or from --since). With --json, each line is one JSON object (a change).

            Example:
              sharesync watch --shared --json
            """)
    @OptionGroup var options: NodeOptions
    @Flag(help: "The shared database (what others share with this node).") var shared = false
    @Option(help: "Start from this token (see `sharesync changes`) rather than from now.") var since: String?

    func run() async throws {
        do {
            let path = NodeHome.controlSocketPath(home: options.homePath)
            var token: String
            let client = try await ControlClient.connect(path: path)
            if let since {
                token = since
            } else {
                token = try await client.call(.currentChangeToken(shared: shared), as: ChangesPage.self).token
            }
            while !Task.isCancelled {
                let page = try await client.call(.changes(shared: shared, since: token, waitSeconds: 30), as: ChangesPage.self)
                for change in page.changes {
                    print(options.json ? ChangeLines.json(change) : ChangeLines.human(change))
                }
                fflush(nil)  // every stream: one line per change reaches a pipe at once
                token = page.token
            }
        } catch {
            throw Output.fail(error)
        }
    }
}

struct RequestAccessCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "request-access",
        abstract: "Ask a share's owner to let you in (the share must allow access requests).",
        discussion: """
            Connects to the owner named in the URL with this node's identity; no daemon is needed. \
            The URL must carry the owner's key fingerprint (`owner=`).

            Example:
              sharesync request-access 'sharesync://alice.example.org:7420/share/…?owner=…'
            """)
    @OptionGroup var options: NodeOptions
    @Argument(help: "The share URL.") var url: String

    func validate() throws {
        guard ShareURL(string: url) != nil else { throw ValidationError("\(url.debugDescription) is not a share URL") }
    }

    struct Requested: Codable { var requested: Bool; var userRecordName: String }

    func run() async throws {
        do {
            let home = try NodeHome.open(at: options.homePath)
            let connection = try await OwnerConnection.connect(
                url: url, identity: home.identity, displayName: home.settings.displayName)
            do {
                try await connection.requestAccess(url: url)
            } catch {
                await connection.close()
                throw error
            }
            await connection.close()
            Output.emit(Requested(requested: true, userRecordName: home.identity.userRecordName), json: options.json) {
                "asked for access as \($0.userRecordName); the owner sees you in `sharesync share requesters`"
            }
        } catch {
            throw Output.fail(error)
        }
    }
}
