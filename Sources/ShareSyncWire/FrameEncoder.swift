import NIOCore

/// Turns payloads into lines, one direction of one connection.
///
/// With a deflate encoding it writes one long-lived raw deflate stream (window 15 bits): each
/// payload is compressed with a sync flush and may refer back to the last ``historySize`` bytes of
/// the payloads before it. The deflate stream itself is borrowed for each frame from a pool shared
/// by all connections (``DeflaterPool``); the encoder keeps only those bytes. Not `Sendable`: one
/// per connection, used on its event loop. A payload it refuses (too large, newline in `plain`,
/// line too long) leaves the stream untouched, so the connection can go on.
public final class FrameEncoder {
    /// The encoding this encoder writes.
    public let encoding: FrameEncoding
    private let limits: FrameLimits
    private let deflaters: DeflaterPool?
    /// Who this encoder is to the pool's streams (``PooledStream/lastUser``).
    private let user = newStreamUser()
    /// The stream this encoder used last, while the pool keeps it.
    private weak var lastDeflater: Deflater?
    /// The last bytes of the payloads sent (at most ``historySize``): the receiver's inflate window
    /// ends with them, so the next frame may refer back into them.
    private var history = RecentBytes(limit: FrameEncoder.historySize)

    /// How far back into earlier payloads a frame may refer: 4 KiB of the 32 KiB deflate allows.
    /// Pushes of one record (about 800 bytes of JSON) compress to 0.084 of their size with 1 to
    /// 4 KiB of history, to 0.078 with the full 32 KiB and to 0.45 with none; pages of 400 records
    /// gain nothing from history (0.053 either way). A frame that does not find its own stream
    /// hashes the history again, about a nanosecond a byte.
    public static let historySize = 4096

    /// zlib's `memLevel` of the deflate streams: 5, not zlib's default 8. A deflate stream holds
    /// 2^(memLevel+7) hash heads, zeroed at every frame's reset, and a 2^(memLevel+6)-symbol
    /// buffer: at 8 that is 128 KB, at 5 16 KB. Measured when each connection held a stream of its
    /// own: an owner with 1,000 idle subscribed participants 214 → 158 MB (`sharesync-bench
    /// connections`), for 0.5 % more bytes (`sharesync-bench wire`, 0.191 → 0.192 of the payload)
    /// at the same speed. The window stays 2^15: a page may refer back 32 KiB within itself.
    public static let memoryLevel: Int32 = 5

    /// The deflate level nodes send at: 1, the fastest. Any level interoperates (the receiver only
    /// inflates); level 1 encodes 2-4 times faster than zlib's default for 3-5 points of ratio
    /// (protocol.md, "Measurements and choice").
    public static let defaultCompressionLevel: Int32 = 1

    /// Creates an encoder for one direction of one connection. `compressionLevel` (0-9, or -1 for
    /// zlib's default) applies to the deflate encodings. It throws nothing today: zlib is set up when
    /// a frame is encoded (``encode(_:into:)`` throws if it cannot be).
    public convenience init(
        encoding: FrameEncoding, limits: FrameLimits = FrameLimits(), compressionLevel: Int32 = FrameEncoder.defaultCompressionLevel
    ) throws(FrameError) {
        try self.init(encoding: encoding, limits: limits, deflaters: DeflaterPool.shared(level: compressionLevel))
    }

    /// An encoder that borrows its deflate streams from `deflaters` (tests).
    init(encoding: FrameEncoding, limits: FrameLimits = FrameLimits(), deflaters: DeflaterPool) throws(FrameError) {
        self.encoding = encoding
        self.limits = limits
        self.deflaters = encoding == .plain ? nil : deflaters
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
        case .deflate, .deflateBase64:
            try self.deflate(payload, into: &out, start: start)
        }
        try self.checkLength(of: &out, from: start)
        out.writeInteger(ByteStuffing.newline)
        if self.deflaters != nil { self.history.append(payload) }
    }

    /// Refuses (and takes back) a line over the maximum length.
    private func checkLength(of out: inout ByteBuffer, from start: Int) throws(FrameError) {
        let length = out.writerIndex - start
        guard length <= self.limits.maximumLineLength else {
            out.moveWriterIndex(to: start)
            throw .lineTooLong(length, limit: self.limits.maximumLineLength)
        }
    }

    /// Encodes `payload` into a new buffer holding one line with its `\n`.
    public func encode(_ payload: ByteBuffer) throws(FrameError) -> ByteBuffer {
        var out = ByteBufferAllocator().buffer(capacity: payload.readableBytes / 2 + 16)
        try self.encode(payload, into: &out)
        return out
    }

    /// Compresses with a sync flush, drops the trailing `00 00 FF FF` and writes the bytes escaped
    /// or in base64. An empty payload is an empty line. The stream this encoder used last goes on
    /// where it stopped if no other connection has used it since; any other is reset and primed
    /// with ``history``. A line refused as too long is refused here, while the stream is borrowed,
    /// so that a stream that went ahead of the receiver is not continued.
    private func deflate(_ payload: ByteBuffer, into out: inout ByteBuffer, start: Int) throws(FrameError) {
        guard let deflaters = self.deflaters, payload.readableBytes > 0 else { return }
        let base64 = self.encoding == .deflateBase64
        try deflaters.withStream(for: self.user, last: &self.lastDeflater) { deflater, continues throws(FrameError) in
            let compressed = try deflater.compress(payload, after: continues ? nil : self.history)
            if base64 {
                Base64.encode(compressed, into: &out)
            } else {
                ByteStuffing.escape(compressed, into: &out)
            }
            try self.checkLength(of: &out, from: start)
        }
    }
}

@available(*, unavailable)
extension FrameEncoder: Sendable {}
