import NIOCore
import Synchronization

/// What the transport learned about a connection before its first frame, for code that reads the
/// connection as a `NIOAsyncChannel` (whose inbound stream carries frames only, not user events).
///
/// Put its ``SessionEventsHandler`` after the transport (``TransportSecurity`` and ``FrameCodec``
/// handlers) and before the message layer. Both futures fail with the connection's first error (or
/// `ChannelError.ioOnClosedChannel`) if it closes before they are known.
public struct SessionEvents: Sendable {
    /// How the connection is protected: known before any frame.
    public let security: EventLoopFuture<ConnectionSecurity>
    /// The session the line handshake agreed on.
    public let session: EventLoopFuture<NegotiatedSession>
    private let errors: SessionErrors

    /// The first error the connection's pipeline reported, if any: the reason it closed, when it did
    /// because of an error (a refused TLS handshake, a malformed frame, a failed TLS record).
    public var firstError: (any Error)? { errors.first }

    init(security: EventLoopFuture<ConnectionSecurity>, session: EventLoopFuture<NegotiatedSession>, errors: SessionErrors) {
        self.security = security
        self.session = session
        self.errors = errors
    }
}

final class SessionErrors: Sendable {
    private let state = Mutex<(any Error)?>(nil)

    var first: (any Error)? { state.withLock { $0 } }

    func record(_ error: any Error) { state.withLock { if $0 == nil { $0 = error } } }
}

/// Turns the transport's user events into a ``SessionEvents``, and keeps errors that come before the
/// session from the message layer: the transport has answered them (a `SHARESYNC-ERROR` line, a TLS
/// alert) and closes the connection itself. Later errors pass on (to a ``FrameErrorHandler``).
public final class SessionEventsHandler: ChannelInboundHandler, RemovableChannelHandler {
    public typealias InboundIn = NIOAny
    public typealias InboundOut = NIOAny

    private let security: EventLoopPromise<ConnectionSecurity>
    private let session: EventLoopPromise<NegotiatedSession>
    private let errors = SessionErrors()
    private var negotiated = false
    /// The events, for the task that serves the connection.
    public let events: SessionEvents

    /// Creates the handler for a channel on `eventLoop`.
    public init(eventLoop: any EventLoop) {
        self.security = eventLoop.makePromise()
        self.session = eventLoop.makePromise()
        self.events = SessionEvents(security: security.futureResult, session: session.futureResult, errors: errors)
    }

    public func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let security = event as? ConnectionSecurity { self.security.succeed(security) }
        if let session = event as? NegotiatedSession {
            negotiated = true
            self.session.succeed(session)
        }
        context.fireUserInboundEventTriggered(event)
    }

    public func errorCaught(context: ChannelHandlerContext, error: any Error) {
        errors.record(error)
        guard negotiated else {
            security.fail(error)
            session.fail(error)
            // A FrameError before the session was answered by the transport, which closes the
            // connection once its answer is written; anything else closes it now.
            if !(error is FrameError) { context.close(promise: nil) }
            return
        }
        context.fireErrorCaught(error)
    }

    public func channelInactive(context: ChannelHandlerContext) {
        let error = errors.first ?? ChannelError.ioOnClosedChannel
        security.fail(error)
        session.fail(error)
        context.fireChannelInactive()
    }

    public func handlerRemoved(context: ChannelHandlerContext) {
        security.fail(ChannelError.ioOnClosedChannel)
        session.fail(ChannelError.ioOnClosedChannel)
    }
}

@available(*, unavailable)
extension SessionEventsHandler: Sendable {}
