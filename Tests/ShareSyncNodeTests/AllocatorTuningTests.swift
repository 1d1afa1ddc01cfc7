#if canImport(Glibc)
import Glibc
import ShareSyncNode
import Testing

/// The daemon's allocator settings (`AllocatorTuning`, applied by `sharesync run`): once applied,
/// glibc's mmap threshold is fixed at 1 MiB whatever the process freed before (without them it starts
/// at 128 KiB and rises with each large block freed), so a page-sized buffer comes from the heap, to
/// be reused, not from a mapping of its own. (Whether a larger block is mapped depends on what the
/// heap holds free already: a free chunk large enough serves it. Not checked.)
@Suite struct AllocatorTuningTests {
    /// Whether glibc mapped the block at `pointer` on its own (`IS_MMAPPED`, bit 1 of the chunk's size
    /// word, just before the pointer).
    static func isMapped(_ pointer: UnsafeMutableRawPointer) -> Bool {
        (pointer.load(fromByteOffset: -MemoryLayout<Int>.size, as: Int.self) & 0x2) != 0
    }

    @Test("after apply, a block of 768 KiB comes from the heap")
    func thresholdsTakeEffect() throws {
        #expect(AllocatorTuning.apply())
        let page = try #require(malloc(768 * 1024))
        defer { free(page) }
        #expect(!Self.isMapped(page))
    }
}
#endif
