import Foundation
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import ShareSyncCore
import ShareSyncStore
import ShareSyncWire
import Synchronization

/// The owner node's server: serves its private database to participants over TLS 1.3, speaking the
/// protocol of `protocol.md` (TLS with mutual certificates, framing, then authentication, requests
/// and pushes). Cleartext is accepted only when ``Configuration/allowCleartext`` is set, and only on
/// a loopback address (for debugging with `nc`).
///
/// The server has no sharing rules of its own: each authenticated connection works on
/// `database.sharedDatabase(for: Caller(userRecordName: "_" + fingerprint))`, and the store's
/// access policy decides what that caller may see and do.
///
/// Each connection is one task in the server's discarding task group (`ServerConnection`), reading
/// its frames from a `NIOAsyncChannel` and writing through its back-pressured outbound writer.
///
/// ```swift
/// let server = try await OwnerServer.start(database: db, identity: me, configuration: .init(port: 7420))
/// db.setShareURLBase(ShareURLBase(host: "example.org", port: server.port, ownerFingerprint: me.fingerprint))
/// ...
/// try await server.shutdown()
/// ```
public final class OwnerServer: Sendable {
    /// Where to listen and which limits each connection gets.
    public struct Configuration: Sendable {
        /// The address to bind. Default `127.0.0.1`.
        public var host: String
        /// The port to bind; 0 picks a free one (see ``OwnerServer/port``).
        public var port: Int
        /// The transport: versions, encodings and frame limits.
        public var transport: ServerConfiguration
        /// How many connections one identity may have open at once. Default 8.
        public var maximumConnectionsPerIdentity: Int
        /// How many connections may be open at once, authenticated or not. A new one takes the slot of
        /// the oldest connection that has not authenticated yet, if there is one; else it is closed as
        /// soon as it is accepted. Default 2,048.
        public var maximumConnections: Int = 2048
        /// How many connections may be open at once that have not authenticated yet (in the TLS or
        /// line handshake, or before `welcome`). A new one closes the oldest of them (each is closed
        /// after the handshake timeout anyway), so idle or slow peers cannot keep others out. Default 256.
        public var maximumUnauthenticatedConnections: Int = 256
        /// How many of those may come from one IP address; more from it are closed as soon as they are
        /// accepted. Default 32.
        public var maximumUnauthenticatedConnectionsPerAddress: Int = 32
        /// The largest frame (payload bytes) a connection may send before `welcome`, that is before it
        /// has proved a key; a larger one is refused (`limitExceeded`, rule `frameTooLarge`) before it
        /// is inflated, and the connection closed. Default 65,536 (a `hello` is a few hundred bytes).
        public var maximumFrameSizeBeforeWelcome: Int = 65_536
        /// How many requests one connection may have in flight; more get `requestRateLimited`. Default 64.
        public var maximumRequestsInFlight: Int
        /// Threads that run database requests. Default 4.
        public var requestThreads: Int
        /// Event loop threads: they run the connections' I/O and their tasks (decoding requests,
        /// routing answers); database work runs on the ``requestThreads``. Default 1.
        public var eventLoopThreads: Int
        /// How long a push may wait to be written to a subscriber that reads nothing; then the
        /// connection closes and the subscriber resumes from its token when it comes back. Default 60 s.
        public var pushWriteTimeout: TimeAmount
        /// Whether clients may also connect without TLS (the server tells TLS from cleartext by the
        /// first byte). Default false: a cleartext client gets `SHARESYNC-ERROR tlsRequired` and is
        /// closed. Only for debugging on loopback: ``OwnerServer/start(database:identity:configuration:logger:)``
        /// refuses it when ``host`` is not a loopback address.
        public var allowCleartext: Bool

        /// Creates a configuration; every parameter has the documented default.
        public init(
            host: String = "127.0.0.1", port: Int = 0, transport: ServerConfiguration = ServerConfiguration(),
            maximumConnectionsPerIdentity: Int = 8, maximumRequestsInFlight: Int = 64, requestThreads: Int = 4,
            eventLoopThreads: Int = 1, pushWriteTimeout: TimeAmount = .seconds(60), allowCleartext: Bool = false
        ) {
            self.pushWriteTimeout = pushWriteTimeout
            self.allowCleartext = allowCleartext
            self.host = host
            self.port = port
            self.transport = transport
            self.maximumConnectionsPerIdentity = maximumConnectionsPerIdentity
            self.maximumRequestsInFlight = maximumRequestsInFlight
            self.requestThreads = requestThreads
            self.eventLoopThreads = eventLoopThreads
        }
    }

    /// The database served.
    public let database: PrivateDatabase
    /// The owner's identity (proved to every client).
    public let identity: NodeIdentity
    /// The configuration the server runs with.
    public let configuration: Configuration
    /// The port the server listens on (the actual one when the configuration said 0).
    public let port: Int

    let logger: Logger
    private let group: MultiThreadedEventLoopGroup
    let threadPool: NIOThreadPool
    private let listener: any Channel
    /// The accepting task: one child task per connection, in a discarding task group.
    private let accepting: Task<Void, Never>
    let registry: ConnectionRegistry
    /// Pushes shared between a caller's connections.
    let pushes: PushCache
    /// What each participant was served.
    let syncStates: ParticipantSyncStates

    private init(
        database: PrivateDatabase, identity: NodeIdentity, configuration: Configuration, logger: Logger,
        group: MultiThreadedEventLoopGroup, threadPool: NIOThreadPool, listener: any Channel, accepting: Task<Void, Never>,
        registry: ConnectionRegistry, pushes: PushCache, syncStates: ParticipantSyncStates
    ) {
        self.pushes = pushes
        self.syncStates = syncStates
        self.database = database
        self.identity = identity
        self.configuration = configuration
        self.logger = logger
        self.group = group
        self.threadPool = threadPool
        self.listener = listener
        self.accepting = accepting
        self.registry = registry
        self.port = listener.localAddress?.port ?? configuration.port
    }

    /// Binds and starts serving. Fails with ``ShareSyncError/Code/networkUnavailable`` if it cannot bind,
    /// and with ``ShareSyncError/Code/invalidArguments`` (rule `cleartextNotLoopback`) if the
    /// configuration allows cleartext on an address that is not loopback.
    public static func start(
        database: PrivateDatabase, identity: NodeIdentity, configuration: Configuration = Configuration(),
        logger: Logger = Logger(label: "sharesync.owner-server")
    ) async throws(ShareSyncError) -> OwnerServer {
        let limits = database.limits
        let frameSize = configuration.transport.limits.maximumFrameSize
        guard limits.maximumRecordSize <= limits.maximumResponseSize, limits.maximumResponseSize + 64 * 1024 <= frameSize else {
            throw ShareSyncError(
                .invalidArguments,
                "the response size (\(limits.maximumResponseSize) bytes) must be at least the record size limit "
                    + "(\(limits.maximumRecordSize)) and at least 64 KiB under the frame limit (\(frameSize))",
                rule: .maximumResponseSize)
        }
        if configuration.allowCleartext, !TransportSecurity.isLoopback(host: configuration.host) {
            throw ShareSyncError(
                .invalidArguments,
                "cleartext connections may only be allowed on a loopback address (127.0.0.1, ::1, localhost), "
                    + "not on \(configuration.host); without the cleartext option every connection uses TLS",
                rule: .cleartextNotLoopback)
        }
        let tls = try TransportSecurity.serverContext(try identity.tlsCredentials())
        let group = MultiThreadedEventLoopGroup(numberOfThreads: max(1, configuration.eventLoopThreads))
        let threadPool = NIOThreadPool(numberOfThreads: max(1, configuration.requestThreads))
        threadPool.start()
        let registry = ConnectionRegistry()
        let pushes = PushCache()
        let syncStates = ParticipantSyncStates()
        let context = ServerContext(
            database: database, identity: identity, configuration: configuration, logger: logger,
            threadPool: threadPool, registry: registry, tls: tls, pushes: pushes, syncStates: syncStates)
        let bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
        do {
            let listener = try await bootstrap.bind(host: configuration.host, port: configuration.port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    do {
                        return try ServerConnection.install(on: channel, context: context)
                    } catch {
                        // NIO leaves a channel whose initializer failed open: close it here.
                        channel.close(promise: nil)
                        throw error
                    }
                }
            }
            let accepting = Task(executorPreference: EventLoopTaskExecutor(group)) {
                do {
                    try await listener.executeThenClose { connections in
                        try await withThrowingDiscardingTaskGroup { group in
                            for try await connection in connections {
                                group.addTask { await connection.run() }
                            }
                        }
                    }
                } catch {
                    logger.error("the owner server stopped accepting connections", metadata: ["error": "\(error)"])
                }
            }
            let server = OwnerServer(
                database: database, identity: identity, configuration: configuration, logger: logger, group: group,
                threadPool: threadPool, listener: listener.channel, accepting: accepting, registry: registry, pushes: pushes,
                syncStates: syncStates)
            logger.info(
                "owner server listening",
                metadata: ["port": "\(server.port)", "transport": "\(configuration.allowCleartext ? "TLS or cleartext (loopback)" : "TLS")"])
            return server
        } catch {
            try? await threadPool.shutdownGracefully()
            try? await group.shutdownGracefully()
            throw ShareSyncError(
                .networkUnavailable, "cannot listen on \(configuration.host):\(configuration.port): \(error)")
        }
    }

    /// The number of open connections (authenticated or not).
    public var connectionCount: Int { registry.count }

    /// The user record names of the identities connected now (authenticated).
    public var connectedIdentities: Set<String> { registry.connectedIdentities }

    /// What this server knows of a participant's sync (by user record name, as ``connectedIdentities``
    /// names them): when it last served them changes and how far into each zone. `nil` if it has not
    /// served or heard from them since it started.
    public func syncState(of userRecordName: String) -> ParticipantSyncState? { syncStates.state(of: userRecordName) }

    /// The address this owner advertises (the one its share URLs name), as every `welcome` tells it;
    /// `nil` until set.
    public var advertisedAddress: WireAddress? { registry.advertised.withLock { $0 } }

    /// Sets the address this owner advertises. Connections authenticated from now on learn it in their
    /// `welcome`; when `announce` is true and the address changed, every authenticated connection is
    /// told at once with an `ownerAddress` push, and participants store it as the owner's address
    /// (protocol.md, "Owners that move"). Returns how many connections were told.
    ///
    /// The first address of an owner that had none is announced too: a client remembers the first
    /// announcement it hears and follows only a later, different one, so one that missed this first
    /// address would take the next one, the owner's actual move, for a first announcement and stay
    /// at the old address.
    @discardableResult
    public func setAdvertisedAddress(_ address: WireAddress, announce: Bool = true) -> Int {
        let changed = registry.advertised.withLock { current in
            defer { current = address }
            return current != address
        }
        guard announce, changed else { return 0 }
        guard let payload = try? MessageCoding.encode(OwnerAddressPush(address: address)) else { return 0 }
        var told = 0
        for channel in registry.authenticatedChannels() {
            // Written on the channel directly, next to the connection's own writes. An announcement
            // that a closing connection loses costs nothing: the next `welcome` carries the address.
            channel.writeAndFlush(payload, promise: nil)
            told += 1
        }
        logger.notice("advertised address changed; participants told", metadata: ["address": "\(address)", "told": "\(told)"])
        return told
    }

    /// Stops listening, closes every connection, and stops the threads.
    public func shutdown() async throws {
        try? await listener.close()
        for channel in registry.allChannels() { try? await channel.close() }
        // Every connection's task ends once its channel closed; then the accepting task ends.
        await accepting.value
        try await threadPool.shutdownGracefully()
        try await group.shutdownGracefully()
    }
}

/// What every connection handler needs from the server.
struct ServerContext: Sendable {
    let database: PrivateDatabase
    let identity: NodeIdentity
    let configuration: OwnerServer.Configuration
    let logger: Logger
    let threadPool: NIOThreadPool
    let registry: ConnectionRegistry
    /// The TLS context every connection shares (this node's certificate).
    let tls: NIOSSLContext
    /// Pushes shared between a caller's connections (``PushCache``).
    let pushes: PushCache
    /// What each participant was served (``ParticipantSyncStates``).
    let syncStates: ParticipantSyncStates
}

/// The open connections, and how many each identity has.
final class ConnectionRegistry: Sendable {
    private struct State {
        var channels: [ObjectIdentifier: any Channel] = [:]
        var authenticatedChannels: Set<ObjectIdentifier> = []
        var perIdentity: [String: Int] = [:]
        var authenticated = 0
        var nextID = 0
        /// When each open connection was accepted (an increasing number) and the peer's address; removed
        /// once it proved a key (``ConnectionRegistry/admit(_:limit:channel:)``): what is left may be evicted.
        var opened: [ObjectIdentifier: (order: Int, address: String?)] = [:]
        var acceptedCount = 0
    }

    /// What ``admit(_:maximumConnections:maximumUnauthenticated:maximumUnauthenticatedPerAddress:)`` decided.
    enum Admission {
        /// Taken; `evicting`, if any, is the oldest connection that had not authenticated, to close now.
        case admitted(evicting: (any Channel)?)
        /// Refused, and why.
        case refused(String)
    }

    private let state = Mutex(State())
    /// How many `fetchZoneChanges` and `fetchRecords` began to be read, all connections (tests read it).
    let largeAnswersStarted = Atomic<Int>(0)
    /// How many of the next push reads fail (tests set it: a storage error in the middle of a push).
    let pushReadFailures = Atomic<Int>(0)

    /// Requests to refuse, by op, with the error given, for as long as it is set (tests set it: an
    /// owner whose disk is full when a participant's leave comes).
    let injectedRefusals = Mutex<[String: ShareSyncError]>([:])

    /// How many of the next `modifyRecords` are applied and then not answered, their connection closed
    /// (tests set it: an answer lost after the owner committed).
    let droppedAnswers = Atomic<Int>(0)

    /// How many `modifyRecords` are answered before the next one of ``droppedAnswers`` is lost (tests
    /// set it: a write in many requests, cut off part-way).
    let answersBeforeDrop = Atomic<Int>(0)
    /// Called once a `modifyRecords` whose answer is lost has been applied, before its connection
    /// closes (tests set it: the owner changes something while the participant has no answer).
    let onDroppedAnswer = Mutex<(@Sendable () -> Void)?>(nil)

    /// Called as each `modifyRecords` begins to be handled, before it is applied (tests set it: a
    /// write known to have reached the owner).
    let onWriteRequest = Mutex<(@Sendable () -> Void)?>(nil)

    /// Whether this `modifyRecords` is one whose answer a test asked to lose.
    func takeDroppedAnswer() -> Bool {
        guard droppedAnswers.load(ordering: .relaxed) > 0, !answersBeforeDrop.takeOne() else { return false }
        return droppedAnswers.takeOne()
    }

    /// Requests left unanswered, by op, for as long as it is set (tests set it: an owner that answers
    /// pings but never a request).
    let silencedOps = Mutex<Set<String>>([])

    /// How many requests an injected refusal lets through before it applies (tests set it: a write in
    /// several requests whose later ones meet a full disk).
    let injectedRefusalsHeldFor = Atomic<Int>(0)

    /// The refusal a test asked for requests of `op`.
    func injectedRefusal(for op: String) -> ShareSyncError? {
        guard let refusal = injectedRefusals.withLock({ $0.isEmpty ? nil : $0[op] }) else { return nil }
        return injectedRefusalsHeldFor.takeOne() ? nil : refusal
    }

    /// Throws if a test asked for a push read to fail.
    func injectedPushReadFailure() throws {
        guard pushReadFailures.takeOne() else { return }
        throw ShareSyncError(.internalError, "a push read failed (injected)")
    }
    /// The address the owner advertises (see ``OwnerServer/setAdvertisedAddress(_:announce:)``).
    let advertised = Mutex<WireAddress?>(nil)

    func remove(_ channel: any Channel) {
        state.withLock { s in
            s.channels.removeValue(forKey: ObjectIdentifier(channel))
            s.authenticatedChannels.remove(ObjectIdentifier(channel))
            s.opened.removeValue(forKey: ObjectIdentifier(channel))
        }
    }

    /// Notes that a connection authenticated: it gets the owner's `ownerAddress` pushes from now on.
    func markAuthenticated(_ channel: any Channel) {
        state.withLock { s in
            if s.channels[ObjectIdentifier(channel)] != nil { s.authenticatedChannels.insert(ObjectIdentifier(channel)) }
        }
    }

    /// The connections that have authenticated.
    func authenticatedChannels() -> [any Channel] {
        state.withLock { s in s.authenticatedChannels.compactMap { s.channels[$0] } }
    }

    var connectedIdentities: Set<String> { state.withLock { Set($0.perIdentity.keys) } }

    func nextConnectionID() -> Int { state.withLock { $0.nextID += 1; return $0.nextID } }

    /// Counts a connection for an identity; false if it already has `limit`. From then on `channel`
    /// is no longer one that has not authenticated: it is never evicted to make room.
    func admit(_ userRecordName: String, limit: Int, channel: any Channel) -> Bool {
        state.withLock { s in
            let n = s.perIdentity[userRecordName, default: 0]
            guard n < limit else { return false }
            s.perIdentity[userRecordName] = n + 1
            s.authenticated += 1
            s.opened.removeValue(forKey: ObjectIdentifier(channel))
            return true
        }
    }

    func release(_ userRecordName: String) {
        state.withLock { s in
            let n = s.perIdentity[userRecordName, default: 0] - 1
            s.perIdentity[userRecordName] = n > 0 ? n : nil
            s.authenticated -= 1
        }
    }

    /// Takes a new connection, or says why not. Peers that never authenticate cannot keep others out:
    /// one address holds at most `maximumUnauthenticatedPerAddress` unauthenticated connections (more
    /// are refused), and when `maximumUnauthenticated` are open (or every slot is taken and some are
    /// unauthenticated), the oldest of them makes room instead of the new one being refused. Before,
    /// 256 silent connections, opened again as each timed out, kept every new participant out.
    func admit(
        _ channel: any Channel, maximumConnections: Int, maximumUnauthenticated: Int, maximumUnauthenticatedPerAddress: Int
    ) -> Admission {
        let address = channel.remoteAddress?.ipAddress
        return state.withLock { s in
            // `opened` holds only open connections (removed with them, and once they prove a key).
            if let address, s.opened.values.count(where: { $0.address == address }) >= maximumUnauthenticatedPerAddress {
                return .refused(
                    "\(maximumUnauthenticatedPerAddress) connections from \(address) have not authenticated yet, the most one "
                        + "address may hold (maximumUnauthenticatedConnectionsPerAddress)")
            }
            let unauthenticated = s.channels.count - s.authenticated
            var evicting: (any Channel)?
            if s.channels.count >= maximumConnections || unauthenticated >= maximumUnauthenticated {
                guard let oldest = s.opened.min(by: { $0.value.order < $1.value.order })?.key, let channel = s.channels[oldest] else {
                    return .refused("\(s.channels.count) connections are open, the most this server accepts (maximumConnections)")
                }
                evicting = channel
                s.channels.removeValue(forKey: oldest)
                s.opened.removeValue(forKey: oldest)
            }
            s.acceptedCount += 1
            s.channels[ObjectIdentifier(channel)] = channel
            s.opened[ObjectIdentifier(channel)] = (s.acceptedCount, address)
            return .admitted(evicting: evicting)
        }
    }

    var count: Int { state.withLock { $0.channels.count } }

    func allChannels() -> [any Channel] { state.withLock { Array($0.channels.values) } }
}
