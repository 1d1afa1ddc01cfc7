import Foundation
import NIOCore
import ShareSyncCore
import ShareSyncWire
import Synchronization

/// The ids of one connection's requests: 1, 2, 3, … (shared by ``OwnerConnection`` and its handler's pings).
final class RequestIDs: Sendable {
    private let last = Mutex(0)

    func next() -> Int { last.withLock { $0 += 1; return $0 } }
}

/// The client side of one connection after the handshake: authenticates, then routes responses to
/// the requests waiting for them and pushes to the subscription stream. Once authenticated it sends a
/// `ping` whenever it has sent nothing for `pingInterval`, so a quiet connection (a subscription
/// waiting for pushes) is not idle in either direction.
///
/// Over TLS the owner's challenge must prove the key of the owner's TLS certificate (rule
/// `tlsKeyMismatch`), which the TLS layer already checked against the share URL's fingerprint.
final class ClientConnectionHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private enum State {
        case awaitingSession
        case awaitingChallenge(clientNonce: String)
        case awaitingWelcome
        case ready(WelcomeMessage)
        case closed
    }

    private let identity: NodeIdentity
    private let expectedOwnerFingerprint: String
    private let hello: HelloMessage
    private let authenticated: EventLoopPromise<WelcomeMessage>
    private var state = State.awaitingSession
    private var waiting: [Int: EventLoopPromise<ByteBuffer>] = [:]
    private var pushes: AsyncStream<ChangesPush>.Continuation?
    private var lastError: ShareSyncError?
    private let requiresTLS: Bool
    private var security: ConnectionSecurity?
    private let requestIDs: RequestIDs
    private let pingInterval: TimeAmount?
    /// When this side last sent a frame (a request, a ping or an authentication message).
    private var lastSent: NIODeadline = .distantPast
    private var keepalive: Scheduled<Void>?
    /// Where the owner's address announcements go (the welcome's and `ownerAddress` pushes).
    let announcements: OwnerAddressAnnouncements

    init(
        identity: NodeIdentity, expectedOwnerFingerprint: String, displayName: String?, requiresTLS: Bool,
        requestIDs: RequestIDs, pingInterval: TimeAmount?, authenticated: EventLoopPromise<WelcomeMessage>,
        announcements: OwnerAddressAnnouncements = OwnerAddressAnnouncements()
    ) {
        self.announcements = announcements
        self.requiresTLS = requiresTLS
        self.requestIDs = requestIDs
        self.pingInterval = pingInterval
        self.identity = identity
        self.expectedOwnerFingerprint = expectedOwnerFingerprint.lowercased()
        self.hello = HelloMessage(publicKey: identity.publicKeyBase64, nonce: AuthTranscript.makeNonce(), displayName: displayName)
        self.authenticated = authenticated
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let security = event as? ConnectionSecurity { self.security = security }
        if event is NegotiatedSession, case .awaitingSession = state {
            state = .awaitingChallenge(clientNonce: hello.nonce)
            send(hello, context: context)
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelInactive(context: ChannelHandlerContext) {
        fail(lastError ?? ShareSyncError(.networkFailure, "the connection to the owner closed"))
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if lastError == nil {
            if let error = error as? ShareSyncError {
                lastError = error
            } else if let error = error as? FrameError, error.code == .tlsRequired || error.code == .alpnMismatch {
                lastError = ShareSyncError(.notAuthenticated, "the owner refused the connection: \(error.message)", rule: Rule(rawValue: error.code.rawValue))
            } else {
                lastError = ShareSyncError(.networkFailure, "the connection to the owner failed: \(error)")
            }
        }
        context.fireErrorCaught(error)
    }

    private func fail(_ error: ShareSyncError) {
        if case .closed = state { return }
        state = .closed
        keepalive?.cancel()
        keepalive = nil
        authenticated.fail(error)
        let waiting = self.waiting
        self.waiting = [:]
        for promise in waiting.values { promise.fail(error) }
        pushes?.finish()
        pushes = nil
    }

    private func send<T: Encodable>(_ message: T, context: ChannelHandlerContext) {
        guard let payload = try? MessageCoding.encode(message, allocator: context.channel.allocator) else { return }
        lastSent = context.eventLoop.now
        context.writeAndFlush(Self.wrapOutboundOut(payload), promise: nil)
    }

    // MARK: Keepalive

    /// Checks at `deadline` whether anything was sent for `pingInterval`; sends a ping if not.
    private func scheduleKeepalive(at deadline: NIODeadline, context: ChannelHandlerContext) {
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        keepalive = context.eventLoop.scheduleTask(deadline: deadline) {
            let (handler, context) = loopBound.value
            handler.keepaliveDue(context: context)
        }
    }

    private func keepaliveDue(context: ChannelHandlerContext) {
        guard case .ready = state, let pingInterval, context.channel.isActive else { return }
        let now = context.eventLoop.now
        if now >= lastSent + pingInterval {
            // The answer is routed like any response and dropped; a lost connection fails it.
            let id = requestIDs.next()
            waiting[id] = context.eventLoop.makePromise(of: ByteBuffer.self)
            send(Request(id: id, body: .ping), context: context)
            scheduleKeepalive(at: now + pingInterval, context: context)
        } else {
            scheduleKeepalive(at: lastSent + pingInterval, context: context)
        }
    }

    private func refuse(_ error: ShareSyncError, context: ChannelHandlerContext) {
        lastError = error
        fail(error)
        context.close(promise: nil)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = Self.unwrapInboundIn(data)
        let head: MessageHead
        do {
            head = try MessageCoding.decode(MessageHead.self, from: frame)
        } catch {
            return refuse(ShareSyncError(.networkFailure, "the owner sent a malformed message: \(error.message)"), context: context)
        }
        switch state {
        case .awaitingChallenge(let clientNonce):
            if let error = head.error { return refuse(error.shareSyncError(), context: context) }
            guard let challenge = try? MessageCoding.decode(ChallengeMessage.self, from: frame), challenge.op == "challenge" else {
                return refuse(ShareSyncError(.notAuthenticated, "expected a challenge from the owner", rule: .challengeExpected), context: context)
            }
            let transcript = AuthTranscript.server(clientNonce: clientNonce, serverNonce: challenge.nonce, clientKey: hello.publicKey)
            guard AuthTranscript.isBase64Of32Bytes(challenge.nonce),
                AuthTranscript.verify(signature: challenge.signature, publicKey: challenge.publicKey, data: transcript)
            else {
                return refuse(ShareSyncError(.notAuthenticated, "the owner's signature does not verify", rule: .badSignature), context: context)
            }
            if requiresTLS {
                guard case .tls(let certificateKey) = security, Data(base64Encoded: challenge.publicKey) == certificateKey else {
                    return refuse(
                        ShareSyncError(
                            .notAuthenticated, "the owner's challenge proves a key other than its TLS certificate's; not talking to it",
                            rule: .tlsKeyMismatch),
                        context: context)
                }
            }
            let fingerprint = Fingerprint.of(publicKeyBase64: challenge.publicKey)
            if fingerprint != expectedOwnerFingerprint {
                return refuse(
                    ShareSyncError(
                        .notAuthenticated,
                        "the owner proved key \(fingerprint ?? "?"), but the share URL names \(expectedOwnerFingerprint); not talking to it",
                        rule: .ownerFingerprintMismatch),
                    context: context)
            }
            state = .awaitingWelcome
            let signature = identity.signBase64(
                AuthTranscript.client(serverNonce: challenge.nonce, clientNonce: clientNonce, serverKey: challenge.publicKey))
            send(AuthenticateMessage(signature: signature), context: context)
        case .awaitingWelcome:
            if let error = head.error { return refuse(error.shareSyncError(), context: context) }
            guard let welcome = try? MessageCoding.decode(WelcomeMessage.self, from: frame), welcome.op == "welcome" else {
                return refuse(ShareSyncError(.notAuthenticated, "expected a welcome from the owner", rule: .welcomeExpected), context: context)
            }
            state = .ready(welcome)
            if let address = welcome.address { announcements.announce(address) }
            if let pingInterval { scheduleKeepalive(at: lastSent + pingInterval, context: context) }
            authenticated.succeed(welcome)
        case .ready(let welcome):
            if head.push == "ownerAddress" {
                // The owner advertises a new address; an announcement that cannot be read changes nothing.
                if let push = try? MessageCoding.decode(OwnerAddressPush.self, from: frame) {
                    announcements.announce(push.address)
                }
            } else if head.push == "changes" {
                // A push that cannot be read is never skipped: the connection closes and the client
                // resumes from its last stored token.
                do {
                    pushes?.yield(try MessageCoding.decode(ChangesPush.self, from: frame))
                } catch {
                    return refuse(ShareSyncError(.networkFailure, "the owner sent a push that cannot be read: \(error.message)"), context: context)
                }
            } else if let id = head.id, let promise = waiting.removeValue(forKey: id) {
                promise.succeed(frame)
            } else if head.id == nil, let error = head.error {
                // An error about the connection itself (no request id): remember it for what follows.
                // (An answer to a request nobody waits for any more, an abandoned one, is dropped.)
                let failure = error.shareSyncError(ownerName: welcome.ownerName)
                lastError = failure
                if failure.code == .changeTokenExpired { pushes?.finish(); pushes = nil }
            }
        case .awaitingSession, .closed:
            break
        }
    }

    // MARK: Called by OwnerConnection on the event loop

    func register(id: Int, promise: EventLoopPromise<ByteBuffer>) -> Bool {
        guard case .ready = state else {
            promise.fail(lastError ?? ShareSyncError(.networkFailure, "the connection to the owner is closed"))
            return false
        }
        waiting[id] = promise
        lastSent = promise.futureResult.eventLoop.now  // the request is written right after this
        return true
    }

    func cancel(id: Int) {
        waiting.removeValue(forKey: id)?.fail(ShareSyncError(.networkFailure, "the request failed to send"))
    }

    /// Stops waiting for a request whose caller gave up: its answer, when it comes, is dropped.
    func abandon(id: Int) {
        waiting.removeValue(forKey: id)?.fail(ShareSyncError(.operationCancelled, "the request was cancelled before its answer came"))
    }

    func setPushes(_ continuation: AsyncStream<ChangesPush>.Continuation?) {
        pushes?.finish()
        if case .closed = state {
            continuation?.finish()
            pushes = nil
        } else {
            pushes = continuation
        }
    }
}

@available(*, unavailable)
extension ClientConnectionHandler: Sendable {}

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
