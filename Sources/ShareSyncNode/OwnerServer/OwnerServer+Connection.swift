import Foundation
import Logging
import NIOCore
import NIOPosix
import ShareSyncCore
import ShareSyncStore
import ShareSyncWire
import Synchronization

/// One server connection, from accept to close, as one task of the server's task group, run on the
/// server's event loop threads (``EventLoopTaskExecutor``).
///
/// The pipeline runs the transport (TLS or allowed cleartext, the line handshake, framing, the idle
/// timeout); this task reads the connection's frames from its `NIOAsyncChannel` and writes through its
/// outbound writer, which suspends while the peer does not read (back-pressure). Its steps:
///
/// 1. Wait for the transport's session (``SessionEvents``): how the connection is protected, and
///    the negotiated encoding. A connection that fails before then was already answered (and
///    closed) by the transport: the task just ends.
/// 2. Authenticate: `hello` → `challenge` → `authenticate` → `welcome`, within the handshake
///    timeout (a timer on the event loop closes the connection when it passes). Anything else before `welcome` is
///    `notAuthenticated` and closes the connection. On a TLS connection the `hello`'s key must be the
///    key of the client's TLS certificate (rule `tlsKeyMismatch`): the identity every access
///    decision uses is then the one TLS authenticated, bound to this connection.
/// 3. Serve: each request is a child task that runs on the server's thread pool (SQLite stays off
///    Swift's cooperative pool) and writes its answer when ready, in any order; at most
///    `maximumRequestsInFlight` at once, counted until the answer is written. A `subscribe` starts a
///    child task that pushes the caller's changes (``SubscriptionPusher``).
///
/// When the peer closes, the reading ends, the task group is cancelled and the channel closed.
struct ServerConnection {
    typealias Outbound = NIOAsyncChannelOutboundWriter<ByteBuffer>

    let server: ServerContext
    let channel: NIOAsyncChannel<ByteBuffer, ByteBuffer>
    let events: SessionEvents
    /// Tells when the channel has taken what was written (see ``WritabilityWaiter``).
    let writability: WritabilityWaiter
    /// The lower frame size limit until the peer authenticates (lifted at `welcome`).
    let frameGate: FrameSizeGate
    var logger: Logger

    init(
        server: ServerContext, channel: NIOAsyncChannel<ByteBuffer, ByteBuffer>, events: SessionEvents, writability: WritabilityWaiter,
        frameGate: FrameSizeGate, id: Int
    ) {
        self.server = server
        self.channel = channel
        self.events = events
        self.writability = writability
        self.frameGate = frameGate
        self.logger = server.logger
        self.logger[metadataKey: "connection.id"] = "\(id)"
        if let peer = channel.channel.remoteAddress { self.logger[metadataKey: "peer"] = "\(peer)" }
    }

    /// Sets up a fresh server channel: TLS (or allowed cleartext), the framing, the session events and
    /// the error handler that tells the peer which rule it broke before closing; then wraps it for
    /// this task. Over the overall limits it throws, and NIO closes the connection at once, before any
    /// handshake (nothing can be said to a peer before TLS).
    static func install(on channel: any Channel, context: ServerContext) throws -> ServerConnection {
        switch context.registry.admit(
            channel, maximumConnections: context.configuration.maximumConnections,
            maximumUnauthenticated: context.configuration.maximumUnauthenticatedConnections,
            maximumUnauthenticatedPerAddress: context.configuration.maximumUnauthenticatedConnectionsPerAddress)
        {
        case .refused(let refusal):
            context.logger.notice("refusing a connection", metadata: ["reason": "\(refusal)"])
            throw ShareSyncError(.requestRateLimited, refusal, rule: .maximumConnections)
        case .admitted(let evicting?):
            context.logger.notice(
                "closing the oldest connection that has not authenticated, to make room",
                metadata: ["peer": "\(evicting.remoteAddress.map { "\($0)" } ?? "?")"])
            evicting.close(promise: nil)
        case .admitted(nil):
            break
        }
        do {
            return try installHandlers(on: channel, context: context)
        } catch {
            context.registry.remove(channel)  // counted above; its task never runs to remove it
            throw error
        }
    }

    private static func installHandlers(on channel: any Channel, context: ServerContext) throws -> ServerConnection {
        let pipeline = channel.pipeline.syncOperations
        try TransportSecurity.addServerHandlers(
            to: pipeline, context: context.tls, allowCleartext: context.configuration.allowCleartext)
        // Frames before `welcome` are small (a hello, an authenticate): larger ones are refused
        // before they are inflated, until the peer has proved a key.
        let gate = FrameSizeGate(limit: context.configuration.maximumFrameSizeBeforeWelcome)
        // Frames are inflated by the connection's task as it takes them (``FrameReader``), not in the
        // pipeline: a connection holds the lines its peer sent and one inflated frame at a time.
        try FrameCodec.addServerHandlers(
            to: pipeline, configuration: context.configuration.transport, gate: gate, framesDecodedByReader: true)
        let events = SessionEventsHandler(eventLoop: channel.eventLoop)
        let writability = WritabilityHandler()
        try pipeline.addHandlers([events, writability])
        try pipeline.addHandler(FrameErrorHandler { error in
            try? MessageCoding.encode(ErrorResponse(id: nil, error.shareSyncError))
        })
        let wrapped = try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel)
        return ServerConnection(
            server: context, channel: wrapped, events: events.events,
            writability: WritabilityWaiter(handler: writability, channel: channel), frameGate: gate,
            id: context.registry.nextConnectionID())
    }

    /// Serves the connection until it closes; never throws (errors are logged, and the peer was told).
    func run() async {
        let raw = channel.channel
        let shared = ConnectionShared()
        defer {
            shared.end()
            if let name = shared.admittedName { server.registry.release(name) }
            server.registry.remove(raw)
        }
        do {
            try await channel.executeThenClose { inbound, outbound in
                let security: ConnectionSecurity
                let reader: FrameReader
                do {
                    security = try await events.security.get()
                    let session = try await events.session.get()
                    reader = try FrameReader(session: session, limits: server.configuration.transport.limits, gate: frameGate)
                } catch {
                    // The transport refused the connection and answered the peer itself.
                    logger.debug("connection failed before the handshake", metadata: ["error": "\(error)"])
                    return
                }
                // Not a child task: a timer on the event loop costs less than a task per connection,
                // and it does nothing once the connection authenticated.
                let timeout = server.configuration.transport.limits.handshakeTimeout
                let deadline = raw.eventLoop.scheduleTask(in: timeout) {
                    guard !shared.isAuthenticated else { return }
                    close(with: ShareSyncError(.notAuthenticated, "no authentication within \(timeout)", rule: .authenticationTimeout))
                }
                defer { deadline.cancel() }
                try await withThrowingDiscardingTaskGroup { group in
                    var session = Session(connection: self, security: security, shared: shared, outbound: outbound)
                    var unreadable = false
                    for try await line in inbound {
                        // After a line that could not be decoded nothing more is read: the stream is broken.
                        // The connection closes once the error handler has told the peer.
                        if unreadable { continue }
                        let frame: ByteBuffer
                        do {
                            frame = try reader.payload(of: line)
                        } catch {
                            // As when the pipeline decoded: the error handler names the broken rule, then closes.
                            unreadable = true
                            raw.pipeline.fireErrorCaught(error)
                            continue
                        }
                        guard try await session.receive(frame, group: &group) else { break }
                    }
                    // The peer closed (or the connection is being closed): stop pushes and requests.
                    group.cancelAll()
                }
            }
        } catch {
            logger.debug("connection ended", metadata: ["error": "\(error)"])
        }
    }

    /// Writes a connection-level error (no request id), then closes the connection. Written on the
    /// channel directly, not through the outbound writer: it must go out even while answers wait.
    func close(with error: ShareSyncError) {
        let raw = channel.channel
        guard let payload = try? MessageCoding.encode(ErrorResponse(id: nil, error), allocator: raw.allocator) else {
            raw.close(promise: nil)
            return
        }
        // Closed anyway if it cannot go out (a peer that reads nothing).
        FrameErrorHandler.close(after: raw.writeAndFlush(payload)) { raw.close(promise: nil) }
    }

    /// Writes an answer; one over the frame limit is replaced by a `limitExceeded` error for the same
    /// request, so every request gets an answer. A write that fails throws: the connection is gone.
    func writeAnswer(_ payload: ByteBuffer, id: Int, executor: RequestExecutor, to outbound: Outbound) async throws {
        try await outbound.write(withinFrameLimit(payload, id: id, executor: executor))
    }

    /// Answers `request` with the refusal a test injected for its op (``ConnectionRegistry/injectedRefusals``)
    /// and returns it; nil, answering nothing, if there is none.
    func answerInjectedRefusal(_ request: Request, executor: RequestExecutor, to outbound: Outbound) async throws -> ShareSyncError? {
        guard let injected = server.registry.injectedRefusal(for: request.body.op) else { return nil }
        try await writeAnswer(executor.errorResponse(id: request.id, injected), id: request.id, executor: executor, to: outbound)
        return injected
    }

    /// `payload`, or a `limitExceeded` answer in its place if it is over the frame limit. Not inlined
    /// into the async caller: a `ShareSyncError` in an async function's frame made it 2 KB larger.
    @inline(never)
    private func withinFrameLimit(_ payload: ByteBuffer, id: Int, executor: RequestExecutor) -> ByteBuffer {
        let limit = server.configuration.transport.limits.maximumFrameSize
        guard payload.readableBytes > limit else { return payload }
        logger.error("an answer is over the frame limit", metadata: ["request": "\(id)", "bytes": "\(payload.readableBytes)"])
        return executor.errorResponse(
            id: id,
            ShareSyncError(
                .limitExceeded, "the answer is \(payload.readableBytes) bytes, more than one frame may carry (\(limit))",
                rule: .maximumResponseSize))
    }
}

/// What a connection's task and its child tasks share: whether (and as whom) it authenticated, the
/// requests in flight, the subscription's wake-up stream and the page read ahead.
final class ConnectionShared: Sendable {
    private struct State {
        var admittedName: String?
        var inFlight = 0
        var subscription: AsyncStream<Void>.Continuation?
        /// Which subscription is the connection's: each `subscribe` takes the next number.
        var subscriptionNumber = 0
        var ended = false
        /// `modifyRecords` requests of this connection whose answers are not written yet.
        var writesInFlight = 0
        /// A commit came while a write was in flight: the subscription's wake-up waits for its answer.
        var wakeDeferred = false
    }

    private let state = Mutex(State())
    /// The next page of the last `fetchZoneChanges` served (see ``ZonePageReadAhead``).
    let readAhead = Mutex<ZonePageReadAhead?>(nil)
    /// Permits to read an answer that may be as large as the response size (``largeAnswerPermits``).
    private let largeAnswers = Mutex(LargeAnswers())

    private struct LargeAnswers {
        var held = 0
        var nextWaiter: UInt64 = 0
        var waiters: [(id: UInt64, continuation: CheckedContinuation<Bool, Never>)] = []
    }

    /// How many `fetchZoneChanges` and `fetchRecords` of one connection are read, or wait for their
    /// answer to be handed to the channel, at once; more wait for one of them (back-pressure, not a
    /// refusal). Each answer may be as large as the response size (4 MiB), and the in-flight limit
    /// alone let a client that sends 64 of them and reads nothing make the owner read and hold
    /// 64 answers: 256 MiB per connection. Two keep a reader's next page read while one is written.
    static let largeAnswerPermits = 2

    /// Waits for a permit to read a large answer; false if the task was cancelled (the connection ended).
    func acquireLargeAnswer() async -> Bool {
        let id = largeAnswers.withLock { s in
            defer { s.nextWaiter += 1 }
            return s.nextWaiter
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                let now: Bool? = largeAnswers.withLock { s in
                    // Checked under the lock: a cancellation after it finds the waiter below.
                    if Task.isCancelled { return false }
                    if s.held < Self.largeAnswerPermits {
                        s.held += 1
                        return true
                    }
                    s.waiters.append((id, continuation))
                    return nil
                }
                if let now { continuation.resume(returning: now) }
            }
        } onCancel: {
            let waiter = largeAnswers.withLock { s -> CheckedContinuation<Bool, Never>? in
                guard let index = s.waiters.firstIndex(where: { $0.id == id }) else { return nil }
                return s.waiters.remove(at: index).continuation
            }
            waiter?.resume(returning: false)
        }
    }

    /// Returns a permit: the longest waiter takes it.
    func releaseLargeAnswer() {
        let next = largeAnswers.withLock { s -> CheckedContinuation<Bool, Never>? in
            guard !s.waiters.isEmpty else {
                s.held -= 1
                return nil
            }
            return s.waiters.removeFirst().continuation
        }
        next?.resume(returning: true)
    }

    var isAuthenticated: Bool { state.withLock { $0.admittedName != nil } }
    var admittedName: String? { state.withLock { $0.admittedName } }

    func authenticated(as name: String) { state.withLock { $0.admittedName = name } }

    /// Counts a request in flight; false if `limit` already are.
    func beginRequest(limit: Int) -> Bool {
        state.withLock { s in
            guard s.inFlight < limit else { return false }
            s.inFlight += 1
            return true
        }
    }

    func endRequest() { state.withLock { $0.inFlight -= 1 } }

    /// Whether a commit wakes the subscription now: not while one of this connection's writes waits
    /// for its answer to be written; its wake-up then comes with that answer (``endWrite()``). A
    /// writer gets the answer first and the push of its own change right after, instead of the push
    /// (read on the thread pool, then written on the event loop) going out first and delaying the
    /// answer (issue 12: participant write p50 0.90 → 0.81 ms, `sharesync-bench suite`, same sitting).
    func commitObserved() -> Bool {
        state.withLock { s in
            guard s.writesInFlight > 0 else { return true }
            s.wakeDeferred = true
            return false
        }
    }

    /// Counts a `modifyRecords` in flight until its answer is written (``endWrite()``).
    func beginWrite() { state.withLock { $0.writesInFlight += 1 } }

    /// A write's answer is written (or will never be): a wake-up deferred meanwhile happens now, even
    /// if other writes are still in flight, so that a push waits for one answer at most.
    func endWrite() {
        let wake = state.withLock { s -> AsyncStream<Void>.Continuation? in
            s.writesInFlight -= 1
            guard s.wakeDeferred else { return nil }
            s.wakeDeferred = false
            return s.subscription
        }
        wake?.yield()
    }

    /// A new subscription's wake-ups (coalesced: a wake-up while a pass runs asks for one more pass)
    /// and its number (``isCurrentSubscription(_:)``); the previous subscription's stream finishes,
    /// so its task ends. Nil once the connection ended.
    func replaceSubscription() -> (wakes: AsyncStream<Void>, wake: AsyncStream<Void>.Continuation, number: Int)? {
        let (stream, continuation) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        let replaced = state.withLock { s -> (previous: AsyncStream<Void>.Continuation?, number: Int)? in
            guard !s.ended else { return nil }
            defer { s.subscription = continuation }
            s.subscriptionNumber += 1
            return (s.subscription, s.subscriptionNumber)
        }
        guard let replaced else { return nil }
        replaced.previous?.finish()
        return (stream, continuation, replaced.number)
    }

    /// Whether subscription `number` is still the connection's. A finished stream still hands out a
    /// wake-up it holds, so a replaced subscription checks this before it asks for a push and before
    /// it writes one: otherwise every `subscribe` replaced right after its answer (whose in-flight
    /// count ended there) still read a push and held it until written, and a client that sent
    /// subscribes and read only their answers made the owner hold any number of pushes.
    func isCurrentSubscription(_ number: Int) -> Bool {
        state.withLock { !$0.ended && $0.subscriptionNumber == number }
    }

    func end() {
        let subscription = state.withLock { s in
            s.ended = true
            defer { s.subscription = nil }
            return s.subscription
        }
        subscription?.finish()
        readAhead.withLock { $0 = nil }
    }
}

/// The reading side of one connection: its state (authentication, then requests), fed one frame at a
/// time by the connection's task.
struct Session {
    private enum Phase {
        case awaitingHello
        case awaitingAuthenticate(hello: HelloMessage, serverNonce: String)
        case authenticated(Caller)
    }

    let connection: ServerConnection
    let security: ConnectionSecurity
    let shared: ConnectionShared
    let outbound: ServerConnection.Outbound
    private var phase = Phase.awaitingHello
    private var pendingAnswer: ByteBuffer?
    private var logger: Logger

    init(connection: ServerConnection, security: ConnectionSecurity, shared: ConnectionShared, outbound: ServerConnection.Outbound) {
        self.connection = connection
        self.security = security
        self.shared = shared
        self.outbound = outbound
        self.logger = connection.logger
    }

    private var server: ServerContext { connection.server }

    /// Handles one frame; false when the connection is to close (it was refused, and told why).
    ///
    /// The frame is handled synchronously and its direct answer, if any, written afterwards: the only
    /// suspension is that write. A task keeps the largest stack of async frames it ever had for as
    /// long as it lives (Swift's task allocator keeps its slabs), and this is the connection's task;
    /// with the handling inlined into this async function its frame was 5.9 KB, held twice by every
    /// connection (heaptrack, the bench's 1,000-connection owner).
    mutating func receive(_ frame: ByteBuffer, group: inout ThrowingDiscardingTaskGroup<any Error>) async throws -> Bool {
        let open = try handle(frame, group: &group)
        if let answer = pendingAnswer {
            pendingAnswer = nil
            try await outbound.write(answer)
        }
        return open
    }

    private mutating func handle(_ frame: ByteBuffer, group: inout ThrowingDiscardingTaskGroup<any Error>) throws -> Bool {
        switch phase {
        case .awaitingHello:
            return try receiveHello(frame)
        case .awaitingAuthenticate(let hello, let serverNonce):
            return try receiveAuthenticate(frame, hello: hello, serverNonce: serverNonce, group: &group)
        case .authenticated(let caller):
            try receiveRequest(frame, caller: caller, group: &group)
            return true
        }
    }

    // MARK: Authentication

    private mutating func receiveHello(_ frame: ByteBuffer) throws -> Bool {
        guard let hello = try? MessageCoding.decode(HelloMessage.self, from: frame), hello.op == "hello" else {
            return refuse("the first message must be a hello", rule: .helloExpected)
        }
        guard AuthTranscript.isBase64Of32Bytes(hello.publicKey), AuthTranscript.isBase64Of32Bytes(hello.nonce) else {
            return refuse("the hello's publicKey and nonce must each be 32 bytes in base64", rule: .malformedHello)
        }
        if let field = hello.oversizedField {
            return refuse("the hello's \(field) is longer than \(HelloMessage.maximumFieldBytes) bytes", rule: .malformedHello)
        }
        if case .tls(let certificateKey) = security, Data(base64Encoded: hello.publicKey) != certificateKey {
            logger.notice("authentication failed: hello key is not the TLS certificate's key")
            return refuse(
                "the hello's publicKey is not the key of this connection's TLS client certificate "
                    + "(\(Fingerprint.of(rawPublicKey: certificateKey)))",
                rule: .tlsKeyMismatch)
        }
        let serverNonce = AuthTranscript.makeNonce()
        let signature = server.identity.signBase64(
            AuthTranscript.server(clientNonce: hello.nonce, serverNonce: serverNonce, clientKey: hello.publicKey))
        phase = .awaitingAuthenticate(hello: hello, serverNonce: serverNonce)
        try send(ChallengeMessage(publicKey: server.identity.publicKeyBase64, nonce: serverNonce, signature: signature))
        return true
    }

    private mutating func receiveAuthenticate(
        _ frame: ByteBuffer, hello: HelloMessage, serverNonce: String, group: inout ThrowingDiscardingTaskGroup<any Error>
    ) throws -> Bool {
        guard let message = try? MessageCoding.decode(AuthenticateMessage.self, from: frame), message.op == "authenticate" else {
            return refuse("expected an authenticate message", rule: .authenticateExpected)
        }
        let transcript = AuthTranscript.client(
            serverNonce: serverNonce, clientNonce: hello.nonce, serverKey: server.identity.publicKeyBase64)
        guard AuthTranscript.verify(signature: message.signature, publicKey: hello.publicKey, data: transcript) else {
            logger.notice("authentication failed: bad signature")
            return refuse("the signature does not prove the key of the hello on this connection", rule: .badSignature)
        }
        let name = "_" + Fingerprint.of(publicKeyBase64: hello.publicKey)!
        guard server.registry.admit(name, limit: server.configuration.maximumConnectionsPerIdentity, channel: connection.channel.channel) else {
            connection.close(
                with: ShareSyncError(
                    .requestRateLimited, "this identity already has \(server.configuration.maximumConnectionsPerIdentity) connections",
                    rule: .maximumConnectionsPerIdentity, retryAfterSeconds: 5))
            return false
        }
        shared.authenticated(as: name)
        logger[metadataKey: "user"] = "\(name)"
        logger.debug("authenticated")
        phase = .authenticated(Caller(userRecordName: name, displayName: hello.displayName))
        let limits = server.database.limits
        let wireLimits = WireLimits(
            maximumItemsPerRequest: limits.maximumItemsPerRequest, maximumRecordSize: limits.maximumRecordSize,
            maximumResponseSize: limits.maximumResponseSize, maximumFrameSize: server.configuration.transport.limits.maximumFrameSize)
        // Registered first, then the address read: an announcement made meanwhile reaches this
        // connection as a push, or its address is already the one the welcome carries.
        server.registry.markAuthenticated(connection.channel.channel)
        // Lifted before the welcome goes out: the client's first request may follow it at once.
        connection.frameGate.lift()
        let address = server.registry.advertised.withLock { $0 }
        try send(WelcomeMessage(userRecordName: name, ownerName: server.database.ownerName, limits: wireLimits, address: address))
        return true
    }

    private func refuse(_ message: String, rule: Rule) -> Bool {
        connection.close(with: ShareSyncError(.notAuthenticated, message, rule: rule))
        return false
    }

    /// The frame's direct answer, written once ``receive(_:group:)`` has handled the frame.
    private mutating func send<T: Encodable>(_ message: T) throws {
        pendingAnswer = try MessageCoding.encode(message, allocator: connection.channel.channel.allocator)
    }

    // MARK: Requests

    private mutating func receiveRequest(_ frame: ByteBuffer, caller: Caller, group: inout ThrowingDiscardingTaskGroup<any Error>) throws {
        let request: Request
        do {
            request = try MessageCoding.decode(Request.self, from: frame)
        } catch {
            let id = (try? MessageCoding.decode(MessageHead.self, from: frame))?.id
            return try send(ErrorResponse(id: id, error))
        }
        if case .ping = request.body {
            // Answered at once, outside the requests in flight: it only keeps the connection from being idle.
            return try send(Response(id: request.id, ok: EmptyResult()))
        }
        let limits = server.database.limits
        // A write with a write ID is checked after its repeat is looked for (`RequestExecutor`).
        if case .modifyRecords(_, _, _, _, _, nil) = request.body, frame.readableBytes > limits.maximumResponseSize {
            return try send(
                ErrorResponse(id: request.id, OwnerServer.oversizedWrite(bytes: frame.readableBytes, limit: limits.maximumResponseSize)))
        }
        // The request stays in flight until its answer is written: a client that stops reading cannot
        // make the owner hold more than `maximumRequestsInFlight` answers for it.
        let limit = server.configuration.maximumRequestsInFlight
        guard shared.beginRequest(limit: limit) else {
            return try send(
                ErrorResponse(
                    id: request.id,
                    ShareSyncError(
                        .requestRateLimited, "more than \(limit) requests in flight", rule: .maximumRequestsInFlight,
                        retryAfterSeconds: 0.1)))
        }
        let executor = RequestExecutor(
            database: server.database, caller: caller, syncStates: server.syncStates, requestBytes: frame.readableBytes)
        let connection = self.connection
        let shared = self.shared
        let outbound = self.outbound
        let logger = Self.requestLogger(logger, request)
        if case .subscribe(let token) = request.body {
            // A task of its own, with nothing else in its frame: it lives as long as the connection,
            // and a task keeps the largest stack of async frames it ever had (the task allocator keeps
            // its slabs). Started from the closure below, whose frame holds every request's locals, it
            // held 10.5 KB per connection (heaptrack, the bench's 1,000-connection owner).
            let id = request.id
            group.addTask {
                // Its in-flight count ends with its answer (in `start`), not with the task.
                logger.debug("owner request: subscription starts")
                try await SubscriptionPusher.start(
                    id: id, token: token, executor: executor, connection: connection, shared: shared, outbound: outbound, logger: logger)
            }
            return
        }
        group.addTask {
            defer { shared.endRequest() }
            let start = ContinuousClock.now
            let refusal: ShareSyncError?
            switch request.body {
            case .subscribe:
                return  // started above, as a task of its own
            case .fetchZoneChanges(let zoneName, let token, let resultsLimit):
                guard await shared.acquireLargeAnswer() else { return }
                defer { shared.releaseLargeAnswer() }
                connection.server.registry.largeAnswersStarted.add(1, ordering: .relaxed)
                let key = ZonePageReadAhead.Key(zoneName: zoneName, token: token, resultsLimit: resultsLimit)
                let answer = await connection.fetchZoneChanges(id: request.id, key, executor: executor, shared: shared)
                try await connection.writeAnswer(answer.payload, id: request.id, executor: executor, to: outbound)
                refusal = answer.error
            case .modifyRecords:
                // The subscription's push of this write waits for its answer (see `commitObserved`).
                shared.beginWrite()
                defer { shared.endWrite() }
                connection.server.registry.onWriteRequest.withLock { $0 }?()
                let dropping = connection.server.registry.takeDroppedAnswer()
                if !dropping, let injected = try await connection.answerInjectedRefusal(request, executor: executor, to: outbound) {
                    refusal = injected
                    break
                }
                let answer = await connection.onThreadPool(id: request.id, executor: executor) { executor.answer(request) }
                if dropping {
                    connection.server.registry.onDroppedAnswer.withLock { $0 }?()
                    connection.channel.channel.close(promise: nil)  // applied, and its answer lost (tests)
                    return
                }
                try await connection.writeAnswer(answer.payload, id: request.id, executor: executor, to: outbound)
                refusal = answer.error
            case .fetchRecords:
                guard await shared.acquireLargeAnswer() else { return }
                defer { shared.releaseLargeAnswer() }
                connection.server.registry.largeAnswersStarted.add(1, ordering: .relaxed)
                let answer = await connection.onThreadPool(id: request.id, executor: executor) { executor.answer(request) }
                try await connection.writeAnswer(answer.payload, id: request.id, executor: executor, to: outbound)
                refusal = answer.error
            default:
                if connection.server.registry.silencedOps.withLock({ $0.contains(request.body.op) }) { return }
                if let injected = try await connection.answerInjectedRefusal(request, executor: executor, to: outbound) {
                    refusal = injected
                    break
                }
                let answer = await connection.onThreadPool(id: request.id, executor: executor) { executor.answer(request) }
                try await connection.writeAnswer(answer.payload, id: request.id, executor: executor, to: outbound)
                refusal = answer.error
            }
            let duration = ContinuousClock.now - start
            // Refusals are counted by code where they are answered (RequestExecutor.errorResponse).
            ShareSyncMetrics.request(channel: "owner", request.body.op, duration: duration, error: nil)
            logger.debug(
                "owner request answered",
                metadata: [
                    "outcome": "\(refusal?.code.rawValue ?? "ok")", "duration.ms": "\(duration.inSeconds * 1000)",
                ])
        }
    }

    /// The connection's logger with a request's metadata: `request.id` and `request` (its operation),
    /// and the zone (and share) it names, if any.
    static func requestLogger(_ connectionLogger: Logger, _ request: Request) -> Logger {
        var logger = connectionLogger
        logger[metadataKey: "request.id"] = "\(request.id)"
        logger[metadataKey: "request"] = "\(request.body.op)"
        switch request.body {
        case .fetchZoneChanges(let zoneName, _, _), .fetchRecords(let zoneName, _), .modifyRecords(let zoneName, _, _, _, _, _):
            logger[metadataKey: "zone"] = "\(zoneName)"
        case .leaveShare(let zoneName, let shareRecordName):
            logger[metadataKey: "zone"] = "\(zoneName)"
            logger[metadataKey: "share"] = "\(shareRecordName)"
        case .fetchShareMetadata, .acceptShare, .requestAccess, .fetchDatabaseChanges, .subscribe, .ping:
            break
        }
        return logger
    }
}

extension ServerConnection {
    /// Runs `body` (a database call, which blocks) on the server's thread pool; if the pool has
    /// stopped (the server is shutting down), the answer is `serviceUnavailable`.
    func onThreadPool(
        id: Int, executor: RequestExecutor, _ body: @escaping @Sendable () -> (payload: ByteBuffer, error: ShareSyncError?)
    ) async -> (payload: ByteBuffer, error: ShareSyncError?) {
        do {
            return try await server.threadPool.runIfActive(body)
        } catch {
            let refusal = ShareSyncError(.serviceUnavailable, "the server is shutting down: \(error)")
            return (executor.errorResponse(id: id, refusal), refusal)
        }
    }
}

/// Completes waits when the channel becomes writable again (its outbound buffer fell under the low
/// watermark), or fails them when it closes. The outbound writer hands a push to the channel at once
/// and suspends only on the next write; a subscription waits here so that its cursor moves only once
/// the push is written, and its deadline catches a subscriber that stalls on its last push too.
final class WritabilityHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = NIOAny
    typealias InboundOut = NIOAny

    private var waiting: [EventLoopPromise<Void>] = []
    private var closed = false

    /// On the event loop: a future that completes once `channel` is writable.
    func writable(_ channel: any Channel) -> EventLoopFuture<Void> {
        if closed { return channel.eventLoop.makeFailedFuture(ChannelError.ioOnClosedChannel) }
        if channel.isWritable { return channel.eventLoop.makeSucceededVoidFuture() }
        let promise = channel.eventLoop.makePromise(of: Void.self)
        waiting.append(promise)
        return promise.futureResult
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable {
            let waiting = self.waiting
            self.waiting = []
            for promise in waiting { promise.succeed() }
        }
        context.fireChannelWritabilityChanged()
    }

    func channelInactive(context: ChannelHandlerContext) {
        closed = true
        let waiting = self.waiting
        self.waiting = []
        for promise in waiting { promise.fail(ChannelError.ioOnClosedChannel) }
        context.fireChannelInactive()
    }
}

@available(*, unavailable)
extension WritabilityHandler: Sendable {}

/// The async side of a ``WritabilityHandler``.
struct WritabilityWaiter: Sendable {
    private let handler: NIOLoopBound<WritabilityHandler>
    private let channel: any Channel

    init(handler: WritabilityHandler, channel: any Channel) {
        self.handler = NIOLoopBound(handler, eventLoop: channel.eventLoop)
        self.channel = channel
    }

    /// Returns once the channel is writable; throws if it closes first.
    func waitUntilWritable() async throws {
        let handler = self.handler
        let channel = self.channel
        try await channel.eventLoop.flatSubmit { handler.value.writable(channel) }.get()
    }
}
