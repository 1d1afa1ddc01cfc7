import Foundation
import NIOCore
import NIOEmbedded
import ShareSyncTestSupport
import Synchronization
import Testing
@testable import ShareSyncWire

/// A payload's end compressed ahead of time (`FrameEncoder.precompress`) and spliced into its frame
/// after the head the connection's stream compresses: what the owner does with the next page of a
/// zone. The receiver's one inflate stream must read such frames, and every frame after them, as
/// it reads any other; so must an independent inflater (Python's zlib).
@Suite struct PrecompressedTailTests {
    /// Frames of a connection: two of every three large answers whose tail was compressed ahead
    /// (pages one after another), the third an ordinary payload (a push, a small answer) that may
    /// refer back into the spliced ones.
    static func frames(seed: UInt64) throws -> [(payload: ByteBuffer, tail: PrecompressedTail?)] {
        let notes = notePayloads(count: 400, seed: seed)
        var rng = SplitMix64(seed: seed)
        return try (0..<60).map { i in
            guard i % 3 != 0 else { return (notes[Int(rng.next() % 400)], nil) }
            var tail = ByteBuffer(string: #"{"changed":["#)
            for j in 0..<(Int(rng.next() % 150) + 1) {
                if j > 0 { tail.writeString(",") }
                var note = notes[(i + j) % 400]
                tail.writeBuffer(&note)
            }
            tail.writeString("]}}")
            var payload = ByteBuffer(string: #"{"id":\#(i),"ok":"#)
            payload.writeImmutableBuffer(tail)
            return (payload, try FrameEncoder.precompress(tail))
        }
    }

    @Test("frames with a spliced tail read back as their payloads, and so does every frame after them", arguments: [true, false])
    func splicedFramesReadBack(keepsAffinity: Bool) throws {
        let encoder = try FrameEncoder(encoding: .deflate, deflaters: DeflaterPool(level: 1, keepsAffinity: keepsAffinity))
        let decoder = try FrameDecoder(encoding: .deflate)
        var spliced = 0
        for (i, frame) in try Self.frames(seed: 5).enumerated() {
            var line = ByteBuffer()
            if try encoder.encode(frame.payload, into: &line, splicing: frame.tail) { spliced += 1 }
            if let tail = frame.tail {
                // The line ends with the tail's bytes as they were compressed ahead.
                #expect(line.readableBytesView.suffix(tail.escaped.readableBytes + 1).elementsEqual(tail.escaped.readableBytesView + [0x0A]))
            }
            line.moveWriterIndex(to: line.writerIndex - 1)
            #expect(try decoder.decode(line: line) == frame.payload, "frame \(i)")
        }
        #expect(spliced == 40)
    }

    @Test("a tail the payload does not end with, or an encoding that cannot splice, is not used")
    func tailNotUsed() throws {
        let tail = try FrameEncoder.precompress(ByteBuffer(string: #"{"changed":[]}}"#))
        let other = ByteBuffer(string: #"{"id":1,"ok":{"changed":[1]}}"#)
        let whole = ByteBuffer(string: #"{"changed":[]}}"#)  // nothing before the tail
        for encoding in [FrameEncoding.deflate, .deflateBase64, .plain] {
            let encoder = try FrameEncoder(encoding: encoding)
            let decoder = try FrameDecoder(encoding: encoding)
            var payloads = [other, whole]
            if encoding != .deflate { payloads.append(ByteBuffer(string: #"{"id":1,"ok":{"changed":[]}}"#)) }
            for payload in payloads {
                var line = ByteBuffer()
                #expect(try encoder.encode(payload, into: &line, splicing: tail) == false, "\(encoding)")
                line.moveWriterIndex(to: line.writerIndex - 1)
                #expect(try decoder.decode(line: line) == payload, "\(encoding)")
            }
        }
    }

    @Test("the frame encoder handler splices an offered tail into the first payload that ends with it, once")
    func handlerUsesAnOfferOnce() throws {
        let handler = try FrameEncoderHandler(encoding: .deflate)
        let channel = EmbeddedChannel(handler: handler)
        defer { _ = try? channel.finish() }
        let frames = try Self.frames(seed: 9)
        let (answer, tail) = (frames[1].payload, try #require(frames[1].tail))
        let uses = Mutex(0)
        handler.splices.offer(tail) { uses.withLock { $0 += 1 } }
        // A push written first does not end with the tail: compressed whole, the offer stays.
        try channel.writeOutbound(frames[0].payload)
        try channel.writeOutbound(answer)
        try channel.writeOutbound(answer)  // the offer was used: compressed whole
        let decoder = try FrameDecoder(encoding: .deflate)
        var lines: [ByteBuffer] = []
        while var line = try channel.readOutbound(as: ByteBuffer.self) {
            line.moveWriterIndex(to: line.writerIndex - 1)
            lines.append(line)
        }
        #expect(try lines.map { try decoder.decode(line: $0) } == [frames[0].payload, answer, answer])
        let ends = lines.map { $0.readableBytesView.suffix(tail.escaped.readableBytes).elementsEqual(tail.escaped.readableBytesView) }
        #expect(ends == [false, true, false])
        #expect(uses.withLock { $0 } == 1)
    }

    @Test("a spliced line over the line limit goes out compressed whole when that fits, and the frames after it read back")
    func tooLongSplicedLineFallsBackToWhole() throws {
        // The answer's tail ends with the 2,000 random bytes of the frame before it: compressed whole
        // they are one back reference; compressed ahead (no dictionary) they are 2,000 bytes again.
        var rng = SplitMix64(seed: 17)
        let random = { (count: Int) in ByteBuffer(bytes: (0..<count).map { _ in UInt8(truncatingIfNeeded: rng.next()) }) }
        let first = random(2000)
        var tail = random(2000)
        tail.writeImmutableBuffer(first)
        var answer = ByteBuffer(string: #"{"id":2,"ok":"#)
        answer.writeImmutableBuffer(tail)
        let small = ByteBuffer(string: #"{"push":"Topics"}"#)
        let handler = try FrameEncoderHandler(encoding: .deflate, limits: FrameLimits(maximumLineLength: 3000))
        let channel = EmbeddedChannel(handler: handler)
        defer { _ = try? channel.finish() }
        let uses = Mutex(0)
        try channel.writeOutbound(first)
        handler.splices.offer(try FrameEncoder.precompress(tail)) { uses.withLock { $0 += 1 } }
        try channel.writeOutbound(answer)
        try channel.writeOutbound(small)
        let decoder = try FrameDecoder(encoding: .deflate)
        var lines: [ByteBuffer] = []
        while var line = try channel.readOutbound(as: ByteBuffer.self) {
            line.moveWriterIndex(to: line.writerIndex - 1)
            lines.append(line)
        }
        #expect(try lines.map { try decoder.decode(line: $0) } == [first, answer, small])
        #expect(uses.withLock { $0 } == 0)  // refused as too long spliced (over 4,000 bytes), sent whole
        #expect(lines.count == 3 && lines[1].readableBytes < 2500, "\(lines.map(\.readableBytes))")
    }

    @Test("Python's zlib reads spliced frames as the Swift decoder does")
    func pythonReadsSplicedFrames() throws {
        let encoder = try FrameEncoder(encoding: .deflate)
        var stream = ByteBuffer()
        let frames = try Self.frames(seed: 11)
        for frame in frames { try encoder.encode(frame.payload, into: &stream, splicing: frame.tail) }
        let input = FileManager.default.temporaryDirectory.appendingPathComponent("spliced-\(UUID().uuidString).bin")
        try Data(stream.readableBytesView).write(to: input)
        defer { try? FileManager.default.removeItem(at: input) }
        let root = PythonFramingTests.root
        let driver = """
            import importlib.util, sys
            spec = importlib.util.spec_from_file_location("framing", sys.argv[1])
            f = importlib.util.module_from_spec(spec); spec.loader.exec_module(f)
            d = f.Decoder("deflate")
            for line in open(sys.argv[2], "rb").read().split(b"\\n")[:-1]:
                print(d.decode(line).hex())
            """
        let outcome = try ChildProcess.run(
            "/usr/bin/env", ["python3", "-c", driver, root.appendingPathComponent(PythonFramingTests.scriptPath).path, input.path], timeout: 60)
        try #require(outcome.status == 0, "\(outcome.stderr)")
        let decoded = outcome.stdout.split(separator: "\n").map(String.init)
        #expect(decoded == frames.map(\.payload.hex))
    }
}
