import NIOCore
import NIOEmbedded
import Testing
@testable import ShareSyncWire

/// Records user events so tests can see the negotiated session.
private final class EventRecorder: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    var sessions: [NegotiatedSession] = []
    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let session = event as? NegotiatedSession { self.sessions.append(session) }
        context.fireUserInboundEventTriggered(event)
    }
}

@Suite struct HandshakeHandlerTests {
    private func activeChannel() throws -> EmbeddedChannel {
        let channel = EmbeddedChannel()
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        return channel
    }

    @Test func serverAnswersThenDecodesFramesThatFollowTheHelloInTheSameRead() throws {
        let channel = EmbeddedChannel()
        let promise = channel.eventLoop.makePromise(of: NegotiatedSession.self)
        try FrameCodec.addServerHandlers(to: channel.pipeline.syncOperations, completion: promise)
        let recorder = EventRecorder()
        try channel.pipeline.syncOperations.addHandler(recorder)
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()

        let payloads = notePayloads(count: 10)
        var input = ByteBuffer(string: "SHARESYNC versions=1 encodings=deflate,plain\n")
        var frames = try encodeStream(payloads, encoding: .deflate)
        input.writeBuffer(&frames)
        try channel.writeInbound(input)

        #expect(try channel.readOutbound(as: ByteBuffer.self) == ByteBuffer(string: "SHARESYNC version=1 encoding=deflate\n"))
        #expect(try promise.futureResult.wait() == NegotiatedSession(version: 1, encoding: .deflate))
        #expect(recorder.sessions == [NegotiatedSession(version: 1, encoding: .deflate)])
        for payload in payloads { #expect(try channel.readInbound(as: ByteBuffer.self) == payload) }

        try channel.writeOutbound(payloads[0])
        var line = try #require(try channel.readOutbound(as: ByteBuffer.self))
        line.moveWriterIndex(to: line.writerIndex - 1)
        #expect(try FrameDecoder(encoding: .deflate).decode(line: line) == payloads[0])
        #expect(throws: (any Error).self) { try channel.pipeline.syncOperations.handler(type: HandshakeHandler.self) }
        _ = try channel.finish()
    }

    @Test("read by the reader: the pipeline hands on each line as sent, and the reader inflates one at a time, within the gate")
    func framesDecodedByTheReaderStayCompressedInThePipeline() throws {
        let channel = EmbeddedChannel()
        let gate = FrameSizeGate(limit: 64 * 1024)
        try FrameCodec.addServerHandlers(to: channel.pipeline.syncOperations, gate: gate, framesDecodedByReader: true)
        let recorder = EventRecorder()
        try channel.pipeline.syncOperations.addHandler(recorder)
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()

        // Twenty lines that each inflate a thousandfold (1 MiB of one byte), in one read.
        let bomb = ByteBuffer(repeating: UInt8(ascii: "a"), count: 1 << 20)
        let payloads = [ByteBuffer(string: #"{"op":"hello"}"#)] + Array(repeating: bomb, count: 20)
        var input = ByteBuffer(string: "SHARESYNC versions=1 encodings=deflate\n")
        var stream = try encodeStream(payloads, encoding: .deflate)
        let wireBytes = stream.readableBytes
        input.writeBuffer(&stream)
        try channel.writeInbound(input)
        _ = try channel.readOutbound(as: ByteBuffer.self)  // the server's handshake answer

        // What waits for the reader is what the peer sent, not what it inflates to.
        var lines: [ByteBuffer] = []
        while let line = try channel.readInbound(as: ByteBuffer.self) { lines.append(line) }
        #expect(lines.count == 21)
        #expect(lines.reduce(0) { $0 + $1.readableBytes } < wireBytes)
        #expect(lines.dropFirst().allSatisfy { $0.readableBytes < 8 * 1024 }, "\(lines.map(\.readableBytes))")

        let reader = try FrameReader(session: try #require(recorder.sessions.first), limits: FrameLimits(), gate: gate)
        #expect(try reader.payload(of: lines[0]) == payloads[0])
        // Before the gate lifts, a frame over its limit is refused as the pipeline refused it.
        #expect(throws: FrameError.self) { try reader.payload(of: lines[1]) }
        // Lifted: each line inflates in turn (a fresh reader, as a connection's stream starts over).
        gate.lift()
        let lifted = try FrameReader(session: try #require(recorder.sessions.first), limits: FrameLimits(), gate: gate)
        #expect(try lifted.payload(of: lines[0]) == payloads[0])
        for line in lines.dropFirst() { #expect(try lifted.payload(of: line) == bomb) }
        _ = try channel.finish()
    }

    @Test(arguments: [
        ("SHARESYNC versions=2 encodings=deflate\n", "unsupportedVersion"),
        ("SHARESYNC versions=1 encodings=zstd\n", "unsupportedEncoding"),
        ("GET / HTTP/1.1\r\n", "malformedHandshake"),
    ])
    func serverRefusesWithAnErrorLineAndCloses(hello: String, code: String) throws {
        let channel = EmbeddedChannel()
        let promise = channel.eventLoop.makePromise(of: NegotiatedSession.self)
        try FrameCodec.addServerHandlers(to: channel.pipeline.syncOperations, completion: promise)
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        #expect(throws: FrameError.self) { try channel.writeInbound(ByteBuffer(string: hello)) }
        let line = try #require(try channel.readOutbound(as: ByteBuffer.self))
        #expect(String(buffer: line).hasPrefix("SHARESYNC-ERROR \(code) "))
        #expect(String(buffer: line).hasSuffix("\n"))
        #expect(!channel.isActive)
        #expect(throws: FrameError.self) { try promise.futureResult.wait() }
    }

    @Test(arguments: [false, true])
    func aLineOfTheFullLengthEndingInCRLFIsTakenHoweverItsBytesArrive(split: Bool) throws {
        let channel = EmbeddedChannel()
        let promise = channel.eventLoop.makePromise(of: NegotiatedSession.self)
        try FrameCodec.addServerHandlers(to: channel.pipeline.syncOperations, completion: promise)
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        // 1,024 bytes before the \r\n (an unknown parameter pads it); split, the \r came alone first
        // and the line was refused with malformedHandshake.
        let head = "SHARESYNC versions=1 encodings=plain x="
        let line = head + String(repeating: "a", count: FrameLimits.maximumHandshakeLineLength - head.utf8.count)
        #expect(line.utf8.count == FrameLimits.maximumHandshakeLineLength)
        if split {
            try channel.writeInbound(ByteBuffer(string: line + "\r"))
            try channel.writeInbound(ByteBuffer(string: "\n"))
        } else {
            try channel.writeInbound(ByteBuffer(string: line + "\r\n"))
        }
        #expect(try promise.futureResult.wait() == NegotiatedSession(version: 1, encoding: .plain))
        // One byte more is refused, whole or split.
        let longer = EmbeddedChannel()
        try FrameCodec.addServerHandlers(to: longer.pipeline.syncOperations)
        try longer.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        #expect(throws: FrameError.self) {
            try longer.writeInbound(ByteBuffer(string: line + "a" + (split ? "\r" : "\r\n")))
            if split { try longer.writeInbound(ByteBuffer(string: "\n")) }
        }
    }

    @Test func refusalLineIsSentEvenWithAFrameErrorHandlerThatClosesOnErrors() throws {
        let channel = EmbeddedChannel()
        try FrameCodec.addServerHandlers(to: channel.pipeline.syncOperations)
        try channel.pipeline.syncOperations.addHandler(FrameErrorHandler())
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        _ = try? channel.writeInbound(ByteBuffer(string: "SHARESYNC versions=9 encodings=deflate\n"))
        let line = try #require(try channel.readOutbound(as: ByteBuffer.self))
        #expect(String(buffer: line).hasPrefix("SHARESYNC-ERROR unsupportedVersion "))
        #expect(!channel.isActive)
    }

    @Test func serverWithoutPlainRefusesAPlainOnlyClient() throws {
        let channel = EmbeddedChannel()
        try FrameCodec.addServerHandlers(to: channel.pipeline.syncOperations, configuration: .init(allowPlain: false))
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        #expect(throws: FrameError.self) { try channel.writeInbound(ByteBuffer(string: "SHARESYNC versions=1 encodings=plain\n")) }
        let line = try #require(try channel.readOutbound(as: ByteBuffer.self))
        #expect(String(buffer: line).hasPrefix("SHARESYNC-ERROR unsupportedEncoding"))
    }

    @Test func clientSendsHelloBuffersEarlyWritesAndInstallsTheCodec() throws {
        let channel = EmbeddedChannel()
        let promise = channel.eventLoop.makePromise(of: NegotiatedSession.self)
        let configuration = ClientConfiguration(encodings: [.deflateBase64, .plain])
        try FrameCodec.addClientHandlers(to: channel.pipeline.syncOperations, configuration: configuration, completion: promise)
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        #expect(try channel.readOutbound(as: ByteBuffer.self) == ByteBuffer(string: "SHARESYNC versions=1 encodings=deflate-base64,plain\n"))

        let early = channel.write(ByteBuffer(string: "{\"early\":true}"))
        channel.flush()
        #expect(try channel.readOutbound(as: ByteBuffer.self) == nil)

        try channel.writeInbound(ByteBuffer(string: "SHARESYNC version=1 encoding=plain\n{\"hi\":1}\n"))
        #expect(try promise.futureResult.wait().encoding == .plain)
        try early.wait()
        #expect(try channel.readOutbound(as: ByteBuffer.self) == ByteBuffer(string: "{\"early\":true}\n"))
        #expect(try channel.readInbound(as: ByteBuffer.self) == ByteBuffer(string: "{\"hi\":1}"))
        _ = try channel.finish()
    }

    @Test func clientFailsOnRefusalWithTheServersCode() throws {
        let channel = EmbeddedChannel()
        let promise = channel.eventLoop.makePromise(of: NegotiatedSession.self)
        try FrameCodec.addClientHandlers(to: channel.pipeline.syncOperations, completion: promise)
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        _ = try channel.readOutbound(as: ByteBuffer.self)
        #expect(throws: FrameError.self) {
            try channel.writeInbound(ByteBuffer(string: "SHARESYNC-ERROR unsupportedVersion server speaks 2 only\n"))
        }
        do {
            _ = try promise.futureResult.wait()
        } catch let error as FrameError {
            #expect(error == FrameError(.unsupportedVersion, "server speaks 2 only"))
        }
        #expect(!channel.isActive)
    }

    @Test func clientRejectsAnEncodingItDidNotOffer() throws {
        let channel = EmbeddedChannel()
        let promise = channel.eventLoop.makePromise(of: NegotiatedSession.self)
        try FrameCodec.addClientHandlers(to: channel.pipeline.syncOperations, configuration: .init(encodings: [.deflate]), completion: promise)
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        #expect(throws: FrameError.self) { try channel.writeInbound(ByteBuffer(string: "SHARESYNC version=1 encoding=plain\n")) }
        #expect(throws: FrameError.self) { try promise.futureResult.wait() }
    }

    @Test func handshakeTimesOut() throws {
        let loop = EmbeddedEventLoop()
        let channel = EmbeddedChannel(loop: loop)
        let promise = channel.eventLoop.makePromise(of: NegotiatedSession.self)
        let limits = FrameLimits(handshakeTimeout: .seconds(10))
        try FrameCodec.addServerHandlers(to: channel.pipeline.syncOperations, configuration: .init(limits: limits), completion: promise)
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        try channel.writeInbound(ByteBuffer(string: "SHARESYNC vers"))
        loop.advanceTime(by: .seconds(9))
        #expect(channel.isActive)
        loop.advanceTime(by: .seconds(2))
        let line = try #require(try channel.readOutbound(as: ByteBuffer.self))
        #expect(String(buffer: line).hasPrefix("SHARESYNC-ERROR handshakeTimeout"))
        #expect(!channel.isActive)
        do {
            _ = try promise.futureResult.wait()
        } catch let error as FrameError {
            #expect(error.code == .handshakeTimeout)
        }
    }

    @Test func idleConnectionFailsWithIdleTimeout() throws {
        let loop = EmbeddedEventLoop()
        let channel = EmbeddedChannel(loop: loop)
        let limits = FrameLimits(idleTimeout: .seconds(120))
        try FrameCodec.addServerHandlers(to: channel.pipeline.syncOperations, configuration: .init(limits: limits))
        try channel.pipeline.syncOperations.addHandler(FrameErrorHandler(errorPayload: { error in
            ByteBuffer(string: #"{"error":"\#(error.code)"}"#)
        }))
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        try channel.writeInbound(ByteBuffer(string: "SHARESYNC versions=1 encodings=plain\n"))
        _ = try channel.readOutbound(as: ByteBuffer.self)
        loop.advanceTime(by: .seconds(119))
        #expect(channel.isActive)
        loop.advanceTime(by: .seconds(2))
        #expect(try channel.readOutbound(as: ByteBuffer.self) == ByteBuffer(string: "{\"error\":\"idleTimeout\"}\n"))
        #expect(!channel.isActive)
    }

    @Test func framesWrittenKeepAConnectionFromBeingIdleToo() throws {
        let loop = EmbeddedEventLoop()
        let channel = EmbeddedChannel(loop: loop)
        let limits = FrameLimits(idleTimeout: .seconds(120))
        try FrameCodec.addServerHandlers(to: channel.pipeline.syncOperations, configuration: .init(limits: limits))
        try channel.pipeline.syncOperations.addHandler(FrameErrorHandler(errorPayload: { error in
            ByteBuffer(string: #"{"error":"\#(error.code)"}"#)
        }))
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        try channel.writeInbound(ByteBuffer(string: "SHARESYNC versions=1 encodings=plain\n"))
        _ = try channel.readOutbound(as: ByteBuffer.self)
        // Nothing more is read; a frame goes out every 100 s (a listener receiving pushes).
        for _ in 0..<4 {
            loop.advanceTime(by: .seconds(100))
            try channel.writeAndFlush(ByteBuffer(string: #"{"push":"changes"}"#)).wait()
            #expect(try channel.readOutbound(as: ByteBuffer.self) == ByteBuffer(string: "{\"push\":\"changes\"}\n"))
            #expect(channel.isActive)
        }
        // Then nothing in either direction: cut after the idle timeout.
        loop.advanceTime(by: .seconds(119))
        #expect(channel.isActive)
        loop.advanceTime(by: .seconds(2))
        #expect(try channel.readOutbound(as: ByteBuffer.self) == ByteBuffer(string: "{\"error\":\"idleTimeout\"}\n"))
        #expect(!channel.isActive)
    }
}
