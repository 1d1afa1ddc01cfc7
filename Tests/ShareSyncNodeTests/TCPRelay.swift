import Foundation
import NIOCore
import NIOPosix
import Synchronization

/// A TCP relay on 127.0.0.1 (port 0) in front of a server: forwards bytes both ways and keeps a
/// copy of everything that crossed, as a passive observer on the network path would see it.
final class TCPRelay: Sendable {
    /// Everything relayed so far, both directions, in arrival order.
    let captured = Mutex([UInt8]())
    private let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
    private let listener = Mutex<(any Channel)?>(nil)

    /// The port the relay listens on.
    var port: Int { portBox.withLock { $0 } }
    private let portBox = Mutex(0)

    /// Starts relaying connections to `127.0.0.1:targetPort`.
    static func start(to targetPort: Int) async throws -> TCPRelay {
        let relay = TCPRelay()
        let group = relay.group
        let channel = try await ServerBootstrap(group: group)
            // The accepted channel reads nothing until this future completes: the outbound side is up by then.
            .childChannelInitializer { inbound in
                ClientBootstrap(group: inbound.eventLoop)
                    .channelInitializer { outbound in
                        outbound.eventLoop.makeCompletedFuture {
                            try outbound.pipeline.syncOperations.addHandler(Forwarder(peer: inbound, relay: relay))
                        }
                    }
                    .connect(host: "127.0.0.1", port: targetPort)
                    .flatMapThrowing { outbound in
                        try inbound.pipeline.syncOperations.addHandler(Forwarder(peer: outbound, relay: relay))
                    }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        relay.listener.withLock { $0 = channel }
        relay.portBox.withLock { $0 = channel.localAddress?.port ?? 0 }
        return relay
    }

    /// Whether `text`'s UTF-8 bytes appear anywhere in what was relayed.
    func sawBytes(of text: String) -> Bool {
        let needle = Array(text.utf8)
        return captured.withLock { bytes in
            guard bytes.count >= needle.count else { return false }
            return (0...(bytes.count - needle.count)).contains { start in bytes[start..<start + needle.count].elementsEqual(needle) }
        }
    }

    func stop() async {
        try? await listener.withLock { $0 }?.close()
        try? await group.shutdownGracefully()
    }

    /// Copies what one side reads to the other side, recording it.
    private final class Forwarder: ChannelInboundHandler, Sendable {
        typealias InboundIn = ByteBuffer
        let peer: any Channel
        let relay: TCPRelay

        init(peer: any Channel, relay: TCPRelay) {
            self.peer = peer
            self.relay = relay
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let buffer = Self.unwrapInboundIn(data)
            relay.captured.withLock { $0.append(contentsOf: buffer.readableBytesView) }
            peer.writeAndFlush(buffer, promise: nil)
        }

        func channelInactive(context: ChannelHandlerContext) {
            peer.close(promise: nil)
            context.fireChannelInactive()
        }

        func errorCaught(context: ChannelHandlerContext, error: any Error) {
            context.close(promise: nil)
        }
    }
}
