import ShareSyncTestSupport
import Foundation
import Testing

@testable import ShareSyncCore

/// What decoding gave: the record, or the error.
private func decodeFast(_ data: Data) -> Result<Record, ShareSyncError> {
    Result { () throws(ShareSyncError) in try Record(jsonData: data) }
}

private func decodeFoundation(_ data: Data) -> Result<Record, ShareSyncError> {
    Result { () throws(ShareSyncError) in try Record(foundationJSONData: data) }
}

/// Expects the hand-written decoder to give exactly what Foundation gives for `data`: an equal record
/// (that also encodes to the same bytes, which `==` on doubles does not ensure for -0.0), or the same error.
func expectSameDecoding(_ data: Data, sourceLocation: SourceLocation = #_sourceLocation) {
    switch (decodeFast(data), decodeFoundation(data)) {
    case (.success(let fast), .success(let foundation)):
        #expect(fast == foundation, "\(String(decoding: data, as: UTF8.self))", sourceLocation: sourceLocation)
        #expect(
            (try? fast.foundationJSONData(includingChangedKeys: true)) == (try? foundation.foundationJSONData(includingChangedKeys: true)),
            "\(String(decoding: data, as: UTF8.self))", sourceLocation: sourceLocation)
    case (.failure(let fast), .failure(let foundation)):
        #expect(fast == foundation, sourceLocation: sourceLocation)
    case (let fast, let foundation):
        Issue.record("fast \(fast) but Foundation \(foundation) for \(String(decoding: data, as: UTF8.self))", sourceLocation: sourceLocation)
    }
}

/// The hand-written record coder against Foundation's: the same bytes out, the same records (or
/// errors) in.
@Suite("Record JSON codec equivalence")
struct RecordJSONCodecTests {
    @Test("random records encode to exactly Foundation's bytes and decode to Foundation's records")
    func randomRecords() throws {
        var random = RandomRecords(seed: 20_240_611)
        var fastDecodes = 0
        let count = 3000
        for i in 0..<count {
            let record = random.record()
            let changedKeys = i % 2 == 0
            let foundation = try record.foundationJSONData(includingChangedKeys: changedKeys)
            let fast = try record.jsonData(includingChangedKeys: changedKeys)
            #expect(fast == foundation, "\(String(decoding: foundation, as: UTF8.self))\n\(String(decoding: fast, as: UTF8.self))")
            expectSameDecoding(foundation)
            if JSONReader.read(foundation, { r throws(JSONFallback) in try r.record() }) != nil { fastDecodes += 1 }
        }
        // Only records with a subnormal double (5e-324), or a record type of cloudkit.share, fall back.
        #expect(fastDecodes > count * 9 / 10, "\(fastDecodes) of \(count) decoded without falling back")
    }

    @Test("the data set's records and a record with every field type take the fast path both ways")
    func fastPathTaken() throws {
        var record = Record(recordType: "Note", recordID: .init(recordName: "note-1", zoneID: topicsZone))
        record["title"] = "Milk"
        record["count"] = 3
        record["price"] = 2.5
        record["done"] = false
        record["due"] = .date(date(millis: 1_700_000_000_123))
        record["photo"] = .bytes(Data([1, 2, 3]))
        record["topic"] = .reference(.init(recordID: .init(recordName: "topic-1", zoneID: topicsZone), action: .deleteSelf))
        record["where"] = .location(Location(latitude: 1.5, longitude: -2))
        record["tags"] = .list(.string(["a", "b"]))
        record.setParent(.init(recordName: "topic-1", zoneID: topicsZone))
        var writer = JSONWriter()
        try writer.record(record, includingChangedKeys: true)
        #expect(Data(writer.bytes) == (try record.foundationJSONData(includingChangedKeys: true)))
        let decoded = JSONReader.read(Data(writer.bytes)) { r throws(JSONFallback) in try r.record() }
        #expect(decoded == (try Record(foundationJSONData: Data(writer.bytes))))
    }

    @Test("doubles print as Foundation prints them", arguments: [
        0, -0.0, 1, -1, 0.1, 1e300, .leastNonzeroMagnitude, 1e15, 1e16, 1e17, 123456789012345.0, 999999999999999.0, 1e21, 1e-7, 100,
        9007199254740992, -9007199254740992, 4503599627370496, 1e14, 1e13, 72057594037927936,
    ] as [Double])
    func doubles(value: Double) throws {
        var record = Record(recordType: "Note", recordID: .init(recordName: "n"))
        record["d"] = .double(value)
        #expect(try record.jsonData() == record.foundationJSONData())
        expectSameDecoding(try record.jsonData())
    }

    @Test("integral doubles of every magnitude print as Foundation prints them")
    func integralDoubles() throws {
        var values: [Double] = []
        for exponent in 0...70 {
            let p = Double(sign: .plus, exponent: exponent, significand: 1)
            values += [p, p - 1, p + 1, -p, p * 1.5]
        }
        for exponent in 0...22 { values += [pow(10, Double(exponent)), pow(10, Double(exponent)) - 1] }
        var record = Record(recordType: "Note", recordID: .init(recordName: "n"))
        record["d"] = .list(.double(values))
        #expect(try record.jsonData() == record.foundationJSONData())
    }

    @Test("a non-finite double fails with Foundation's error", arguments: [Double.infinity, -.infinity, .nan])
    func nonFinite(value: Double) throws {
        var record = Record(recordType: "Note", recordID: .init(recordName: "n"))
        record["d"] = .list(.double([1, value]))
        let fast = #expect(throws: ShareSyncError.self) { try record.jsonData() }
        let foundation = #expect(throws: ShareSyncError.self) { try record.foundationJSONData() }
        #expect(fast == foundation)
    }

    @Test("a share record encodes and decodes as before (through Foundation)")
    func shareRecord() throws {
        var share = Share(recordZoneID: topicsZone)
        try share.addParticipant(Participant(lookupInfo: .init(userRecordName: "_b"), permission: .readWrite))
        let json = try share.record.jsonData()
        #expect(json == (try share.record.foundationJSONData()))
        expectSameDecoding(json)
    }

    @Test("records cut short at every byte fail as Foundation fails")
    func truncated() throws {
        var random = RandomRecords(seed: 7)
        for _ in 0..<6 {
            let json = try random.record().foundationJSONData(includingChangedKeys: true)
            for end in 0..<json.count { expectSameDecoding(json.prefix(end)) }
        }
    }

    @Test("records with bytes changed, inserted or removed decode as Foundation decodes them")
    func mutated() throws {
        var random = RandomRecords(seed: 99)
        for _ in 0..<60 {
            let json = [UInt8](try random.record().foundationJSONData(includingChangedKeys: random.chance(0.5)))
            for _ in 0..<40 { expectSameDecoding(Data(random.mutated(json))) }
        }
    }

    @Test("unusual but valid JSON decodes as Foundation decodes it", arguments: [
        // Whitespace everywhere, keys out of order, escapes in keys and values, surrogate pairs.
        #" { "recordType" : "Note" , "recordName" : "a" , "fields" : { } } "#,
        #"{"zoneID":{"zoneName":"Z"},"recordName":"a","recordType":"Note","fields":{"r":{"type":"REFERENCE","value":{"recordName":"b"}}}}"#,
        #"{"recordName":"a\u0041\ud83d\ude00\/\b\f\n\r\t\"\\","recordType":"N\u00e9"}"#,
        #"{"recordN\u0061me":"a","recordType":"Note"}"#,
        #"{"recordName":"a","recordType":"Note","fields":{"k\u0000":{"type":"STRING","value":"\u0000"}}}"#,
        #"{"recordName":"a","recordType":"Note","fields":{"x":{"value":"v","type":"STRING"}}}"#,
        #"{"recordName":"a","recordType":"Note","unknown":1}"#,
        #"{"recordName":"a","recordType":"Note","recordChangeTag":null}"#,
        #"{"recordName":"a","recordType":"Note","parentChanged":true}"#,
        #"{"recordName":"a","recordType":"Note","changedKeys":[],"parentChanged":true}"#,
        #"{"recordName":"a","recordType":"Note","changedKeys":["x","x"],"parentChanged":false}"#,
        #"{"recordName":"a","recordType":"cloudkit.share"}"#,
        #"{"recordName":"a","recordType":"Note","fields":{"n":{"type":"INT64","value":1.0}}}"#,
        #"{"recordName":"a","recordType":"Note","fields":{"n":{"type":"INT64","value":1e2}}}"#,
        #"{"recordName":"a","recordType":"Note","fields":{"n":{"type":"INT64","value":-0}}}"#,
        #"{"recordName":"a","recordType":"Note","fields":{"n":{"type":"INT64","value":9223372036854775808}}}"#,
        #"{"recordName":"a","recordType":"Note","fields":{"n":{"type":"INT64","value":-9223372036854775808}}}"#,
        #"{"recordName":"a","recordType":"Note","fields":{"n":{"type":"INT64","value":-9223372036854775809}}}"#,
        #"{"recordName":"a","recordType":"Note","fields":{"n":{"type":"INT64","value":01}}}"#,
        #"{"recordName":"a","recordType":"Note","fields":{"n":{"type":"TIMESTAMP","value":99999999999999999999}}}"#,
        #"{"recordName":"a","recordType":"Note","fields":{"d":{"type":"DOUBLE","value":1e400}}}"#,
        #"{"recordName":"a","recordType":"Note","fields":{"d":{"type":"DOUBLE","value":1e-400}}}"#,
        #"{"recordName":"a","recordType":"Note","fields":{"d":{"type":"DOUBLE","value":-0.0}}}"#,
        #"{"recordName":"a","recordType":"Note","fields":{"d":{"type":"DOUBLE","value":0.000}}}"#,
        #"{"recordName":"a","recordType":"Note","fields":{"d":{"type":"DOUBLE","value":2.2250738585072011e-308}}}"#,
        #"{"recordName":"a","recordType":"Note","fields":{"d":{"type":"DOUBLE","value":0.1000000000000000055511151231257827021181583404541015625}}}"#,
        #"{"recordName":"a","recordType":"Note","fields":{"d":{"type":"DOUBLE","value":123456789012345678901234567890}}}"#,
        #"{"recordName":"a","recordType":"Note","fields":{"d":{"type":"DOUBLE","value":1E+2}}}"#,
        #"{"recordName":"a","recordType":"Note","fields":{"d":{"type":"DOUBLE","value":"1"}}}"#,
        #"{"recordName":"a","recordType":"Note","fields":{"d":{"type":"DOUBLE","value":.5}}}"#,
        #"{"recordName":"a","recordType":"Note","fields":{"d":{"type":"DOUBLE","value":1.}}}"#,
        #"{"recordName":"a","recordType":"Note","fields":{"d":{"type":"DOUBLE","value":+1}}}"#,
        #"{"recordName":"a","recordType":"Note","fields":{"b":{"type":"BOOLEAN","value":1}}}"#,
        #"{"recordName":"a","recordType":"Note","fields":{"b":{"type":"BYTES","value":"AAE"}}}"#,
        #"{"recordName":"a","recordType":"Note","fields":{"b":{"type":"BYTES","value":"A A="}}}"#,
        #"{"recordName":"a","recordType":"Note","fields":{"s":{"type":"STRING","value":["x"]}}}"#,
        #"{"recordName":"a","recordType":"Note","fields":{"s":{"type":"STRING_LIST","value":"x"}}}"#,
        #"{"recordName":"a","recordType":"Note","fields":{"s":{"type":"string","value":"x"}}}"#,
        #"{"recordName":"a","recordType":"Note","fields":{"s":{"type":"STRING"}}}"#,
        #"{"recordName":"a","recordType":"Note","fields":{"s":{"type":"STRING","value":"x","extra":1}}}"#,
        #"{"recordName":"a","recordType":"Note","fields":{"r":{"type":"REFERENCE","value":{"recordName":"b","action":"BOGUS"}}}}"#,
        #"{"recordName":"a","recordType":"Note","fields":{"r":{"type":"REFERENCE_LIST","value":[{"recordName":"b","zoneID":{"ownerRecordName":"o"}}]}}}"#,
        #"{"recordName":"a","recordType":"Note","fields":{"l":{"type":"LOCATION","value":{"latitude":1}}}}"#,
        #"{"recordName":"a","recordType":"Note","fields":{"x":{"type":"STRING","value":"1"},"x":{"type":"STRING","value":"2"}}}"#,
        #"{"recordName":"a","recordType":"Note","fields":{"é":{"type":"STRING","value":"1"},"e\u0301":{"type":"STRING","value":"2"}}}"#,
        #"{"recordName":"a","recordType":"Note","fields":{"r":{"type":"REFERENCE","value":{"recordName":"b"}},"r":{"type":"STRING","value":"2"}}}"#,
        #"{"recordName":"a","recordName":"b","recordType":"Note"}"#,
        #"{"recordName":"a","recordType":"Note","changed\u212Aeys":["x"]}"#,
        #"{"recordName":"a","recordType":"Note","created":{"timestamp":1,"userRecordName":"u"},"modified":{"timestamp":-1}}"#,
        #"{"recordName":"a","recordType":"Note","created":{"userRecordName":"u"}}"#,
        #"{"recordName":"a","recordType":"Note"} x"#,
        #"{"recordName":"a","recordType":"Note"}{}"#,
        #"{"recordName":"a","recordType":"Note",}"#,
        #"{"recordName":"a","recordType":"Note"]"#,
        #"{"recordName":"\ud800","recordType":"Note"}"#,
        #"{"recordName":"\udc00\ud800","recordType":"Note"}"#,
        #"{"recordName":"\ud800\u0041","recordType":"Note"}"#,
        #"{"recordName":"\x","recordType":"Note"}"#,
        #"{"recordName":"\u00G0","recordType":"Note"}"#,
        "{\"recordName\":\"a\tb\",\"recordType\":\"Note\"}",
        "\u{FEFF}{\"recordName\":\"a\",\"recordType\":\"Note\"}",
        #"[{"recordName":"a","recordType":"Note"}]"#,
        "", " ", "{", "}", "null", "{}", "[]", "\"x\"", "1",
    ])
    func unusual(json: String) {
        expectSameDecoding(Data(json.utf8))
    }

    @Test("invalid UTF-8, deep nesting and huge inputs decode as Foundation decodes them")
    func hostileBytes() {
        let prefix = Array(#"{"recordName":""#.utf8)
        let suffix = Array(#"","recordType":"Note"}"#.utf8)
        for bad: [UInt8] in [[0x80], [0xC0, 0x80], [0xC2], [0xE0, 0x80, 0x80], [0xED, 0xA0, 0x80], [0xF4, 0x90, 0x80, 0x80],
            [0xF5, 0x80, 0x80, 0x80], [0xFF], [0xF0, 0x9F, 0x98], [0xC3, 0xA9]]
        {
            expectSameDecoding(Data(prefix + bad + suffix))
        }
        let deep = String(repeating: "[", count: 10_000) + String(repeating: "]", count: 10_000)
        expectSameDecoding(Data(#"{"recordName":"a","recordType":"Note","x":\#(deep)}"#.utf8))
        expectSameDecoding(Data(#"{"recordName":"a","recordType":"Note","fields":{"d":{"type":"DOUBLE","value":1\#(String(repeating: "0", count: 5000))}}}"#.utf8))
        expectSameDecoding(Data(#"{"recordName":"\#(String(repeating: "é", count: 100_000))","recordType":"Note"}"#.utf8))
    }
}

/// The participant checks each received record with `checkedRecordIdentity()` instead of building it
/// with `record()`: both must accept exactly the same bytes, and agree on the record's ID and type.
@Suite("Record identity check against the record reader")
struct RecordIdentityCheckTests {
    /// Expects the check and the reader to agree on `data`; returns whether they accepted it.
    @discardableResult
    func expectSameAcceptance(_ data: Data, sourceLocation: SourceLocation = #_sourceLocation) -> Bool {
        let identity = JSONReader.read(data) { r throws(JSONFallback) in try r.checkedRecordIdentity() }
        let record = JSONReader.read(data) { r throws(JSONFallback) in try r.record() }
        let text = String(decoding: data, as: UTF8.self)
        switch (identity, record) {
        case (nil, nil):
            return false
        case (let identity?, let record?):
            #expect(identity.recordID == record.recordID && identity.recordType == record.recordType, "\(text)", sourceLocation: sourceLocation)
            if !identity.marksChanges {
                #expect(record.changedKeys.isEmpty && !record.parentChanged, "\(text)", sourceLocation: sourceLocation)
            }
            return true
        case (let identity, let record):
            Issue.record("check \(identity != nil), reader \(record != nil) for \(text)", sourceLocation: sourceLocation)
            return false
        }
    }

    @Test("random records, whole, cut short and with bytes changed: accepted by both or by neither")
    func randomAndMutated() throws {
        var random = RandomRecords(seed: 4_242)
        var accepted = 0
        for round in 0..<120 {
            let json = [UInt8](try random.record().jsonData(includingChangedKeys: random.chance(0.3)))
            if expectSameAcceptance(Data(json)) { accepted += 1 }
            if round < 6 { for end in 0..<json.count { expectSameAcceptance(Data(json.prefix(end))) } }
            for _ in 0..<30 { expectSameAcceptance(Data(random.mutated(json))) }
        }
        #expect(accepted > 30)
    }

    @Test("the cases a second reader could get wrong", arguments: [
        // a field named twice, in two spellings of the same string
        #"{"fields":{"\u00e9":{"type":"INT64","value":1},"e\u0301":{"type":"INT64","value":2}},"recordName":"a","recordType":"N"}"#,
        // a reference field and a value field with the same name, in both orders
        #"{"fields":{"x":{"type":"REFERENCE","value":{"recordName":"b"}},"x":{"type":"INT64","value":2}},"recordName":"a","recordType":"N"}"#,
        #"{"fields":{"x":{"type":"INT64","value":2},"x":{"type":"REFERENCE_LIST","value":[]}},"recordName":"a","recordType":"N"}"#,
        // the value before the type; a type twice; no value; an unknown type
        #"{"fields":{"x":{"value":2,"type":"INT64"}},"recordName":"a","recordType":"N"}"#,
        #"{"fields":{"x":{"type":"INT64","type":"INT64","value":2}},"recordName":"a","recordType":"N"}"#,
        #"{"fields":{"x":{"type":"INT64"}},"recordName":"a","recordType":"N"}"#,
        #"{"fields":{"x":{"type":"ASSET","value":2}},"recordName":"a","recordType":"N"}"#,
        // values of the wrong kind, bad base64, a lone surrogate in a string value
        #"{"fields":{"x":{"type":"TIMESTAMP","value":1.5}},"recordName":"a","recordType":"N"}"#,
        #"{"fields":{"x":{"type":"BYTES","value":"@@@"}},"recordName":"a","recordType":"N"}"#,
        #"{"fields":{"x":{"type":"STRING","value":"\ud800"}},"recordName":"a","recordType":"N"}"#,
        #"{"fields":{"x":{"type":"LOCATION_LIST","value":[{"latitude":1}]}},"recordName":"a","recordType":"N"}"#,
        // fine: every kind once, an empty reference list, escapes, a parent and a change tag
        #"{"fields":{"a":{"type":"STRING","value":"\u00e9\n"},"b":{"type":"INT64_LIST","value":[1,-2]},"c":{"type":"REFERENCE_LIST","value":[]},"d":{"type":"BYTES","value":"AAE="},"e":{"type":"LOCATION","value":{"latitude":1,"longitude":2}},"f":{"type":"BOOLEAN_LIST","value":[true]},"g":{"type":"DOUBLE","value":0.5}},"parent":{"recordName":"p"},"recordChangeTag":"z","recordName":"a","recordType":"N","zoneID":{"ownerRecordName":"_o","zoneName":"Z"}}"#,
        // a share record, a key twice, a missing name, changed keys
        #"{"fields":{},"recordName":"a","recordType":"cloudkit.share"}"#,
        #"{"fields":{},"recordName":"a","recordName":"b","recordType":"N"}"#,
        #"{"fields":{},"recordType":"N"}"#,
        #"{"changedKeys":["x"],"fields":{"x":{"type":"INT64","value":1}},"parentChanged":true,"recordName":"a","recordType":"N"}"#,
    ])
    func edgeCases(json: String) {
        expectSameAcceptance(Data(json.utf8))
    }
}
