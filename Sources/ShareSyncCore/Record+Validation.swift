import Foundation

extension Record {
    /// Checks the record against the data model's rules and the limits: names, field keys, values
    /// (finite doubles, valid locations, references within the record's zone) and size.
    ///
    /// - Returns: the record's JSON form, whose size was checked.
    public func validate(limits: Limits) throws(ShareSyncError) -> Data {
        try checkContent(limits: limits)
        let json = try jsonData()
        try checkSize(of: json, limits: limits)
        return json
    }

    /// Checks everything ``validate(limits:)`` does but the size, without encoding the record.
    public func checkContent(limits: Limits) throws(ShareSyncError) {
        try Names.checkZoneName(recordID.zoneID.zoneName, limits: limits)
        try Names.checkRecordName(recordID.recordName, limits: limits, recordID: recordID)
        try Names.checkRecordType(recordType, limits: limits, recordID: recordID)
        for (key, value) in fields {
            try Names.checkFieldKey(key, limits: limits, recordID: recordID)
            try check(value, key: key)
        }
        if let parent {
            guard parent.recordID.zoneID.isSameZone(as: recordID.zoneID) else {
                throw .invalid(
                    "the parent must be in the record's own zone", recordID: recordID, rule: .parentSameZone)
            }
            guard parent.recordID.recordName != recordID.recordName else {
                throw .invalid("a record cannot be its own parent", recordID: recordID, rule: .parentCycle)
            }
        }
    }

    /// Checks the size of the record's JSON form against ``Limits/maximumRecordSize``.
    public func checkSize(of json: Data, limits: Limits) throws(ShareSyncError) {
        guard json.count <= limits.maximumRecordSize else {
            throw ShareSyncError(
                .limitExceeded,
                "record is \(json.count) bytes, over the limit of \(limits.maximumRecordSize) bytes",
                recordID: recordID, rule: .recordSize)
        }
    }

    private func check(_ value: FieldValue, key: String) throws(ShareSyncError) {
        func finite(_ d: Double) throws(ShareSyncError) {
            guard d.isFinite else {
                throw .invalid("field \(key): a double must be finite", recordID: recordID, rule: .finiteDouble)
            }
        }
        func location(_ l: Location) throws(ShareSyncError) {
            guard l.latitude.isFinite, l.longitude.isFinite, abs(l.latitude) <= 90, abs(l.longitude) <= 180 else {
                throw .invalid(
                    "field \(key): latitude must be within ±90 and longitude within ±180", recordID: recordID,
                    rule: .locationRange)
            }
        }
        func date(_ d: Date) throws(ShareSyncError) {
            guard d.timeIntervalSince1970.isFinite, abs(d.timeIntervalSince1970) <= Millis.maximumSeconds else {
                throw .invalid(
                    "field \(key): a date must be within about 3 million years of 1970", recordID: recordID, rule: .validDate)
            }
        }
        switch value {
        case .double(let d): try finite(d)
        case .list(.double(let ds)): for d in ds { try finite(d) }
        case .location(let l): try location(l)
        case .list(.location(let ls)): for l in ls { try location(l) }
        case .date(let d): try date(d)
        case .list(.date(let ds)): for d in ds { try date(d) }
        default: break
        }
        for reference in value.references where !reference.recordID.zoneID.isSameZone(as: recordID.zoneID) {
            throw .invalid(
                "field \(key): a reference must point into the record's own zone", recordID: recordID,
                rule: .referenceSameZone)
        }
    }
}
