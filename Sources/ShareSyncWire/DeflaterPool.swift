import CZlib
import NIOCore
import Synchronization

/// Raw deflate streams lent to encoders for one frame at a time, so that a connection does not hold
/// a deflate stream of its own between frames.
///
/// A frame of the `deflate` encodings continues one long-lived stream per connection direction: the
/// receiver inflates every frame with the same inflate stream, so a frame may refer back up to
/// 32 KiB into the payloads before it. The sender need not keep its deflate stream for that. A
/// stream that is reset, handed the last bytes the connection sent as its dictionary
/// (`deflateSetDictionary`, which raw deflate allows after a reset or a flush) and flushed with
/// `Z_SYNC_FLUSH` writes blocks that refer only to bytes the receiver's window holds, so its output
/// is a valid continuation of the connection's stream: receivers see no difference.
///
/// Streams go back to the pool after each frame, and an encoder gets its own last stream back if
/// no other connection has used it since (``Deflater/lastUser``): then the stream just goes on, with
/// no reset and the whole 32 KiB of context, exactly as a stream kept per connection. That is the
/// case whenever at most ``maximumIdle`` connections send at once. Beyond that, a frame pays the
/// reset and the dictionary.
///
/// Measured reason (calling zlib directly, since compress-nio does not expose
/// `deflateSetDictionary`): a deflate stream (window 2^15, memLevel 5) holds about 148 KB; with
/// one per connection an owner serving 1,000 participants spent 148 MB of its 323 MB on them
/// (heaptrack, `sharesync-bench suite --only fan-out`); pooled, its peak RSS is 165 MB. What a
/// frame that does not find its own stream costs: the reset and hashing the 4 KiB dictionary, about
/// 5 µs (`sharesync-bench wire`, single records: 95 → 41 MB/s when every frame paid it), and
/// references back 4 KiB rather than 32 (0.192 → 0.197 of the payload for single records).
final class DeflaterPool: Sendable {
    /// The most idle streams kept (about 148 KB each); more are freed when given back.
    static let maximumIdle = 16

    let level: Int32
    /// Whether an encoder gets its own last stream back (always, but in tests of the other path).
    let keepsAffinity: Bool
    private let idle = Mutex<[Deflater.Box]>([])

    /// A pool of its own (the nodes share ``shared(level:)``); tests use one to know which streams
    /// their encoders get.
    init(level: Int32, keepsAffinity: Bool = true) {
        self.level = level
        self.keepsAffinity = keepsAffinity
    }

    private static let pools = Mutex<[Int32: DeflaterPool]>([:])

    /// The pool of streams at compression `level`.
    static func shared(level: Int32) -> DeflaterPool {
        pools.withLock { pools in
            if let pool = pools[level] { return pool }
            let pool = DeflaterPool(level: level)
            pools[level] = pool
            return pool
        }
    }

    /// Runs `body` with a stream of this pool's level that no one else uses meanwhile: `preferred`
    /// if it is idle (the caller's own last stream), else the one idle longest, else a new one.
    func withDeflater<R>(preferring preferred: Deflater?, _ body: (Deflater) throws(FrameError) -> R) throws(FrameError) -> R {
        let taken = idle.withLock { idle -> Deflater? in
            if keepsAffinity, let preferred, let i = idle.firstIndex(where: { $0.deflater === preferred }) {
                return idle.remove(at: i).deflater
            }
            return idle.isEmpty ? nil : idle.removeFirst().deflater
        }
        let deflater: Deflater
        if let taken { deflater = taken } else { deflater = try Deflater(level: level) }
        defer {
            deflater.trim()
            let returned = Deflater.Box(deflater: deflater)
            // The least recently returned go first, so that a busy connection finds its own again.
            let dropped = idle.withLock { idle -> Deflater.Box? in
                idle.append(returned)
                return idle.count > Self.maximumIdle ? idle.removeFirst() : nil
            }
            _ = dropped  // freed here, outside the lock
        }
        return try body(deflater)
    }
}

/// One raw deflate stream (window 2^15, ``FrameEncoder/memoryLevel``) and its output buffer.
final class Deflater {
    /// A deflater moving between threads through the pool: only one holds it at a time.
    struct Box: @unchecked Sendable {
        let deflater: Deflater
    }

    /// The ``FrameEncoder`` whose frame this stream wrote last, whole; 0 if none or if a frame was
    /// refused after compressing. Only that encoder may continue the stream without a reset.
    /// Changed only by the borrower; read by the next borrower (the pool's lock orders the two).
    var lastUser: UInt64 = 0

    private let stream: UnsafeMutablePointer<z_stream>
    private var output: ByteBuffer
    /// Output buffers larger than this are not kept between frames.
    private static let keptOutputCapacity = 256 * 1024

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
    func compress(_ payload: ByteBuffer, after history: [UInt8]?) throws(FrameError) -> ByteBuffer {
        if history != nil {
            guard deflateReset(stream) == Z_OK else { throw FrameError(.invalidEncoding, "deflate could not be reset") }
        }
        if let history, !history.isEmpty {
            let rc = history.withUnsafeBufferPointer { deflateSetDictionary(stream, $0.baseAddress, UInt32($0.count)) }
            guard rc == Z_OK else { throw FrameError(.invalidEncoding, "deflate refused its dictionary (zlib error \(rc))") }
        }
        output.clear()
        output.reserveCapacity(Int(deflateBound(stream, UInt(payload.readableBytes))) + 16)
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
    fileprivate func trim() {
        if output.capacity > Self.keptOutputCapacity { output = ByteBufferAllocator().buffer(capacity: 0) }
    }
}
