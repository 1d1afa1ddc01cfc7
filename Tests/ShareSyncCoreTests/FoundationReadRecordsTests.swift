import Foundation
import Testing

@testable import ShareSyncCore

/// Share records are read by `JSONDecoder` (the hand-written reader leaves them to it); the same bytes
/// are decoded once and then served from ``FoundationReadRecords``.
@Suite("Records that only JSONDecoder reads, decoded once per bytes")
struct FoundationReadRecordsTests {
    /// A share with a participant, in a zone of its own (no other test reads the same bytes).
    static func shareJSON(title: String) throws -> (Data, RecordZone.ID) {
        let zone = RecordZone.ID(zoneName: "Cached-\(UUID().uuidString)")
        var share = Share(recordZoneID: zone)
        share.title = title
        try share.addParticipant(Participant(lookupInfo: .init(emailAddress: "bob@example.com")))
        return (try share.record.jsonData(), zone)
    }

    @Test("a share record read twice: the second read comes from the cache and equals a fresh decode")
    func secondReadIsCached() throws {
        let (json, _) = try Self.shareJSON(title: "Groceries")
        let cache = FoundationReadRecords.shared
        #expect(cache.record(for: json) == nil)
        let first = try Record(jsonData: json)
        let before = cache.hits.load(ordering: .relaxed)
        let second = try Record(jsonData: json)
        #expect(cache.hits.load(ordering: .relaxed) > before)
        #expect(second == first)
        #expect(second == (try Record(foundationJSONData: json)))
        #expect(Share(second)?.title == "Groceries")
        #expect(Share(second)?.participants.count == first.shareState?.participants.count)
    }

    @Test("changed bytes are decoded afresh: a changed share is never served from an older read")
    func changedBytesAreReadAgain() throws {
        let (json, zone) = try Self.shareJSON(title: "Before")
        _ = try Record(jsonData: json)
        var share = try #require(Share(try Record(jsonData: json)))
        share.title = "After"
        let changed = try share.record.jsonData()
        #expect(changed != json)
        let read = try #require(Share(try Record(jsonData: changed)))
        #expect(read.title == "After")
        #expect(read.recordID.zoneID == zone)
    }

    @Test("malformed JSON still fails with its error, and nothing is kept for it")
    func malformedIsNotKept() throws {
        let bad = Data(#"{"recordName":"x","recordType":"cloudkit.share","fields":{"title":{"value":1}}"#.utf8)
        #expect(throws: ShareSyncError.self) { try Record(jsonData: bad) }
        #expect(FoundationReadRecords.shared.record(for: bad) == nil)
    }

    @Test("past its capacity the cache starts again empty: it never holds more than its bytes")
    func capacityIsBounded() throws {
        let cache = FoundationReadRecords()
        let record = Record(recordType: "Note", recordID: Record.ID(recordName: "n", zoneID: RecordZone.ID(zoneName: "Z")))
        let third = FoundationReadRecords.capacity / 3 + 1
        let keys = (0..<3).map { i in Data(repeating: UInt8(i), count: third) }
        for key in keys { cache.keep(record, for: key) }
        // The first two fit; the third would pass the capacity, so the cache was emptied for it.
        #expect(cache.record(for: keys[0]) == nil)
        #expect(cache.record(for: keys[1]) == nil)
        #expect(cache.record(for: keys[2]) == record)
        cache.keep(record, for: Data(count: FoundationReadRecords.capacity + 1))
        #expect(cache.record(for: Data(count: FoundationReadRecords.capacity + 1)) == nil)
    }
}
