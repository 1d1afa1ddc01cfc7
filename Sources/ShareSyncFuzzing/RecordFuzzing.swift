import Foundation
import ShareSyncCore

/// The record JSON reader target. Input: a record's JSON form.
///
/// `Record(jsonData:)` reads it (hand-written reader first, `JSONDecoder` when it falls back). Where
/// the hand-written reader reads a record, `JSONDecoder` must read an equal record that encodes to the
/// same bytes (RecordJSONCodec.swift: "results and error messages stay exactly what they were"), and
/// the hand-written encoder must write exactly `JSONEncoder`'s bytes for it.
enum RecordFuzzing {
    static func run(_ input: UnsafeRawBufferPointer) throws(FuzzFailure) {
        let data = Data(input)
        let decoded = try? Record(jsonData: data)
        let fastRead = JSONReader.read(input, { r throws(JSONFallback) in try r.record() })
        try checkIdentity(fastRead, input)
        guard let fast = fastRead else {
            if let decoded { try checkEncoders(decoded, input) }
            return
        }
        let foundation: Record
        do {
            foundation = try Record(foundationJSONData: data)
        } catch {
            throw FuzzFailure("the hand-written reader read a record, JSONDecoder failed with \(error) on \(preview(input))")
        }
        try check(fast == foundation, "the hand-written reader and JSONDecoder read different records from \(preview(input))")
        for changedKeys in [false, true] {
            let fastJSON = try? fast.foundationJSONData(includingChangedKeys: changedKeys)
            let foundationJSON = try? foundation.foundationJSONData(includingChangedKeys: changedKeys)
            try check(
                fastJSON == foundationJSON,
                "the records read from \(preview(input)) encode differently:\n\(preview(fastJSON ?? Data()))\n\(preview(foundationJSON ?? Data()))")
        }
        try checkEncoders(fast, input)
    }

    /// The participant's check of a received record (`checkedRecordIdentity()`, which builds no
    /// record) accepts exactly what the hand-written reader reads, with the same ID and type.
    static func checkIdentity(_ record: Record?, _ input: UnsafeRawBufferPointer) throws(FuzzFailure) {
        let identity = JSONReader.read(input, { r throws(JSONFallback) in try r.checkedRecordIdentity() })
        try check(
            (identity == nil) == (record == nil),
            "the identity check \(identity == nil ? "refused" : "accepted") what the record reader \(record == nil ? "refused" : "read"): \(preview(input))")
        guard let identity, let record else { return }
        try check(
            identity.recordID == record.recordID && identity.recordType == record.recordType,
            "the identity check read \(identity.recordID) of type \(identity.recordType), the record reader \(record.recordID): \(preview(input))")
        try check(
            identity.marksChanges || (record.changedKeys.isEmpty && !record.parentChanged),
            "the identity check missed the changed keys of \(preview(input))")
    }

    /// The hand-written encoder writes `JSONEncoder`'s bytes.
    static func checkEncoders(_ record: Record, _ input: UnsafeRawBufferPointer) throws(FuzzFailure) {
        for changedKeys in [false, true] {
            guard let foundation = try? record.foundationJSONData(includingChangedKeys: changedKeys) else { continue }
            let written = try? record.jsonData(includingChangedKeys: changedKeys)
            try check(
                written == foundation,
                "the record read from \(preview(input)) is written\n\(preview(written ?? Data()))\nJSONEncoder writes\n\(preview(foundation))")
        }
    }
}
