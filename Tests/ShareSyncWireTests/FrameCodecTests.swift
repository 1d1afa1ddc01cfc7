import NIOCore
import NIOEmbedded
import NIOTestUtils
import ShareSyncTestSupport
import Testing
@testable import ShareSyncWire

@Suite struct FrameCodecTests {
    static let encodings = FrameEncoding.allCases

    @Test(arguments: encodings)
    func manyFramesRoundTripFedOneByteAtATime(encoding: FrameEncoding) throws {
        let payloads = notePayloads(count: 200) + [ByteBuffer()] + notePayloads(count: 20, seed: 9)
        let stream = try encodeStream(payloads, encoding: encoding)
        #expect(try decodeOnChannel(stream, encoding: encoding, chunks: { _ in 1 }) == payloads)
    }

    @Test(arguments: encodings)
    func manyFramesRoundTripInRandomSplits(encoding: FrameEncoding) throws {
        let payloads = notePayloads(count: 500)
        let stream = try encodeStream(payloads, encoding: encoding)
        for seed in UInt64(1)...5 {
            let decoded = try decodeOnChannel(stream, encoding: encoding, chunks: { Int($0.next() % 700) + 1 }, seed: seed)
            #expect(decoded == payloads)
        }
    }

    @Test(arguments: encodings)
    func decoderPassesTheNIOVerifier(encoding: FrameEncoding) async throws {
        // Seconds of CPU: run on the blocking threads, not on the cooperative pool the async tests need.
        try await blocking {
            let payloads = notePayloads(count: 30)
            let stream = try encodeStream(payloads, encoding: encoding)
            let pairs = [(stream, payloads)]
            try ByteToMessageDecoderVerifier.verifyDecoder(inputOutputPairs: pairs) {
                try! FrameLineDecoder(encoding: encoding)
            }
        }
    }

    @Test(arguments: encodings)
    func encoderHandlerWritesLinesAndDecoderHandlerReadsThem(encoding: FrameEncoding) throws {
        let channel = EmbeddedChannel()
        try channel.pipeline.syncOperations.addHandler(FrameEncoderHandler(encoding: encoding))
        try channel.pipeline.syncOperations.addHandler(FrameCodec.decoderHandler(encoding: encoding))
        let payloads = notePayloads(count: 50)
        var wire = ByteBuffer()
        for payload in payloads {
            try channel.writeOutbound(payload)
            var line = try #require(try channel.readOutbound(as: ByteBuffer.self))
            #expect(line.readableBytesView.last == 0x0A)
            #expect(line.readableBytesView.dropLast().contains(0x0A) == false)
            wire.writeBuffer(&line)
        }
        try channel.writeInbound(wire)
        for payload in payloads {
            #expect(try channel.readInbound(as: ByteBuffer.self) == payload)
        }
        #expect(try channel.finish().isClean)
    }

    @Test func sharedContextMakesRepeatedMessagesTiny() throws {
        var rng = SplitMix64(seed: 1)
        let message = ByteBuffer(string: notePayload(123, rng: &rng))
        #expect((200...320).contains(message.readableBytes))
        for encoding in [FrameEncoding.deflate, .deflateBase64] {
            let encoder = try FrameEncoder(encoding: encoding)
            let sizes = try (0..<50).map { _ in try encoder.encode(message).readableBytes }
            #expect(sizes[49] * 10 < sizes[0], "\(encoding): first \(sizes[0]) bytes, 50th \(sizes[49]) bytes")
            #expect(sizes[49] <= 20)
        }
    }

    @Test func plainPayloadWithNewlineFailsOnlyThatWrite() throws {
        let channel = EmbeddedChannel()
        try channel.pipeline.syncOperations.addHandler(FrameEncoderHandler(encoding: .plain))
        let bad = channel.write(ByteBuffer(string: "{\"a\":\n1}"))
        channel.flush()
        #expect(throws: FrameError.self) { try bad.wait() }
        try channel.writeOutbound(ByteBuffer(string: "{}"))
        #expect(try channel.readOutbound(as: ByteBuffer.self) == ByteBuffer(string: "{}\n"))
        _ = try channel.finish()
    }

    @Test(arguments: encodings)
    func encoderRefusesPayloadsOverTheFrameLimitAndCarriesOn(encoding: FrameEncoding) throws {
        let limits = FrameLimits(maximumFrameSize: 1000)
        let encoder = try FrameEncoder(encoding: encoding, limits: limits)
        let decoder = try FrameDecoder(encoding: encoding, limits: limits)
        let big = ByteBuffer(repeating: UInt8(ascii: "x"), count: 1001)
        do {
            _ = try encoder.encode(big)
            Issue.record("accepted a payload over the limit")
        } catch {
            #expect(error.code == .frameTooLarge)
        }
        let small = ByteBuffer(string: "{\"ok\":true}")
        var line = try encoder.encode(small)
        line.moveWriterIndex(to: line.writerIndex - 1)
        #expect(try decoder.decode(line: line) == small)
    }

    @Test func byteStuffingRoundTripsEveryByteValue() throws {
        var all = ByteBuffer()
        for _ in 0..<3 { for byte in UInt8.min...UInt8.max { all.writeInteger(byte) } }
        var escaped = ByteBuffer()
        ByteStuffing.escape(all, into: &escaped)
        #expect(!escaped.readableBytesView.contains(0x0A))
        #expect(escaped.readableBytes == all.readableBytes + 6)
        var back = ByteBuffer()
        try ByteStuffing.unescape(escaped, into: &back)
        #expect(back == all)
        #expect(ByteBuffer(hex: "611b011b0262") == {
            var out = ByteBuffer()
            ByteStuffing.escape(ByteBuffer(hex: "610a1b62"), into: &out)
            return out
        }())
    }

    @Test func base64MatchesTheStandardAlphabet() throws {
        for (input, expected) in [("", ""), ("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"), ("foobar", "Zm9vYmFy"), ("\u{FB}\u{FF}", "w7vDvw==")] {
            var out = ByteBuffer()
            Base64.encode(ByteBuffer(string: input), into: &out)
            #expect(String(buffer: out) == expected)
            var back = ByteBuffer()
            try Base64.decode(out, into: &back)
            #expect(String(buffer: back) == input)
        }
    }
}
