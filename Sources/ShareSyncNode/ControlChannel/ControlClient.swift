import Foundation
import NIOCore
import NIOExtras
import NIOPosix
import ShareSyncCore
import Synchronization

/// Why a control request did not get an answer.
public enum ControlClientError: Error, Sendable, CustomStringConvertible {
    /// No daemon listens on the socket (it does not exist, or nobody accepts).
    case unreachable(path: String, reason: String)
    /// The daemon answered something that is not a response.
    case malformedResponse(String)

    public var description: String {
        switch self {
        case .unreachable(let path, let reason):
            "the node is not running (no daemon on \(path): \(reason)); start it with `sharesync run`"
        case .malformedResponse(let detail): "the node's answer is not a control response: \(detail)"
        }
    }
}

/// The CLI's end of the control channel: connects to a node's `control.sock`, sends requests and
/// reads responses (one JSON line each; see ``ControlRequest``).
///
/// One client can send any number of requests; their responses come back in order. Keeping one
/// client open saves the connection set-up on every call (an application driving its node should);
/// ``close()`` ends it. When the daemon closed the connection (it stopped, or restarted), the next
/// request connects again first: nothing was sent on the closed connection, so nothing is sent twice.
/// A request in flight when the connection ends fails (its outcome is unknown), and so does a request
/// while no daemon listens (``ControlClientError/unreachable(path:reason:)``).
public final class ControlClient: Sendable {
    private let path: String
    private let state: Mutex<(channel: any Channel, closed: Bool)>

    private init(channel: any Channel, path: String) {
        self.path = path
        self.state = Mutex((channel, false))
    }

    /// Connects; ``ControlClientError/unreachable(path:reason:)`` if no daemon listens there.
    public static func connect(path: String) async throws(ControlClientError) -> ControlClient {
        ControlClient(channel: try await openChannel(path: path), path: path)
    }

    private static func openChannel(path: String) async throws(ControlClientError) -> any Channel {
        guard FileManager.default.fileExists(atPath: path) else {
            throw .unreachable(path: path, reason: "no such socket")
        }
        do {
            return try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandler(
                            ByteToMessageHandler(LineBasedFrameDecoder(), maximumBufferSize: 256 * 1024 * 1024))
                        try channel.pipeline.syncOperations.addHandler(ControlExchangeHandler())
                    }
                }
                .connect(unixDomainSocketPath: path).get()
        } catch {
            throw .unreachable(path: path, reason: "\(error)")
        }
    }

    /// The connection to send on: the open one, or a new one if the daemon closed it.
    private func activeChannel() async throws -> any Channel {
        let (channel, closed) = state.withLock { $0 }
        guard !closed else { throw ControlClientError.malformedResponse("the connection to the node was closed") }
        if channel.isActive { return channel }
        let fresh = try await Self.openChannel(path: path)
        let (chosen, superseded) = state.withLock { s -> (any Channel, (any Channel)?) in
            if s.closed { return (fresh, fresh) }  // closed meanwhile: this one goes too
            if s.channel.isActive { return (s.channel, fresh) }  // another request reconnected first
            s.channel = fresh
            return (fresh, nil)
        }
        if let superseded { try? await superseded.close() }
        guard chosen.isActive else { throw ControlClientError.malformedResponse("the connection to the node was closed") }
        return chosen
    }

    /// Whether a daemon accepts connections on `path`.
    static func isServing(path: String) async -> Bool {
        guard let client = try? await connect(path: path) else { return false }
        await client.close()
        return true
    }

    /// Sends one request and returns the response line (the JSON, without the newline).
    public func send(_ request: ControlRequest) async throws -> Data {
        var line = try request.line()
        // The node closes a connection whose line is over its limit, without an answer: said here,
        // with the sizes, instead of a closed connection that reads as a network failure.
        guard line.count < ControlServer.maximumLineLength else {
            throw ShareSyncError(
                .limitExceeded,
                "the request is \(line.count) bytes; a node takes control requests of at most \(ControlServer.maximumLineLength) "
                    + "bytes (send fewer or smaller records at a time)")
        }
        line.append(UInt8(ascii: "\n"))
        let channel = try await activeChannel()
        let promise = channel.eventLoop.makePromise(of: ByteBuffer.self)
        let written = channel.eventLoop.makePromise(of: Void.self)
        written.futureResult.whenFailure { error in
            promise.fail(ControlClientError.malformedResponse("cannot send to the node: \(error)"))
        }
        channel.writeAndFlush(ControlExchange(line: ByteBuffer(bytes: line), response: promise), promise: written)
        let response = try await promise.futureResult.get()
        return Data(response.readableBytesView)
    }

    /// Sends one request and decodes its result; a refusal throws ``ControlError``.
    public func call<T: Codable & Sendable>(_ request: ControlRequest, as type: T.Type) async throws -> T {
        try ControlResponse<T>.result(of: try await send(request))
    }

    /// Closes the connection; requests still waiting fail, and later ones too.
    public func close() async {
        let channel = state.withLock { s -> any Channel in
            s.closed = true
            return s.channel
        }
        try? await channel.close()
    }
}

extension ControlRequest {
    /// The request's JSON line, without the newline: records with their ``Record/changedKeys`` (for the
    /// `changedKeys` save policy), keys sorted, slashes unescaped.
    public func line() throws -> Data {
        if let fast = fastEncode() { return fast }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.userInfo[Record.encodeChangedKeys] = true
        return try encoder.encode(self)
    }
}

extension ControlResponse {
    /// The result of a response line; a refusal throws its ``ControlError``, a line that is not a
    /// response ``ControlClientError/malformedResponse(_:)``.
    public static func result(of line: Data) throws -> Result {
        // A page of query results, the one response that carries many records: the hand-written reader.
        if Result.self == QueryPage.self, let page = QueryPage.fastResult(line) as? Result { return page }
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        let response: ControlResponse<Result>
        do {
            response = try decoder.decode(ControlResponse<Result>.self, from: line)
        } catch {
            throw ControlClientError.malformedResponse("\(error)")
        }
        if let error = response.error { throw error }
        guard response.ok, let result = response.result else {
            throw ControlClientError.malformedResponse("neither a result nor an error")
        }
        return result
    }
}

/// A request line and the promise of its response line.
struct ControlExchange: Sendable {
    var line: ByteBuffer
    var response: EventLoopPromise<ByteBuffer>
}

/// Matches response lines to requests, in order; when the connection ends, the requests still
/// waiting fail with ``ControlClientError/malformedResponse(_:)``.
final class ControlExchangeHandler: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = ControlExchange
    typealias OutboundOut = ByteBuffer

    private var waiting: CircularBuffer<EventLoopPromise<ByteBuffer>> = []

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let exchange = unwrapOutboundIn(data)
        waiting.append(exchange.response)
        context.write(wrapOutboundOut(exchange.line), promise: promise)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let line = unwrapInboundIn(data)
        guard let next = waiting.popFirst() else { return }  // an answer to nothing: ignored
        next.succeed(line)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        failAll(ControlClientError.malformedResponse("the connection to the node failed: \(error)"))
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        failAll(ControlClientError.malformedResponse(
            "the node closed the connection before answering (it stopped?): the request may or may not have been carried out; "
                + "check before sending it again"))
        context.fireChannelInactive()
    }

    private func failAll(_ error: ControlClientError) {
        while let next = waiting.popFirst() { next.fail(error) }
    }
}
