import ShareSyncCore
import Testing

@Suite("Splitting into batches by count and bytes")
struct BatchedTests {
    @Test func batchesKeepTheOrderAndRespectBothLimitsButAnOversizedElementGoesAlone() {
        let sizes = [3, 3, 3, 10, 1, 1, 1, 1, 1, 4, 4]
        let batches = sizes.batched(maximumCount: 4, maximumBytes: 7) { $0 }
        #expect(batches == [[3, 3], [3], [10], [1, 1, 1, 1], [1, 4], [4]])
        #expect(batches.flatMap { $0 } == sizes)
        for batch in batches where batch.count > 1 {
            #expect(batch.count <= 4 && batch.reduce(0, +) <= 7)
        }
        #expect([Int]().batched(maximumCount: 4, maximumBytes: 7) { $0 }.isEmpty)
    }
}
