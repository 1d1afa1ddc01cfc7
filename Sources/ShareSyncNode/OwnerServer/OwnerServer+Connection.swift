import Foundation
import Logging
import NIOCore
import NIOPosix
import ShareSyncCore
import ShareSyncStore
import ShareSyncWire

/// One server connection after the handshake: authentication, then requests and pushes.
///
/// States: waiting for `hello` → waiting for `authenticate` → authenticated. Anything else before
/// `welcome` is `notAuthenticated` and closes the connection. On a TLS connection the `hello`'s key
/// must be the key of the client's TLS certificate (rule `tlsKeyMismatch`): the identity every
/// access decision uses is then the one TLS authenticated, bound to this connection. Requests run
/// on the server's thread pool; their responses (and pushes) are written when ready, in any order.
final class ServerConnectionHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private enum State {
        case awaitingHello
        case awaitingAuthenticate(hello: HelloMessage, serverNonce: String)
        case authenticated(Caller)
        case closed
    }

    let server: ServerContext
    private var logger: Logger
    private var state = State.awaitingHello
    private var inFlight = 0
    private var admittedName: String?
    /// How the connection is protected (known before any frame; nil until then).
    private var security: ConnectionSecurity?
    private var subscription: Subscription?
    /// The next page of the last `fetchZoneChanges` served (see ``ZonePageReadAhead``).
    var readAhead: ZonePageReadAhead?

    var isAuthenticated: Bool {
        if case .authenticated = state { return true }
        return false
    }

    init(server: ServerContext, connectionID: Int) {
        self.server = server
        self.logger = server.logger
        self.logger[metadataKey: "connection.id"] = "\(connectionID)"
    }

    /// Sets up a fresh server channel: TLS (or allowed cleartext), the framing, this handler, and the
    /// error handler that tells the peer which rule it broke before closing.
    static func install(on channel: any Channel, context: ServerContext) throws {
        // Over the overall limits: the initializer fails and NIO closes the connection at once, before
        // any handshake (nothing can be said to a peer before TLS).
        if let refusal = context.registry.refusal(
            maximumConnections: context.configuration.maximumConnections,
            maximumUnauthenticated: context.configuration.maximumUnauthenticatedConnections)
        {
            context.logger.notice("refusing a connection", metadata: ["reason": "\(refusal)"])
            throw ShareSyncError(.requestRateLimited, refusal, rule: .maximumConnections)
        }
        let handler = ServerConnectionHandler(server: context, connectionID: context.registry.nextConnectionID())
        let pipeline = channel.pipeline.syncOperations
        try TransportSecurity.addServerHandlers(
            to: pipeline, context: context.tls, allowCleartext: context.configuration.allowCleartext)
        try FrameCodec.addServerHandlers(to: pipeline, configuration: context.configuration.transport)
        try pipeline.addHandler(handler)
        try pipeline.addHandler(FrameErrorHandler { error in
            try? MessageCoding.encode(ErrorResponse(id: nil, error.shareSyncError))
        })
    }

    private var negotiated = false
    /// Closes the connection if it has not authenticated within the handshake timeout.
    private var authenticationDeadline: Scheduled<Void>?

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is NegotiatedSession {
            negotiated = true
            let timeout = server.configuration.transport.limits.handshakeTimeout
            let bound = NIOLoopBound((handler: self, context: context), eventLoop: context.eventLoop)
            authenticationDeadline = context.eventLoop.scheduleTask(in: timeout) {
                let (handler, context) = bound.value
                if case .closed = handler.state { return }
                guard !handler.isAuthenticated else { return }
                handler.close(
                    with: ShareSyncError(.notAuthenticated, "no authentication within \(timeout)", rule: .authenticationTimeout),
                    context: context)
            }
        }
        if let security = event as? ConnectionSecurity { self.security = security }
        context.fireUserInboundEventTriggered(event)
    }

    /// Handshake failures stop here: the ``HandshakeHandler`` answers them with its
    /// `SHARESYNC-ERROR` line and closes, which the error handler would otherwise pre-empt.
    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if !negotiated, error is FrameError { return }
        if !negotiated { logger.debug("connection failed before the handshake", metadata: ["error": "\(error)"]) }
        context.fireErrorCaught(error)
    }

    func handlerAdded(context: ChannelHandlerContext) {
        server.registry.add(context.channel)
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.cleanUp(context: context)
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.cleanUp(context: context)
    }

    private func cleanUp(context: ChannelHandlerContext) {
        state = .closed
        authenticationDeadline?.cancel()
        authenticationDeadline = nil
        readAhead = nil
        server.registry.remove(context.channel)
        if let name = admittedName {
            admittedName = nil
            server.registry.release(name)
        }
        subscription?.cancel()
        subscription = nil
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = Self.unwrapInboundIn(data)
        switch state {
        case .awaitingHello:
            self.receiveHello(frame, context: context)
        case .awaitingAuthenticate(let hello, let serverNonce):
            self.receiveAuthenticate(frame, hello: hello, serverNonce: serverNonce, context: context)
        case .authenticated(let caller):
            self.receiveRequest(frame, caller: caller, context: context)
        case .closed:
            break
        }
    }

    // MARK: Authentication

    private func receiveHello(_ frame: ByteBuffer, context: ChannelHandlerContext) {
        guard let hello = try? MessageCoding.decode(HelloMessage.self, from: frame), hello.op == "hello" else {
            return refuse("the first message must be a hello", rule: .helloExpected, context: context)
        }
        guard AuthTranscript.isBase64Of32Bytes(hello.publicKey), AuthTranscript.isBase64Of32Bytes(hello.nonce) else {
            return refuse("the hello's publicKey and nonce must each be 32 bytes in base64", rule: .malformedHello, context: context)
        }
        switch security {
        case .tls(let certificateKey):
            guard Data(base64Encoded: hello.publicKey) == certificateKey else {
                logger.notice("authentication failed: hello key is not the TLS certificate's key")
                return refuse(
                    "the hello's publicKey is not the key of this connection's TLS client certificate "
                        + "(\(Fingerprint.of(rawPublicKey: certificateKey)))",
                    rule: .tlsKeyMismatch, context: context)
            }
        case .cleartext:
            break
        case nil:
            return refuse("the connection's transport security is not established", rule: .tlsKeyMismatch, context: context)
        }
        let serverNonce = AuthTranscript.makeNonce()
        let signature = server.identity.signBase64(
            AuthTranscript.server(clientNonce: hello.nonce, serverNonce: serverNonce, clientKey: hello.publicKey))
        state = .awaitingAuthenticate(hello: hello, serverNonce: serverNonce)
        let challenge = ChallengeMessage(publicKey: server.identity.publicKeyBase64, nonce: serverNonce, signature: signature)
        self.send(challenge, context: context)
    }

    private func receiveAuthenticate(_ frame: ByteBuffer, hello: HelloMessage, serverNonce: String, context: ChannelHandlerContext) {
        guard let message = try? MessageCoding.decode(AuthenticateMessage.self, from: frame), message.op == "authenticate" else {
            return refuse("expected an authenticate message", rule: .authenticateExpected, context: context)
        }
        let transcript = AuthTranscript.client(
            serverNonce: serverNonce, clientNonce: hello.nonce, serverKey: server.identity.publicKeyBase64)
        guard AuthTranscript.verify(signature: message.signature, publicKey: hello.publicKey, data: transcript) else {
            logger.notice("authentication failed: bad signature")
            return refuse("the signature does not prove the key of the hello on this connection", rule: .badSignature, context: context)
        }
        let name = "_" + Fingerprint.of(publicKeyBase64: hello.publicKey)!
        guard server.registry.admit(name, limit: server.configuration.maximumConnectionsPerIdentity) else {
            let error = ShareSyncError(
                .requestRateLimited, "this identity already has \(server.configuration.maximumConnectionsPerIdentity) connections",
                rule: .maximumConnectionsPerIdentity, retryAfterSeconds: 5)
            return close(with: error, context: context)
        }
        admittedName = name
        authenticationDeadline?.cancel()
        authenticationDeadline = nil
        logger[metadataKey: "user"] = "\(name)"
        logger.debug("authenticated")
        state = .authenticated(Caller(userRecordName: name, displayName: hello.displayName))
        let limits = server.database.limits
        let wireLimits = WireLimits(
            maximumItemsPerRequest: limits.maximumItemsPerRequest, maximumRecordSize: limits.maximumRecordSize,
            maximumResponseSize: limits.maximumResponseSize, maximumFrameSize: server.configuration.transport.limits.maximumFrameSize)
        // Marked first, then the address read: an announcement made meanwhile reaches this connection
        // as a push, or its address is already the one the welcome carries.
        server.registry.markAuthenticated(context.channel)
        let address = server.registry.advertised.withLock { $0 }
        self.send(
            WelcomeMessage(userRecordName: name, ownerName: server.database.ownerName, limits: wireLimits, address: address),
            context: context)
    }

    private func refuse(_ message: String, rule: Rule, context: ChannelHandlerContext) {
        close(with: ShareSyncError(.notAuthenticated, message, rule: rule), context: context)
    }

    private func close(with error: ShareSyncError, context: ChannelHandlerContext) {
        state = .closed
        guard let payload = try? MessageCoding.encode(ErrorResponse(id: nil, error), allocator: context.channel.allocator) else {
            context.close(promise: nil)
            return
        }
        let bound = NIOLoopBound(context, eventLoop: context.eventLoop)
        context.writeAndFlush(Self.wrapOutboundOut(payload)).whenComplete { _ in bound.value.close(promise: nil) }
    }

    private func send<T: Encodable>(_ message: T, context: ChannelHandlerContext) {
        guard let payload = try? MessageCoding.encode(message, allocator: context.channel.allocator) else { return }
        context.writeAndFlush(Self.wrapOutboundOut(payload), promise: nil)
    }

    // MARK: Requests

    private func receiveRequest(_ frame: ByteBuffer, caller: Caller, context: ChannelHandlerContext) {
        let request: Request
        do {
            request = try MessageCoding.decode(Request.self, from: frame)
        } catch {
            let id = (try? MessageCoding.decode(MessageHead.self, from: frame))?.id
            return self.send(ErrorResponse(id: id, error), context: context)
        }
        if case .ping = request.body {
            // Answered on the event loop at once, outside the requests in flight: it only keeps the
            // connection from being idle.
            return self.send(Response(id: request.id, ok: EmptyResult()), context: context)
        }
        if case .modifyRecords = request.body, frame.readableBytes > server.database.limits.maximumResponseSize {
            // Its answer carries the saved records back, and an answer cannot be cut into pages.
            let error = ShareSyncError(
                .limitExceeded,
                "this modifyRecords request is \(frame.readableBytes) bytes; at most \(server.database.limits.maximumResponseSize) "
                    + "bytes are allowed in one (split it into several requests)",
                rule: .maximumResponseSize)
            return self.send(ErrorResponse(id: request.id, error), context: context)
        }
        guard inFlight < server.configuration.maximumRequestsInFlight else {
            let error = ShareSyncError(
                .requestRateLimited, "more than \(server.configuration.maximumRequestsInFlight) requests in flight",
                rule: .maximumRequestsInFlight, retryAfterSeconds: 0.1)
            return self.send(ErrorResponse(id: request.id, error), context: context)
        }
        inFlight += 1
        let executor = RequestExecutor(database: server.database, caller: caller)
        let channel = context.channel
        let bound = NIOLoopBound(self, eventLoop: context.eventLoop)
        let future: EventLoopFuture<ByteBuffer>
        if case .subscribe(let token) = request.body {
            future = self.subscribe(id: request.id, token: token, executor: executor, channel: channel, eventLoop: context.eventLoop)
        } else if case .fetchZoneChanges(let zoneName, let token, let limit) = request.body {
            future = self.fetchZoneChanges(
                id: request.id, ZonePageReadAhead.Key(zoneName: zoneName, token: token, resultsLimit: limit), executor: executor,
                eventLoop: context.eventLoop)
        } else {
            future = server.threadPool.runIfActive(eventLoop: context.eventLoop) { executor.execute(request) }
        }
        let logger = self.logger
        future.whenComplete { result in
            let payload: ByteBuffer
            switch result {
            case .success(let answer):
                payload = answer
            case .failure(let error):
                payload = executor.errorResponse(
                    id: request.id, ShareSyncError(.serviceUnavailable, "the server is shutting down: \(error)"))
            }
            // The request stays in flight until its answer is written: a client that stops reading
            // cannot make the owner hold more than `maximumRequestsInFlight` answers for it.
            Self.writeAnswer(payload, id: request.id, executor: executor, channel: channel, logger: logger).whenComplete { _ in
                bound.value.inFlight -= 1
            }
        }
    }

    /// Writes an answer; one the frame encoder refuses (over the frame limit) is replaced by a
    /// `limitExceeded` error for the same request, so every request gets an answer. If even that cannot
    /// be written, the connection closes: the client sees it fail, never a request that waits forever.
    private static func writeAnswer(
        _ payload: ByteBuffer, id: Int, executor: RequestExecutor, channel: any Channel, logger: Logger
    ) -> EventLoopFuture<Void> {
        let size = payload.readableBytes
        return channel.writeAndFlush(payload).flatMapError { error in
            guard let frameError = error as? FrameError, channel.isActive else { return channel.eventLoop.makeFailedFuture(error) }
            logger.error("an answer could not be written", metadata: ["request": "\(id)", "bytes": "\(size)", "error": "\(frameError)"])
            let replacement = executor.errorResponse(
                id: id,
                ShareSyncError(
                    .limitExceeded, "the answer is \(size) bytes, more than one frame may carry (\(frameError.message))",
                    rule: .maximumResponseSize))
            return channel.writeAndFlush(replacement)
        }.flatMapErrorThrowing { error in
            if channel.isActive {
                logger.error("closing the connection: an answer could not be written", metadata: ["request": "\(id)", "error": "\(error)"])
                channel.close(promise: nil)
            }
            throw error
        }
    }

    private func subscribe(
        id: Int, token: ServerChangeToken?, executor: RequestExecutor, channel: any Channel, eventLoop: any EventLoop
    ) -> EventLoopFuture<ByteBuffer> {
        let existing = subscription
        let bound = NIOLoopBound(self, eventLoop: eventLoop)
        let server = self.server
        return server.threadPool.runIfActive(eventLoop: eventLoop) { () -> Result<ServerChangeToken, ShareSyncError> in
            Result { () throws(ShareSyncError) in try executor.subscriptionStart(token) }
        }.map { result -> ByteBuffer in
            switch result {
            case .failure(let error):
                return (try? MessageCoding.encode(ErrorResponse(id: id, error))) ?? ByteBuffer()
            case .success(let start):
                existing?.cancel()
                let subscription = Subscription(
                    executor: executor, cursor: start, channel: channel, threadPool: server.threadPool,
                    writeTimeout: server.configuration.pushWriteTimeout, logger: bound.value.logger)
                if case .closed = bound.value.state {
                    subscription.cancel()
                } else {
                    bound.value.subscription = subscription
                    subscription.begin()
                }
                return (try? MessageCoding.encode(Response(id: id, ok: SubscribeResult(token: start)))) ?? ByteBuffer()
            }
        }
    }
}

@available(*, unavailable)
extension ServerConnectionHandler: Sendable {}
