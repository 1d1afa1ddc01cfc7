import Foundation
import Testing

@testable import ShareSyncCore

/// Malformed record JSON fails with invalidArguments and a message that names the problem.
@Suite("Malformed record JSON")
struct RecordJSONErrorTests {
    @Test("an unknown field type is rejected with the type name and the field key in the message")
    func unknownFieldType() throws {
        let error = try #require(decodingError(
            #"{"recordName":"a","recordType":"Note","fields":{"colour":{"type":"COLOUR","value":"red"}}}"#))
        #expect(error.code == .invalidArguments)
        #expect(error.message.contains("COLOUR"), "\(error.message)")
        #expect(error.message.contains("colour"), "\(error.message)")
        #expect(error.rule == .recordJSON)
    }

    @Test("a missing recordName is rejected, naming recordName")
    func missingRecordName() throws {
        let error = try #require(decodingError(#"{"recordType":"Note","fields":{}}"#))
        #expect(error.code == .invalidArguments)
        #expect(error.message.contains("recordName"), "\(error.message)")
    }

    @Test("a missing recordType is rejected, naming recordType")
    func missingRecordType() throws {
        let error = try #require(decodingError(#"{"recordName":"a"}"#))
        #expect(error.code == .invalidArguments)
        #expect(error.message.contains("recordType"), "\(error.message)")
    }

    @Test("BYTES that are not base64 are rejected, naming base64 and the field")
    func bytesNotBase64() throws {
        let error = try #require(decodingError(
            #"{"recordName":"a","recordType":"Note","fields":{"photo":{"type":"BYTES","value":"not base64!"}}}"#))
        #expect(error.code == .invalidArguments)
        #expect(error.message.contains("base64"), "\(error.message)")
        #expect(error.message.contains("photo"), "\(error.message)")
    }

    @Test("a BYTES_LIST element that is not base64 is rejected")
    func bytesListNotBase64() throws {
        let error = try #require(decodingError(
            #"{"recordName":"a","recordType":"Note","fields":{"photos":{"type":"BYTES_LIST","value":["AAE=","%%%"]}}}"#))
        #expect(error.code == .invalidArguments)
        #expect(error.message.contains("base64"), "\(error.message)")
        #expect(error.message.contains("photos"), "\(error.message)")
    }

    @Test(
        "a value of the wrong shape is named as JSON names it (an object, a string, a number), not as a Swift type",
        arguments: [
            (#"{"recordName":"a","recordType":"Note","fields":3}"#, "expected an object at fields"),
            (#"{"recordName":3,"recordType":"Note"}"#, "expected a string at recordName"),
            (#"{"recordName":"a","recordType":"Note","created":{"timestamp":"soon"}}"#, "expected a number at created.timestamp"),
            (#"{"recordName":"a","recordType":true}"#, "expected a string at recordType"),
            (#"{"recordName":"a","recordType":"Note","fields":{"l":{"type":"STRING_LIST","value":"a"}}}"#, "expected an array"),
        ])
    func wrongShapesAreNamedAsJSON(json: String, expected: String) throws {
        let error = try #require(decodingError(json))
        #expect(error.message.contains(expected), "\(error.message)")
        for swiftName in ["Dictionary<", "Array<", "String.Type", "Int64", "a value of another kind"] {
            #expect(!error.message.contains(swiftName), "\(error.message)")
        }
    }

    @Test("data that is not JSON at all is rejected as malformed JSON", arguments: ["hello", "", "{", "[1,2]", "42"])
    func notJSON(text: String) throws {
        let error = try #require(decodingError(text))
        #expect(error.code == .invalidArguments)
        #expect(error.message.contains("malformed record JSON"), "\(error.message)")
    }

    @Test(
        "a value of the wrong JSON type for its declared type is rejected, naming the field",
        arguments: [
            #"{"type":"INT64","value":"12"}"#,
            #"{"type":"STRING","value":12}"#,
            #"{"type":"BOOLEAN","value":"yes"}"#,
            #"{"type":"DOUBLE","value":"1.5"}"#,
            #"{"type":"TIMESTAMP","value":"2024-01-01"}"#,
            #"{"type":"REFERENCE","value":"topic-1"}"#,
            #"{"type":"LOCATION","value":{"latitude":1}}"#,
            #"{"type":"STRING_LIST","value":"a"}"#,
            #"{"type":"INT64_LIST","value":[1,"2"]}"#,
            #"{"type":"STRING"}"#,
        ])
    func wrongValueType(field: String) throws {
        let error = try #require(decodingError(#"{"recordName":"a","recordType":"Note","fields":{"count":"# + field + "}}"))
        #expect(error.code == .invalidArguments)
        #expect(error.message.contains("count"), "\(error.message)")
    }

    @Test(
        "a fractional number for INT64 or TIMESTAMP is rejected, naming the field",
        arguments: [
            #"{"type":"INT64","value":1.5}"#,
            #"{"type":"TIMESTAMP","value":1700000000000.5}"#,
            #"{"type":"INT64_LIST","value":[1,2.5]}"#,
        ])
    func fractionalInteger(field: String) throws {
        let error = try #require(decodingError(#"{"recordName":"a","recordType":"Note","fields":{"count":"# + field + "}}"))
        #expect(error.code == .invalidArguments)
        #expect(error.message.contains("count"), "\(error.message)")
        #expect(!error.message.contains("not valid JSON"), "\(error.message)")
    }

    @Test("a field without a type is rejected")
    func missingType() throws {
        let error = try #require(decodingError(#"{"recordName":"a","recordType":"Note","fields":{"count":{"value":1}}}"#))
        #expect(error.code == .invalidArguments)
        #expect(error.message.contains("type"), "\(error.message)")
    }

    @Test("a reference with an unknown action is rejected")
    func unknownReferenceAction() throws {
        let error = try #require(decodingError(
            #"{"recordName":"a","recordType":"Note","fields":{"t":{"type":"REFERENCE","value":{"recordName":"b","action":"VALIDATE"}}}}"#))
        #expect(error.code == .invalidArguments)
    }

    @Test("a double that JSON cannot hold (NaN) fails to encode with invalidArguments naming the record")
    func nonFiniteDouble() throws {
        var record = Record(recordType: "Note", recordID: Record.ID(recordName: "note-1"))
        record["x"] = .double(.nan)
        let error = try #require(#expect(throws: ShareSyncError.self) { try record.jsonData() })
        #expect(error.code == .invalidArguments)
        #expect(error.recordID == record.recordID)
    }
}
