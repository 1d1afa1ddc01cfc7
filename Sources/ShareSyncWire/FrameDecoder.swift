import CompressNIO
import NIOCore

/// Turns lines back into payloads, one direction of one connection; the inverse of ``FrameEncoder``.
///
/// With a deflate encoding it owns one long-lived raw inflate stream. Inflating writes straight
/// into the payload's buffer, which starts at four times the compressed size and doubles, and stops
/// as soon as the payload would exceed the maximum frame size, so a decompression bomb costs at most
/// about that much memory. Nothing is kept between frames but zlib's own 32 KiB window (a fixed
/// 64 KiB output window per connection cost an owner with 1,000 participants 64 MB; measured with
/// heaptrack, `sharesync-bench suite --only fan-out`). Not `Sendable`: one per connection.
/// After it has thrown, the deflate context may be out of step: close the connection.
public final class FrameDecoder {
    /// The encoding this decoder reads.
    public let encoding: FrameEncoding
    private let limits: FrameLimits
    private let decompressor: ZlibDecompressor?
    private let allocator = ByteBufferAllocator()
    /// The smallest buffer a payload is inflated into.
    private static let minimumCapacity = 1024

    /// Creates a decoder for one direction of one connection.
    /// - Throws: ``FrameError`` if zlib cannot be initialised.
    public init(encoding: FrameEncoding, limits: FrameLimits = FrameLimits()) throws(FrameError) {
        self.encoding = encoding
        self.limits = limits
        switch encoding {
        case .plain:
            self.decompressor = nil
        case .deflate, .deflateBase64:
            do {
                self.decompressor = try ZlibDecompressor(algorithm: .deflate, windowSize: 15)
            } catch {
                throw FrameError(.inflateFailed, "cannot initialise inflate: \(error)")
            }
        }
    }

    /// Decodes one line (without its `\n`) into its payload.
    /// - Throws: ``FrameError``: ``FrameError/Code/lineTooLong``, ``FrameError/Code/invalidEncoding``,
    ///   ``FrameError/Code/inflateFailed`` or ``FrameError/Code/frameTooLarge``.
    public func decode(line: ByteBuffer) throws(FrameError) -> ByteBuffer {
        guard line.readableBytes <= self.limits.maximumLineLength else {
            throw .lineTooLong(line.readableBytes, limit: self.limits.maximumLineLength)
        }
        switch self.encoding {
        case .plain:
            guard line.readableBytes <= self.limits.maximumFrameSize else {
                throw .frameTooLarge(line.readableBytes, limit: self.limits.maximumFrameSize)
            }
            if line.readableBytesView.contains(ByteStuffing.newline) {
                throw FrameError(.invalidEncoding, "raw newline inside a line")
            }
            return line
        case .deflate:
            guard line.readableBytes > 0 else { return line }
            var compressed = self.allocator.buffer(capacity: line.readableBytes + 4)
            try ByteStuffing.unescape(line, into: &compressed)
            return try self.inflate(&compressed)
        case .deflateBase64:
            guard line.readableBytes > 0 else { return line }
            var compressed = self.allocator.buffer(capacity: line.readableBytes / 4 * 3 + 4)
            try Base64.decode(line, into: &compressed)
            return try self.inflate(&compressed)
        }
    }

    /// Re-appends `00 00 FF FF` and inflates, stopping at the maximum frame size.
    private func inflate(_ compressed: inout ByteBuffer) throws(FrameError) -> ByteBuffer {
        guard let decompressor = self.decompressor else { return compressed }
        compressed.writeInteger(UInt32(0x0000_FFFF))
        let limit = self.limits.maximumFrameSize
        var payload = self.allocator.buffer(capacity: min(limit + 1, max(Self.minimumCapacity, compressed.readableBytes * 4)))
        while true {
            let consumedBefore = compressed.readerIndex
            let producedBefore = payload.writerIndex
            var finished = false
            do {
                try decompressor.inflate(from: &compressed, to: &payload)
                finished = true
            } catch let error as CompressNIOError where error == .bufferOverflow {
                // The buffer is full: grow it and go round again.
            } catch let error as CompressNIOError where error == .inputBufferOverflow {
                finished = true
            } catch let error as CompressNIOError where error == .corruptData {
                throw FrameError(.inflateFailed, "corrupt deflate data")
            } catch {
                throw FrameError(.inflateFailed, "inflate failed: \(error)")
            }
            guard payload.readableBytes <= limit else {
                throw .frameTooLarge(payload.readableBytes, limit: limit)
            }
            if finished {
                guard compressed.readableBytes == 0 else {
                    throw FrameError(.inflateFailed, "data after the end of the deflate stream")
                }
                return payload
            }
            if payload.writerIndex == producedBefore && compressed.readerIndex == consumedBefore {
                throw FrameError(.inflateFailed, "inflate made no progress")
            }
            // One byte past the limit is enough to know the payload is too large.
            if payload.writableBytes == 0 { payload.reserveCapacity(min(limit + 1, payload.capacity * 2)) }
        }
    }
}

@available(*, unavailable)
extension FrameDecoder: Sendable {}
