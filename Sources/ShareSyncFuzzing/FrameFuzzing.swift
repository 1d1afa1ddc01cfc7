import NIOCore
import NIOEmbedded
import ShareSyncWire

/// The frame decoder target. Input: one selector byte, then the byte stream after the handshake.
///
/// - `selector % 3` chooses the encoding (`deflate`, `deflate-base64`, `plain`).
/// - `selector & 0x80 == 0`: the stream is split at `\n` and each line goes to one `FrameDecoder`
///   (one inflate context for the whole stream, as on a connection), until the first error. Every
///   payload decoded is then encoded again with a fresh `FrameEncoder` and decoded with a fresh
///   decoder: it must come back unchanged.
/// - `selector & 0x80 != 0`: the stream goes to a `FrameLineDecoder` in a `ByteToMessageHandler`
///   on an `EmbeddedChannel` in chunks of `(selector >> 2) & 0x1F + 1` bytes; the payloads it
///   produces must be those the line-by-line path gives (a prefix of them, if it stops on an error).
///
/// The limits are small (4 KiB lines, 16 KiB frames) so that a decompression bomb meets the limit.
enum FrameFuzzing {
    static let limits = FrameLimits(maximumLineLength: 4096, maximumFrameSize: 16 * 1024, idleTimeout: nil)
    /// For re-encoding what was decoded: base64 of a 16 KiB payload does not fit a 4 KiB line.
    static let roomyLimits = FrameLimits(maximumLineLength: 64 * 1024, maximumFrameSize: 16 * 1024, idleTimeout: nil)
    static let lineErrors: Set<FrameError.Code> = [.lineTooLong, .frameTooLarge, .invalidEncoding, .inflateFailed]

    static func run(_ input: UnsafeRawBufferPointer) throws(FuzzFailure) {
        guard let selector = input.first else { return }
        let encoding = FrameEncoding.allCases[Int(selector) % FrameEncoding.allCases.count]
        let stream = ByteBuffer(bytes: input.dropFirst())
        let direct = try decodeLines(stream, encoding: encoding)
        if selector & 0x80 == 0 {
            try reencode(direct.payloads, encoding: encoding)
        } else {
            let chunk = Int(selector >> 2) & 0x1F + 1
            let piped = try decodeInPipeline(stream, encoding: encoding, chunkSize: chunk)
            try check(
                Array(direct.payloads.prefix(piped.count)) == piped,
                "\(encoding): the pipeline gave \(piped.count) payloads, the lines \(direct.payloads.count), not a prefix")
            if direct.error == nil && direct.endsWithNewline {
                try check(piped.count == direct.payloads.count, "\(encoding): the pipeline stopped early at \(piped.count) of \(direct.payloads.count) payloads")
            }
        }
    }

    /// Decodes the complete lines of `stream` with one decoder until the first error.
    static func decodeLines(
        _ stream: ByteBuffer, encoding: FrameEncoding
    ) throws(FuzzFailure) -> (payloads: [ByteBuffer], error: FrameError?, endsWithNewline: Bool) {
        let decoder: FrameDecoder
        do { decoder = try FrameDecoder(encoding: encoding, limits: limits) } catch { throw FuzzFailure("FrameDecoder.init: \(error)") }
        var rest = stream
        var payloads: [ByteBuffer] = []
        while let newline = rest.readableBytesView.firstIndex(of: 0x0A) {
            let line = rest.readSlice(length: newline - rest.readerIndex)!
            rest.moveReaderIndex(forwardBy: 1)
            do {
                let payload = try decoder.decode(line: line)
                try check(
                    payload.readableBytes <= limits.maximumFrameSize,
                    "\(encoding): a payload of \(payload.readableBytes) bytes passed the frame size \(limits.maximumFrameSize)")
                if encoding == .plain { try check(payload == line, "plain: the payload is not the line") }
                if line.readableBytes == 0 { try check(payload.readableBytes == 0, "\(encoding): an empty line gave a payload") }
                payloads.append(payload)
            } catch let error as FrameError {
                try check(lineErrors.contains(error.code), "\(encoding): unexpected error \(error) for a line")
                return (payloads, error, true)
            } catch {
                throw error as! FuzzFailure
            }
        }
        return (payloads, nil, rest.readableBytes == 0)
    }

    /// Encodes `payloads` on one fresh stream, decodes them on another: they must come back unchanged.
    static func reencode(_ payloads: [ByteBuffer], encoding: FrameEncoding) throws(FuzzFailure) {
        guard !payloads.isEmpty else { return }
        do {
            let encoder = try FrameEncoder(encoding: encoding, limits: roomyLimits)
            let decoder = try FrameDecoder(encoding: encoding, limits: roomyLimits)
            for payload in payloads {
                var line = try encoder.encode(payload)
                try check(line.readableBytesView.last == 0x0A, "\(encoding): an encoded line without its newline")
                line.moveWriterIndex(to: line.writerIndex - 1)
                try check(!line.readableBytesView.contains(0x0A), "\(encoding): an encoded line with a newline inside")
                let again = try decoder.decode(line: line)
                try check(again == payload, "\(encoding): a payload did not survive encoding and decoding again")
            }
        } catch let error as FuzzFailure {
            throw error
        } catch {
            throw FuzzFailure("\(encoding): re-encoding a decoded payload failed: \(error)")
        }
    }

    /// Feeds `stream` to a `FrameLineDecoder` in a `ByteToMessageHandler`, `chunkSize` bytes at a time.
    static func decodeInPipeline(_ stream: ByteBuffer, encoding: FrameEncoding, chunkSize: Int) throws(FuzzFailure) -> [ByteBuffer] {
        let channel = EmbeddedChannel()
        defer { _ = try? channel.finish(acceptAlreadyClosed: true) }
        do {
            try channel.pipeline.syncOperations.addHandler(FrameCodec.decoderHandler(encoding: encoding, limits: limits))
        } catch {
            throw FuzzFailure("cannot build the pipeline: \(error)")
        }
        var payloads: [ByteBuffer] = []
        var rest = stream
        var failed = false
        while rest.readableBytes > 0 && !failed {
            let chunk = rest.readSlice(length: min(chunkSize, rest.readableBytes))!
            do {
                try channel.writeInbound(chunk)
            } catch let error as FrameError {
                try check(lineErrors.contains(error.code), "\(encoding): unexpected error \(error) in the pipeline")
                failed = true
            } catch {
                // ByteToMessageHandler's own buffer cap is the other legitimate answer to a long line.
                failed = true
            }
            while let payload = try? channel.readInbound(as: ByteBuffer.self) { payloads.append(payload) }
        }
        return payloads
    }
}
