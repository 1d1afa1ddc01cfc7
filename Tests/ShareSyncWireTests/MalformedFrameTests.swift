import NIOCore
import NIOEmbedded
import Testing
@testable import ShareSyncWire

/// Decodes one line with a fresh decoder and returns the error code it throws, if any.
private func errorCode(line: ByteBuffer, encoding: FrameEncoding, limits: FrameLimits = FrameLimits()) -> FrameError.Code? {
    do {
        _ = try FrameDecoder(encoding: encoding, limits: limits).decode(line: line)
        return nil
    } catch {
        return error.code
    }
}

@Suite struct MalformedFrameTests {
    @Test(arguments: ["1b03", "41421b", "1b1b", "1b00"])
    func badEscapeSequencesAreInvalidEncoding(hex: String) {
        #expect(errorCode(line: ByteBuffer(hex: hex), encoding: .deflate) == .invalidEncoding)
    }

    @Test(arguments: ["Zg=", "Zg=a", "Z===", "Zm9v!A==", "Zm9v Zg==", "Zh==", "Zg==Zg=="])
    func badBase64IsInvalidEncoding(line: String) {
        #expect(errorCode(line: ByteBuffer(string: line), encoding: .deflateBase64) == .invalidEncoding)
    }

    @Test func corruptDeflateDataIsInflateFailed() {
        // BTYPE 11 (reserved) is always invalid deflate.
        #expect(errorCode(line: ByteBuffer(hex: "ff"), encoding: .deflate) == .inflateFailed)
        #expect(errorCode(line: ByteBuffer(string: "/w=="), encoding: .deflateBase64) == .inflateFailed)
    }

    @Test func dataAfterAFinalBlockIsInflateFailed() throws {
        // A complete raw deflate stream with BFINAL set ("hello"), then more bytes.
        #expect(errorCode(line: ByteBuffer(hex: "cb48cdc9c90700"), encoding: .deflate) == .inflateFailed)
    }

    /// A cut line is a frame error or some bytes (inflating a cut stream may even give the payload
    /// back, or bytes after it): never a crash, never another kind of error, never more than the
    /// frame size limit. The JSON layer above refuses whatever is not a message.
    @Test func truncatedDeflateFailsCleanlyOrYieldsBoundedBytes() throws {
        let payloads = notePayloads(count: 5)
        let limits = FrameLimits(maximumLineLength: 4096, maximumFrameSize: 1024)
        let encoder = try FrameEncoder(encoding: .deflate, limits: limits)
        var line = try encoder.encode(payloads[0])
        line.moveWriterIndex(to: line.writerIndex - 1)
        var failures = 0
        for cut in 1..<line.readableBytes {
            let decoder = try FrameDecoder(encoding: .deflate, limits: limits)
            let truncated = line.getSlice(at: line.readerIndex, length: cut)!
            do {
                let payload = try decoder.decode(line: truncated)
                #expect(payload.readableBytes <= limits.maximumFrameSize)
            } catch {  // typed: a FrameError, never anything else
                failures += 1
                #expect([.inflateFailed, .frameTooLarge, .invalidEncoding].contains(error.code), "\(error)")
            }
        }
        #expect(failures > 0)
    }

    @Test(arguments: FrameEncoding.allCases)
    func connectionClosedMidLineIsTruncatedFrame(encoding: FrameEncoding) throws {
        let channel = EmbeddedChannel()
        try channel.pipeline.syncOperations.addHandler(FrameCodec.decoderHandler(encoding: encoding))
        var stream = try encodeStream(notePayloads(count: 2), encoding: encoding)
        stream.moveWriterIndex(to: stream.writerIndex - 10)
        try channel.writeInbound(stream)
        #expect(try channel.readInbound(as: ByteBuffer.self) != nil)
        do {
            _ = try channel.finish()
            Issue.record("expected truncatedFrame")
        } catch let error as FrameError {
            #expect(error.code == .truncatedFrame)
        }
    }

    @Test(arguments: FrameEncoding.allCases)
    func randomGarbageLinesNeverCrash(encoding: FrameEncoding) throws {
        var rng = SplitMix64(seed: 99)
        var outcomes: [String: Int] = [:]
        for _ in 0..<400 {
            let decoder = try FrameDecoder(encoding: encoding)
            for _ in 0..<3 {
                let length = Int(rng.next() % 300)
                var line = ByteBuffer()
                for _ in 0..<length {
                    var byte = UInt8(truncatingIfNeeded: rng.next())
                    if byte == 0x0A { byte = 0x0B }
                    line.writeInteger(byte)
                }
                do {
                    _ = try decoder.decode(line: line)
                    outcomes["ok", default: 0] += 1
                } catch {
                    outcomes[error.code.rawValue, default: 0] += 1
                }
            }
        }
        #expect(outcomes.values.reduce(0, +) == 1200)
        if encoding != .plain { #expect(outcomes["ok", default: 0] < 1200) }
    }

    @Test(arguments: FrameEncoding.allCases)
    func oversizedLineIsRejectedAtTheCap(encoding: FrameEncoding) throws {
        let limits = FrameLimits(maximumLineLength: 4096)
        let channel = EmbeddedChannel()
        try channel.pipeline.syncOperations.addHandler(FrameCodec.decoderHandler(encoding: encoding, limits: limits))
        let chunk = ByteBuffer(repeating: UInt8(ascii: "A"), count: 1024)
        do {
            for _ in 0..<4 { try channel.writeInbound(chunk) }  // 4096 bytes: still allowed
            try channel.writeInbound(ByteBuffer(string: "A"))
            Issue.record("accepted a line over the cap")
        } catch let error as FrameError {
            #expect(error.code == .lineTooLong)
            #expect(error.message.contains("4096"))
        }
        _ = try? channel.finish()
    }

    @Test func completeOversizedLineIsRejected() throws {
        let limits = FrameLimits(maximumLineLength: 100)
        var stream = ByteBuffer(repeating: UInt8(ascii: "B"), count: 101)
        stream.writeString("\n")
        #expect(throws: FrameError.lineTooLong(101, limit: 100)) {
            _ = try decodeLines(stream, encoding: .plain, limits: limits)
        }
    }

    @Test(arguments: [FrameEncoding.deflate, .deflateBase64])
    func decompressionBombStopsAtTheInflatedCap(encoding: FrameEncoding) throws {
        let big = FrameLimits(maximumLineLength: 1 << 30, maximumFrameSize: 1 << 30)
        let zeros = ByteBuffer(repeating: 0, count: 100_000_000)
        let bomb = try FrameEncoder(encoding: encoding, limits: big, compressionLevel: 9).encode(zeros)  // as an attacker would
        #expect(bomb.readableBytes < 200_000)
        var line = bomb
        line.moveWriterIndex(to: line.writerIndex - 1)
        let decoder = try FrameDecoder(encoding: encoding)  // default 16 MiB cap
        do {
            _ = try decoder.decode(line: line)
            Issue.record("inflated a bomb")
        } catch {
            #expect(error.code == .frameTooLarge)
            #expect(error.message.contains("\(FrameLimits.defaultMaximumFrameSize)"))
        }
    }

    @Test func frameOfExactlyTheCapIsAccepted() throws {
        let limits = FrameLimits(maximumFrameSize: 200_000)
        let payload = ByteBuffer(repeating: UInt8(ascii: "z"), count: 200_000)
        var line = try FrameEncoder(encoding: .deflate, limits: limits).encode(payload)
        line.moveWriterIndex(to: line.writerIndex - 1)
        #expect(try FrameDecoder(encoding: .deflate, limits: limits).decode(line: line) == payload)
        let smaller = FrameLimits(maximumFrameSize: 199_999)
        #expect(errorCode(line: line, encoding: .deflate, limits: smaller) == .frameTooLarge)
    }
}
