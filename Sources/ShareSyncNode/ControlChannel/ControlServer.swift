import Foundation
import Logging
import NIOCore
import NIOExtras
import NIOPosix
import ShareSyncCore
import Synchronization

/// The daemon's end of the control channel: a Unix domain socket, one JSON request per line, one JSON
/// response per line (the format is described on ``ControlRequest``).
///
/// The socket file gets mode 0600 and lives in the node home (0700), so only the node's user can
/// connect. ``run()`` serves until ``close()``; a bad client never stops the server.
///
/// Each connection is served by a channel handler (``ControlConnectionHandler``) that starts each
/// request as a task on the store's threads and writes its response from the event loop: two
/// thread hops per request. It used to be an `NIOAsyncChannel` loop answering through a task group
/// (the request, and a watcher of the channel's closing). Measured with `sharesync-bench control`
/// (p50, same sitting): a `zoneList` 320 → 270 µs, a one-record save 543 → 430 µs. What is left of
/// the 270 µs is spread thin (JSON coding, GRDB's pooled read, thread wake-ups: `perf` shows no
/// single hot spot).
public final class ControlServer: Sendable {
    /// The longest request line accepted; a longer one closes that connection.
    public static let maximumLineLength = 4 * 1024 * 1024

    /// The socket's path.
    public let path: String
    private let listener: any Channel
    private let state: State

    /// What the server's connections share: the requests in progress, and the open connections
    /// (closed with the server).
    final class State: Sendable {
        /// Requests being answered (until their answer is written), and whether the server is closing:
        /// then no request starts any more (lines not started stay unanswered). One lock for both, so
        /// that a request cannot start after ``ControlServer/close()`` found none in progress.
        let requests = Mutex((inProgress: 0, closing: false))

        /// Counts a request that starts; false once the server is closing.
        func begin() -> Bool {
            requests.withLock { r in
                guard !r.closing else { return false }
                r.inProgress += 1
                return true
            }
        }

        func end() { requests.withLock { $0.inProgress -= 1 } }
        /// Answers written since the server started (tests).
        let answered = Mutex(0)
        private let connections = Mutex<(open: [ObjectIdentifier: any Channel], closed: Bool)>(([:], false))

        /// Adds a connection; false once the server closed.
        func add(_ channel: any Channel) -> Bool {
            connections.withLock { state in
                guard !state.closed else { return false }
                state.open[ObjectIdentifier(channel)] = channel
                return true
            }
        }

        func remove(_ channel: any Channel) {
            _ = connections.withLock { $0.open.removeValue(forKey: ObjectIdentifier(channel)) }
        }

        /// Marks the server closed and returns the connections still open.
        func closeAll() -> [any Channel] {
            connections.withLock { state in
                state.closed = true
                defer { state.open = [:] }
                return Array(state.open.values)
            }
        }
    }

    private init(path: String, listener: any Channel, state: State) {
        self.path = path
        self.listener = listener
        self.state = state
    }

    /// Binds the socket, replacing a stale socket file left by a daemon that died.
    /// Fails with ``ShareSyncError/Code/serviceUnavailable`` if another daemon is serving it. (A daemon
    /// checks the home's lock long before, ``NodeHome/lockForDaemon()``; this is the second line.)
    public static func bind(
        path: String, handler: ControlHandler, logger: Logger, group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) async throws(ShareSyncError) -> ControlServer {
        if FileManager.default.fileExists(atPath: path) {
            if await ControlClient.isServing(path: path) {
                throw ShareSyncError(
                    .serviceUnavailable, "a daemon is already running on \(path)", rule: .oneDaemonPerHome)
            }
            try? FileManager.default.removeItem(atPath: path)
        }
        let state = State()
        do {
            let listener = try await ServerBootstrap(group: group)
                .childChannelInitializer { channel in
                    guard state.add(channel) else { return channel.close() }
                    channel.closeFuture.whenComplete { _ in state.remove(channel) }
                    return channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandler(
                            ByteToMessageHandler(LineBasedFrameDecoder(), maximumBufferSize: maximumLineLength))
                        try channel.pipeline.syncOperations.addHandler(
                            ControlConnectionHandler(handler: handler, logger: logger, state: state))
                    }
                }
                .bind(unixDomainSocketPath: path, cleanupExistingSocketFile: false).get()
            chmod(path, 0o600)
            return ControlServer(path: path, listener: listener, state: state)
        } catch {
            throw ShareSyncError(.serviceUnavailable, "cannot listen on the control socket \(path): \(error)")
        }
    }

    /// Serves connections until ``close()``.
    public func run() async {
        try? await listener.closeFuture.get()
    }

    /// How long ``close()`` lets requests in progress finish and answer before it closes their connections.
    public static let closingGrace = Duration.seconds(5)

    /// Stops listening and starting requests, lets those in progress finish and answer (for up to
    /// ``closingGrace``), then closes the connections (cancelling what still runs) and removes the
    /// socket file. Before, a request that had done its work (a committed import batch) lost its
    /// answer when the daemon stopped, and its client reported a failure.
    public func close() async {
        try? await listener.close()
        state.requests.withLock { $0.closing = true }
        let deadline = ContinuousClock.now + Self.closingGrace
        while requestsInProgress > 0, ContinuousClock.now < deadline {
            // Not Task.sleep: a stop in a cancelled task (a service's graceful shutdown) would spin.
            await withUnsafeContinuation { (resume: UnsafeContinuation<Void, Never>) in
                DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(10)) { resume.resume() }
            }
        }
        for connection in state.closeAll() { try? await connection.close() }
        try? FileManager.default.removeItem(atPath: path)
    }

    /// How many requests are being answered now.
    public var requestsInProgress: Int { state.requests.withLock { $0.inProgress } }

    /// Whether ``close()`` has begun: no request starts any more (tests).
    var isClosing: Bool { state.requests.withLock { $0.closing } }

    /// How many answers were written since the server started (tests).
    var answersWritten: Int { state.answered.withLock { $0 } }
}

/// Serves one control connection: its request lines in order, one at a time, each answered by a task
/// on the store's threads (most requests read or write a database, ``StoreThreads``). A request whose
/// client goes away (the CLI's timeout, Ctrl-C) is cancelled: the wait it was in (an accept's sync,
/// say) ends, and the daemon does no more work for nobody. Lines that come while one is answered
/// wait here; past ``ControlConnectionHandler/maximumWaitingLines`` the handler stops reading the
/// socket until they are answered. The next line is answered only while the channel is writable: a
/// client that sends requests and reads no answers holds one answer in the daemon, not all of them
/// (they queued in memory without bound before).
final class ControlConnectionHandler: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    /// How many request lines may wait behind the one being answered before reading stops.
    static let maximumWaitingLines = 16

    private let handler: ControlHandler
    private let logger: Logger
    private let state: ControlServer.State
    private var waiting = CircularBuffer<Data>()
    private var answering: Task<Void, Never>?
    private var readHeld = false
    private var isOpen = true

    init(handler: ControlHandler, logger: Logger, state: ControlServer.State) {
        self.handler = handler
        self.logger = logger
        self.state = state
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let line = Self.unwrapInboundIn(data)
        waiting.append(Data(line.readableBytesView))
        answerNext(context: context)
    }

    func read(context: ChannelHandlerContext) {
        if waiting.count >= Self.maximumWaitingLines {
            readHeld = true
        } else {
            context.read()
        }
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable { answerNext(context: context) }
        context.fireChannelWritabilityChanged()
    }

    func channelInactive(context: ChannelHandlerContext) {
        isOpen = false
        waiting.removeAll()
        if let answering {
            logger.info("the control client went away; its request was cancelled")
            answering.cancel()
        }
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // A line over the limit, or a failed socket: this connection ends, the server goes on.
        logger.debug("control connection ended", metadata: ["error": "\(error)"])
        context.close(promise: nil)
    }

    /// Starts answering the first waiting line, unless one is being answered.
    private func answerNext(context: ChannelHandlerContext) {
        guard isOpen, answering == nil, context.channel.isWritable, !waiting.isEmpty, state.begin() else { return }
        let line = waiting.removeFirst()
        if readHeld, waiting.count < Self.maximumWaitingLines {
            readHeld = false
            context.read()
        }
        let handler = self.handler
        let loop = context.eventLoop
        let bound = NIOLoopBound((self, context), eventLoop: loop)
        answering = Task(executorPreference: StoreThreads.executor) {
            let response = await handler.respond(toLine: line)
            loop.execute {
                let (connection, context) = bound.value
                connection.answered(response, context: context)
            }
        }
    }

    private func answered(_ response: Data, context: ChannelHandlerContext) {
        state.answered.withLock { $0 += 1 }
        answering = nil
        guard isOpen else { return state.end() }
        var buffer = context.channel.allocator.buffer(capacity: response.count + 1)
        buffer.writeBytes(response)
        buffer.writeInteger(UInt8(ascii: "\n"))
        // In progress until written: a server closing meanwhile waits for the whole answer to go out.
        let state = self.state
        let written = context.eventLoop.makePromise(of: Void.self)
        written.futureResult.whenComplete { _ in state.end() }
        context.writeAndFlush(Self.wrapOutboundOut(buffer), promise: written)
        answerNext(context: context)
    }
}
