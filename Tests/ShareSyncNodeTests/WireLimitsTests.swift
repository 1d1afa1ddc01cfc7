import ShareSyncCore
import ShareSyncWire
import Testing

@testable import ShareSyncNode

/// What a participant does with the limits an owner's welcome announces: any value comes off the wire.
@Suite("An owner's limits, as a participant uses them")
struct WireLimitsTests {
    @Test("zero, negative and huge limits are kept within reason, and batching with them does not trap")
    func limitsFromTheWireAreClamped() {
        let hostile = WireLimits(maximumItemsPerRequest: 0, maximumRecordSize: -1, maximumResponseSize: .min, maximumFrameSize: .max)
        let limits = hostile.withinReason
        #expect(limits.maximumItemsPerRequest == 1 && limits.maximumRecordSize == 1024)
        #expect(limits.maximumResponseSize == 1024 && limits.maximumFrameSize == 1 << 30)
        // A batch size of 0 (stride by 0) and Int.min minus 64 KiB trapped here.
        let record = Record(recordType: "Note", recordID: Record.ID(recordName: "n", zoneID: RecordZone.ID(zoneName: "Z")))
        let batches = ModifyItem.batches([.saving(record), .delete("m")], limits: limits)
        #expect(batches.map(\.count) == [1, 1])
        #expect(WireLimits().withinReason == WireLimits(), "the defaults are within reason")
    }
}

/// A link's queue of pushes waiting to be applied stays bounded whatever the owner sends.
@Suite("The queue of pushes a link has not applied yet")
struct PushQueueTests {
    @Test("past its capacity the queue drops what it holds and says so, and starts again empty")
    func theQueueIsBounded() {
        var queue = PushQueue<Int>()
        for i in 0..<5 { queue.add(i) }
        let some = queue.take()
        #expect(some.items == [0, 1, 2, 3, 4] && !some.dropped)
        // More than the capacity between two takes: everything goes, and the link must catch up.
        for i in 0..<(PushQueue<Int>.capacity * 10) { queue.add(i) }
        let overflowed = queue.take()
        #expect(overflowed.dropped, "the link would not know to catch up")
        #expect(overflowed.items.count < PushQueue<Int>.capacity, "\(overflowed.items.count) pushes held")
        let after = queue.take()
        #expect(after.items.isEmpty && !after.dropped)
    }
}
