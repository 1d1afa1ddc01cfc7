import Foundation
import NIOCore
import NIOExtras
import NIOPosix
import ShareSyncCore

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
public final class ControlClient: Sendable {
    private let channel: NIOAsyncChannel<ByteBuffer, ByteBuffer>

    private init(channel: NIOAsyncChannel<ByteBuffer, ByteBuffer>) { self.channel = channel }

    /// Connects; ``ControlClientError/unreachable(path:reason:)`` if no daemon listens there.
    public static func connect(path: String) async throws(ControlClientError) -> ControlClient {
        guard FileManager.default.fileExists(atPath: path) else {
            throw .unreachable(path: path, reason: "no such socket")
        }
        do {
            let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .connect(unixDomainSocketPath: path) { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandler(
                            ByteToMessageHandler(LineBasedFrameDecoder(), maximumBufferSize: 256 * 1024 * 1024))
                        return try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel)
                    }
                }
            return ControlClient(channel: channel)
        } catch {
            throw .unreachable(path: path, reason: "\(error)")
        }
    }

    /// Whether a daemon accepts connections on `path`.
    static func isServing(path: String) async -> Bool {
        guard let client = try? await connect(path: path) else { return false }
        await client.close()
        return true
    }

    /// Sends one request and returns the response line (the JSON, without the newline).
    public func send(_ request: ControlRequest) async throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        var line = try encoder.encode(request)
        line.append(UInt8(ascii: "\n"))
        return try await channel.executeThenClose { inbound, outbound in
            try await outbound.write(ByteBuffer(bytes: line))
            var iterator = inbound.makeAsyncIterator()
            guard let response = try await iterator.next() else {
                throw ControlClientError.malformedResponse("the node closed the connection")
            }
            return Data(response.readableBytesView)
        }
    }

    /// Sends one request and decodes its result; a refusal throws ``ControlError``.
    /// Returns the decoded result and the result's JSON as the node sent it.
    public func call<T: Codable & Sendable>(_ request: ControlRequest, as type: T.Type) async throws -> T {
        let data = try await send(request)
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        let response: ControlResponse<T>
        do {
            response = try decoder.decode(ControlResponse<T>.self, from: data)
        } catch {
            throw ControlClientError.malformedResponse("\(error)")
        }
        if let error = response.error { throw error }
        guard response.ok, let result = response.result else {
            throw ControlClientError.malformedResponse("neither a result nor an error")
        }
        return result
    }

    /// Closes the connection.
    public func close() async {
        try? await channel.channel.close()
    }
}
