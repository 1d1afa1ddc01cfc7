import Foundation
import Testing

@testable import ShareSyncCore

/// The JSON form of records follows the CloudKit Web Services record dictionary.
@Suite("Record JSON form")
struct RecordJSONTests {
    static let sameZoneTopic = Record.ID(recordName: "topic-1", zoneID: topicsZone)
    static let defaultZoneTopic = Record.ID(recordName: "topic-1")
    static let someBytes = Data([0x00, 0x01, 0x02, 0xFF])

    /// Each field value with the exact JSON the record in zone Topics writes for it (keys sorted).
    static let fieldCases: [(FieldValue, String)] = [
        (.string("Milk"), #"{"type":"STRING","value":"Milk"}"#),
        (.string(""), #"{"type":"STRING","value":""}"#),
        (.int64(42), #"{"type":"INT64","value":42}"#),
        (.int64(-7), #"{"type":"INT64","value":-7}"#),
        (.int64(.max), #"{"type":"INT64","value":9223372036854775807}"#),
        (.double(1.5), #"{"type":"DOUBLE","value":1.5}"#),
        (.double(-0.25), #"{"type":"DOUBLE","value":-0.25}"#),
        (.bool(true), #"{"type":"BOOLEAN","value":true}"#),
        (.bool(false), #"{"type":"BOOLEAN","value":false}"#),
        (.date(date(millis: 1_700_000_000_123)), #"{"type":"TIMESTAMP","value":1700000000123}"#),
        (.date(date(millis: -1_000)), #"{"type":"TIMESTAMP","value":-1000}"#),
        (.bytes(someBytes), #"{"type":"BYTES","value":"AAEC/w=="}"#),
        (.bytes(Data()), #"{"type":"BYTES","value":""}"#),
        (
            .reference(.init(recordID: sameZoneTopic, action: .none)),
            #"{"type":"REFERENCE","value":{"action":"NONE","recordName":"topic-1"}}"#
        ),
        (
            .reference(.init(recordID: sameZoneTopic, action: .deleteSelf)),
            #"{"type":"REFERENCE","value":{"action":"DELETE_SELF","recordName":"topic-1"}}"#
        ),
        (
            .reference(.init(recordID: defaultZoneTopic, action: .deleteSelf)),
            #"{"type":"REFERENCE","value":{"action":"DELETE_SELF","recordName":"topic-1","zoneID":{"ownerRecordName":"__defaultOwner__","zoneName":"_defaultZone"}}}"#
        ),
        (
            .location(Location(latitude: 37.5, longitude: -122.25)),
            #"{"type":"LOCATION","value":{"latitude":37.5,"longitude":-122.25}}"#
        ),
        (.list(.string(["a", "b"])), #"{"type":"STRING_LIST","value":["a","b"]}"#),
        (.list(.int64([1, -2])), #"{"type":"INT64_LIST","value":[1,-2]}"#),
        (.list(.double([0.5, 2.25])), #"{"type":"DOUBLE_LIST","value":[0.5,2.25]}"#),
        (.list(.bool([true, false])), #"{"type":"BOOLEAN_LIST","value":[true,false]}"#),
        (
            .list(.date([date(millis: 1_700_000_000_000), date(millis: 1)])),
            #"{"type":"TIMESTAMP_LIST","value":[1700000000000,1]}"#
        ),
        (.list(.bytes([someBytes, Data("hi".utf8)])), #"{"type":"BYTES_LIST","value":["AAEC/w==","aGk="]}"#),
        (
            .list(.reference([.init(recordID: sameZoneTopic, action: .none), .init(recordID: defaultZoneTopic, action: .deleteSelf)])),
            #"{"type":"REFERENCE_LIST","value":[{"action":"NONE","recordName":"topic-1"},{"action":"DELETE_SELF","recordName":"topic-1","zoneID":{"ownerRecordName":"__defaultOwner__","zoneName":"_defaultZone"}}]}"#
        ),
        (
            .list(.location([Location(latitude: 0, longitude: 0.5)])),
            #"{"type":"LOCATION_LIST","value":[{"latitude":0,"longitude":0.5}]}"#
        ),
        (.list(.string([])), #"{"type":"STRING_LIST","value":[]}"#),
        (.list(.int64([])), #"{"type":"INT64_LIST","value":[]}"#),
        (.list(.double([])), #"{"type":"DOUBLE_LIST","value":[]}"#),
        (.list(.bool([])), #"{"type":"BOOLEAN_LIST","value":[]}"#),
        (.list(.date([])), #"{"type":"TIMESTAMP_LIST","value":[]}"#),
        (.list(.bytes([])), #"{"type":"BYTES_LIST","value":[]}"#),
        (.list(.reference([])), #"{"type":"REFERENCE_LIST","value":[]}"#),
        (.list(.location([])), #"{"type":"LOCATION_LIST","value":[]}"#),
    ]

    @Test("each field type is written as {type, value} with the CloudKit type name and read back", arguments: fieldCases)
    func fieldValueJSON(value: FieldValue, expected: String) throws {
        var record = Record(recordType: "Note", recordID: Record.ID(recordName: "note-1", zoneID: topicsZone))
        record["f"] = value
        let json = try jsonString(record)
        #expect(json.contains(#""fields":{"f":"# + expected + "}"), "got \(json)")

        let decoded = try Record(jsonData: Data(json.utf8))
        #expect(decoded["f"] == value)
        #expect(decoded["f"]?.typeName == value.typeName)
    }

    @Test("a new record in the default zone has exactly recordName, recordType, zoneID and fields")
    func newRecordJSON() throws {
        var record = Record(recordType: "Note", recordID: Record.ID(recordName: "note-1"))
        record["title"] = "Milk"
        #expect(
            try jsonString(record)
                == #"{"fields":{"title":{"type":"STRING","value":"Milk"}},"recordName":"note-1","recordType":"Note","zoneID":{"ownerRecordName":"__defaultOwner__","zoneName":"_defaultZone"}}"#
        )
    }

    @Test("a saved record writes recordChangeTag, created and modified as {timestamp in ms, userRecordName}, parent and share")
    func savedRecordJSON() throws {
        let record = savedRecord(
            fields: ["title": "Milk"],
            parent: .init(recordID: Record.ID(recordName: "topic-1", zoneID: topicsZone)),
            share: .init(recordID: Record.ID(recordName: "share-1", zoneID: topicsZone)))
        #expect(
            try jsonString(record)
                == #"{"created":{"timestamp":1700000000123,"userRecordName":"_alice"},"fields":{"title":{"type":"STRING","value":"Milk"}},"modified":{"timestamp":1700000456789,"userRecordName":"_bob"},"parent":{"recordName":"topic-1"},"recordChangeTag":"2b","recordName":"note-1","recordType":"Note","share":{"recordName":"share-1"},"zoneID":{"ownerRecordName":"__defaultOwner__","zoneName":"Topics"}}"#
        )
        let object = try jsonObject(record)
        #expect(
            Set(object.keys)
                == ["recordName", "recordType", "recordChangeTag", "zoneID", "fields", "created", "modified", "parent", "share"])
    }

    @Test("zoneID carries the zone's owner as ownerRecordName")
    func zoneOwnerJSON() throws {
        let zone = RecordZone.ID(zoneName: "Topics", ownerName: "_owner42")
        let record = Record(recordType: "Note", recordID: Record.ID(recordName: "note-1", zoneID: zone))
        #expect(try jsonString(record).contains(#""zoneID":{"ownerRecordName":"_owner42","zoneName":"Topics"}"#))
        #expect(try Record(jsonData: record.jsonData()).recordID.zoneID == zone)
    }

    @Test("a parent in another zone is written with its zoneID")
    func parentInOtherZone() throws {
        var record = Record(recordType: "Note", recordID: Record.ID(recordName: "note-1", zoneID: topicsZone))
        record.setParent(Record.ID(recordName: "topic-1"))
        #expect(
            try jsonString(record).contains(
                #""parent":{"recordName":"topic-1","zoneID":{"ownerRecordName":"__defaultOwner__","zoneName":"_defaultZone"}}"#))
        #expect(try Record(jsonData: record.jsonData()).parent == record.parent)
    }

    @Test("a record with every field type and all system fields survives encode then decode unchanged")
    func roundTripWithSystemFields() throws {
        var fields: [String: FieldValue] = [:]
        for (index, (value, _)) in Self.fieldCases.enumerated() { fields["f\(index)"] = value }
        let record = savedRecord(
            fields: fields,
            parent: .init(recordID: Record.ID(recordName: "topic-1", zoneID: topicsZone)),
            share: .init(recordID: Record.ID(recordName: "share-1", zoneID: topicsZone)))

        let decoded = try Record(jsonData: record.jsonData())
        #expect(decoded == record)
        #expect(decoded.creationDate == date(millis: 1_700_000_000_123))
        #expect(decoded.modificationDate == date(millis: 1_700_000_456_789))
        #expect(decoded.creatorUserRecordID?.recordName == "_alice")
        #expect(decoded.lastModifiedUserRecordID?.recordName == "_bob")
        #expect(decoded.recordChangeTag == "2b")
        #expect(decoded.allKeys == record.allKeys)
        #expect(decoded.changedKeys.isEmpty)
    }

    @Test("a record with no system fields round-trips with them still absent")
    func roundTripWithoutSystemFields() throws {
        let record = savedRecord()
        let fresh = Record(recordType: "Note", recordID: record.recordID)
        let decoded = try Record(jsonData: fresh.jsonData())
        #expect(decoded == fresh)
        #expect(decoded.creationDate == nil)
        #expect(decoded.recordChangeTag == nil)
        #expect(decoded.parent == nil)
        #expect(decoded.share == nil)
    }

    @Test("dates keep millisecond precision: finer parts are rounded to the millisecond")
    func datesKeepMilliseconds() throws {
        var record = Record(recordType: "Note", recordID: Record.ID(recordName: "note-1"))
        record["at"] = .date(Date(timeIntervalSince1970: 1_700_000_000.123_4))
        #expect(try jsonString(record).contains(#"{"type":"TIMESTAMP","value":1700000000123}"#))
        #expect(try Record(jsonData: record.jsonData())["at"] == .date(date(millis: 1_700_000_000_123)))
    }

    @Test("a reference without zoneID or action is read as a reference into the record's zone with action none")
    func referenceDefaults() throws {
        let json = #"""
            {"recordName":"note-1","recordType":"Note","zoneID":{"zoneName":"Topics"},
             "fields":{"topic":{"type":"REFERENCE","value":{"recordName":"topic-1"}}}}
            """#
        let record = try Record(jsonData: Data(json.utf8))
        #expect(record["topic"] == .reference(.init(recordID: Record.ID(recordName: "topic-1", zoneID: topicsZone), action: .none)))
    }

    @Test("a record without zoneID is in the default zone; a zoneID without owner belongs to the current user")
    func zoneDefaults() throws {
        let noZone = try Record(jsonData: Data(#"{"recordName":"a","recordType":"Note"}"#.utf8))
        #expect(noZone.recordID.zoneID == .default)
        #expect(noZone.fields.isEmpty)
        let noOwner = try Record(jsonData: Data(#"{"recordName":"a","recordType":"Note","zoneID":{"zoneName":"Topics"}}"#.utf8))
        #expect(noOwner.recordID.zoneID == RecordZone.ID(zoneName: "Topics", ownerName: "__defaultOwner__"))
    }

    @Test("a parent read from JSON always has action none, even if the JSON says DELETE_SELF")
    func parentActionIsNone() throws {
        let json = #"{"recordName":"a","recordType":"Note","parent":{"recordName":"p","action":"DELETE_SELF"}}"#
        let record = try Record(jsonData: Data(json.utf8))
        #expect(record.parent == .init(recordID: Record.ID(recordName: "p"), action: .none))
    }
}
