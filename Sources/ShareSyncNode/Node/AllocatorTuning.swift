#if canImport(Glibc)
import CMalloc
#endif

/// The C allocator settings the `sharesync run` daemon applies to itself at start (glibc's
/// `mallopt`; nothing elsewhere). An app that embeds a node keeps its own allocator settings.
///
/// Measured reason: glibc serves allocations above its mmap threshold (128 KiB at start, raised only
/// as such blocks are freed) with fresh `mmap`s and gives the heap's free top back above its trim
/// threshold, so each page of a zone a daemon serves (a few hundred KiB of JSON, its compressed
/// form, the growing buffers in between) came from pages the kernel faulted in and zeroed again:
/// `exc_page_fault` and `clear_page_erms` in perf of the owner. With the mmap threshold fixed at
/// 1 MiB and the trim threshold at 4 MiB, a freshly started owner serving a 100,000-record initial
/// sync used 0.46 s of CPU against 0.51-0.57 s (`sharesync-bench suite --only initial-sync`, 3
/// interleaved pairs; daemon to daemon 120,000 against 112,000 records/s), for 1.3 MB more peak RSS
/// (and 1.6 MB in the 1,000-connection fan-out, at 123.5 MB).
public enum AllocatorTuning {
    /// Allocations at least this large are mapped on their own (a frame of several MiB).
    public static let mmapThreshold = 1 << 20
    /// Free memory at the top of a heap kept for reuse before it is given back to the system.
    public static let trimThreshold = 4 << 20

    /// Applies the settings to this process; true if the allocator took them.
    @discardableResult
    public static func apply() -> Bool {
        #if canImport(Glibc)
        return mallopt(M_MMAP_THRESHOLD, Int32(mmapThreshold)) == 1 && mallopt(M_TRIM_THRESHOLD, Int32(trimThreshold)) == 1
        #else
        return false
        #endif
    }
}
