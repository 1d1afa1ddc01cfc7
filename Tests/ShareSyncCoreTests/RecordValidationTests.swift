import Foundation
import Testing

@testable import ShareSyncCore

@Suite("Record validation")
struct RecordValidationTests {
    let limits = Limits()

    func note(_ name: String = "note-1", zone: RecordZone.ID = topicsZone) -> Record {
        Record(recordType: "Note", recordID: Record.ID(recordName: name, zoneID: zone))
    }

    func validationError(_ record: Record, limits: Limits = Limits(), sourceLocation: SourceLocation = #_sourceLocation)
        -> ShareSyncError?
    {
        #expect(throws: ShareSyncError.self, sourceLocation: sourceLocation) { try record.validate(limits: limits) }
    }

    @Test("a valid record passes and validate returns its JSON form")
    func validRecord() throws {
        var record = note()
        record["title"] = "Milk"
        record["topic"] = .reference(.init(recordID: Record.ID(recordName: "topic-1", zoneID: topicsZone), action: .deleteSelf))
        record.setParent(Record.ID(recordName: "topic-1", zoneID: topicsZone))
        #expect(try record.validate(limits: limits) == record.jsonData())
    }

    @Test("bad names fail with their name rule", arguments: [
        (Record.ID(recordName: "has space", zoneID: topicsZone), "Note", "recordNameSyntax"),
        (Record.ID(recordName: "ok", zoneID: RecordZone.ID(zoneName: "_hidden")), "Note", "zoneNameSyntax"),
        (Record.ID(recordName: "ok", zoneID: topicsZone), "2Note", "recordTypeSyntax"),
    ])
    func badNames(recordID: Record.ID, recordType: String, rule: String) throws {
        let error = try #require(validationError(Record(recordType: recordType, recordID: recordID)))
        #expect(error.code == .invalidArguments)
        #expect(error.rule?.rawValue == rule)
    }

    @Test("a bad field key fails with rule fieldKeySyntax, naming the record")
    func badFieldKey() throws {
        var record = note()
        record["bad key"] = "x"
        let error = try #require(validationError(record))
        #expect(error.rule == .fieldKeySyntax)
        #expect(error.recordID == record.recordID)
    }

    @Test("a double that is not finite fails with rule finiteDouble, alone or in a list", arguments: [
        FieldValue.double(.nan), .double(.infinity), .list(.double([1, -.infinity])),
    ])
    func nonFiniteDouble(value: FieldValue) throws {
        var record = note()
        record["x"] = value
        let error = try #require(validationError(record))
        #expect(error.rule == .finiteDouble)
        #expect(error.message.contains("field x"), "\(error.message)")
    }

    @Test("a location outside ±90/±180 fails with rule locationRange", arguments: [
        FieldValue.location(Location(latitude: 91, longitude: 0)),
        .location(Location(latitude: 0, longitude: -180.5)),
        .list(.location([Location(latitude: 0, longitude: 0), Location(latitude: .nan, longitude: 0)])),
    ])
    func locationOutOfRange(value: FieldValue) throws {
        var record = note()
        record["where"] = value
        let error = try #require(validationError(record))
        #expect(error.rule == .locationRange)
    }

    @Test("a location at the edges of the range is valid")
    func locationEdges() throws {
        var record = note()
        record["where"] = .list(.location([Location(latitude: 90, longitude: -180), Location(latitude: -90, longitude: 180)]))
        _ = try record.validate(limits: limits)
    }

    @Test("a reference into another zone fails with rule referenceSameZone", arguments: [
        FieldValue.reference(.init(recordID: Record.ID(recordName: "t"), action: .none)),
        .list(.reference([.init(recordID: Record.ID(recordName: "t", zoneID: topicsZone)), .init(recordID: Record.ID(recordName: "t"))])),
    ])
    func referenceOtherZone(value: FieldValue) throws {
        var record = note()
        record["topic"] = value
        let error = try #require(validationError(record))
        #expect(error.rule == .referenceSameZone)
    }

    @Test("a parent in another zone fails with parentSameZone; a record as its own parent with parentCycle")
    func parentRules() throws {
        var other = note()
        other.setParent(Record.ID(recordName: "topic-1"))
        #expect(validationError(other)?.rule == .parentSameZone)
        var own = note()
        own.setParent(own.recordID)
        #expect(validationError(own)?.rule == .parentCycle)
    }

    @Test("a record larger than maximumRecordSize fails with limitExceeded and rule recordSize, naming both sizes")
    func recordSize() throws {
        var small = Limits()
        small.maximumRecordSize = 200
        var record = note()
        record["body"] = .string(String(repeating: "x", count: 300))
        let error = try #require(validationError(record, limits: small))
        #expect(error.code == .limitExceeded)
        #expect(error.rule == .recordSize)
        #expect(error.message.contains("over the limit of 200 bytes"), "\(error.message)")
        record["body"] = "short"
        _ = try record.validate(limits: small)
    }

    @Test(
        "a date too far from 1970 to hold in milliseconds fails validation instead of crashing")
    func hugeDate() throws {
        var record = note()
        record["at"] = .date(Date(timeIntervalSince1970: 1e17))
        let error = try #require(validationError(record))
        #expect(error.rule == .validDate)
    }

    @Test(
        "a TIMESTAMP of whole milliseconds past 64 bits is read and fails as a date (validDate), not as a malformed number",
        arguments: [#"{"type":"TIMESTAMP","value":1e20}"#, #"{"type":"TIMESTAMP_LIST","value":[1,-1e20]}"#])
    func timestampPast64Bits(field: String) throws {
        let json = #"{"recordName":"n","recordType":"Note","zoneID":{"zoneName":"Topics"},"fields":{"at":\#(field)}}"#
        let record = try Record(jsonData: Data(json.utf8))
        let error = try #require(validationError(record))
        #expect(error.rule == .validDate)
        #expect(error.message.contains("field at: a date must be within about 3 million years of 1970"), "\(error.message)")
    }

    @Test("a TIMESTAMP that is not whole milliseconds, and an INT64 past 64 bits, are malformed, and say why")
    func malformedNumbers() {
        for (field, words) in [
            (#"{"type":"TIMESTAMP","value":1.5}"#, "field at: a TIMESTAMP is whole milliseconds since 1970"),
            (#"{"type":"TIMESTAMP","value":"soon"}"#, "field at: a TIMESTAMP is whole milliseconds since 1970"),
            (#"{"type":"TIMESTAMP_LIST","value":[1,"later"]}"#, "field at: a TIMESTAMP is whole milliseconds since 1970"),
            (#"{"type":"INT64","value":1e20}"#, "field at: an INT64 value must be a whole number from -2^63 to 2^63 - 1"),
            (#"{"type":"INT64_LIST","value":[1,1e20]}"#, "field at: an INT64_LIST value's elements must be whole numbers"),
        ] {
            let json = #"{"recordName":"n","recordType":"Note","zoneID":{"zoneName":"Topics"},"fields":{"at":\#(field)}}"#
            let error = #expect(throws: ShareSyncError.self) { try Record(jsonData: Data(json.utf8)) }
            #expect(error?.message.contains(words) == true, "\(error?.message ?? "")")
        }
    }
}

@Suite("Modify results")
struct ModifyRecordsResultTests {
    @Test("get returns the saved records when nothing failed")
    func allSucceeded() throws {
        let record = savedRecord()
        let result = ModifyRecordsResult(saveResults: [record.recordID: .success(record)])
        #expect(try result.get() == [record])
        #expect(result.errors.isEmpty)
    }

    @Test("get throws partialFailure with each failed item's error by record name")
    func partialFailure() throws {
        let saved = savedRecord()
        let conflictID = Record.ID(recordName: "note-2", zoneID: topicsZone)
        let goneID = Record.ID(recordName: "note-3", zoneID: topicsZone)
        let conflict = ShareSyncError(.serverRecordChanged, "changed", recordID: conflictID)
        let gone = ShareSyncError(.unknownItem, "no such record", recordID: goneID)
        let result = ModifyRecordsResult(
            saveResults: [saved.recordID: .success(saved), conflictID: .failure(conflict)],
            deleteResults: [goneID: .failure(gone)])
        #expect(result.savedRecords == [saved])
        let error = try #require(#expect(throws: ShareSyncError.self) { try result.get() })
        #expect(error.code == .partialFailure)
        #expect(error.partialErrors == ["note-2": conflict, "note-3": gone])
        #expect(error.partialErrorsByItemID == [conflictID: conflict, goneID: gone])
        #expect(error.message == "2 of 3 items failed")
    }

    @Test("a zone change page splits its changes into changed and deleted records")
    func zoneChanges() {
        let record = savedRecord()
        let deleted = DeletedRecord(recordID: Record.ID(recordName: "old", zoneID: topicsZone), recordType: "Note")
        let page = ZoneChanges(
            zoneID: topicsZone, changes: [.changed(record), .deleted(deleted)],
            changeToken: ServerChangeToken(stringValue: "2.db1.x"), moreComing: false)
        #expect(page.changedRecords == [record])
        #expect(page.deletedRecords == [deleted])
    }
}
