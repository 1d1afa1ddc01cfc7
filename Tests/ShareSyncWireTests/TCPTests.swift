import NIOCore
import NIOPosix
import Testing
@testable import ShareSyncWire

/// Server side: echoes every payload back.
private final class EchoHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer
    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        context.writeAndFlush(data, promise: nil)
    }
}

/// Client side: collects payloads and completes once `expected` have arrived.
private final class CollectHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    private let expected: Int
    private let done: EventLoopPromise<[ByteBuffer]>
    private var received: [ByteBuffer] = []
    init(expected: Int, done: EventLoopPromise<[ByteBuffer]>) {
        self.expected = expected
        self.done = done
    }
    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        self.received.append(Self.unwrapInboundIn(data))
        if self.received.count == self.expected { self.done.succeed(self.received) }
    }
    func errorCaught(context: ChannelHandlerContext, error: Error) {
        self.done.fail(error)
        context.close(promise: nil)
    }
    func channelInactive(context: ChannelHandlerContext) {
        self.done.fail(ChannelError.eof)
    }
}

/// Collects raw bytes (for a client that speaks no codec).
private final class RawCollector: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = ByteBuffer
    var bytes = ByteBuffer()
    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var buffer = Self.unwrapInboundIn(data)
        self.bytes.writeBuffer(&buffer)
    }
}

@Suite struct TCPTests {
    private func startServer(group: EventLoopGroup) async throws -> Channel {
        try await ServerBootstrap(group: group)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let pipeline = channel.pipeline.syncOperations
                    try FrameCodec.addServerHandlers(to: pipeline)
                    try pipeline.addHandler(EchoHandler())
                    try pipeline.addHandler(FrameErrorHandler(errorPayload: { error in
                        ByteBuffer(string: #"{"error":"\#(error.code)"}"#)
                    }))
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
    }

    private func connectClient(
        group: EventLoopGroup, port: Int, encoding: FrameEncoding, expected: Int
    ) async throws -> (Channel, EventLoopFuture<NegotiatedSession>, EventLoopFuture<[ByteBuffer]>) {
        let loop = group.next()
        let session = loop.makePromise(of: NegotiatedSession.self)
        let done = loop.makePromise(of: [ByteBuffer].self)
        let channel = try await ClientBootstrap(group: loop)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let pipeline = channel.pipeline.syncOperations
                    try FrameCodec.addClientHandlers(to: pipeline, configuration: .init(encodings: [encoding]), completion: session)
                    try pipeline.addHandler(CollectHandler(expected: expected, done: done))
                }
            }
            .connect(host: "127.0.0.1", port: port).get()
        return (channel, session.futureResult, done.futureResult)
    }

    @Test(arguments: FrameEncoding.allCases)
    func handshakeAndHundredsOfFramesBothWays(encoding: FrameEncoding) async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        let server = try await self.startServer(group: group)
        let port = try #require(server.localAddress?.port)
        let payloads = notePayloads(count: 300)
        let (client, session, echoed) = try await self.connectClient(group: group, port: port, encoding: encoding, expected: 300)
        for payload in payloads { client.write(payload, promise: nil) }  // before and after the handshake
        client.flush()
        #expect(try await session.get() == NegotiatedSession(version: 1, encoding: encoding))
        #expect(try await echoed.get() == payloads)
        try await client.close()
        try await server.close()
        try await group.shutdownGracefully()
    }

    @Test func aClientSendingGarbageIsClosedWhileAnotherKeepsWorking() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        let server = try await self.startServer(group: group)
        let port = try #require(server.localAddress?.port)
        let payloads = notePayloads(count: 400)
        let (good, session, echoed) = try await self.connectClient(group: group, port: port, encoding: .deflate, expected: 400)
        #expect(try await session.get().encoding == .deflate)
        for payload in payloads.prefix(200) { good.write(payload, promise: nil) }
        good.flush()

        let collector = RawCollector()
        let bad = try await ClientBootstrap(group: group)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(collector) }
            }
            .connect(host: "127.0.0.1", port: port).get()
        var garbage = ByteBuffer(string: "SHARESYNC versions=1 encodings=deflate\n")
        garbage.writeBytes([0xFF, 0x1B, 0x07, 0x42, 0x0A])
        try await bad.writeAndFlush(garbage)
        try await bad.closeFuture.get()  // the server closed it
        var reply = try await bad.eventLoop.submit { collector.bytes }.get()
        let helloEnd = try #require(reply.readableBytesView.firstIndex(of: 0x0A))
        let hello = reply.readSlice(length: helloEnd - reply.readerIndex + 1)!
        #expect(String(buffer: hello) == "SHARESYNC version=1 encoding=deflate\n")
        #expect(reply.readableBytesView.last == 0x0A)
        reply.moveWriterIndex(to: reply.writerIndex - 1)
        let decoded = try FrameDecoder(encoding: .deflate).decode(line: reply)
        #expect(String(buffer: decoded) == #"{"error":"invalidEncoding"}"#)

        for payload in payloads.suffix(200) { good.write(payload, promise: nil) }
        good.flush()
        #expect(try await echoed.get() == payloads)
        #expect(good.isActive)
        try await good.close()
        try await server.close()
        try await group.shutdownGracefully()
    }
}
