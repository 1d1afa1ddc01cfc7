import Foundation

// The hand-written JSON coding of records: the same bytes as the Codable conformance in
// Record+JSON.swift gives through `JSONCoding`, several times faster. Share records, non-finite
// doubles and anything unusual in the input are a `JSONFallback`, and the callers use the Codable
// path for them, so results and error messages stay exactly what they were.

extension JSONWriter {
    /// Writes a record as ``Record/jsonData(includingChangedKeys:)`` does, keys in sorted order.
    /// A share record or a non-finite double is a ``JSONFallback``.
    package mutating func record(_ record: Record, includingChangedKeys: Bool) throws(JSONFallback) {
        guard record.shareState == nil else { throw JSONFallback() }
        let zone = record.recordID.zoneID
        raw("{")
        if includingChangedKeys {
            raw(#""changedKeys":"#)
            array(record.changedKeys.sorted()) { $0.string($1) }
            raw(",")
        }
        if let created = record.creationDate {
            raw(#""created":"#)
            stamp(created, user: record.creatorUserRecordID)
            raw(",")
        }
        raw(#""fields":{"#)
        // Foundation sorts keys by their UTF-8 bytes.
        let fields = record.fields.sorted { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) }
        for (i, field) in fields.enumerated() {
            if i > 0 { raw(",") }
            string(field.key)
            raw(":")
            try fieldValue(field.value, zone: zone)
        }
        raw("}")
        if let modified = record.modificationDate {
            raw(#","modified":"#)
            stamp(modified, user: record.lastModifiedUserRecordID)
        }
        if let parent = record.parent {
            raw(#","parent":"#)
            reference(parent, zone: zone, includeAction: false)
        }
        if includingChangedKeys, record.parentChanged { raw(#","parentChanged":true"#) }
        if let tag = record.recordChangeTag {
            raw(#","recordChangeTag":"#)
            string(tag)
        }
        raw(#","recordName":"#)
        string(record.recordID.recordName)
        raw(#","recordType":"#)
        string(record.recordType)
        if let share = record.share {
            raw(#","share":"#)
            reference(share, zone: zone, includeAction: false)
        }
        raw(#","zoneID":"#)
        zoneID(zone)
        raw("}")
    }

    private mutating func stamp(_ date: Date, user: Record.ID?) {
        raw(#"{"timestamp":"#)
        int(Millis.from(date))
        if let user {
            raw(#","userRecordName":"#)
            string(user.recordName)
        }
        raw("}")
    }

    private mutating func zoneID(_ zone: RecordZone.ID) {
        raw(#"{"ownerRecordName":"#)
        string(zone.ownerName)
        raw(#","zoneName":"#)
        string(zone.zoneName)
        raw("}")
    }

    /// A reference as `JSONReference` writes it: the zone only when it is not the record's.
    private mutating func reference(_ reference: Record.Reference, zone: RecordZone.ID, includeAction: Bool) {
        raw("{")
        if includeAction {
            switch reference.action {
            case .none: raw(#""action":"NONE","#)
            case .deleteSelf: raw(#""action":"DELETE_SELF","#)
            }
        }
        raw(#""recordName":"#)
        string(reference.recordID.recordName)
        if reference.recordID.zoneID != zone {
            raw(#","zoneID":"#)
            zoneID(reference.recordID.zoneID)
        }
        raw("}")
    }

    private mutating func location(_ location: Location) throws(JSONFallback) {
        raw(#"{"latitude":"#)
        try double(location.latitude)
        raw(#","longitude":"#)
        try double(location.longitude)
        raw("}")
    }

    private mutating func fieldValue(_ value: FieldValue, zone: RecordZone.ID) throws(JSONFallback) {
        raw(#"{"type":"#)
        string(value.typeName)
        raw(#","value":"#)
        switch value {
        case .string(let v): string(v)
        case .int64(let v): int(v)
        case .double(let v): try double(v)
        case .bool(let v): bool(v)
        case .date(let v): int(Millis.from(v))
        case .bytes(let v): string(v.base64EncodedString())
        case .reference(let v): reference(v, zone: zone, includeAction: true)
        case .location(let v): try location(v)
        case .list(let list):
            switch list {
            case .string(let v): array(v) { $0.string($1) }
            case .int64(let v): array(v) { $0.int($1) }
            case .double(let v): try array(v) { w, d throws(JSONFallback) in try w.double(d) }
            case .bool(let v): array(v) { $0.bool($1) }
            case .date(let v): array(v) { $0.int(Millis.from($1)) }
            case .bytes(let v): array(v) { $0.string($1.base64EncodedString()) }
            case .reference(let v): array(v) { $0.reference($1, zone: zone, includeAction: true) }
            case .location(let v): try array(v) { w, l throws(JSONFallback) in try w.location(l) }
            }
        }
        raw("}")
    }
}

extension JSONReader {
    /// A reference as read, before its zone defaults to the record's (which comes later in the JSON).
    private struct PendingReference {
        var recordName: String
        var zoneID: RecordZone.ID?
        var action: Record.Reference.Action

        func resolved(in zone: RecordZone.ID) -> Record.Reference {
            Record.Reference(recordID: Record.ID(recordName: recordName, zoneID: zoneID ?? zone), action: action)
        }
    }

    /// The top-level keys of a record, one bit each, to catch a key written twice.
    private enum RecordKey: Int {
        case changedKeys, created, fields, modified, parent, parentChanged, recordChangeTag, recordName, recordType, share
        case zoneID
    }

    /// Reads a record as ``Record/init(jsonData:)`` does. A share record, an unknown or repeated key,
    /// `null`, or a value of an unexpected type is a ``JSONFallback``.
    package mutating func record() throws(JSONFallback) -> Record {
        var seen: UInt32 = 0
        var recordName: String?
        var recordType: String?
        var recordChangeTag: String?
        var zone: RecordZone.ID?
        var fields: [String: FieldValue] = [:]
        var referenceFields: [(key: String, list: Bool, references: [PendingReference])] = []
        var created: (Int64, String?)?
        var modified: (Int64, String?)?
        var parent: PendingReference?
        var share: PendingReference?
        var changedKeys: [String]?
        var parentChanged: Bool?
        try object { r, key throws(JSONFallback) in
            let which: RecordKey
            if key.is("recordName") {
                which = .recordName
                recordName = try r.string()
            } else if key.is("recordType") {
                which = .recordType
                recordType = try r.string()
            } else if key.is("fields") {
                which = .fields
                try r.object { r, key throws(JSONFallback) in
                    let name = try r.string(key)
                    if let references = try r.fieldValue(into: &fields, key: name) {
                        referenceFields.append((name, references.list, references.values))
                    }
                }
            } else if key.is("zoneID") {
                which = .zoneID
                zone = try r.zoneID()
            } else if key.is("created") {
                which = .created
                created = try r.stamp()
            } else if key.is("modified") {
                which = .modified
                modified = try r.stamp()
            } else if key.is("parent") {
                which = .parent
                parent = try r.reference()
            } else if key.is("recordChangeTag") {
                which = .recordChangeTag
                recordChangeTag = try r.string()
            } else if key.is("share") {
                which = .share
                share = try r.reference()
            } else if key.is("changedKeys") {
                which = .changedKeys
                changedKeys = try r.elements { r throws(JSONFallback) in try r.string() }
            } else if key.is("parentChanged") {
                which = .parentChanged
                parentChanged = try r.bool()
            } else {
                throw JSONFallback()
            }
            let bit: UInt32 = 1 << which.rawValue
            guard seen & bit == 0 else { throw JSONFallback() }
            seen |= bit
        }
        guard let recordName, let recordType, recordType != Record.shareRecordType else { throw JSONFallback() }
        let zoneID = zone ?? .default
        for field in referenceFields {
            guard fields[field.key] == nil else { throw JSONFallback() }
            let references = field.references.map { $0.resolved(in: zoneID) }
            fields[field.key] = field.list ? .list(.reference(references)) : .reference(references[0])
        }
        func user(_ stamp: (Int64, String?)?) -> Record.ID? { stamp?.1.map { Record.ID(recordName: $0) } }
        var record = Record(
            recordType: recordType, recordID: Record.ID(recordName: recordName, zoneID: zoneID), fields: fields,
            parent: parent?.resolved(in: zoneID).withAction(.none), share: share?.resolved(in: zoneID).withAction(.none),
            creationDate: created.map { Millis.date($0.0) }, modificationDate: modified.map { Millis.date($0.0) },
            creatorUserRecordID: user(created), lastModifiedUserRecordID: user(modified), recordChangeTag: recordChangeTag)
        if let changedKeys { record.markChanged(changedKeys, parent: parentChanged ?? false) }
        return record
    }

    /// Reads a record as ``record()`` does and keeps the bytes it came in as its ``EncodedRecord/json``:
    /// checked with ``checkedRecordIdentity()``, which accepts exactly what ``record()`` reads without
    /// building the record. Bytes that carry changed keys (which a stored record never holds) are read
    /// with ``record()`` and encoded again without them.
    package mutating func encodedRecord() throws(JSONFallback) -> EncodedRecord {
        let start = self
        let (identity, json) = try captured { r throws(JSONFallback) in try r.checkedRecordIdentity() }
        guard !identity.marksChanges else {
            self = start
            let record = try record()
            guard let encoded = try? EncodedRecord(record) else { throw JSONFallback() }
            return encoded
        }
        return EncodedRecord(recordID: identity.recordID, recordType: identity.recordType, json: json)
    }

    /// Reads a record's JSON exactly as ``record()`` does, failing (``JSONFallback``) on the same input,
    /// but builds only its ID and type: each value is checked as ``record()`` reads it, and field values
    /// are not kept. `marksChanges`: the JSON names changed keys or a parent change.
    ///
    /// Measured reason (the participant reads every record of every page): building the record, its
    /// fields dictionary and strings was most of the participant's decoding time in an initial sync.
    /// The fuzzer's message and record targets check that this accepts what ``record()`` accepts,
    /// and reads the same ID and type.
    package mutating func checkedRecordIdentity() throws(JSONFallback) -> (recordID: Record.ID, recordType: String, marksChanges: Bool) {
        var seen: UInt32 = 0
        var recordName: String?
        var recordType: String?
        var zone: RecordZone.ID?
        var fieldNames: Set<String> = []
        var marksChanges = false
        try object { r, key throws(JSONFallback) in
            let which: RecordKey
            if key.is("recordName") {
                which = .recordName
                recordName = try r.string()
            } else if key.is("recordType") {
                which = .recordType
                recordType = try r.string()
            } else if key.is("fields") {
                which = .fields
                try r.object { r, key throws(JSONFallback) in
                    // record() refuses a field named twice, whatever the spellings of the two names.
                    guard fieldNames.insert(try r.string(key)).inserted else { throw JSONFallback() }
                    try r.checkFieldValue()
                }
            } else if key.is("zoneID") {
                which = .zoneID
                zone = try r.zoneID()
            } else if key.is("created") {
                which = .created
                _ = try r.stamp()
            } else if key.is("modified") {
                which = .modified
                _ = try r.stamp()
            } else if key.is("parent") {
                which = .parent
                _ = try r.reference()
            } else if key.is("recordChangeTag") {
                which = .recordChangeTag
                _ = try r.scanString()
            } else if key.is("share") {
                which = .share
                _ = try r.reference()
            } else if key.is("changedKeys") {
                which = .changedKeys
                try r.array { r throws(JSONFallback) in _ = try r.scanString() }
                marksChanges = true
            } else if key.is("parentChanged") {
                which = .parentChanged
                _ = try r.bool()
                marksChanges = true
            } else {
                throw JSONFallback()
            }
            let bit: UInt32 = 1 << which.rawValue
            guard seen & bit == 0 else { throw JSONFallback() }
            seen |= bit
        }
        guard let recordName, let recordType, recordType != Record.shareRecordType else { throw JSONFallback() }
        return (Record.ID(recordName: recordName, zoneID: zone ?? .default), recordType, marksChanges)
    }

    /// Checks a field value as ``fieldValue(into:key:)`` reads it, keeping nothing.
    private mutating func checkFieldValue() throws(JSONFallback) {
        var type: Key?
        var hasValue = false
        try object { r, member throws(JSONFallback) in
            if member.is("type"), type == nil {
                type = try r.scanString()
                return
            }
            guard member.is("value"), let type, !hasValue else { throw JSONFallback() }
            hasValue = true
            if type.is("STRING") {
                _ = try r.scanString()
            } else if type.is("INT64") || type.is("TIMESTAMP") {
                _ = try r.int64()
            } else if type.is("DOUBLE") {
                _ = try r.double()
            } else if type.is("BOOLEAN") {
                _ = try r.bool()
            } else if type.is("BYTES") {
                _ = try r.bytes()
            } else if type.is("REFERENCE") {
                _ = try r.reference()
            } else if type.is("LOCATION") {
                _ = try r.location()
            } else if type.is("STRING_LIST") {
                try r.array { r throws(JSONFallback) in _ = try r.scanString() }
            } else if type.is("INT64_LIST") || type.is("TIMESTAMP_LIST") {
                try r.array { r throws(JSONFallback) in _ = try r.int64() }
            } else if type.is("DOUBLE_LIST") {
                try r.array { r throws(JSONFallback) in _ = try r.double() }
            } else if type.is("BOOLEAN_LIST") {
                try r.array { r throws(JSONFallback) in _ = try r.bool() }
            } else if type.is("BYTES_LIST") {
                try r.array { r throws(JSONFallback) in _ = try r.bytes() }
            } else if type.is("REFERENCE_LIST") {
                try r.array { r throws(JSONFallback) in _ = try r.reference() }
            } else if type.is("LOCATION_LIST") {
                try r.array { r throws(JSONFallback) in _ = try r.location() }
            } else {
                throw JSONFallback()
            }
        }
        guard hasValue else { throw JSONFallback() }
    }

    private mutating func zoneID() throws(JSONFallback) -> RecordZone.ID {
        var zoneName: String?
        var owner: String?
        try object { r, key throws(JSONFallback) in
            if key.is("zoneName"), zoneName == nil {
                zoneName = try r.string()
            } else if key.is("ownerRecordName"), owner == nil {
                owner = try r.string()
            } else {
                throw JSONFallback()
            }
        }
        guard let zoneName else { throw JSONFallback() }
        return RecordZone.ID(zoneName: zoneName, ownerName: owner ?? RecordZone.ID.currentUserDefaultName)
    }

    private mutating func stamp() throws(JSONFallback) -> (Int64, String?) {
        var timestamp: Int64?
        var user: String?
        try object { r, key throws(JSONFallback) in
            if key.is("timestamp"), timestamp == nil {
                timestamp = try r.int64()
            } else if key.is("userRecordName"), user == nil {
                user = try r.string()
            } else {
                throw JSONFallback()
            }
        }
        guard let timestamp else { throw JSONFallback() }
        return (timestamp, user)
    }

    private mutating func reference() throws(JSONFallback) -> PendingReference {
        var recordName: String?
        var zone: RecordZone.ID?
        var action: Record.Reference.Action?
        try object { r, key throws(JSONFallback) in
            if key.is("recordName"), recordName == nil {
                recordName = try r.string()
            } else if key.is("zoneID"), zone == nil {
                zone = try r.zoneID()
            } else if key.is("action"), action == nil {
                let value = try r.scanString()
                if value.is("NONE") {
                    action = Record.Reference.Action.none
                } else if value.is("DELETE_SELF") {
                    action = .deleteSelf
                } else {
                    throw JSONFallback()
                }
            } else {
                throw JSONFallback()
            }
        }
        guard let recordName else { throw JSONFallback() }
        return PendingReference(recordName: recordName, zoneID: zone, action: action ?? .none)
    }

    private mutating func location() throws(JSONFallback) -> Location {
        var latitude: Double?
        var longitude: Double?
        try object { r, key throws(JSONFallback) in
            if key.is("latitude"), latitude == nil {
                latitude = try r.double()
            } else if key.is("longitude"), longitude == nil {
                longitude = try r.double()
            } else {
                throw JSONFallback()
            }
        }
        guard let latitude, let longitude else { throw JSONFallback() }
        return Location(latitude: latitude, longitude: longitude)
    }

    private mutating func bytes() throws(JSONFallback) -> Data {
        guard let data = Data(base64Encoded: try string()) else { throw JSONFallback() }
        return data
    }

    /// Reads a field value (`{"type", "value"}`, type first) into `fields`; a reference or reference
    /// list is returned instead, for its zone to default to the record's.
    private mutating func fieldValue(
        into fields: inout [String: FieldValue], key: String
    ) throws(JSONFallback) -> (list: Bool, values: [PendingReference])? {
        guard fields[key] == nil else { throw JSONFallback() }
        var type: Key?
        var value: FieldValue?
        var references: (list: Bool, values: [PendingReference])?
        try object { r, member throws(JSONFallback) in
            if member.is("type"), type == nil {
                type = try r.scanString()
                return
            }
            guard member.is("value"), let type, value == nil, references == nil else { throw JSONFallback() }
            if type.is("STRING") {
                value = .string(try r.string())
            } else if type.is("INT64") {
                value = .int64(try r.int64())
            } else if type.is("DOUBLE") {
                value = .double(try r.double())
            } else if type.is("BOOLEAN") {
                value = .bool(try r.bool())
            } else if type.is("TIMESTAMP") {
                value = .date(Millis.date(try r.int64()))
            } else if type.is("BYTES") {
                value = .bytes(try r.bytes())
            } else if type.is("REFERENCE") {
                references = (false, [try r.reference()])
            } else if type.is("LOCATION") {
                value = .location(try r.location())
            } else if type.is("STRING_LIST") {
                value = .list(.string(try r.elements { r throws(JSONFallback) in try r.string() }))
            } else if type.is("INT64_LIST") {
                value = .list(.int64(try r.elements { r throws(JSONFallback) in try r.int64() }))
            } else if type.is("DOUBLE_LIST") {
                value = .list(.double(try r.elements { r throws(JSONFallback) in try r.double() }))
            } else if type.is("BOOLEAN_LIST") {
                value = .list(.bool(try r.elements { r throws(JSONFallback) in try r.bool() }))
            } else if type.is("TIMESTAMP_LIST") {
                value = .list(.date(try r.elements { r throws(JSONFallback) in Millis.date(try r.int64()) }))
            } else if type.is("BYTES_LIST") {
                value = .list(.bytes(try r.elements { r throws(JSONFallback) in try r.bytes() }))
            } else if type.is("REFERENCE_LIST") {
                references = (true, try r.elements { r throws(JSONFallback) in try r.reference() })
            } else if type.is("LOCATION_LIST") {
                value = .list(.location(try r.elements { r throws(JSONFallback) in try r.location() }))
            } else {
                throw JSONFallback()
            }
        }
        if let references { return references }
        guard let value else { throw JSONFallback() }
        fields[key] = value
        return nil
    }
}
