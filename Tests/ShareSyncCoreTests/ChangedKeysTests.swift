import Foundation
import Testing

@testable import ShareSyncCore

@Suite("Changed keys")
struct ChangedKeysTests {
    @Test("a new record has no changed keys")
    func newRecord() {
        let record = Record(recordType: "Note")
        #expect(record.changedKeys.isEmpty)
        #expect(!record.parentChanged)
    }

    @Test("setting a field through the subscript notes its key; reading does not")
    func subscriptSetNotesKey() {
        var record = Record(recordType: "Note")
        record["title"] = "Milk"
        record["count"] = 2
        _ = record["other"]
        #expect(record.changedKeys == ["title", "count"])
        #expect(record["title"] == "Milk")
    }

    @Test("removing a field by setting nil removes it and notes its key")
    func removingNotesKey() {
        var record = savedRecord(fields: ["title": "Milk", "count": 2])
        #expect(record.changedKeys.isEmpty)
        record["title"] = nil
        #expect(record["title"] == nil)
        #expect(record.allKeys == ["count"])
        #expect(record.changedKeys == ["title"])
    }

    @Test("setting the parent marks parentChanged")
    func parentChanged() {
        var record = Record(recordType: "Note")
        record.setParent(Record.ID(recordName: "topic-1"))
        #expect(record.parentChanged)
        #expect(record.parent == .init(recordID: Record.ID(recordName: "topic-1"), action: .none))
    }

    @Test("JSON carries changedKeys (sorted) and parentChanged only when asked to")
    func jsonCarriesChangedKeysWhenAsked() throws {
        var record = Record(recordType: "Note", recordID: Record.ID(recordName: "note-1"))
        record["title"] = "Milk"
        record["body"] = nil
        record.setParent(Record.ID(recordName: "topic-1"))

        let plain = try jsonObject(record)
        #expect(plain["changedKeys"] == nil)
        #expect(plain["parentChanged"] == nil)

        let withKeys = try jsonString(record, includingChangedKeys: true)
        #expect(withKeys.contains(#""changedKeys":["body","title"]"#), "\(withKeys)")
        #expect(withKeys.contains(#""parentChanged":true"#), "\(withKeys)")
    }

    @Test("JSON with changed keys but an unchanged parent writes no parentChanged")
    func noParentChangedWhenUnchanged() throws {
        var record = Record(recordType: "Note", recordID: Record.ID(recordName: "note-1"))
        record["title"] = "Milk"
        let object = try jsonObject(record, includingChangedKeys: true)
        #expect(object["changedKeys"] as? [String] == ["title"])
        #expect(object["parentChanged"] == nil)
    }

    @Test("decoding restores changedKeys and parentChanged, so the record equals the one encoded")
    func decodingRestoresChangedKeys() throws {
        var record = savedRecord(fields: ["title": "Milk", "count": 2])
        record["title"] = "Bread"
        record["gone"] = nil
        record.setParent(Record.ID(recordName: "topic-1", zoneID: topicsZone))

        let decoded = try Record(jsonData: record.jsonData(includingChangedKeys: true))
        #expect(decoded.changedKeys == ["title", "gone"])
        #expect(decoded.parentChanged)
        #expect(decoded == record)
    }

    @Test("decoding JSON written without changed keys gives a record with none")
    func decodingWithoutChangedKeys() throws {
        var record = Record(recordType: "Note", recordID: Record.ID(recordName: "note-1"))
        record["title"] = "Milk"
        let decoded = try Record(jsonData: record.jsonData())
        #expect(decoded.changedKeys.isEmpty)
        #expect(!decoded.parentChanged)
        #expect(decoded["title"] == "Milk")
    }
}
