import Foundation
import Logging
import Prometheus
import ServiceLifecycle
import ShareSyncCore
import ShareSyncStore
import ShareSyncWire
import Synchronization

/// The node daemon (`sharesync run`) as a ``Service``: it takes the home's daemon lock (one daemon per
/// home, ``NodeHome/lockForDaemon()``; refused with `serviceUnavailable`, rule `oneDaemonPerHome`, before
/// anything else happens), opens the home's databases, serves the private database to participants
/// (``OwnerServer``), points share URLs at the advertised address, and answers the local control channel
/// (``ControlServer``) until graceful shutdown.
///
/// ```swift
/// let node = NodeService(home: try NodeHome.open(at: path), logger: logger) { address in
///     print("listening on \(address)")
/// }
/// let group = ServiceGroup(services: [node], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
/// try await group.run()
/// ```
public final class NodeService: Service, Sendable {
    /// Where the daemon is in its life.
    public enum State: Sendable {
        case idle
        case starting
        case running(listen: HostAndPort, advertised: HostAndPort)
        case stopping
        case stopped
    }

    public let home: NodeHome
    private let logger: Logger
    private let onListening: @Sendable (HostAndPort) -> Void
    private let participantConfiguration: ParticipantSync.Configuration
    private let allowCleartext: Bool
    private let connectionsPerIdentity: Int
    private let metrics: Metrics?
    private let state = Mutex(State.idle)

    /// Where the daemon serves its metrics, and the registry they are in (the one `MetricsSystem` was
    /// bootstrapped with, so the node's counters land there too).
    public struct Metrics: Sendable {
        public var address: HostAndPort
        public var registry: PrometheusCollectorRegistry
        /// Called once the endpoint listens, with its address (the actual port when 0 was asked for).
        public var onListening: @Sendable (HostAndPort) -> Void

        public init(address: HostAndPort, registry: PrometheusCollectorRegistry, onListening: @escaping @Sendable (HostAndPort) -> Void = { _ in }) {
            self.address = address
            self.registry = registry
            self.onListening = onListening
        }
    }

    /// - Parameters:
    ///   - onListening: called once the owner server and the control socket are up, with the
    ///     address the owner server is bound to (the actual port when the settings say 0).
    ///   - participantConfiguration: how the participant side syncs (its display name is the home's).
    ///   - allowCleartext: whether the owner server also accepts cleartext connections (debugging; only
    ///     with a loopback listen address, else ``run()`` fails: see ``OwnerServer/Configuration/allowCleartext``).
    ///   - connectionsPerIdentity: how many connections the owner server accepts from one identity at
    ///     once (``OwnerServer/Configuration/maximumConnectionsPerIdentity``).
    ///   - metrics: where to serve Prometheus metrics (``MetricsEndpoint``); `nil`: nowhere.
    public init(
        home: NodeHome, logger: Logger, participantConfiguration: ParticipantSync.Configuration = .init(),
        allowCleartext: Bool = false, connectionsPerIdentity: Int = 8, metrics: Metrics? = nil,
        onListening: @escaping @Sendable (HostAndPort) -> Void = { _ in }
    ) {
        self.home = home
        self.metrics = metrics
        self.allowCleartext = allowCleartext
        self.connectionsPerIdentity = connectionsPerIdentity
        var participantConfiguration = participantConfiguration
        participantConfiguration.displayName = home.settings.displayName
        self.participantConfiguration = participantConfiguration
        var logger = logger
        logger[metadataKey: "node.user"] = "\(home.identity.userRecordName)"
        self.logger = logger
        self.onListening = onListening
    }

    /// The current state.
    public var currentState: State { state.withLock { $0 } }

    /// Starts the owner server on the settings' address; for a `listen` port of 0, on the port kept from
    /// the first start while it is free, else on a new one.
    private func startServer(database: PrivateDatabase, settings: NodeSettings) async throws(ShareSyncError) -> OwnerServer {
        func start(port: Int) async throws(ShareSyncError) -> OwnerServer {
            try await OwnerServer.start(
                database: database, identity: home.identity,
                configuration: OwnerServer.Configuration(
                    host: settings.listen.host, port: port, maximumConnectionsPerIdentity: connectionsPerIdentity,
                    allowCleartext: allowCleartext),
                logger: logger)
        }
        if settings.listen.port == 0, let kept = settings.boundPort {
            do {
                return try await start(port: kept)
            } catch {
                logger.warning(
                    "the port this node kept is taken; listening on a new one (share URLs and participants' addresses change)",
                    metadata: ["port": "\(kept)", "error": "\(error)"])
            }
        }
        do {
            return try await start(port: settings.listen.port)
        } catch {
            // Said where the address comes from: a daemon that cannot start cannot take `advertise`.
            var error = error
            error.message += "; this is the listen address in \(home.settingsPath) (key \"listen\"): free it, or edit it there"
            throw error
        }
    }

    public func run() async throws {
        try state.withLock { s throws(ShareSyncError) in
            guard case .idle = s else { throw ShareSyncError(.internalError, "a NodeService runs once") }
            s = .starting
        }
        defer { state.withLock { $0 = .stopped } }
        let node = try await start(controlSocket: true)
        var endpoint: MetricsEndpoint?
        if let metrics {
            let gauges = NodeGauges(registry: metrics.registry)
            do {
                endpoint = try await MetricsEndpoint.start(
                    host: metrics.address.host, port: metrics.address.port, registry: metrics.registry,
                    collect: { gauges.refresh(node) }, logger: logger)
            } catch {
                await node.stop()
                throw error
            }
        }
        state.withLock { $0 = .running(listen: node.listen, advertised: node.advertised) }
        onListening(node.listen)
        if let endpoint, let metrics { metrics.onListening(endpoint.address) }
        // Returns on graceful shutdown, or throws when the service is cancelled: stop either way.
        try? await gracefulShutdown()
        state.withLock { $0 = .stopping }
        await endpoint?.close()
        await node.stop()
    }

    /// Starts the node: takes the home's daemon lock, opens its databases, starts the owner server and the
    /// participant side and, with `controlSocket`, answers the control channel on the home's socket. The
    /// node runs until ``RunningNode/stop()``. ``run()`` is this plus waiting for graceful shutdown; an app
    /// that embeds a node (the `ShareSync` library's `Container.embedded`) calls it directly.
    public func start(controlSocket: Bool) async throws(ShareSyncError) -> RunningNode {
        // One daemon per home, checked first: before a database is opened, a socket listens or an owner
        // is contacted. The lock is held until the node stops.
        let lock = try home.lockForDaemon()
        var settings = home.settings
        let database: PrivateDatabase
        let replica: SharedDatabaseReplica
        let server: OwnerServer
        do {
            database = try home.openPrivateDatabase()
            database.setOwnerIdentity(displayName: home.settings.displayName, emailAddress: home.settings.email)
            replica = try home.openReplica()
            server = try await startServer(database: database, settings: settings)
        } catch {
            lock.release()
            throw error
        }
        if settings.listen.port == 0, settings.boundPort != server.port {
            // Keep the port the system chose: the next start binds it again.
            settings.boundPort = server.port
            var updated = home
            updated.settings = settings
            do {
                try updated.saveSettings()
            } catch {
                logger.warning("cannot keep the chosen port in the settings", metadata: ["error": "\(error)"])
            }
        }
        let bound = HostAndPort(host: settings.listen.host, port: server.port)
        let advertised = Mutex(settings.advertisedAddress(boundPort: server.port))
        let initial = advertised.withLock { $0 }
        database.setShareURLBase(
            ShareURLBase(host: initial.host, port: initial.port, ownerFingerprint: home.identity.fingerprint))
        server.setAdvertisedAddress(WireAddress(host: initial.host, port: initial.port), announce: false)
        let savedSettings = Mutex(settings)
        let identity = home.identity
        // The participant side: resumes every owner already in the replica from its stored tokens.
        var participantLogger = logger
        participantLogger[metadataKey: "component"] = "participant"
        let participant = ParticipantSync(
            replica: replica, identity: identity,
            configuration: participantConfiguration, logger: participantLogger)
        let events = participant.events()
        let eventLog = Task { [participantLogger] in
            for await event in events { Self.log(event, to: participantLogger) }
        }
        do {
            try participant.start()
        } catch {
            await participant.stop()
            await eventLog.value
            try? await server.shutdown()
            lock.release()
            throw error
        }
        let feeds = NodeChangeFeeds(database: database, replica: replica)
        let handler = ControlHandler(
            database: database, participant: participant, feeds: feeds,
            status: { [home] () throws(ShareSyncError) -> NodeStatus in
                var status = NodeStatus(
                    userRecordName: identity.userRecordName, fingerprint: identity.fingerprint,
                    displayName: home.settings.displayName, listen: bound, advertised: advertised.withLock { $0 },
                    connections: server.connectionCount)
                // A failed read says so (the command exits 65 naming it); it used to show "shares: none".
                // The rest is still shown: the replica's lines matter most when the node's disk fails.
                do throws(ShareSyncError) {
                    status.shares = try Self.shareStatuses(database, server: server)
                } catch {
                    var failure = error
                    failure.message = "the private database's shares could not be read: " + failure.message
                    status.errors = [ControlError(failure)]
                }
                return status
            },
            advertise: { [home, logger] address, listen throws(ShareSyncError) in
                // A listen address the next start could not bind is refused now, not saved: the daemon
                // would not start again, and `advertise` needs a running daemon to change it back.
                // (This node's own port is taken by itself now: only the host is checked with it.)
                if let listen {
                    try Self.checkBindable(HostAndPort(host: listen.host, port: listen.port == bound.port ? 0 : listen.port))
                }
                // Kept first (a daemon restarted later comes back with it), then URLs and participants.
                let next = try savedSettings.withLock { settings throws(ShareSyncError) -> NodeSettings in
                    var changed = settings
                    changed.advertiseHost = address.host
                    changed.advertisePort = address.port
                    if let listen {
                        changed.listen = listen
                        changed.boundPort = nil
                    }
                    var updated = home
                    updated.settings = changed
                    try updated.saveSettings()
                    settings = changed
                    return changed
                }
                advertised.withLock { $0 = address }
                database.setShareURLBase(
                    ShareURLBase(host: address.host, port: address.port, ownerFingerprint: identity.fingerprint))
                let told = server.setAdvertisedAddress(WireAddress(host: address.host, port: address.port))
                logger.notice("advertised address set", metadata: ["address": "\(address)", "participantsTold": "\(told)"])
                return AdvertiseResult(
                    advertised: address, listening: bound, listenAtNextStart: next.listen, participantsTold: told)
            },
            logger: logger)
        var control: ControlServer?
        if controlSocket {
            do {
                control = try await ControlServer.bind(path: home.controlSocketPath, handler: handler, logger: logger)
            } catch {
                feeds.close()
                await participant.stop()
                await eventLog.value
                try? await server.shutdown()
                lock.release()
                throw error
            }
        }
        logger.info(
            "node running",
            metadata: ["listen": "\(bound)", "advertised": "\(initial)", "control": "\(control?.path ?? "-")"])
        return RunningNode(
            handler: handler, participant: participant, database: database, server: server, listen: bound, advertised: initial,
            logger: logger,
            stopParts: RunningNode.Parts(
                lock: lock, server: server, feeds: feeds, control: control, controlTask: control.map { control in
                    Task { await control.run() }
                }, eventLog: eventLog))
    }

    /// Each share of the private database, with how many of its participants accepted and are connected,
    /// and each accepted participant's sync state as the owner server knows it.
    static func shareStatuses(_ database: PrivateDatabase, server: OwnerServer) throws(ShareSyncError) -> [ShareStatus] {
        let connected = server.connectedIdentities
        var statuses: [ShareStatus] = []
        for zone in try database.fetchAllZones() {
            for share in try database.fetchShares(in: zone.zoneID) {
                let others = share.participants.filter { $0.role != .owner && $0.acceptanceStatus != .removed }
                let accepted = others.filter { $0.acceptanceStatus == .accepted }
                let sync = accepted.compactMap { participant -> ParticipantSyncStatus? in
                    guard let name = participant.userIdentity.userRecordName else { return nil }
                    let state = server.syncState(of: name)
                    // Counted in the participant's view of the zone, from the last position they have.
                    let pending = state?.zoneTokens[zone.zoneID.zoneName].flatMap { token in
                        try? database.sharedDatabase(for: Caller(userRecordName: name))
                            .pendingChangeCount(inZone: zone.zoneID.zoneName, since: token)
                    }
                    return ParticipantSyncStatus(
                        userRecordName: name, displayName: participant.userIdentity.displayName,
                        connected: connected.contains(name), lastSync: state?.lastSync, pending: pending)
                }
                statuses.append(ShareStatus(
                    zoneName: zone.zoneID.zoneName, shareName: share.recordID.recordName, title: share.title,
                    rootRecordName: share.rootRecordID?.recordName, publicPermission: share.publicPermission,
                    participants: others.count, accepted: accepted.count, connected: sync.count { $0.connected },
                    participantSync: sync))
            }
        }
        return statuses
    }

    /// Logs one event of the participant sync engine, with the owner and zone as metadata.
    static func log(_ event: ParticipantSync.Event, to logger: Logger) {
        switch event {
        case .connected(let owner):
            logger.info("owner connected", metadata: ["owner": "\(owner)"])
        case .disconnected(let owner, let error, let retryIn):
            logger.info(
                "owner disconnected",
                metadata: ["owner": "\(owner)", "error": "\(error.map(\.description) ?? "-")", "retryIn": "\(retryIn)"])
        case .synced(let owner, let zones):
            logger.info("owner synced", metadata: ["owner": "\(owner)", "zones": "\(zones)"])
        case .zoneChanged(let owner, let zone, let changed, let deleted):
            logger.debug(
                "zone changed",
                metadata: ["owner": "\(owner)", "zone": "\(zone)", "changed": "\(changed)", "deleted": "\(deleted)"])
        case .zoneReplaced(let owner, let zone, let records):
            logger.info("zone replaced", metadata: ["owner": "\(owner)", "zone": "\(zone)", "records": "\(records)"])
        case .zonePurged(let owner, let zone):
            logger.info("zone purged", metadata: ["owner": "\(owner)", "zone": "\(zone)"])
        case .queued(let owner, let operationID):
            logger.info("write queued", metadata: ["owner": "\(owner)", "operation": "\(operationID)"])
        case .operationSent(let owner, let operationID, _):
            logger.info("queued write sent", metadata: ["owner": "\(owner)", "operation": "\(operationID)"])
        case .conflict(let owner, let recordID, let resolved):
            logger.notice(
                "write conflict",
                metadata: [
                    "owner": "\(owner)", "zone": "\(recordID.zoneID.zoneName)", "record": "\(recordID.recordName)",
                    "resolved": "\(resolved)",
                ])
        case .operationKept(let owner, let operation):
            logger.notice(
                "queued write kept in the outbox",
                metadata: [
                    "owner": "\(owner)", "operation": "\(operation.id)", "state": "\(operation.state.rawValue)",
                    "error": "\(operation.error.map(\.description) ?? "-")",
                ])
        case .ownerAddressChanged(let owner, let host, let port, let announced):
            logger.notice(
                "owner address changed",
                metadata: ["owner": "\(owner)", "address": "\(HostAndPort(host: host, port: port))", "announcedByOwner": "\(announced)"])
        case .ownerForgotten(let owner):
            logger.notice("owner forgotten: nothing of its shares is left here", metadata: ["owner": "\(owner)"])
        case .error(let owner, let error):
            logger.warning(
                "sync error",
                metadata: [
                    "owner": "\(owner ?? "-")", "zone": "\(error.zoneID?.zoneName ?? "-")", "error": "\(error.description)",
                ])
        }
    }
}

/// A started node (``NodeService/start(controlSocket:)``): its databases open, its owner server
/// listening, its participant side following its owners, until ``stop()``.
public final class RunningNode: Sendable {
    /// Answers control requests: the same handler the control socket serves, for an app to call in process.
    public let handler: ControlHandler
    /// The participant side (the shared database replica and its sync engine).
    public let participant: ParticipantSync
    /// The owner's private database.
    public let database: PrivateDatabase
    /// The owner server.
    let server: OwnerServer
    /// Where the owner server listens (the actual port when the settings say 0).
    public let listen: HostAndPort
    /// The address share URLs carried when the node started.
    public let advertised: HostAndPort
    private let logger: Logger
    private let parts: Mutex<Parts?>

    struct Parts: Sendable {
        var lock: DaemonLock
        var server: OwnerServer
        var feeds: NodeChangeFeeds
        var control: ControlServer?
        var controlTask: Task<Void, Never>?
        var eventLog: Task<Void, Never>
    }

    init(
        handler: ControlHandler, participant: ParticipantSync, database: PrivateDatabase, server: OwnerServer,
        listen: HostAndPort, advertised: HostAndPort, logger: Logger, stopParts: Parts
    ) {
        self.handler = handler
        self.participant = participant
        self.database = database
        self.server = server
        self.listen = listen
        self.advertised = advertised
        self.logger = logger
        self.parts = Mutex(stopParts)
    }

    /// Answers one control request line in process, as the control socket would: on the store's threads
    /// (``StoreThreads``), so its SQLite work never holds a thread of Swift's cooperative pool.
    public func respond(toLine line: Data) async -> Data {
        await withTaskExecutorPreference(StoreThreads.executor) { await self.handler.respond(toLine: line) }
    }

    /// Whether ``stop()`` was called.
    public var isStopped: Bool { parts.withLock { $0 == nil } }

    /// Stops the node: the control socket first (requests in progress finish), then the participant side
    /// and the owner server; then checkpoints the WALs of the private database and the
    /// replica into their files and releases the home's daemon lock. Stopping twice does nothing.
    public func stop() async {
        guard let parts = parts.withLock({ p -> Parts? in defer { p = nil }; return p }) else { return }
        logger.info("node stopping")
        parts.feeds.close()
        if let control = parts.control {
            await control.close()
            await parts.controlTask?.value
        }
        await participant.stop()
        await parts.eventLog.value
        try? await parts.server.shutdown()
        // Before the home is released, each WAL is checkpointed into its file (private.sqlite,
        // replica.sqlite) and emptied, so the file alone holds every commit once the node stopped.
        // Before, a stop right after a participant's connection closed could leave the last commits in
        // the WAL only (a copy of private.sqlite alone lacked them). The connections stay open: a call still in flight (an
        // embedded container's) may use them.
        let checkpoints: [(String, () throws(ShareSyncError) -> Void)] = [
            ("private database", database.checkpointWhole), ("replica", participant.replica.checkpointWhole),
        ]
        for (name, checkpoint) in checkpoints {
            do {
                try checkpoint()
            } catch {
                logger.warning("the \(name)'s WAL could not be checkpointed at stop", metadata: ["error": "\(error)"])
            }
        }
        parts.lock.release()
        logger.info("node stopped")
    }
}

/// The gauges a scrape reads off the node: connections, participants, each share's connected
/// participants and pending changes, the outbox, each replica zone's lag, and the compression ratio.
final class NodeGauges: Sendable {
    private let registry: PrometheusCollectorRegistry
    private let lagGauges = Mutex<[String: Gauge]>([:])
    private let shareGauges = Mutex<[String: [Gauge]]>([:])

    init(registry: PrometheusCollectorRegistry) { self.registry = registry }

    /// The gauge `name` with `labels` (made on first use, then the same one).
    private func gauge(_ name: String, labels: [(String, String)] = [], help: String) -> Gauge {
        registry.makeGauge(descriptor: MetricNameDescriptor(metricName: name, unitName: "", helpText: help), labels: labels)
    }

    func refresh(_ node: RunningNode) {
        gauge("sharesync_connections", help: "Open participant connections to this owner").set(Int64(node.server.connectionCount))
        if let shares = try? NodeService.shareStatuses(node.database, server: node.server) {
            gauge("sharesync_shares", help: "Shares of the private database").set(Int64(shares.count))
            gauge("sharesync_participants", help: "Accepted participants, over every share")
                .set(Int64(shares.reduce(0) { $0 + $1.accepted }))
            // Per share: its participants connected now, and the changes waiting for them.
            var present: Set<String> = []
            for share in shares {
                let labels = [("zone", share.zoneName), ("share", share.shareName)]
                let key = share.zoneName + "\u{0}" + share.shareName
                present.insert(key)
                let connected = gauge("sharesync_share_connected_participants", labels: labels,
                    help: "Accepted participants of a share connected now")
                connected.set(Int64(share.connected))
                let pending = gauge("sharesync_share_pending_changes", labels: labels,
                    help: "Changes of a share's zone not yet served to its participants, summed over those this owner has a position for")
                pending.set(Int64((share.participantSync ?? []).reduce(0) { $0 + ($1.pending ?? 0) }))
                shareGauges.withLock { $0[key] = [connected, pending] }
            }
            let gone = shareGauges.withLock { gauges -> [Gauge] in
                let stale = gauges.filter { !present.contains($0.key) }
                for key in stale.keys { gauges.removeValue(forKey: key) }
                return stale.values.flatMap { $0 }
            }
            for gauge in gone { registry.unregisterGauge(gauge) }
        }
        if let counts = try? node.participant.replica.outboxCounts() {
            for (state, count) in counts {
                gauge("sharesync_outbox_operations", labels: [("state", state.rawValue)],
                    help: "This node's writes to shared zones in the outbox"
                ).set(Int64(count))
            }
        }
        gauge("sharesync_compression_ratio", help: "Wire bytes per payload byte, both directions")
            .set(ShareSyncMetrics.compressionRatio)
        // Sync lag per replicated zone; zones that left the replica lose their gauge.
        let zones = (try? node.participant.replica.allZones()) ?? []
        var present: Set<String> = []
        for zoneID in zones {
            let key = zoneID.ownerName + "\u{0}" + zoneID.zoneName
            present.insert(key)
            let lag = node.participant.syncLag(owner: zoneID.ownerName) ?? .zero
            let lagGauge = gauge("sharesync_replica_lag_seconds", labels: [("owner", zoneID.ownerName), ("zone", zoneID.zoneName)],
                help: "How far behind its owner a shared zone may be (0 while following its pushes)")
            lagGauge.set(lag.inSeconds)
            lagGauges.withLock { $0[key] = lagGauge }
        }
        let gone = lagGauges.withLock { gauges -> [Gauge] in
            let stale = gauges.filter { !present.contains($0.key) }
            for key in stale.keys { gauges.removeValue(forKey: key) }
            return Array(stale.values)
        }
        for gauge in gone { registry.unregisterGauge(gauge) }
    }
}

extension NodeService {
    /// Throws `invalidArguments` (rule `advertisedAddress`) unless a TCP socket can listen on `address`
    /// now: a local address, a port that is free (0: any).
    static func checkBindable(_ address: HostAndPort) throws(ShareSyncError) {
        var hints = addrinfo()
        hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var found: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(address.host, String(address.port), &hints, &found)
        guard status == 0, let first = found else {
            throw ShareSyncError(
                .invalidArguments, "cannot listen on \(address): \(String(cString: gai_strerror(status)))", rule: .advertisedAddress)
        }
        defer { freeaddrinfo(first) }
        let fd = socket(first.pointee.ai_family, first.pointee.ai_socktype, first.pointee.ai_protocol)
        guard fd >= 0 else {
            throw ShareSyncError(.invalidArguments, "cannot listen on \(address): \(String(cString: strerror(errno)))", rule: .advertisedAddress)
        }
        defer { close(fd) }
        var yes: Int32 = 1
        _ = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        guard bind(fd, first.pointee.ai_addr, first.pointee.ai_addrlen) == 0 else {
            throw ShareSyncError(
                .invalidArguments,
                "cannot listen on \(address): \(String(cString: strerror(errno))) (not an address of this host, or the port is taken); nothing was changed",
                rule: .advertisedAddress)
        }
    }
}

