import NIOCore

/// Turns lines back into payloads, one direction of one connection; the inverse of ``FrameEncoder``.
///
/// With a deflate encoding it reads one long-lived raw inflate stream: a frame may refer back into
/// the last 32 KiB of the payloads before it. The inflate stream itself is borrowed for each frame
/// from a pool shared by all connections (``InflaterPool``): the connection's own last stream if no
/// other connection has used it since, else another, reset and given the last 32 KiB of payloads
/// (often much less) as its window. The decoder keeps only those bytes. A zlib inflate stream holds
/// 39 KB (its 32 KiB window and its state); an owner with 1,000 participants, who each send a few
/// requests, spent 39 MB on them. Inflating writes straight into the payload's buffer, which starts
/// at eight times the compressed size (JSON pages come to about 0.15) and doubles, and stops as soon
/// as the payload would exceed the maximum frame size, so a decompression bomb costs at most about
/// that much memory. Not `Sendable`: one per connection. After it has thrown, the deflate context may
/// be out of step: close the connection.
public final class FrameDecoder {
    /// The encoding this decoder reads.
    public let encoding: FrameEncoding
    private let limits: FrameLimits
    private let inflaters: InflaterPool?
    /// A lower limit until the peer authenticates, if the connection set one.
    private let gate: FrameSizeGate?
    private let allocator = ByteBufferAllocator()
    /// Who this decoder is to the pool's streams (``PooledStream/lastUser``).
    private let user = newStreamUser()
    /// The stream this decoder used last, while the pool keeps it.
    private weak var lastInflater: Inflater?
    /// The last bytes of the payloads received (at most ``windowSize``): the sender's stream may
    /// refer back into them.
    private var history = RecentBytes(limit: FrameDecoder.windowSize, layout: .contiguous)
    /// How far back a frame may refer: deflate's 32 KiB window.
    static let windowSize = 32 * 1024

    /// Creates a decoder for one direction of one connection. It throws nothing today: zlib is set up
    /// when a frame is decoded.
    /// `gate`, if given, lowers the frame size limit until it is lifted.
    public convenience init(encoding: FrameEncoding, limits: FrameLimits = FrameLimits(), gate: FrameSizeGate? = nil) throws(FrameError) {
        try self.init(encoding: encoding, limits: limits, inflaters: InflaterPool.shared, gate: gate)
    }

    /// A decoder that borrows its inflate streams from `inflaters` (tests).
    init(encoding: FrameEncoding, limits: FrameLimits = FrameLimits(), inflaters: InflaterPool, gate: FrameSizeGate? = nil) throws(FrameError) {
        self.encoding = encoding
        self.limits = limits
        self.inflaters = encoding == .plain ? nil : inflaters
        self.gate = gate
    }

    /// The largest payload accepted now: the frame limit, or the gate's lower one.
    private var frameLimit: Int { min(limits.maximumFrameSize, gate?.current ?? .max) }

    /// Decodes one line (without its `\n`) into its payload.
    /// - Throws: ``FrameError``: ``FrameError/Code/lineTooLong``, ``FrameError/Code/invalidEncoding``,
    ///   ``FrameError/Code/inflateFailed`` or ``FrameError/Code/frameTooLarge``.
    public func decode(line: ByteBuffer) throws(FrameError) -> ByteBuffer {
        guard line.readableBytes <= self.limits.maximumLineLength else {
            throw .lineTooLong(line.readableBytes, limit: self.limits.maximumLineLength)
        }
        switch self.encoding {
        case .plain:
            let limit = self.frameLimit
            guard line.readableBytes <= limit else {
                throw .frameTooLarge(line.readableBytes, limit: limit)
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
        guard let inflaters = self.inflaters else { return compressed }
        compressed.writeInteger(UInt32(0x0000_FFFF))
        let (limit, allocator) = (self.frameLimit, self.allocator)
        let input = compressed
        let payload = try inflaters.withStream(for: self.user, last: &self.lastInflater) { inflater, continues throws(FrameError) in
            try inflater.inflate(input, after: continues ? nil : self.history, limit: limit, allocator: allocator)
        }
        self.history.append(payload)
        return payload
    }
}

@available(*, unavailable)
extension FrameDecoder: Sendable {}
