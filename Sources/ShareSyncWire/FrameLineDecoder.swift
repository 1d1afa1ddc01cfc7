import NIOCore

/// A `ByteToMessageDecoder` that splits the byte stream after the handshake into `\n`-terminated
/// lines and decodes each into its payload with a ``FrameDecoder``.
///
/// It checks each line's own length against ``FrameLimits/maximumLineLength`` (and fails as soon
/// as more bytes than that are buffered without a newline). Wrap it as
/// `ByteToMessageHandler(decoder, maximumBufferSize:)`, or use ``FrameCodec/decoderHandler(encoding:limits:)``.
/// Errors are ``FrameError``s, fired through the pipeline by `ByteToMessageHandler`.
public struct FrameLineDecoder: ByteToMessageDecoder {
    public typealias InboundOut = ByteBuffer

    private let frameDecoder: FrameDecoder
    private let decodesFrames: Bool
    private let lineLimit: Int
    /// A lower frame size limit until the peer authenticates, if the connection set one: lines are
    /// then held to twice it (the most a frame's encoding grows it, escaped deflate output), so an
    /// unauthenticated peer cannot make the decoder buffer a 16 MiB line either.
    private let gate: FrameSizeGate?
    /// Bytes after the reader index already searched for a newline (so byte-by-byte input stays linear).
    private var scanned = 0

    /// Creates a decoder for one connection.
    ///
    /// With `decodesFrames` false it hands on each line as it came (without its newline), checked
    /// only for its length, and the channel's reader decodes it with a ``FrameReader`` when it takes
    /// it. A connection's servers and clients read that way: decoded here, every complete line of one
    /// read (up to 256 KiB of input) was inflated at once and held until the reader took it, so a
    /// peer sending lines of deflate that inflate a thousandfold (16 KB to 16 MiB) made a connection
    /// hold hundreds of MiB. Left to the reader, a connection holds the lines as sent, and one
    /// inflated frame at a time.
    public init(
        encoding: FrameEncoding, limits: FrameLimits = FrameLimits(), gate: FrameSizeGate? = nil, decodesFrames: Bool = true
    ) throws(FrameError) {
        self.frameDecoder = try FrameDecoder(encoding: encoding, limits: limits, gate: gate)
        self.decodesFrames = decodesFrames
        self.lineLimit = limits.maximumLineLength
        self.gate = gate
    }

    /// The longest line accepted now.
    private var maximumLineLength: Int {
        guard let gate else { return lineLimit }
        let frame = gate.current
        return frame >= lineLimit / 2 ? lineLimit : min(lineLimit, frame * 2 + 64)
    }

    public mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        guard let line = try self.nextLine(&buffer) else { return .needMoreData }
        guard decodesFrames else {
            context.fireChannelRead(Self.wrapInboundOut(line))
            return .continue
        }
        let payload = try self.frameDecoder.decode(line: line)
        ShareSyncMetrics.frameReceived(wireBytes: line.readableBytes + 1, payloadBytes: payload.readableBytes)
        context.fireChannelRead(Self.wrapInboundOut(payload))
        return .continue
    }

    public mutating func decodeLast(
        context: ChannelHandlerContext,
        buffer: inout ByteBuffer,
        seenEOF: Bool
    ) throws -> DecodingState {
        if try self.decode(context: context, buffer: &buffer) == .continue { return .continue }
        if seenEOF && buffer.readableBytes > 0 {
            let count = buffer.readableBytes
            buffer.moveReaderIndex(forwardBy: count)
            throw FrameError(.truncatedFrame, "connection closed in the middle of a line (\(count) bytes without a newline)")
        }
        return .needMoreData
    }

    /// Takes one line without its newline off `buffer`, or returns nil if none is complete.
    mutating func nextLine(_ buffer: inout ByteBuffer) throws(FrameError) -> ByteBuffer? {
        let view = buffer.readableBytesView
        let searchStart = view.startIndex + self.scanned
        guard let newline = view[searchStart...].firstIndex(of: ByteStuffing.newline) else {
            self.scanned = view.count
            if view.count > maximumLineLength {
                throw .lineTooLong(view.count, limit: maximumLineLength)
            }
            return nil
        }
        let length = newline - view.startIndex
        guard length <= maximumLineLength else {
            throw .lineTooLong(length, limit: maximumLineLength)
        }
        self.scanned = 0
        let line = buffer.readSlice(length: length)!
        buffer.moveReaderIndex(forwardBy: 1)
        return line
    }
}

@available(*, unavailable)
extension FrameLineDecoder: Sendable {}

/// Decodes the lines a ``FrameLineDecoder`` hands on undecoded (`decodesFrames: false`) into their
/// payloads, one at a time, as the channel's reader takes them. Make one per connection once its
/// session is negotiated, and give it every line in order: a deflate stream spans the connection.
public struct FrameReader {
    private let decoder: FrameDecoder

    /// A reader for a connection's lines in `session`'s encoding, within `limits` (and `gate`'s lower
    /// limit until it is lifted: the same gate as the line decoder's).
    public init(session: NegotiatedSession, limits: FrameLimits, gate: FrameSizeGate? = nil) throws(FrameError) {
        self.decoder = try FrameDecoder(encoding: session.encoding, limits: limits, gate: gate)
    }

    /// The payload of the next line: the same checks and errors as ``FrameDecoder/decode(line:)``.
    /// After an error the connection is to close: the stream cannot go on.
    public func payload(of line: ByteBuffer) throws(FrameError) -> ByteBuffer {
        let payload = try decoder.decode(line: line)
        ShareSyncMetrics.frameReceived(wireBytes: line.readableBytes + 1, payloadBytes: payload.readableBytes)
        return payload
    }
}

@available(*, unavailable)
extension FrameReader: Sendable {}

/// An outbound handler that encodes each payload `ByteBuffer` written to it into one line with a
/// ``FrameEncoder``. A payload the encoder refuses fails only that write's promise (with the
/// ``FrameError``); the connection and the deflate stream carry on.
public final class FrameEncoderHandler: ChannelOutboundHandler, RemovableChannelHandler {
    public typealias OutboundIn = ByteBuffer
    public typealias OutboundOut = ByteBuffer

    private let encoder: FrameEncoder

    /// Creates the handler for one connection.
    public init(encoding: FrameEncoding, limits: FrameLimits = FrameLimits()) throws(FrameError) {
        self.encoder = try FrameEncoder(encoding: encoding, limits: limits)
    }

    public func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let payload = Self.unwrapOutboundIn(data)
        var out = context.channel.allocator.buffer(capacity: payload.readableBytes / 2 + 16)
        do {
            try self.encoder.encode(payload, into: &out)
        } catch {
            promise?.fail(error)
            return
        }
        ShareSyncMetrics.frameSent(wireBytes: out.readableBytes, payloadBytes: payload.readableBytes)
        context.write(Self.wrapOutboundOut(out), promise: promise)
    }
}

@available(*, unavailable)
extension FrameEncoderHandler: Sendable {}
