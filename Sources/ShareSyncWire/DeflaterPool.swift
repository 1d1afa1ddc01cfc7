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
/// Measured reason (calling zlib directly, since compress-nio does not expose
/// `deflateSetDictionary`): a deflate stream (window 2^15, memLevel 5) holds about 148 KB; with
/// one per connection an owner serving 1,000 participants spent 148 MB of its 323 MB on them
/// (heaptrack, `sharesync-bench suite --only fan-out`). Lent per frame, the streams number the
/// threads encoding at once, and each connection keeps only ``FrameEncoder/historySize`` bytes.
/// What it costs: a reset and a dictionary of up to 4 KiB per frame (a few microseconds), and a push
/// can refer back only 4 KiB, not 32 (`sharesync-bench wire` gives the sizes).
final class DeflaterPool: Sendable {
    /// The most idle streams kept; more are freed when given back.
    static let maximumIdle = 8

    let level: Int32
    private let idle = Mutex<[Deflater.Box]>([])

    private init(level: Int32) { self.level = level }

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

    /// Runs `body` with a stream of this pool's level, reset, that no one else uses meanwhile.
    func withDeflater<R>(_ body: (Deflater) throws(FrameError) -> R) throws(FrameError) -> R {
        let box = idle.withLock { $0.popLast() }
        let deflater: Deflater
        if let box { deflater = box.deflater } else { deflater = try Deflater(level: level) }
        defer {
            deflater.trim()
            let returned = Deflater.Box(deflater: deflater)
            idle.withLock { idle in
                if idle.count < Self.maximumIdle { idle.append(returned) }
            }
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

    /// Deflates `payload` as the continuation of a stream whose last bytes were `history`, with a
    /// sync flush, and returns the compressed bytes without the flush's trailing `00 00 FF FF`.
    /// The buffer is this deflater's own: use it before the deflater goes back to the pool.
    func compress(_ payload: ByteBuffer, after history: [UInt8]) throws(FrameError) -> ByteBuffer {
        guard deflateReset(stream) == Z_OK else { throw FrameError(.invalidEncoding, "deflate could not be reset") }
        if !history.isEmpty {
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
