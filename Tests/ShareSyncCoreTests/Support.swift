import Foundation
import Testing

@testable import ShareSyncCore

/// A zone other than the default one, for records and references that must say which zone they are in.
let topicsZone = RecordZone.ID(zoneName: "Topics")

/// A date with millisecond precision, as JSON and storage keep it.
func date(millis: Int64) -> Date { Date(timeIntervalSince1970: Double(millis) / 1000) }

/// The record's JSON as a string (keys are sorted, so the text is deterministic).
func jsonString(_ record: Record, includingChangedKeys: Bool = false) throws -> String {
    String(decoding: try record.jsonData(includingChangedKeys: includingChangedKeys), as: UTF8.self)
}

/// The record's JSON as a dictionary, to look at its keys.
func jsonObject(_ record: Record, includingChangedKeys: Bool = false) throws -> [String: Any] {
    let object = try JSONSerialization.jsonObject(with: record.jsonData(includingChangedKeys: includingChangedKeys))
    return try #require(object as? [String: Any])
}

/// Decodes a record from JSON text, expecting it to fail, and returns the error.
func decodingError(
    _ json: String, sourceLocation: SourceLocation = #_sourceLocation
) -> ShareSyncError? {
    #expect(throws: ShareSyncError.self, sourceLocation: sourceLocation) {
        try Record(jsonData: Data(json.utf8))
    }
}

/// A saved-looking record: every system field set, no changed keys.
func savedRecord(
    recordType: String = "Note", recordID: Record.ID = Record.ID(recordName: "note-1", zoneID: topicsZone),
    fields: [String: FieldValue] = [:], parent: Record.Reference? = nil, share: Record.Reference? = nil
) -> Record {
    Record(
        recordType: recordType, recordID: recordID, fields: fields, parent: parent, share: share,
        creationDate: date(millis: 1_700_000_000_123), modificationDate: date(millis: 1_700_000_456_789),
        creatorUserRecordID: Record.ID(recordName: "_alice"), lastModifiedUserRecordID: Record.ID(recordName: "_bob"),
        recordChangeTag: "2b")
}
