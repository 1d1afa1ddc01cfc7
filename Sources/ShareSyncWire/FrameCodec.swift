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
/// each); the transport turns them into lines. See `protocol-framing.md` for the wire format.
public enum FrameCodec {
    /// Adds the server side of the transport: a ``HandshakeHandler`` with the server role.
    public static func addServerHandlers(
        to pipeline: ChannelPipeline.SynchronousOperations,
        configuration: ServerConfiguration = ServerConfiguration(),
        completion: EventLoopPromise<NegotiatedSession>? = nil
    ) throws {
        try pipeline.addHandler(HandshakeHandler(role: .server(configuration), completion: completion))
    }

    /// Adds the client side of the transport: a ``HandshakeHandler`` with the client role, which
    /// sends the hello when the channel becomes active.
    public static func addClientHandlers(
        to pipeline: ChannelPipeline.SynchronousOperations,
        configuration: ClientConfiguration = ClientConfiguration(),
        completion: EventLoopPromise<NegotiatedSession>? = nil
    ) throws {
        try pipeline.addHandler(HandshakeHandler(role: .client(configuration), completion: completion))
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

/// Turns the read-idle event of a NIO `IdleStateHandler` into ``FrameError/Code/idleTimeout``,
/// fired through the pipeline. Installed by ``HandshakeHandler`` when ``FrameLimits/idleTimeout`` is set.
public final class IdleTimeoutHandler: ChannelInboundHandler, RemovableChannelHandler {
    public typealias InboundIn = NIOAny

    private let timeout: TimeAmount

    /// Creates the handler; `timeout` is only used in the error message.
    public init(timeout: TimeAmount) { self.timeout = timeout }

    public func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case .read? = event as? IdleStateHandler.IdleStateEvent {
            context.fireErrorCaught(FrameError(.idleTimeout, "nothing received for \(self.timeout)"))
        } else {
            context.fireUserInboundEventTriggered(event)
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
        let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
        context.writeAndFlush(Self.wrapOutboundOut(payload)).whenComplete { _ in
            loopBound.value.close(promise: nil)
        }
    }
}

@available(*, unavailable)
extension FrameErrorHandler: Sendable {}
