import Foundation
import Logging
import ServiceLifecycle
import ShareSyncCore
import ShareSyncStore
import Synchronization

/// The node daemon (`sharesync run`) as a ``Service``: it opens the home's databases, serves the
/// private database to participants (``OwnerServer``), points share URLs at the advertised address,
/// and answers the local control channel (``ControlServer``) until graceful shutdown.
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
    private let state = Mutex(State.idle)

    /// - Parameter onListening: called once the owner server and the control socket are up, with the
    ///   address the owner server is bound to (the actual port when the settings say 0).
    public init(home: NodeHome, logger: Logger, onListening: @escaping @Sendable (HostAndPort) -> Void = { _ in }) {
        self.home = home
        var logger = logger
        logger[metadataKey: "node.user"] = "\(home.identity.userRecordName)"
        self.logger = logger
        self.onListening = onListening
    }

    /// The current state.
    public var currentState: State { state.withLock { $0 } }

    public func run() async throws {
        try state.withLock { s throws(ShareSyncError) in
            guard case .idle = s else { throw ShareSyncError(.internalError, "a NodeService runs once") }
            s = .starting
        }
        defer { state.withLock { $0 = .stopped } }
        let settings = home.settings
        let database = try home.openPrivateDatabase()
        _ = try home.openReplica()
        let server = try await OwnerServer.start(
            database: database, identity: home.identity,
            configuration: OwnerServer.Configuration(host: settings.listen.host, port: settings.listen.port),
            logger: logger)
        let bound = HostAndPort(host: settings.listen.host, port: server.port)
        let advertised = settings.advertisedAddress(boundPort: server.port)
        database.setShareURLBase(
            ShareURLBase(host: advertised.host, port: advertised.port, ownerFingerprint: home.identity.fingerprint))
        let identity = home.identity
        let handler = ControlHandler(
            database: database,
            status: { [home] in
                NodeStatus(
                    userRecordName: identity.userRecordName, fingerprint: identity.fingerprint,
                    displayName: home.settings.displayName, listen: bound, advertised: advertised,
                    connections: server.connectionCount)
            },
            logger: logger)
        let control: ControlServer
        do {
            control = try await ControlServer.bind(path: home.controlSocketPath, handler: handler, logger: logger)
        } catch {
            try? await server.shutdown()
            throw error
        }
        state.withLock { $0 = .running(listen: bound, advertised: advertised) }
        logger.info(
            "node running",
            metadata: ["listen": "\(bound)", "advertised": "\(advertised)", "control": "\(control.path)"])
        onListening(bound)

        await withDiscardingTaskGroup { group in
            group.addTask { await control.run() }
            // Returns on graceful shutdown, or throws when the service is cancelled: stop either way.
            try? await gracefulShutdown()
            state.withLock { $0 = .stopping }
            logger.info("node stopping")
            await control.close()
        }
        try? await server.shutdown()
        logger.info("node stopped")
    }
}
