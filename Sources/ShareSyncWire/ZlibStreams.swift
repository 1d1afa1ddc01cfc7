import CZlib
import NIOCore
import Synchronization

/// A zlib stream a ``StreamPool`` lends.
protocol PooledStream: AnyObject {
    /// The encoder or decoder whose frame this stream handled last, whole; 0 if none, or if the
    /// frame failed after the stream moved. Only that one may go on with the stream as it is.
    /// Changed only by the borrower; read by the next borrower (the pool's lock orders the two).
    var lastUser: UInt64 { get set }
    /// Lets go of what should not be kept while idle.
    func trim()
}

/// A new identity for ``PooledStream/lastUser``, unique for the process.
func newStreamUser() -> UInt64 { streamUsers.add(1, ordering: .relaxed).newValue }
private let streamUsers = Atomic<UInt64>(0)

/// zlib streams lent to encoders and decoders for one frame at a time, so that a connection does not
/// hold a deflate or inflate stream of its own between frames.
///
/// A frame of the `deflate` encodings continues one long-lived stream per connection direction: the
/// receiver inflates every frame with the same inflate stream, so a frame may refer back up to
/// 32 KiB into the payloads before it. The sender need not keep its deflate stream for that. A
/// stream that is reset, handed the last bytes the connection sent as its dictionary
/// (`deflateSetDictionary`, which raw deflate allows after a reset or a flush) and flushed with
/// `Z_SYNC_FLUSH` writes blocks that refer only to bytes the receiver's window holds, so its output
/// is a valid continuation of the connection's stream: receivers see no difference.
///
/// Inflating works the same way round (``Inflater``): raw inflate accepts `inflateSetDictionary`
/// at any time, so a decoder that keeps the last 32 KiB of the payloads it received (often much less:
/// what a participant sends an owner is a few requests) can inflate each frame with any stream.
///
/// Streams go back to the pool after each frame, and a connection gets its own last stream back if
/// no other connection has used it since (``PooledStream/lastUser``, kept by ``withStream(for:last:_:)``): then the stream just goes on, with
/// no reset and the whole 32 KiB of context, exactly as a stream kept per connection. That is the
/// case whenever at most ``maximumIdle`` connections send at once. Beyond that, a frame pays the
/// reset and the dictionary.
///
/// Measured reason (calling zlib directly, since compress-nio does not expose
/// `deflateSetDictionary`): a deflate stream (window 2^15, memLevel 5) holds about 148 KB; with
/// one per connection an owner serving 1,000 participants spent 148 MB of its 323 MB on them
/// (heaptrack, `sharesync-bench suite --only fan-out`); with deflate streams pooled its peak RSS
/// was 165 MB, and 147 MB with inflate streams pooled too (39 KB each). What a
/// frame that does not find its own stream costs: the reset and hashing the 4 KiB dictionary, about
/// 5 µs (`sharesync-bench wire`, single records: 95 → 41 MB/s when every frame paid it), and
/// references back 4 KiB rather than 32 (0.192 → 0.197 of the payload for single records).
final class StreamPool<Stream: PooledStream>: Sendable {
    /// The most idle streams kept (a deflate stream holds about 148 KB, an inflate stream 39 KB);
    /// more are freed when given back.
    static var maximumIdle: Int { 16 }

    /// Whether a connection gets its own last stream back (always, but in tests of the other path).
    let keepsAffinity: Bool
    private let make: @Sendable () throws(FrameError) -> Stream
    private let idle = Mutex<[Box]>([])

    private struct Box: @unchecked Sendable {  // only one thread holds a stream at a time
        let stream: Stream
    }

    /// A pool of its own (the nodes share `DeflaterPool.shared(level:)` and `InflaterPool.shared`);
    /// tests use one to know which streams their encoders and decoders get.
    init(keepsAffinity: Bool = true, make: @escaping @Sendable () throws(FrameError) -> Stream) {
        self.keepsAffinity = keepsAffinity
        self.make = make
    }

    /// Runs `body` for the encoder or decoder `user` with a stream that no one else uses meanwhile:
    /// `last` (the caller's own last stream) if it is idle, else the one idle longest, else a new
    /// one. `body` learns whether the stream is as the caller's last frame left it (it may go on
    /// with it) or must be reset. Once `body` returns, the stream is the caller's `last`; if it
    /// throws, the stream is no one's, so nobody goes on with a stream a failed frame moved.
    func withStream<R>(
        for user: UInt64, last: inout Stream?, _ body: (Stream, _ continues: Bool) throws(FrameError) -> R
    ) throws(FrameError) -> R {
        let stream = try take(preferring: last)
        defer { giveBack(stream) }
        let continues = keepsAffinity && stream.lastUser == user
        stream.lastUser = 0  // until the frame is whole
        let result = try body(stream, continues)
        stream.lastUser = user
        last = stream
        return result
    }

    private func take(preferring preferred: Stream?) throws(FrameError) -> Stream {
        let taken = idle.withLock { idle -> Stream? in
            if keepsAffinity, let preferred, let i = idle.firstIndex(where: { $0.stream === preferred }) {
                return idle.remove(at: i).stream
            }
            return idle.isEmpty ? nil : idle.removeFirst().stream
        }
        if let taken { return taken }
        return try make()
    }

    private func giveBack(_ stream: Stream) {
        stream.trim()
        let returned = Box(stream: stream)
        // The least recently returned go first, so that a busy connection finds its own again.
        let dropped = idle.withLock { idle -> Box? in
            idle.append(returned)
            return idle.count > Self.maximumIdle ? idle.removeFirst() : nil
        }
        _ = dropped  // freed here, outside the lock
    }
}

typealias DeflaterPool = StreamPool<Deflater>

extension StreamPool where Stream == Deflater {
    /// A pool of deflate streams at compression `level`.
    convenience init(level: Int32, keepsAffinity: Bool = true) {
        self.init(keepsAffinity: keepsAffinity) { () throws(FrameError) in try Deflater(level: level) }
    }

    /// The pool of deflate streams at compression `level` that every encoder of the process shares.
    static func shared(level: Int32) -> DeflaterPool {
        sharedDeflaters.withLock { pools in
            if let pool = pools[level] { return pool }
            let pool = DeflaterPool(level: level)
            pools[level] = pool
            return pool
        }
    }
}

private let sharedDeflaters = Mutex<[Int32: DeflaterPool]>([:])

typealias InflaterPool = StreamPool<Inflater>

extension StreamPool where Stream == Inflater {
    /// A pool of raw inflate streams.
    convenience init(keepsAffinity: Bool = true) {
        self.init(keepsAffinity: keepsAffinity) { () throws(FrameError) in try Inflater() }
    }

    /// The pool of inflate streams every decoder of the process shares.
    static let shared = InflaterPool()
}

/// One raw deflate stream (window 2^15, ``FrameEncoder/memoryLevel``) and its output buffer.
final class Deflater: PooledStream {
    var lastUser: UInt64 = 0

    private let stream: UnsafeMutablePointer<z_stream>
    private var output: ByteBuffer
    /// Output buffers larger than this are not kept between frames.
    private static let keptOutputCapacity = 1024 * 1024

    init(level: Int32) throws(FrameError) {
        stream = .allocate(capacity: 1)
        stream.initialize(to: z_stream())
        let rc = CZlib_deflateInit2(stream, level, -15, FrameEncoder.memoryLevel)
        guard rc == Z_OK else {
            stream.deinitialize(count: 1)
            stream.deallocate()
            throw FrameError(.invalidEncoding, "cannot initialise deflate (zlib error \(rc))")
        }
        output = ByteBufferAllocator().buffer(capacity: 0)
    }

    deinit {
        deflateEnd(stream)
        stream.deinitialize(count: 1)
        stream.deallocate()
    }

    /// Deflates `payload` with a sync flush and returns the compressed bytes without the flush's
    /// trailing `00 00 FF FF`: with a `history`, as a fresh stream primed with those last bytes of
    /// the connection; without, as the continuation of this stream. The buffer is this deflater's
    /// own: use it before the deflater goes back to the pool.
    func compress(_ payload: ByteBuffer, after history: RecentBytes?) throws(FrameError) -> ByteBuffer {
        if history != nil {
            guard deflateReset(stream) == Z_OK else { throw FrameError(.invalidEncoding, "deflate could not be reset") }
        }
        if let history, !history.isEmpty {
            let rc = history.withContiguousBytes { deflateSetDictionary(stream, $0.baseAddress, UInt32($0.count)) }
            guard rc == Z_OK else { throw FrameError(.invalidEncoding, "deflate refused its dictionary (zlib error \(rc))") }
        }
        output.clear()
        // Room for JSON at a ratio of a half (pages come to about 0.15); the loop grows it if not.
        // Reserving deflate's bound (more than the payload) made every page's buffer too big to keep.
        output.reserveCapacity(payload.readableBytes / 2 + 64)
        let rc = payload.withUnsafeReadableBytes { input in self.deflateAll(input) }
        guard rc == Z_OK || rc == Z_BUF_ERROR, stream.pointee.avail_in == 0, output.readableBytes >= 4,
            output.getInteger(at: output.writerIndex - 4, as: UInt32.self) == 0x0000_FFFF
        else {
            throw FrameError(.invalidEncoding, "deflate did not end with a sync flush (zlib \(rc))")
        }
        output.moveWriterIndex(to: output.writerIndex - 4)
        return output
    }

    /// Deflates all of `input` with a sync flush into `output`, growing it as needed; zlib's last code.
    private func deflateAll(_ input: UnsafeRawBufferPointer) -> Int32 {
        stream.pointee.next_in = UnsafeMutablePointer(mutating: input.bindMemory(to: Bytef.self).baseAddress)
        stream.pointee.avail_in = UInt32(input.count)
        defer { stream.pointee.next_in = nil }
        var rc = Z_OK
        repeat {
            if output.writableBytes < 64 { output.reserveCapacity(output.capacity * 2 + 64) }
            rc = deflateStep()
            // A flush that filled the output has more to write (zlib's manual, `deflate`).
        } while rc == Z_OK && (stream.pointee.avail_in > 0 || stream.pointee.avail_out == 0)
        return rc
    }

    /// One call of `deflate(Z_SYNC_FLUSH)` into `output`'s free space.
    private func deflateStep() -> Int32 {
        let stream = self.stream
        let (rc, written) = output.withUnsafeMutableWritableBytes { out -> (Int32, Int) in
            stream.pointee.next_out = out.bindMemory(to: Bytef.self).baseAddress
            stream.pointee.avail_out = UInt32(out.count)
            let rc = deflate(stream, Z_SYNC_FLUSH)
            let written = out.count - Int(stream.pointee.avail_out)
            stream.pointee.next_out = nil
            return (rc, written)
        }
        output.moveWriterIndex(forwardBy: written)
        return rc
    }

    /// Lets go of a large output buffer (a big frame's) before the deflater is kept idle.
    func trim() {
        if output.capacity > Self.keptOutputCapacity { output = ByteBufferAllocator().buffer(capacity: 0) }
    }
}

/// One raw inflate stream (window 2^15).
final class Inflater: PooledStream {
    var lastUser: UInt64 = 0
    private let stream: UnsafeMutablePointer<z_stream>

    init() throws(FrameError) {
        stream = .allocate(capacity: 1)
        stream.initialize(to: z_stream())
        let rc = CZlib_inflateInit2(stream, -15)
        guard rc == Z_OK else {
            stream.deinitialize(count: 1)
            stream.deallocate()
            throw FrameError(.inflateFailed, "cannot initialise inflate (zlib error \(rc))")
        }
    }

    deinit {
        inflateEnd(stream)
        stream.deinitialize(count: 1)
        stream.deallocate()
    }

    func trim() {}

    /// Inflates all of `compressed` (a frame's deflate data, `00 00 FF FF` appended) into a new
    /// buffer: with a `history`, as a fresh stream whose window is those last bytes of the
    /// connection; without, as the continuation of this stream. The buffer starts at eight times the
    /// compressed size and doubles; inflating stops as soon as the payload exceeds `limit`.
    func inflate(
        _ compressed: ByteBuffer, after history: RecentBytes?, limit: Int, allocator: ByteBufferAllocator
    ) throws(FrameError) -> ByteBuffer {
        if let history {
            guard inflateReset(stream) == Z_OK else { throw FrameError(.inflateFailed, "inflate could not be reset") }
            if !history.isEmpty {
                let rc = history.withContiguousBytes { inflateSetDictionary(stream, $0.baseAddress, UInt32($0.count)) }
                guard rc == Z_OK else { throw FrameError(.inflateFailed, "inflate refused its window (zlib error \(rc))") }
            }
        }
        var payload = allocator.buffer(capacity: min(limit + 1, max(1024, compressed.readableBytes * 8)))
        try compressed.withUnsafeReadableBytes { (input) throws(FrameError) in
            try self.inflateAll(input, into: &payload, limit: limit)
        }
        return payload
    }

    private func inflateAll(_ input: UnsafeRawBufferPointer, into payload: inout ByteBuffer, limit: Int) throws(FrameError) {
        stream.pointee.next_in = UnsafeMutablePointer(mutating: input.bindMemory(to: Bytef.self).baseAddress)
        stream.pointee.avail_in = UInt32(input.count)
        defer { stream.pointee.next_in = nil }
        while true {
            if payload.writableBytes == 0 { payload.reserveCapacity(min(limit + 1, payload.capacity * 2)) }
            let before = (input: stream.pointee.avail_in, output: payload.writerIndex)
            let rc = inflateStep(into: &payload)
            switch rc {
            case Z_OK, Z_BUF_ERROR:
                break
            case Z_STREAM_END:
                // A block marked final: the stream of a connection never ends.
                throw FrameError(.inflateFailed, "data after the end of the deflate stream")
            case Z_DATA_ERROR, Z_NEED_DICT:
                throw FrameError(.inflateFailed, "corrupt deflate data")
            default:
                throw FrameError(.inflateFailed, "inflate failed (zlib error \(rc))")
            }
            guard payload.readableBytes <= limit else { throw .frameTooLarge(payload.readableBytes, limit: limit) }
            // All of the input taken and room left over: the payload is whole.
            if stream.pointee.avail_in == 0 && stream.pointee.avail_out > 0 { return }
            if stream.pointee.avail_in == before.input && payload.writerIndex == before.output && stream.pointee.avail_out > 0 {
                throw FrameError(.inflateFailed, "inflate made no progress")
            }
        }
    }

    /// One call of `inflate(Z_SYNC_FLUSH)` into `payload`'s free space.
    private func inflateStep(into payload: inout ByteBuffer) -> Int32 {
        let stream = self.stream
        let (rc, written) = payload.withUnsafeMutableWritableBytes { out -> (Int32, Int) in
            stream.pointee.next_out = out.bindMemory(to: Bytef.self).baseAddress
            stream.pointee.avail_out = UInt32(out.count)
            let rc = CZlib.inflate(stream, Z_SYNC_FLUSH)
            let written = out.count - Int(stream.pointee.avail_out)
            stream.pointee.next_out = nil
            return (rc, written)
        }
        payload.moveWriterIndex(forwardBy: written)
        return rc
    }
}

/// The last bytes a connection's stream carried (at most `limit`): what the receiver's inflate
/// window ends with, or what a sender's reset stream is primed with.
///
/// Two layouts, as the bytes are used. A `ring` grows to `limit` and then wraps around, so keeping
/// it costs a copy of each payload's bytes, never a shift of what is kept (shifting 32 KiB for every
/// small frame halved the decoding speed of single-record frames); handing the bytes out in one piece
/// then costs a copy when they wrap. A sender uses it: it primes a stream with its 4 KiB only when
/// the stream it gets is not its own. `contiguous` keeps up to twice `limit` and moves the last
/// `limit` bytes to the front when that fills, once per `limit` bytes appended, so the bytes are
/// always in one piece: a receiver hands its 32 KiB to zlib for every frame whose stream is not its
/// own, which a process with many connections does for most frames (the bench's 100 participants:
/// the ring's copies were about 2 % of their CPU, perf).
struct RecentBytes {
    enum Layout {
        case ring
        case contiguous
    }

    let limit: Int
    private let layout: Layout
    private var bytes: [UInt8] = []
    /// In a ring, where the oldest byte is once `bytes` is full (and where the next one goes).
    private var start = 0

    init(limit: Int, layout: Layout = .ring) {
        self.limit = limit
        self.layout = layout
    }

    var isEmpty: Bool { bytes.isEmpty }

    mutating func append(_ payload: ByteBuffer) {
        payload.withUnsafeReadableBytes { append($0.bindMemory(to: UInt8.self)) }
    }

    private mutating func append(_ source: UnsafeBufferPointer<UInt8>) {
        var source = source[...]
        if source.count >= limit {
            bytes = Array(source.suffix(limit))
            start = 0
            return
        }
        if layout == .contiguous {
            if bytes.count + source.count > 2 * limit {
                bytes.removeFirst(bytes.count - min(bytes.count, limit - source.count))
            } else if bytes.count + source.count > limit {
                bytes.reserveCapacity(2 * limit)
            }
            bytes.append(contentsOf: source)
            return
        }
        if bytes.count < limit {
            let taken = source.prefix(limit - bytes.count)
            bytes.append(contentsOf: taken)
            source = source.dropFirst(taken.count)
        }
        while !source.isEmpty {
            let n = min(limit - start, source.count)
            let (at, from) = (start, source.base.baseAddress! + source.startIndex)
            bytes.withUnsafeMutableBufferPointer { ring in (ring.baseAddress! + at).update(from: from, count: n) }
            start = (start + n) % limit
            source = source.dropFirst(n)
        }
    }

    /// Runs `body` with the bytes oldest first, in one piece.
    func withContiguousBytes<R>(_ body: (UnsafeBufferPointer<UInt8>) -> R) -> R {
        if layout == .contiguous {
            return bytes.withUnsafeBufferPointer { all in body(UnsafeBufferPointer(rebasing: all[max(0, all.count - limit)...])) }
        }
        if start == 0 { return bytes.withUnsafeBufferPointer(body) }
        let ordered = Array(bytes[start...]) + bytes[..<start]
        return ordered.withUnsafeBufferPointer(body)
    }

    /// The bytes oldest first (tests).
    var contents: [UInt8] { withContiguousBytes { Array($0) } }
}
