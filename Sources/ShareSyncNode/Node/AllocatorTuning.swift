#if os(Linux) && canImport(Glibc)
import CMalloc
import Glibc
#endif

/// The C allocator settings the `sharesync run` daemon applies to itself at start (glibc's
/// `mallopt`; nothing elsewhere, and nothing if the operator set glibc's malloc settings through
/// the environment, which then stand). An app that embeds a node keeps its own allocator settings.
///
/// Measured reason: glibc serves allocations above its mmap threshold (128 KiB at start, raised only
/// as such blocks are freed, with the trim threshold kept at twice it) with fresh `mmap`s, and gives
/// the heap's free top back above its trim threshold, so each page of a zone a freshly started daemon
/// served (a few hundred KiB of JSON, its compressed form, the buffers in between) came from pages
/// the kernel faulted in and zeroed again: `exc_page_fault` and `clear_page_erms` in perf of the
/// owner. With the mmap threshold fixed at 1 MiB and the trim threshold at 4 MiB (setting either
/// turns glibc's adjustment off), a freshly started owner serving a 100,000-record initial sync used
/// 0.45-0.46 s of CPU against 0.52-0.55 s, and the sync daemon to daemon ran at 121,700 against
/// 113,000 records/s (`sharesync-bench suite --only initial-sync`, 3 interleaved pairs), for 1.3 MB
/// more peak RSS (1.6 MB more in the 1,000-connection fan-out, at 123.5 MB).
///
/// What it costs: blocks over 1 MiB (frames of large records) are mapped, and faulted in, every
/// time, where glibc's adjustment would have learned their size; and each malloc arena (glibc keeps
/// up to 8 per core, one per thread that allocates at once) may hold up to 4 MiB free before it gives
/// memory back, so a daemon on a machine with many cores may keep more than the figures above
/// (measured on 2 cores).
package enum AllocatorTuning {
    /// Blocks at least this large, when no free memory of the heap serves them, are mapped on their own.
    package static let mmapThreshold = 1 << 20
    /// Free memory at the top of a heap kept for reuse before it is given back to the system.
    package static let trimThreshold = 4 << 20

    /// Whether the environment sets glibc's malloc parameters (`GLIBC_TUNABLES` naming
    /// `glibc.malloc.`, or the older `MALLOC_…` variables such as `MALLOC_ARENA_MAX`): an operator's
    /// choice, left as it is.
    package static func environmentSetsMalloc(_ environment: [String: String]) -> Bool {
        environment["GLIBC_TUNABLES"]?.contains("glibc.malloc.") == true || environment.keys.contains { $0.hasPrefix("MALLOC_") }
    }

    /// Applies the settings to this process unless `environment` sets glibc's malloc parameters;
    /// true if the allocator took them.
    @discardableResult
    package static func apply(environment: [String: String]) -> Bool {
        #if os(Linux) && canImport(Glibc)
        guard !environmentSetsMalloc(environment) else { return false }
        return mallopt(M_MMAP_THRESHOLD, Int32(mmapThreshold)) == 1 && mallopt(M_TRIM_THRESHOLD, Int32(trimThreshold)) == 1
        #else
        return false
        #endif
    }
}
