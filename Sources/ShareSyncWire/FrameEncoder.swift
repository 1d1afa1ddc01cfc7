import CompressNIO
import NIOCore

/// Turns payloads into lines, one direction of one connection.
///
/// With a deflate encoding it owns one long-lived raw deflate stream (window 15 bits): each
/// payload is compressed with a sync flush, so later frames refer back to earlier ones. Not
/// `Sendable`: one per connection, used on its event loop. A payload it refuses (too large,
/// newline in `plain`) leaves the stream untouched, so the connection can go on.
public final class FrameEncoder {
    /// The encoding this encoder writes.
    public let encoding: FrameEncoding
    private let limits: FrameLimits
    private let compressor: ZlibCompressor?
    private var scratch: ByteBuffer

    /// zlib's `memLevel` of the deflate stream: 5, not zlib's default 8. A deflate stream holds
    /// 2^(memLevel+7) hash heads (zeroed when it starts) and a 2^(memLevel+6)-symbol buffer, per
    /// connection: at 8 that is 128 KB, at 5 16 KB. Measured: an owner with 1,000 idle subscribed
    /// participants 214 → 158 MB (`sharesync-bench connections`), for 0.5 % more bytes
    /// (`sharesync-bench wire`, 0.191 → 0.192 of the payload) at the same speed. The window stays
    /// 2^15: 2^13 saved more memory under load but cost 12 % more bytes in an initial sync.
    public static let memoryLevel: Int32 = 5

    /// The deflate level nodes send at: 1, the fastest. Any level interoperates (the receiver only
    /// inflates); level 1 encodes 2-4 times faster than zlib's default for 3-5 points of ratio
    /// (protocol.md, "Measurements and choice").
    public static let defaultCompressionLevel: Int32 = 1

    /// Creates an encoder for one direction of one connection. `compressionLevel` (0-9, or -1 for
    /// zlib's default) applies to the deflate encodings.
    /// - Throws: ``FrameError`` if zlib cannot be initialised.
    public init(
        encoding: FrameEncoding, limits: FrameLimits = FrameLimits(), compressionLevel: Int32 = FrameEncoder.defaultCompressionLevel
    ) throws(FrameError) {
        self.encoding = encoding
        self.limits = limits
        self.scratch = ByteBufferAllocator().buffer(capacity: 0)
        switch encoding {
        case .plain:
            self.compressor = nil
        case .deflate, .deflateBase64:
            do {
                self.compressor = try ZlibCompressor(
                    algorithm: .deflate,
                    configuration: ZlibConfiguration(windowSize: 15, compressionLevel: compressionLevel, memoryLevel: FrameEncoder.memoryLevel)
                )
            } catch {
                throw FrameError(.inflateFailed, "cannot initialise deflate: \(error)")
            }
        }
    }

    /// Appends the line for `payload`, including its terminating `\n`, to `out`.
    /// - Throws: ``FrameError`` with ``FrameError/Code/frameTooLarge`` when the payload exceeds
    ///   the maximum frame size, ``FrameError/Code/invalidEncoding`` for a newline in a `plain`
    ///   payload, ``FrameError/Code/lineTooLong`` when the encoded line would exceed the maximum.
    ///   On error nothing is appended.
    public func encode(_ payload: ByteBuffer, into out: inout ByteBuffer) throws(FrameError) {
        guard payload.readableBytes <= self.limits.maximumFrameSize else {
            throw .frameTooLarge(payload.readableBytes, limit: self.limits.maximumFrameSize)
        }
        let start = out.writerIndex
        switch self.encoding {
        case .plain:
            if let offset = payload.readableBytesView.firstIndex(of: ByteStuffing.newline) {
                throw FrameError(.invalidEncoding, "plain payload contains a newline at offset \(offset - payload.readerIndex)")
            }
            out.writeImmutableBuffer(payload)
        case .deflate:
            let compressed = try self.deflate(payload)
            ByteStuffing.escape(compressed, into: &out)
        case .deflateBase64:
            let compressed = try self.deflate(payload)
            Base64.encode(compressed, into: &out)
        }
        let length = out.writerIndex - start
        guard length <= self.limits.maximumLineLength else {
            out.moveWriterIndex(to: start)
            throw .lineTooLong(length, limit: self.limits.maximumLineLength)
        }
        out.writeInteger(ByteStuffing.newline)
    }

    /// Encodes `payload` into a new buffer holding one line with its `\n`.
    public func encode(_ payload: ByteBuffer) throws(FrameError) -> ByteBuffer {
        var out = ByteBufferAllocator().buffer(capacity: payload.readableBytes / 2 + 16)
        try self.encode(payload, into: &out)
        return out
    }

    /// Compresses with a sync flush and drops the trailing `00 00 FF FF`. An empty payload is an
    /// empty line: the stream is not touched.
    private func deflate(_ payload: ByteBuffer) throws(FrameError) -> ByteBuffer {
        guard let compressor = self.compressor, payload.readableBytes > 0 else {
            return ByteBufferAllocator().buffer(capacity: 0)
        }
        var input = payload
        self.scratch.clear()
        self.scratch.reserveCapacity(compressor.maxSize(from: input))
        do {
            try compressor.deflate(from: &input, to: &self.scratch, flush: .sync)
        } catch {
            throw FrameError(.invalidEncoding, "deflate failed: \(error)")
        }
        guard input.readableBytes == 0, self.scratch.readableBytes >= 4,
            self.scratch.getInteger(at: self.scratch.writerIndex - 4, as: UInt32.self) == 0x0000_FFFF
        else {
            throw FrameError(.invalidEncoding, "deflate did not end with a sync flush")
        }
        self.scratch.moveWriterIndex(to: self.scratch.writerIndex - 4)
        return self.scratch
    }
}

@available(*, unavailable)
extension FrameEncoder: Sendable {}
