import CompressNIO
import NIOCore

/// Turns lines back into payloads, one direction of one connection; the inverse of ``FrameEncoder``.
///
/// With a deflate encoding it owns one long-lived raw inflate stream. Inflating writes into a
/// fixed 64 KiB window and stops as soon as the payload would exceed the maximum frame size, so
/// a decompression bomb costs at most that much memory. Not `Sendable`: one per connection.
/// After it has thrown, the deflate context may be out of step: close the connection.
public final class FrameDecoder {
    /// The encoding this decoder reads.
    public let encoding: FrameEncoding
    private let limits: FrameLimits
    private let decompressor: ZlibDecompressor?
    private var window: ByteBuffer
    private let allocator = ByteBufferAllocator()
    private static let windowSize = 64 * 1024

    /// Creates a decoder for one direction of one connection.
    /// - Throws: ``FrameError`` if zlib cannot be initialised.
    public init(encoding: FrameEncoding, limits: FrameLimits = FrameLimits()) throws(FrameError) {
        self.encoding = encoding
        self.limits = limits
        switch encoding {
        case .plain:
            self.decompressor = nil
            self.window = ByteBufferAllocator().buffer(capacity: 0)
        case .deflate, .deflateBase64:
            do {
                self.decompressor = try ZlibDecompressor(algorithm: .deflate, windowSize: 15)
            } catch {
                throw FrameError(.inflateFailed, "cannot initialise inflate: \(error)")
            }
            self.window = ByteBufferAllocator().buffer(capacity: Self.windowSize)
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
        var payload: ByteBuffer?
        var total = 0
        while true {
            self.window.clear()
            let consumedBefore = compressed.readerIndex
            var finished = false
            do {
                try decompressor.inflate(from: &compressed, to: &self.window)
                finished = true
            } catch let error as CompressNIOError where error == .bufferOverflow {
                // The window is full: go round again.
            } catch let error as CompressNIOError where error == .inputBufferOverflow {
                finished = true
            } catch let error as CompressNIOError where error == .corruptData {
                throw FrameError(.inflateFailed, "corrupt deflate data")
            } catch {
                throw FrameError(.inflateFailed, "inflate failed: \(error)")
            }
            let produced = self.window.readableBytes
            guard total + produced <= limit else {
                throw .frameTooLarge(total + produced, limit: limit)
            }
            if produced > 0 {
                if payload == nil {
                    payload = self.allocator.buffer(capacity: finished ? produced : min(limit, produced * 2))
                }
                payload!.writeBuffer(&self.window)
                total += produced
            }
            if finished {
                guard compressed.readableBytes == 0 else {
                    throw FrameError(.inflateFailed, "data after the end of the deflate stream")
                }
                return payload ?? self.allocator.buffer(capacity: 0)
            }
            if produced == 0 && compressed.readerIndex == consumedBefore {
                throw FrameError(.inflateFailed, "inflate made no progress")
            }
        }
    }
}

@available(*, unavailable)
extension FrameDecoder: Sendable {}
