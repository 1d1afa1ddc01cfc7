import NIOCore

/// Entry points for building a ShareSync transport pipeline.
///
/// A server or client pipeline starts with the transport and then the message layer:
///
/// ```swift
/// try FrameCodec.addServerHandlers(to: channel.pipeline.syncOperations, configuration: .init())
/// try channel.pipeline.syncOperations.addHandlers(MyMessageHandler(), FrameErrorHandler())
/// ```
///
/// After the handshake, the message layer reads and writes payload `ByteBuffer`s (one JSON value
/// each); the transport turns them into lines. See `protocol.md` for the wire format.
public enum FrameCodec {
    /// Adds the server side of the transport: a ``HandshakeHandler`` with the server role (and
    /// `gate`'s lower frame size limit until the connection lifts it, see ``FrameSizeGate``).
    public static func addServerHandlers(
        to pipeline: ChannelPipeline.SynchronousOperations,
        configuration: ServerConfiguration = ServerConfiguration(),
        completion: EventLoopPromise<NegotiatedSession>? = nil,
        gate: FrameSizeGate? = nil,
        framesDecodedByReader: Bool = false
    ) throws {
        try pipeline.addHandler(
            HandshakeHandler(role: .server(configuration), completion: completion, gate: gate, framesDecodedByReader: framesDecodedByReader))
    }

    /// Adds the client side of the transport: a ``HandshakeHandler`` with the client role, which
    /// sends the hello when the channel becomes active.
    public static func addClientHandlers(
        to pipeline: ChannelPipeline.SynchronousOperations,
        configuration: ClientConfiguration = ClientConfiguration(),
        completion: EventLoopPromise<NegotiatedSession>? = nil,
        framesDecodedByReader: Bool = false
    ) throws {
        try pipeline.addHandler(
            HandshakeHandler(role: .client(configuration), completion: completion, framesDecodedByReader: framesDecodedByReader))
    }

    /// A frame decoder for a pipeline that skips the handshake (tests, or an encoding agreed otherwise):
    /// lines in, payloads out, with the buffer capped at the maximum line length.
    public static func decoderHandler(
        encoding: FrameEncoding,
        limits: FrameLimits = FrameLimits()
    ) throws -> ByteToMessageHandler<FrameLineDecoder> {
        ByteToMessageHandler(
            try FrameLineDecoder(encoding: encoding, limits: limits),
            maximumBufferSize: limits.maximumLineLength + 1
        )
    }
}

/// Fires ``FrameError/Code/idleTimeout`` through the pipeline when nothing has happened on the
/// connection for ``FrameLimits/idleTimeout``: no bytes read and no frame written (a write counts once
/// the channel has written it), then keeps watching. A peer that only listens to pushes is therefore
/// not idle; a connection quiet in both directions is. Uses the event loop's clock (so tests on an
/// `EmbeddedEventLoop` can advance time). Installed by ``HandshakeHandler`` when the limit is set,
/// between the frame encoder and the frame decoder.
public final class IdleTimeoutHandler: ChannelDuplexHandler, RemovableChannelHandler {
    public typealias InboundIn = NIOAny
    public typealias InboundOut = NIOAny
    public typealias OutboundIn = NIOAny
    public typealias OutboundOut = NIOAny

    private let timeout: TimeAmount
    private var lastActivity: NIODeadline = .distantPast
    private var check: Scheduled<Void>?

    /// Creates the handler.
    public init(timeout: TimeAmount) { self.timeout = timeout }

    public func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { self.start(context: context) }
    }

    public func channelActive(context: ChannelHandlerContext) {
        self.start(context: context)
        context.fireChannelActive()
    }

    public func handlerRemoved(context: ChannelHandlerContext) {
        self.check?.cancel()
        self.check = nil
    }

    public func channelInactive(context: ChannelHandlerContext) {
        self.check?.cancel()
        self.check = nil
        context.fireChannelInactive()
    }

    public func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        self.lastActivity = context.eventLoop.now
        context.fireChannelRead(data)
    }

    public func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let promise = promise ?? context.eventLoop.makePromise()
        let loopBound = NIOLoopBound(self, eventLoop: context.eventLoop)
        let eventLoop = context.eventLoop
        promise.futureResult.whenSuccess { loopBound.value.lastActivity = eventLoop.now }
        context.write(data, promise: promise)
    }

    private func start(context: ChannelHandlerContext) {
        guard self.check == nil else { return }
        self.lastActivity = context.eventLoop.now
        self.schedule(at: self.lastActivity + self.timeout, context: context)
    }

    private func schedule(at deadline: NIODeadline, context: ChannelHandlerContext) {
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        self.check = context.eventLoop.scheduleTask(deadline: deadline) {
            let (handler, context) = loopBound.value
            handler.fire(context: context)
        }
    }

    private func fire(context: ChannelHandlerContext) {
        guard context.channel.isActive else { return }
        let due = self.lastActivity + self.timeout
        if context.eventLoop.now >= due {
            self.schedule(at: context.eventLoop.now + self.timeout, context: context)
            context.fireErrorCaught(FrameError(.idleTimeout, "nothing received or sent for \(self.timeout)"))
        } else {
            self.schedule(at: due, context: context)
        }
    }
}

@available(*, unavailable)
extension IdleTimeoutHandler: Sendable {}

/// The last handler of a pipeline: on a ``FrameError`` (or any other error) it writes the
/// payload `errorPayload` returns, if any, as a final frame, then closes the connection.
///
/// The message layer gives a closure that renders its error message naming the rule
/// (`error.code.rawValue`). Put it after the message handlers so they see errors first.
public final class FrameErrorHandler: ChannelInboundHandler, RemovableChannelHandler {
    public typealias InboundIn = NIOAny
    public typealias OutboundOut = ByteBuffer

    private let errorPayload: @Sendable (FrameError) -> ByteBuffer?
    private var closing = false

    /// Creates the handler. `errorPayload` makes the final frame for a ``FrameError``; nil sends none.
    public init(errorPayload: @escaping @Sendable (FrameError) -> ByteBuffer? = { _ in nil }) {
        self.errorPayload = errorPayload
    }

    public func errorCaught(context: ChannelHandlerContext, error: Error) {
        guard !self.closing else { return }
        self.closing = true
        guard let frameError = error as? FrameError, context.channel.isActive,
            let payload = self.errorPayload(frameError)
        else {
            context.close(promise: nil)
            return
        }
        // A peer that stops reading never lets the frame out: the connection closes after a second
        // anyway. Before, it stayed open for good (an idle timeout included), TCP keeping it alive.
        let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
        Self.close(after: context.writeAndFlush(Self.wrapOutboundOut(payload))) { loopBound.value.close(promise: nil) }
    }

    /// How long a final frame may wait to be written before the connection closes without it.
    public static let finalFrameGrace = TimeAmount.seconds(1)

    /// Calls `close` once a connection's last write (`written`) completes, or after
    /// ``finalFrameGrace`` if it does not: a peer that reads nothing, or a TLS handshake that never
    /// completes, would otherwise keep the connection open for good.
    public static func close(after written: EventLoopFuture<Void>, _ close: @escaping @Sendable () -> Void) {
        let closeAnyway = written.eventLoop.scheduleTask(in: finalFrameGrace, close)
        written.whenComplete { _ in
            closeAnyway.cancel()
            close()
        }
    }
}

@available(*, unavailable)
extension FrameErrorHandler: Sendable {}
