#if os(Linux) && canImport(Glibc)
import Glibc
@testable import ShareSyncNode
import Testing

/// The daemon's allocator settings (`AllocatorTuning`, applied by `sharesync run`).
@Suite struct AllocatorTuningTests {
    /// Whether glibc mapped the block at `pointer` on its own (`IS_MMAPPED`, bit 1 of the chunk's size
    /// word, just before the pointer).
    static func isMapped(_ pointer: UnsafeMutableRawPointer) -> Bool {
        (pointer.load(fromByteOffset: -MemoryLayout<Int>.size, as: Int.self) & 0x2) != 0
    }

    /// Once applied, glibc's mmap threshold is 1 MiB whatever the process freed before, so a block of
    /// 768 KiB (a few pages' answers) comes from the heap, to be reused. A smoke test in this process:
    /// without the settings glibc would map it in a fresh process (threshold 128 KiB), but here other
    /// tests may already have raised glibc's own threshold, or left a free chunk that serves it.
    @Test("apply takes, and a block of 768 KiB then comes from the heap")
    func thresholdsTakeEffect() throws {
        #expect(AllocatorTuning.apply(environment: [:]))
        let block = try #require(malloc(768 * 1024))
        defer { free(block) }
        #expect(!Self.isMapped(block))
    }

    @Test("an operator's malloc settings in the environment stand")
    func environmentSettingsStand() {
        for environment in [
            ["GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=65536"], ["MALLOC_TRIM_THRESHOLD_": "131072"],
            ["MALLOC_ARENA_MAX": "2"],
        ] {
            #expect(AllocatorTuning.environmentSetsMalloc(environment), "\(environment)")
            #expect(!AllocatorTuning.apply(environment: environment), "\(environment)")
        }
        for environment in [[:], ["GLIBC_TUNABLES": "glibc.pthread.rseq=0"], ["PATH": "/bin"], ["SHARESYNC_MALLOC": "1"]] {
            #expect(!AllocatorTuning.environmentSetsMalloc(environment), "\(environment)")
        }
    }
}
#endif
