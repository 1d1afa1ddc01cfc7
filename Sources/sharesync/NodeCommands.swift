import ArgumentParser
import Foundation
import Logging
import Metrics
import Prometheus
import ServiceLifecycle
import ShareSync
import ShareSyncNode
import ShareSyncWire
import UnixSignals

struct InitCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "init",
        abstract: "Create a node home: a new identity, empty databases and settings.",
        discussion: """
            Prints the node's user record name (how owners know this node) and its key fingerprint. \
            Refuses a folder that already is a node home.

            Example:
              sharesync init --home ~/.sharesync --name Alice --email alice@example.org --listen 0.0.0.0:7420 --advertise alice.example.org:7420
            """)

    @OptionGroup var options: NodeOptions

    @Option(help: "The name shown to the people you share with.")
    var name: String

    @Option(help: "Your email address (what others may invite you by).")
    var email: String?

    @Option(help: "Your phone number (what others may invite you by).")
    var phone: String?

    @Option(help: ArgumentHelp("Where the daemon listens for participants; port 0 picks a free one.", valueName: "host:port"))
    var listen = "0.0.0.0:7420"

    @Option(help: ArgumentHelp(
        "The address share URLs carry (default: the listen address; this host's name when listening on every interface; the bound port).",
        valueName: "host[:port]"))
    var advertise: String?

    func validate() throws {
        guard HostAndPort(parsing: listen) != nil else {
            throw ValidationError("--listen \(listen.debugDescription) is not HOST:PORT (port 0...65535)")
        }
        if let advertise, advertiseAddress(advertise) == nil {
            throw ValidationError("--advertise \(advertise.debugDescription) is not HOST or HOST:PORT")
        }
        guard !name.trimmingCharacters(in: .whitespaces).isEmpty else { throw ValidationError("--name must not be empty") }
        // Owners refuse a longer one in the hello (protocol.md, "Authentication").
        for (option, value) in [("--name", name), ("--email", email), ("--phone", phone)] {
            if let value, value.utf8.count > HelloMessage.maximumFieldBytes {
                throw ValidationError("\(option) is \(value.utf8.count) bytes; at most \(HelloMessage.maximumFieldBytes)")
            }
        }
        try Syntax.checkInvitation(email: email, phone: phone)
        // A Unix socket's path holds at most 103 bytes here (SwiftNIO's limit, under the kernel's 107):
        // a home deeper than that could be created, and `run` then failed only after its servers had
        // started.
        let socket = NodeHome.controlSocketPath(home: options.homePath)
        guard socket.utf8.count <= 103 else {
            throw ValidationError(
                "--home is too deep: its control socket \(socket) would be \(socket.utf8.count) bytes, and a Unix socket path holds at most 103 here; choose a shorter path")
        }
    }

    private func advertiseAddress(_ text: String) -> (host: String, port: Int?)? {
        if let parsed = HostAndPort(parsing: text), parsed.port > 0 { return (parsed.host, parsed.port) }
        if !text.isEmpty, !text.contains(":") || (text.hasPrefix("[") && text.hasSuffix("]")) {
            let host = text.hasPrefix("[") ? String(text.dropFirst().dropLast()) : text
            // The same check as with a port: a host share URLs can carry (it used to pass unchecked).
            return HostName.isValid(host) ? (host, nil) : nil
        }
        return nil
    }

    struct Created: Codable {
        var home: String
        var userRecordName: String
        var fingerprint: String
        var displayName: String
    }

    func run() async throws {
        let advertised = advertise.flatMap(advertiseAddress)
        let settings = NodeSettings(
            displayName: name, email: email, phone: phone, listen: HostAndPort(parsing: listen)!,
            advertiseHost: advertised?.host, advertisePort: advertised?.port)
        let home: NodeHome
        do {
            home = try NodeHome.create(at: options.homePath, settings: settings)
        } catch {
            let exit = error.rule == .homeExists ? Exit.cannotCreate : Exit.software
            if Output.jsonErrors {
                Output.emitJSONError(code: error.code.rawValue, message: error.message, exit: exit, rule: error.rule?.rawValue)
            } else {
                Output.error(error.description)
            }
            throw exit
        }
        let created = Created(
            home: home.path, userRecordName: home.identity.userRecordName, fingerprint: home.identity.fingerprint,
            displayName: name)
        Output.emit(created, json: options.json) {
            """
            created node home \($0.home)
            user record name: \($0.userRecordName)
            fingerprint: \($0.fingerprint)
            """
        }
    }
}

struct RunCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
        abstract: "Run the node daemon: serve shares to participants and answer the CLI.",
        discussion: """
            Prints `listening on HOST:PORT` once it serves, then logs to standard error. Stops cleanly \
            on SIGTERM or SIGINT (exit 0), removing its control socket. One daemon per home: while one \
            runs, another `run` on the same home exits 65 (rule oneDaemonPerHome) before it listens or \
            contacts an owner. With SHARESYNC_EXIT_WITH_PARENT=PID in its environment it also stops \
            cleanly once process PID is gone (test harnesses set it, so that a daemon does not outlive \
            the run that started it).

            Example:
              sharesync run --home ~/.sharesync --log-level debug
            """)

    @OptionGroup var options: NodeOptions

    @Option(help: "trace, debug, info, notice, warning, error or critical.")
    var logLevel: String = "info"

    @Option(help: .hidden) var syncPageSize: Int?

    @Option(help: ArgumentHelp(
        "How many connections one participant identity may have open at once (1-1024).",
        discussion: "Each device of a person is one connection; more are refused with requestRateLimited (rule maximumConnectionsPerIdentity) until one closes.",
        valueName: "n"))
    var connectionsPerIdentity: Int = 8

    @Option(help: ArgumentHelp(
        "Serve Prometheus metrics at http://HOST:PORT/metrics (port 0 picks a free one).",
        discussion: "Prints `metrics on HOST:PORT` once it serves. Off by default.",
        valueName: "host:port"))
    var metrics: String?

    @Option(help: ArgumentHelp("text (the default) or json: one JSON object per line, with every metadata key.", valueName: "format"))
    var logFormat: String = "text"

    @Flag(help: ArgumentHelp(
        "Also accept cleartext (non-TLS) connections, for debugging with nc. Only with a loopback listen address.",
        discussion: "Every connection uses TLS 1.3 otherwise; a cleartext client is told `SHARESYNC-ERROR tlsRequired`."))
    var cleartextLoopback = false

    func validate() throws {
        guard Logger.Level(rawValue: logLevel) != nil else {
            throw ValidationError("--log-level \(logLevel.debugDescription) is not one of trace, debug, info, notice, warning, error, critical")
        }
        guard (1...1024).contains(connectionsPerIdentity) else {
            throw ValidationError("--connections-per-identity \(connectionsPerIdentity) is not between 1 and 1024")
        }
        if let metrics, HostAndPort(parsing: metrics) == nil {
            throw ValidationError("--metrics \(metrics.debugDescription) is not HOST:PORT (port 0...65535)")
        }
        guard ["text", "json"].contains(logFormat) else {
            throw ValidationError("--log-format \(logFormat.debugDescription) is not text or json")
        }
    }

    func run() async throws {
        let tunedAllocator = AllocatorTuning.apply(environment: ProcessInfo.processInfo.environment)
        let level = Logger.Level(rawValue: logLevel)!
        let json = logFormat == "json"
        LoggingSystem.bootstrap { label in
            if json { return JSONLogHandler(label: label, level: level) }
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        // Before the node starts: its counters are made on first use, in whatever system is bootstrapped.
        var exporter: NodeService.Metrics?
        if let metrics, let address = HostAndPort(parsing: metrics) {
            let registry = PrometheusCollectorRegistry()
            MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: registry))
            exporter = NodeService.Metrics(address: address, registry: registry) { bound in
                FileHandle.standardOutput.write(Data("metrics on \(bound)\n".utf8))
            }
        }
        let logger = Logger(label: "sharesync.node")
        logger.debug("allocator settings", metadata: ["applied": "\(tunedAllocator)"])
        let home: NodeHome
        do {
            home = try NodeHome.open(at: options.homePath)
        } catch {
            throw Output.fail(error)
        }
        let listen = home.settings.listen
        if cleartextLoopback, !TransportSecurity.isLoopback(host: listen.host) {
            throw Output.fail(
                ShareSyncError(
                    .invalidArguments,
                    "--cleartext-loopback needs a loopback listen address, but this node listens on \(listen); "
                        + "set one with `sharesync init --listen 127.0.0.1:PORT`, or run without --cleartext-loopback (TLS)",
                    rule: .cleartextNotLoopback))
        }
        // --sync-page-size (hidden): smaller fetch pages, so tests can interrupt an initial sync midway.
        let node = NodeService(
            home: home, logger: logger, participantConfiguration: ParticipantSync.Configuration(pageSize: syncPageSize),
            allowCleartext: cleartextLoopback, connectionsPerIdentity: connectionsPerIdentity, metrics: exporter
        ) { address in
            // Unbuffered: whoever started the daemon waits for this line.
            FileHandle.standardOutput.write(Data("listening on \(address)\n".utf8))
        }
        let group = ServiceGroup(
            services: [node], gracefulShutdownSignals: [.sigterm, .sigint], cancellationSignals: [], logger: logger)
        let watch = ParentWatch.start(environment: ProcessInfo.processInfo.environment) { await group.triggerGracefulShutdown() }
        defer { watch?.cancel() }
        do {
            try await group.run()
        } catch {
            throw Output.fail(unwrap(error))
        }
    }

    /// ServiceGroup wraps a service's error; show the node's own.
    private func unwrap(_ error: any Error) -> any Error {
        if let error = error as? ShareSyncError { return error }
        let mirror = Mirror(reflecting: error)
        for child in mirror.children { if let inner = child.value as? ShareSyncError { return inner } }
        return error
    }
}

struct StatusCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Show the running node: who it is, where it listens, its shares and the shares it replicates.",
        discussion: """
            Each share of your private database shows its participants: how many accepted and how many \
            of those are connected now; then each participant who accepted: connected or not, when this \
            node last served them changes, and how many changes of the share's zone wait for them \
            (unknown until their node connects once after this daemon started). Each zone of your shared database (a share you accepted) shows \
            its sync state: the link to its owner (following: connected and caught up, changes arrive \
            as pushes; syncing: catching up; connecting or waitingToReconnect: not connected), when it \
            last was caught up, its lag (how far behind the owner it may be: 0 while following), its \
            records, and this node's writes to it: pending (waiting for the owner), conflicts and \
            refused (kept until resolved; see `sharesync outbox`). While a link is not following, its last \
            error says why (a wrong key pinned, a refusal, a full disk, the network); an owner none of whose \
            zones have arrived yet (a first sync that never finished) is listed with its address. A part \
            the node cannot read from its own databases (a failing disk) is shown as "could not be read" \
            and named on standard error (in the JSON: `errors`); the rest is shown, and the command exits 65.

            Example:
              sharesync status --home ~/.sharesync --json
            """)

    @OptionGroup var options: NodeOptions

    func run() async throws {
        // A part that could not be read was left out: say which, and fail (65).
        try await runOnNode(options, human: Self.human, failingIf: { (status: NodeStatus) -> ShareSyncError? in
            guard let errors = status.errors, let first = errors.first else { return nil }
            var failure = ShareSyncError(first.code, errors.map(\.message).joined(separator: "; "))
            failure.rule = first.rule
            return failure
        }) { try await $0.status() }
    }

    private static func human(_ status: NodeStatus) -> String {
        var lines = [
            "user record name: \(status.userRecordName)",
            "fingerprint: \(status.fingerprint)",
            "name: \(status.displayName)",
            "listening on \(status.listen), advertised as \(status.advertised)",
            "participant connections: \(status.connections)",
        ]
        if let outbox = status.outbox {
            lines.append("outbox: \(outbox.pending) pending, \(outbox.conflicts) conflicts, \(outbox.refused) refused")
        }
        let shares = status.shares ?? []
        lines.append("shares:" + (status.shares == nil && status.errors != nil ? " could not be read" : shares.isEmpty ? " none" : ""))
        let formatter = ISO8601DateFormatter()
        for share in shares {
            let what = share.rootRecordName.map { "record \($0)" } ?? "whole zone"
            lines.append(
                "  \(share.zoneName)/\(share.shareName) (\(what)\(share.title.map { ", \"\($0)\"" } ?? "")): "
                    + "\(share.accepted) of \(share.participants) participants accepted, \(share.connected) connected"
                    + (share.publicPermission == .none ? "" : ", public \(share.publicPermission.rawValue)"))
            for participant in share.participantSync ?? [] {
                let who = participant.displayName.map { "\($0) (\(participant.userRecordName))" } ?? participant.userRecordName
                lines.append(
                    "    \(who): \(participant.connected ? "connected" : "not connected"), "
                        + "last sync \(participant.lastSync.map(formatter.string) ?? "unknown"), "
                        + "\(participant.pending.map(String.init) ?? "unknown") pending")
            }
        }
        let replicas = status.replicas ?? []
        // Owners none of whose zones the replica holds (an accept whose first sync never finished).
        let zoneless = (status.owners ?? []).filter { $0.zones == 0 && !$0.synced }
        let unread = status.errors != nil && (status.replicas == nil || status.owners == nil)
        lines.append("shared with you:" + (unread ? " could not be read in full" : replicas.isEmpty && zoneless.isEmpty ? " none" : ""))
        func failure(_ error: ControlError?) -> String {
            error.map { ", last error \($0.code.rawValue)\($0.rule.map { " (\($0.rawValue))" } ?? ""): \($0.message)" } ?? ""
        }
        for replica in replicas {
            let owner = replica.ownerDisplayName.map { "\($0) (\(replica.ownerName))" } ?? replica.ownerName
            let lag = replica.lagSeconds.map { String(format: "%.1f s", $0) } ?? "-"
            lines.append(
                "  \(owner) \(replica.zoneName): \(replica.state), last sync \(replica.lastSync.map(formatter.string) ?? "never"), "
                    + "lag \(lag), \(replica.records) records, \(replica.pending) pending, \(replica.conflicts) conflicts"
                    + (replica.refused > 0 ? ", \(replica.refused) refused" : "") + failure(replica.lastError))
        }
        for link in zoneless {
            let owner = link.ownerDisplayName.map { "\($0) (\(link.ownerName))" } ?? link.ownerName
            lines.append("  \(owner) at \(link.address): \(link.state), no zones yet" + failure(link.lastError))
        }
        return lines.joined(separator: "\n")
    }
}
