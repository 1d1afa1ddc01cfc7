import NIOCore
import NIOPosix
import Synchronization

/// A TCP proxy on 127.0.0.1 (port 0) in front of a server that cuts connections at random byte
/// offsets: each connection is closed, both ways, once the bytes relayed in both directions together
/// reach an offset drawn from `cutAfter`, until `cuts` connections have been cut; later connections
/// are relayed untouched. Seeded, so a failing run can be repeated.
///
/// ```swift
/// let proxy = try await FaultyProxy.start(to: server.port, cuts: 30, cutAfter: 200...20_000, seed: 7)
/// // point clients at proxy.port; after 30 cuts it relays faithfully
/// ```
public final class FaultyProxy: Sendable {
    private struct State {
        var generator: SeededGenerator
        var cutsLeft: Int
        var cutsDone = 0
        var connections = 0
    }

    private let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
    private let listener = Mutex<(any Channel)?>(nil)
    private let state: Mutex<State>
    private let cutAfter: ClosedRange<Int>
    private let portBox = Mutex(0)

    /// The port the proxy listens on.
    public var port: Int { portBox.withLock { $0 } }
    /// How many connections have been cut so far.
    public var cutsDone: Int { state.withLock { $0.cutsDone } }
    /// How many connections the proxy has accepted.
    public var connections: Int { state.withLock { $0.connections } }

    private init(cuts: Int, cutAfter: ClosedRange<Int>, seed: UInt64) {
        self.state = Mutex(State(generator: SeededGenerator(seed: seed), cutsLeft: cuts))
        self.cutAfter = cutAfter
    }

    /// Starts relaying connections to `127.0.0.1:targetPort`.
    public static func start(to targetPort: Int, cuts: Int, cutAfter: ClosedRange<Int>, seed: UInt64) async throws -> FaultyProxy {
        let proxy = FaultyProxy(cuts: cuts, cutAfter: cutAfter, seed: seed)
        let channel = try await ServerBootstrap(group: proxy.group)
            .childChannelInitializer { inbound in
                let budget = proxy.nextBudget()
                return ClientBootstrap(group: inbound.eventLoop)
                    .channelInitializer { outbound in
                        outbound.eventLoop.makeCompletedFuture {
                            try outbound.pipeline.syncOperations.addHandler(Forwarder(peer: inbound, budget: budget, proxy: proxy))
                        }
                    }
                    .connect(host: "127.0.0.1", port: targetPort)
                    .flatMapThrowing { outbound in
                        try inbound.pipeline.syncOperations.addHandler(Forwarder(peer: outbound, budget: budget, proxy: proxy))
                    }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        proxy.listener.withLock { $0 = channel }
        proxy.portBox.withLock { $0 = channel.localAddress?.port ?? 0 }
        return proxy
    }

    /// Stops cutting: every connection from now on is relayed untouched.
    public func stopCutting() { state.withLock { $0.cutsLeft = 0 } }

    /// Stops listening and closes what it relays.
    public func stop() async {
        try? await listener.withLock { $0 }?.close()
        try? await group.shutdownGracefully()
    }

    /// The byte offset at which the next connection is cut, or nil to relay it untouched.
    private func nextBudget() -> ByteBudget {
        state.withLock { s in
            s.connections += 1
            guard s.cutsLeft > 0 else { return ByteBudget(cutAt: nil) }
            let span = UInt64(cutAfter.upperBound - cutAfter.lowerBound + 1)
            return ByteBudget(cutAt: cutAfter.lowerBound + Int(s.generator.next() % span))
        }
    }

    /// Counts a cut; false if cutting was stopped meanwhile (the connection is then left alone).
    fileprivate func takeCut() -> Bool {
        state.withLock { s in
            guard s.cutsLeft > 0 else { return false }
            s.cutsLeft -= 1
            s.cutsDone += 1
            return true
        }
    }

    /// The bytes both directions of one connection may still relay before the cut.
    fileprivate final class ByteBudget: Sendable {
        let cutAt: Int?
        let relayed = Mutex(0)
        init(cutAt: Int?) { self.cutAt = cutAt }
    }

    /// Copies what one side reads to the other; at the connection's offset, relays the bytes up to it
    /// and closes both sides.
    private final class Forwarder: ChannelInboundHandler, Sendable {
        typealias InboundIn = ByteBuffer
        let peer: any Channel
        let budget: ByteBudget
        let proxy: FaultyProxy

        init(peer: any Channel, budget: ByteBudget, proxy: FaultyProxy) {
            self.peer = peer
            self.budget = budget
            self.proxy = proxy
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            var buffer = Self.unwrapInboundIn(data)
            guard let cutAt = budget.cutAt else { return peer.writeAndFlush(buffer, promise: nil) }
            let (before, cut) = budget.relayed.withLock { relayed -> (Int, Bool) in
                let before = relayed
                relayed += buffer.readableBytes
                return (before, relayed >= cutAt)
            }
            guard cut, before < cutAt, proxy.takeCut() else {
                if before < cutAt || budget.cutAt == nil { peer.writeAndFlush(buffer, promise: nil) }
                return
            }
            // Relay up to the offset, then cut both ways.
            if let head = buffer.readSlice(length: cutAt - before), head.readableBytes > 0 {
                peer.writeAndFlush(head, promise: nil)
            }
            let peer = self.peer
            peer.eventLoop.execute { peer.close(promise: nil) }
            context.close(promise: nil)
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
