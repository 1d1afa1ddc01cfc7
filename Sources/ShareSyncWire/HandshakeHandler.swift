import NIOCore

/// Runs the handshake on one connection, as client or server, then installs the frame codec.
///
/// Put it first in a fresh pipeline (``FrameCodec/addServerHandlers(to:configuration:completion:)``
/// does). On success it installs a ``FrameEncoderHandler`` before itself and a ``FrameLineDecoder``
/// (plus the idle timeout) after itself, fires a ``NegotiatedSession`` user inbound event,
/// succeeds `completion`, passes on any bytes that followed the handshake line, sends the payloads
/// written before the handshake completed, and removes itself.
///
/// On failure it fails `completion` and fires the ``FrameError`` through the pipeline; the server
/// side first writes `SHARESYNC-ERROR <code> <message>`. Either side then closes the connection.
public final class HandshakeHandler: ChannelDuplexHandler, RemovableChannelHandler {
    public typealias InboundIn = ByteBuffer
    public typealias InboundOut = ByteBuffer
    public typealias OutboundIn = ByteBuffer
    public typealias OutboundOut = ByteBuffer

    /// Which side of the connection this handler speaks for.
    public enum Role: Sendable {
        /// Sends the client hello when the channel becomes active.
        case client(ClientConfiguration)
        /// Waits for the client hello and answers it.
        case server(ServerConfiguration)
    }

    private enum State {
        case idle
        case waiting
        case done
        case failed
    }

    private let role: Role
    private let completion: EventLoopPromise<NegotiatedSession>?
    private let gate: FrameSizeGate?
    private let framesDecodedByReader: Bool
    private var state = State.idle
    private var received: ByteBuffer?
    private var pendingWrites: [(ByteBuffer, EventLoopPromise<Void>?)] = []
    private var timeout: Scheduled<Void>?

    /// Creates the handler for one connection.
    /// - Parameter completion: succeeded with the negotiated session, or failed with a ``FrameError``.
    /// - Parameter gate: a lower frame size limit for the frame decoder it installs, lifted by the
    ///   connection once its peer has authenticated (``FrameSizeGate``).
    /// - Parameter framesDecodedByReader: the installed ``FrameLineDecoder`` hands on each frame's
    ///   line as it came (checked for its length only), and whoever reads the channel decodes it with
    ///   a ``FrameReader`` when it takes it (see ``FrameLineDecoder/init(encoding:limits:gate:decodesFrames:)``).
    public init(
        role: Role, completion: EventLoopPromise<NegotiatedSession>? = nil, gate: FrameSizeGate? = nil,
        framesDecodedByReader: Bool = false
    ) {
        self.role = role
        self.completion = completion
        self.gate = gate
        self.framesDecodedByReader = framesDecodedByReader
    }

    private var limits: FrameLimits {
        switch self.role {
        case .client(let configuration): configuration.limits
        case .server(let configuration): configuration.limits
        }
    }

    public func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { self.start(context: context) }
    }

    public func channelActive(context: ChannelHandlerContext) {
        self.start(context: context)
        context.fireChannelActive()
    }

    public func handlerRemoved(context: ChannelHandlerContext) {
        self.timeout?.cancel()
        self.timeout = nil
    }

    public func channelInactive(context: ChannelHandlerContext) {
        if self.state == .idle || self.state == .waiting {
            self.fail(FrameError(.malformedHandshake, "connection closed during the handshake"), context: context, reply: false)
        }
        context.fireChannelInactive()
    }

    public func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        switch self.state {
        case .idle, .waiting:
            self.pendingWrites.append((Self.unwrapOutboundIn(data), promise))
        case .done:
            context.write(data, promise: promise)
        case .failed:
            promise?.fail(FrameError(.malformedHandshake, "the handshake failed"))
        }
    }

    public func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard self.state == .waiting else { return }
        var bytes = Self.unwrapInboundIn(data)
        if self.received == nil {
            self.received = bytes
        } else {
            self.received!.writeBuffer(&bytes)
        }
        guard let newline = self.received!.readableBytesView.firstIndex(of: ByteStuffing.newline) else {
            // The line's limit does not count a `\r` before its newline (parsing trims it): a line of
            // the full length whose `\r` came in one read and its `\n` in the next was refused.
            let view = self.received!.readableBytesView
            let pending = view.count - (view.last == UInt8(ascii: "\r") ? 1 : 0)
            if pending > FrameLimits.maximumHandshakeLineLength {
                self.fail(FrameError(.malformedHandshake, "no newline in the first \(FrameLimits.maximumHandshakeLineLength) bytes"), context: context)
            }
            return
        }
        let lineBytes = self.received!.readSlice(length: newline - self.received!.readerIndex)!
        self.received!.moveReaderIndex(forwardBy: 1)
        let line = Substring(String(decoding: lineBytes.readableBytesView, as: UTF8.self))
        do {
            let session = try self.negotiate(line: line, context: context)
            try self.complete(session, context: context)
        } catch {
            self.fail(error as? FrameError ?? FrameError(.malformedHandshake, "\(error)"), context: context)
        }
    }

    private func start(context: ChannelHandlerContext) {
        guard self.state == .idle else { return }
        self.state = .waiting
        let limits = self.limits
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        self.timeout = context.eventLoop.scheduleTask(in: limits.handshakeTimeout) {
            let (handler, context) = loopBound.value
            guard handler.state == .waiting else { return }
            handler.fail(FrameError(.handshakeTimeout, "no handshake within \(limits.handshakeTimeout)"), context: context)
        }
        if case .client(let configuration) = self.role {
            var hello = context.channel.allocator.buffer(string: configuration.hello.render())
            hello.writeInteger(ByteStuffing.newline)
            context.writeAndFlush(Self.wrapOutboundOut(hello), promise: nil)
        }
    }

    private func negotiate(line: Substring, context: ChannelHandlerContext) throws(FrameError) -> NegotiatedSession {
        switch self.role {
        case .server(let configuration):
            let hello = try Handshake.ClientHello(parsing: line)
            let answer = try Handshake.negotiate(hello, configuration: configuration)
            var reply = context.channel.allocator.buffer(string: answer.render())
            reply.writeInteger(ByteStuffing.newline)
            context.writeAndFlush(Self.wrapOutboundOut(reply), promise: nil)
            return NegotiatedSession(version: answer.version, encoding: answer.encoding)
        case .client(let configuration):
            switch try Handshake.ServerReply(parsing: line) {
            case .refused(let error):
                throw error
            case .accepted(let answer):
                guard configuration.versions.contains(answer.version) else {
                    throw FrameError(.unsupportedVersion, "server chose version \(answer.version), which was not offered")
                }
                guard configuration.encodings.contains(answer.encoding) else {
                    throw FrameError(.unsupportedEncoding, "server chose \(answer.encoding.rawValue), which was not offered")
                }
                return NegotiatedSession(version: answer.version, encoding: answer.encoding)
            }
        }
    }

    private func complete(_ session: NegotiatedSession, context: ChannelHandlerContext) throws {
        self.state = .done
        self.timeout?.cancel()
        self.timeout = nil
        let limits = self.limits
        let pipeline = context.pipeline.syncOperations
        try pipeline.addHandler(FrameEncoderHandler(encoding: session.encoding, limits: limits), position: .before(self))
        var inbound: [ChannelHandler] = []
        if let idleTimeout = limits.idleTimeout {
            inbound.append(IdleTimeoutHandler(timeout: idleTimeout))
        }
        inbound.append(
            ByteToMessageHandler(
                try FrameLineDecoder(encoding: session.encoding, limits: limits, gate: self.gate, decodesFrames: !self.framesDecodedByReader),
                maximumBufferSize: limits.maximumLineLength + 1
            )
        )
        try pipeline.addHandlers(inbound, position: .after(self))

        context.fireUserInboundEventTriggered(session)
        self.completion?.succeed(session)
        if let rest = self.received, rest.readableBytes > 0 {
            context.fireChannelRead(Self.wrapInboundOut(rest))
        }
        self.received = nil
        let writes = self.pendingWrites
        self.pendingWrites = []
        for (payload, promise) in writes {
            context.write(Self.wrapOutboundOut(payload), promise: promise)
        }
        if !writes.isEmpty { context.flush() }
        pipeline.removeHandler(context: context, promise: nil)
    }

    private func fail(_ error: FrameError, context: ChannelHandlerContext, reply: Bool = true) {
        guard self.state == .idle || self.state == .waiting else { return }
        self.state = .failed
        self.timeout?.cancel()
        self.timeout = nil
        self.received = nil
        let writes = self.pendingWrites
        self.pendingWrites = []
        for (_, promise) in writes { promise?.fail(error) }
        self.completion?.fail(error)
        guard reply, context.channel.isActive else {
            context.fireErrorCaught(error)
            return
        }
        if case .server = self.role {
            // The refusal line goes out before the error travels on, so a handler further down that
            // closes on errors (FrameErrorHandler) cannot cut it off.
            var line = context.channel.allocator.buffer(string: Handshake.renderError(error))
            line.writeInteger(ByteStuffing.newline)
            // If the line cannot go out (a TLS handshake that never completes buffers it), close anyway.
            let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
            FrameErrorHandler.close(after: context.writeAndFlush(Self.wrapOutboundOut(line))) { loopBound.value.close(promise: nil) }
            context.fireErrorCaught(error)
        } else {
            context.fireErrorCaught(error)
            context.close(promise: nil)
        }
    }
}

@available(*, unavailable)
extension HandshakeHandler: Sendable {}
