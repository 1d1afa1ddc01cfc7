import Foundation
import Logging
import NIOCore
import NIOSSL
import ShareSyncCore
import ShareSyncWire
import Synchronization

/// The client side of one connection to an owner, run as one task from connect to close.
///
/// The pipeline runs the transport (TLS pinned to the share URL's key, the line handshake, framing,
/// the idle timeout); this task reads the connection's frames from its `NIOAsyncChannel`, and requests
/// go out through its outbound writer, which suspends while the owner does not read. Its steps:
///
/// 1. Authenticate: `hello` → `challenge` (the owner's proof, checked against the pinned key and,
///    over TLS, against the key of the owner's certificate: rule `tlsKeyMismatch`) → `authenticate`
///    → `welcome`, all within the connect timeout (a child task closes the connection when it passes).
/// 2. Route: each answer to the request waiting for its id (an answer nobody waits for, an abandoned
///    request's, is dropped); each `changes` push to the subscription stream; each `ownerAddress` push
///    to the announcements. A message that cannot be read closes the connection with a clear error:
///    nothing is skipped, and the engine resumes from its last stored token.
/// 3. Ping: a child task sends a `ping` whenever nothing was sent for the ping interval, so a quiet
///    connection (a subscription waiting for pushes) is never idle in either direction.
///
/// When the connection closes, everything still waiting fails with the reason: the owner's last
/// connection-level error, else the transport's, else `networkFailure`.
final class ClientSession: Sendable {
    typealias Outbound = NIOAsyncChannelOutboundWriter<ByteBuffer>

    /// Who connects, to whom, and how.
    struct Settings: Sendable {
        var identity: NodeIdentity
        var expectedOwnerFingerprint: String
        var displayName: String?
        var requiresTLS: Bool
        var pingInterval: TimeAmount?
        var authenticationTimeout: TimeAmount
        /// How long a request may wait for its answer before the connection is closed (the link then
        /// connects again); nil: for ever. An owner that answers pings but never one request held
        /// that owner's link (its outbox, its catch-ups) for good.
        var answerTimeout: TimeAmount? = nil
    }

    /// What a successful authentication hands to ``OwnerConnection``.
    struct Ready: Sendable {
        let welcome: WelcomeMessage
        let outbound: Outbound
    }

    private struct State {
        var waiting: [Int: EventLoopPromise<ByteBuffer>] = [:]
        var pushes: PushReceiver?
        /// Set once the connection closed: what requests made from now on fail with.
        var failure: ShareSyncError?
        /// The first error about the connection itself (from the owner, or found here).
        var error: ShareSyncError?
        var ownerName: String?
        var lastSent = NIODeadline.now()
        var lastID = 0
    }

    let settings: Settings
    let channel: NIOAsyncChannel<ByteBuffer, ByteBuffer>
    let events: SessionEvents
    /// The frame limits the session's lines are decoded within (``Frames``).
    let limits: FrameLimits
    /// The bytes received from the owner so far (``armAnswerDeadline(id:answer:timeout:receivedBefore:)``).
    let received: ReceivedBytes
    /// Where the owner's address announcements go (the welcome's and `ownerAddress` pushes).
    let announcements = OwnerAddressAnnouncements()
    private let state = Mutex(State())

    private init(
        settings: Settings, channel: NIOAsyncChannel<ByteBuffer, ByteBuffer>, events: SessionEvents, limits: FrameLimits,
        received: ReceivedBytes
    ) {
        self.limits = limits
        self.received = received
        self.settings = Settings(
            identity: settings.identity, expectedOwnerFingerprint: settings.expectedOwnerFingerprint.lowercased(),
            displayName: settings.displayName, requiresTLS: settings.requiresTLS, pingInterval: settings.pingInterval,
            authenticationTimeout: settings.authenticationTimeout, answerTimeout: settings.answerTimeout)
        self.channel = channel
        self.events = events
    }

    /// Sets up a fresh client channel (TLS when `tls` is given, the framing, the session events and
    /// the error handler) and wraps it for the session's task (``start(onEventLoop:)``). Call on the
    /// channel's event loop.
    static func install(
        on channel: any Channel, tls: NIOSSLContext?, configuration: ClientConfiguration, settings: Settings
    ) throws -> ClientSession {
        let pipeline = channel.pipeline.syncOperations
        let received = ReceivedBytes()
        try pipeline.addHandler(received)
        if let tls {
            try TransportSecurity.addClientHandlers(to: pipeline, context: tls, expectedPeerFingerprint: settings.expectedOwnerFingerprint)
        }
        // Frames are inflated by the session's task as it takes them (``FrameReader``), not in the
        // pipeline: the connection holds the lines the owner sent and one inflated frame at a time.
        try FrameCodec.addClientHandlers(to: pipeline, configuration: configuration, framesDecodedByReader: true)
        let events = SessionEventsHandler(eventLoop: channel.eventLoop)
        try pipeline.addHandlers([events, FrameErrorHandler()])
        let wrapped = try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel)
        return ClientSession(settings: settings, channel: wrapped, events: events.events, limits: configuration.limits, received: received)
    }

    // MARK: The connection's task

    /// A session whose task runs: ``ready`` completes when it authenticated (or failed).
    struct Started: Sendable {
        let session: ClientSession
        let ready: EventLoopFuture<Ready>
        let task: Task<Void, Never>
    }

    /// Starts the connection's task. Call it in the channel initializer, before the connection is
    /// active: the task must be reading and writing by the time the transport's session begins, or
    /// an idle timeout could pass before the `hello` goes out. The task runs on the channel's event
    /// loop (`onEventLoop`, see ``EventLoopTaskExecutor``), else on the global executor (tests).
    func start(onEventLoop: Bool = true) -> Started {
        let eventLoop = channel.channel.eventLoop
        let ready = eventLoop.makePromise(of: Ready.self)
        let task =
            onEventLoop
            ? Task(executorPreference: EventLoopTaskExecutor(eventLoop)) { await self.run(ready: ready) }
            : Task { await self.run(ready: ready) }
        return Started(session: self, ready: ready.futureResult, task: task)
    }

    /// Runs the connection until it closes. `ready` gets the welcome and the writer once
    /// authenticated, or the reason the connection failed before.
    func run(ready: EventLoopPromise<Ready>) async {
        do {
            try await channel.executeThenClose { inbound, outbound in
                try await withThrowingDiscardingTaskGroup { group in
                    group.addTask { await self.enforceAuthenticationDeadline() }
                    var frames = Frames(lines: inbound.makeAsyncIterator(), channel: channel.channel)
                    let welcome = try await authenticate(frames: &frames, outbound: outbound)
                    ready.succeed(Ready(welcome: welcome, outbound: outbound))
                    if let interval = settings.pingInterval {
                        group.addTask { await self.keepalive(every: interval, outbound: outbound) }
                    }
                    while let frame = try await frames.next() { try route(frame) }
                    group.cancelAll()
                }
            }
        } catch let error as ShareSyncError {
            record(error)  // what this side refused (the owner's proof, a message it cannot read)
        } catch let error as FrameError {
            record(Self.describe(error))  // a line that could not be decoded (``Frames``)
        } catch {
            // The channel closed or failed: the transport's first error (``finish()``) says why.
        }
        let failure = finish()
        ready.fail(failure)
    }

    private func enforceAuthenticationDeadline() async {
        let timeout = settings.authenticationTimeout
        try? await channel.channel.eventLoop.sleep(for: timeout)
        guard !Task.isCancelled, state.withLock({ $0.ownerName == nil }) else { return }
        record(ShareSyncError(.networkFailure, "no authentication within \(timeout)"))
        channel.channel.close(promise: nil)
    }

    private func authenticate(frames: inout Frames, outbound: Outbound) async throws -> WelcomeMessage {
        frames.reader = try FrameReader(session: try await events.session.get(), limits: limits)
        // Over TLS the transport told how the connection is protected before the session began; a
        // cleartext client (loopback only) has no such event.
        let security = settings.requiresTLS ? try await events.security.get() : .cleartext
        // A longer name (a home made before the limit, a library caller's) is cut to the limit at a
        // character boundary: owners refuse a hello with a longer one.
        let hello = HelloMessage(
            publicKey: settings.identity.publicKeyBase64, nonce: AuthTranscript.makeNonce(),
            displayName: settings.displayName.map(HelloMessage.withinFieldLimit))
        try await write(hello, to: outbound)

        let challengeFrame = try await Self.next(&frames)
        let challenge = try Self.decode(ChallengeMessage.self, op: "challenge", from: challengeFrame, rule: .challengeExpected)
        let transcript = AuthTranscript.server(clientNonce: hello.nonce, serverNonce: challenge.nonce, clientKey: hello.publicKey)
        guard AuthTranscript.isBase64Of32Bytes(challenge.nonce),
            AuthTranscript.verify(signature: challenge.signature, publicKey: challenge.publicKey, data: transcript)
        else {
            throw ShareSyncError(.notAuthenticated, "the owner's signature does not verify", rule: .badSignature)
        }
        if settings.requiresTLS {
            guard case .tls(let certificateKey) = security, Data(base64Encoded: challenge.publicKey) == certificateKey else {
                throw ShareSyncError(
                    .notAuthenticated, "the owner's challenge proves a key other than its TLS certificate's; not talking to it",
                    rule: .tlsKeyMismatch)
            }
        }
        let fingerprint = Fingerprint.of(publicKeyBase64: challenge.publicKey)
        guard fingerprint == settings.expectedOwnerFingerprint else {
            throw ShareSyncError(
                .notAuthenticated,
                "the owner proved key \(fingerprint ?? "?"), but the share URL names \(settings.expectedOwnerFingerprint); not talking to it",
                rule: .ownerFingerprintMismatch)
        }
        let signature = settings.identity.signBase64(
            AuthTranscript.client(serverNonce: challenge.nonce, clientNonce: hello.nonce, serverKey: challenge.publicKey))
        try await write(AuthenticateMessage(signature: signature), to: outbound)

        let welcome = try Self.decode(WelcomeMessage.self, op: "welcome", from: try await Self.next(&frames), rule: .welcomeExpected)
        // An owner's name is its key's (`_` + fingerprint), and the key is what it just proved. A name
        // taken on trust let an owner speak as another owner this node knows: the replica stored it
        // under that owner, moved that owner's address and key to it, and handed it that owner's
        // queued writes.
        guard let fingerprint, welcome.ownerName == "_" + fingerprint else {
            throw ShareSyncError(
                .notAuthenticated,
                "the owner calls itself \(welcome.ownerName), but the key it proved is \(fingerprint ?? "?"); not talking to it",
                rule: .ownerFingerprintMismatch)
        }
        state.withLock { $0.ownerName = welcome.ownerName }
        if let address = welcome.address { announcements.announce(address) }
        return welcome
    }

    /// The next frame; the connection closing first is an error (the reason comes from ``finish()``).
    private static func next(_ frames: inout Frames) async throws -> ByteBuffer {
        guard let frame = try await frames.next() else { throw ChannelError.ioOnClosedChannel }
        return frame
    }

    /// The session's frames: each line the pipeline handed on, decoded as it is taken (``FrameReader``).
    struct Frames {
        var lines: NIOAsyncChannelInboundStream<ByteBuffer>.AsyncIterator
        let channel: any Channel
        /// Set once the session is negotiated (its encoding), before the first frame is read.
        var reader: FrameReader?

        /// The next frame, or nil when the connection closed. A line that cannot be decoded goes
        /// through the pipeline as a decoder's error would (the transport notes it and the connection
        /// closes), and is thrown.
        mutating func next() async throws -> ByteBuffer? {
            guard let line = try await lines.next() else { return nil }
            guard let reader else { throw FrameError(.invalidEncoding, "a frame came before the session was negotiated") }
            do {
                return try reader.payload(of: line)
            } catch {
                channel.pipeline.fireErrorCaught(error)
                throw error
            }
        }
    }

    /// An authentication message: the owner's error if it sent one instead, else `notAuthenticated`.
    private static func decode<T: Decodable & Sendable>(_ type: T.Type, op: String, from frame: ByteBuffer, rule: Rule) throws -> T {
        if let error = (try? MessageCoding.decode(MessageHead.self, from: frame))?.error { throw error.shareSyncError() }
        guard let message = try? MessageCoding.decode(T.self, from: frame), (message as? any AuthenticationMessage)?.op == op else {
            throw ShareSyncError(.notAuthenticated, "expected a \(op) from the owner", rule: rule)
        }
        return message
    }

    /// Sends a `ping` whenever nothing was sent for `interval`; its answer is dropped when it comes.
    /// Ends when the connection does (cancelled, or a write fails), without an error of its own.
    private func keepalive(every interval: TimeAmount, outbound: Outbound) async {
        while !Task.isCancelled {
            let due = state.withLock { $0.lastSent } + interval
            let now = NIODeadline.now()
            do {
                if now >= due {
                    try await write(Request(id: nextID(), body: .ping), to: outbound)
                } else {
                    try await channel.channel.eventLoop.sleep(for: due - now)
                }
            } catch {
                return
            }
        }
    }

    /// Routes one frame after authentication; throws (closing the connection) on one that cannot be read.
    private func route(_ frame: ByteBuffer) throws {
        if let id = MessageHead.responseID(frame) {
            state.withLock { $0.waiting.removeValue(forKey: id) }?.succeed(frame)
            return
        }
        let head: MessageHead
        do {
            head = try MessageCoding.decode(MessageHead.self, from: frame)
        } catch {
            throw ShareSyncError(.networkFailure, "the owner sent a malformed message: \(error.message)")
        }
        let ownerName = state.withLock { $0.ownerName } ?? ""
        switch head.push {
        case "ownerAddress":
            // The owner advertises a new address; an announcement that cannot be read changes nothing.
            if let push = try? MessageCoding.decode(OwnerAddressPush.self, from: frame) { announcements.announce(push.address) }
        case "changes":
            // A push that cannot be read is never skipped: the connection closes and the client
            // resumes from its last stored token.
            let push: OwnerConnection.Push
            do {
                let wire = try MessageCoding.decode(ChangesPush.self, from: frame)
                push = OwnerConnection.Push(
                    databaseChanges: wire.databaseChanges.databaseChanges(ownerName: ownerName),
                    zoneChanges: try wire.zoneChanges.map { try $0.zoneChanges(ownerName: ownerName) }, changeToken: wire.token,
                    moreComing: wire.moreComing ?? false)
            } catch {
                let reason = (error as? ShareSyncError)?.message ?? "\(error)"
                throw ShareSyncError(.networkFailure, "the owner sent a push that cannot be read: \(reason)")
            }
            state.withLock { $0.pushes }?.receive(push)
        default:
            if let id = head.id {
                state.withLock { $0.waiting.removeValue(forKey: id) }?.succeed(frame)
            } else if let error = head.error {
                let failure = error.shareSyncError(ownerName: ownerName)
                if failure.code == .changeTokenExpired {
                    // The subscription's cursor expired: only the pushes end (the link catches up and
                    // subscribes again); the connection goes on. Before, it was also kept as the
                    // connection's error, and when the connection closed, even hours later, its
                    // requests failed with changeTokenExpired: queued writes were kept as refused
                    // and shares left locally as if the owner had been told.
                    state.withLock { s in defer { s.pushes = nil }; return s.pushes }?.end()
                } else {
                    // An error about the connection itself (no request id): remember it for what follows.
                    record(failure)
                }
            }
        }
    }

    /// Keeps the first error about the connection.
    private func record(_ error: ShareSyncError) {
        state.withLock { if $0.error == nil { $0.error = error } }
    }

    /// Marks the connection closed: fails what waits, ends the pushes. Returns the reason.
    private func finish() -> ShareSyncError {
        let transport = events.firstError.map(Self.describe)
        let (failure, waiting, pushes) = state.withLock { s in
            let failure = s.failure ?? s.error ?? transport ?? ShareSyncError(.networkFailure, "the connection to the owner closed")
            s.failure = failure
            defer { s.waiting = [:]; s.pushes = nil }
            return (failure, s.waiting, s.pushes)
        }
        for promise in waiting.values { promise.fail(failure) }
        pushes?.end()
        return failure
    }

    /// What an error of the transport means to the caller.
    static func describe(_ error: any Error) -> ShareSyncError {
        if let error = error as? ShareSyncError { return error }
        if let error = error as? FrameError, error.code == .tlsRequired || error.code == .alpnMismatch {
            return ShareSyncError(
                .notAuthenticated, "the owner refused the connection: \(error.message)", rule: Rule(rawValue: error.code.rawValue))
        }
        if error is CancellationError { return ShareSyncError(.operationCancelled, "the connection was cancelled") }
        return ShareSyncError(.networkFailure, "the connection to the owner failed: \(error)")
    }

    // MARK: Called by OwnerConnection

    func nextID() -> Int { state.withLock { $0.lastID += 1; return $0.lastID } }

    private func write<T: Encodable>(_ message: T, to outbound: Outbound) async throws {
        let payload = try MessageCoding.encode(message, allocator: channel.channel.allocator)
        state.withLock { $0.lastSent = .now() }
        try await outbound.write(payload)
    }

    /// Sends a request; its answer completes the returned future (or the connection's failure does).
    func send(_ payload: ByteBuffer, id: Int, outbound: Outbound) async throws(ShareSyncError) -> EventLoopFuture<ByteBuffer> {
        let promise = channel.channel.eventLoop.makePromise(of: ByteBuffer.self)
        let failure = state.withLock { s -> ShareSyncError? in
            if let failure = s.failure { return failure }
            s.waiting[id] = promise
            s.lastSent = .now()
            return nil
        }
        if let failure {
            promise.fail(failure)
            throw failure
        }
        do {
            try await outbound.write(payload)
            if let timeout = settings.answerTimeout {
                armAnswerDeadline(id: id, answer: promise.futureResult, timeout: timeout, receivedBefore: received.count)
            }
        } catch {
            let failure = error is CancellationError
                ? ShareSyncError(.operationCancelled, "the request was cancelled before it was sent")
                : state.withLock { $0.failure } ?? Self.describe(error)
            state.withLock { $0.waiting.removeValue(forKey: id) }?.fail(failure)
            throw failure
        }
        return promise.futureResult
    }

    /// The least the owner must send in an ``Settings/answerTimeout`` for a request still unanswered to
    /// keep waiting: an answer on its way over a slow link (a page of megabytes) counts; the answers
    /// to pings (a few bytes each) do not.
    static let answerProgressBytes = 1024

    /// Closes the connection if request `id` is still unanswered after `timeout` during which the owner
    /// sent less than ``answerProgressBytes`` (the link then connects again); else waits again.
    private func armAnswerDeadline(id: Int, answer: EventLoopFuture<ByteBuffer>, timeout: TimeAmount, receivedBefore: Int) {
        let late = channel.channel.eventLoop.scheduleTask(in: timeout) { [self] in
            guard state.withLock({ $0.waiting[id] != nil }) else { return }
            let now = received.count
            if now - receivedBefore >= Self.answerProgressBytes {
                return armAnswerDeadline(id: id, answer: answer, timeout: timeout, receivedBefore: now)
            }
            guard let waiting = state.withLock({ $0.waiting.removeValue(forKey: id) }) else { return }
            let failure = ShareSyncError(
                .networkFailure, "the owner did not answer a request within \(timeout); closing the connection to start over")
            record(failure)
            waiting.fail(failure)
            channel.channel.close(promise: nil)
        }
        answer.whenComplete { _ in late.cancel() }
    }

    /// Stops waiting for a request whose caller gave up: its answer, when it comes, is dropped.
    func abandon(id: Int) {
        state.withLock { $0.waiting.removeValue(forKey: id) }?
            .fail(ShareSyncError(.operationCancelled, "the request was cancelled before its answer came"))
    }

    /// Where `changes` pushes go from now on (the previous receiver ends); ended at once if the connection closed.
    func setPushes(_ receiver: PushReceiver) {
        let (previous, closed) = state.withLock { s in
            defer { if s.failure == nil { s.pushes = receiver } }
            return (s.pushes, s.failure != nil)
        }
        previous?.end()
        if closed { receiver.end() }
    }
}

/// The authentication messages' `op`, for ``ClientSession`` to check.
protocol AuthenticationMessage {
    var op: String { get }
}

extension ChallengeMessage: AuthenticationMessage {}
extension WelcomeMessage: AuthenticationMessage {}

/// The addresses an owner announced on one connection: the latest, and who wants to hear of new ones.
final class OwnerAddressAnnouncements: Sendable {
    private struct State {
        var latest: WireAddress?
        var listener: (@Sendable (WireAddress) -> Void)?
    }

    private let state = Mutex(State())

    var latest: WireAddress? { state.withLock { $0.latest } }

    func announce(_ address: WireAddress) {
        let listener = state.withLock { s in
            s.latest = address
            return s.listener
        }
        listener?(address)
    }

    func setListener(_ listener: (@Sendable (WireAddress) -> Void)?) {
        state.withLock { $0.listener = listener }
    }
}

/// Counts the bytes a connection receives, as they come off the socket (first in the pipeline).
final class ReceivedBytes: ChannelInboundHandler, Sendable {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    private let total = Atomic<Int>(0)

    /// The bytes received so far.
    var count: Int { total.load(ordering: .relaxed) }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        total.add(Self.unwrapInboundIn(data).readableBytes, ordering: .relaxed)
        context.fireChannelRead(data)
    }
}
