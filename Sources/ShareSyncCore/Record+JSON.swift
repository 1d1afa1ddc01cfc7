import Foundation
import Synchronization

// The JSON form of a record follows the CloudKit Web Services record dictionary:
//
//     {"recordName": "note-1", "recordType": "Note", "recordChangeTag": "2b",
//      "zoneID": {"zoneName": "Topics", "ownerRecordName": "__defaultOwner__"},
//      "fields": {"title": {"value": "Milk", "type": "STRING"}},
//      "created": {"timestamp": 1700000000000, "userRecordName": "_a1b2"},
//      "modified": {"timestamp": 1700000000000, "userRecordName": "_a1b2"},
//      "parent": {"recordName": "topic-1"}, "share": {"recordName": "…"}}
//
// A save request may add "changedKeys": [...] (and "parentChanged": true) for the changedKeys policy.
// Share records add "share" properties at the top level: rootRecord, publicPermission, participants,
// allowsAccessRequests, requesters, blockedIdentities, url, currentUserParticipantID.

extension Record: Codable {
    private enum Keys: String, CodingKey {
        case recordName, recordType, recordChangeTag, zoneID, fields, created, modified, parent, share
        case changedKeys, parentChanged
        case rootRecord, publicPermission, participants, allowsAccessRequests, requesters, blockedIdentities, url
        case currentUserParticipantID
    }

    private struct Stamp: Codable {
        var timestamp: Int64
        var userRecordName: String?
    }

    /// Set in an encoder's `userInfo` to include ``changedKeys`` (for save requests).
    public static let encodeChangedKeys = CodingUserInfoKey(rawValue: "sharesync.encodeChangedKeys")!

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: Keys.self)
        let zone = try c.decodeIfPresent(JSONZoneID.self, forKey: .zoneID)?.zoneID ?? .default
        let id = Record.ID(recordName: try c.decode(String.self, forKey: .recordName), zoneID: zone)
        var fields: [String: FieldValue] = [:]
        if c.contains(.fields) {
            let fc = try c.nestedContainer(keyedBy: DynamicKey.self, forKey: .fields)
            let coding = FieldValueCoding(zone: zone)
            // In key order, so that of several bad fields the same one is always reported.
            for key in fc.allKeys.sorted(by: { $0.stringValue < $1.stringValue }) {
                fields[key.stringValue] = try coding.decode(from: fc, key: key)
            }
        }
        let created = try c.decodeIfPresent(Stamp.self, forKey: .created)
        let modified = try c.decodeIfPresent(Stamp.self, forKey: .modified)
        func user(_ s: Stamp?) -> Record.ID? { s?.userRecordName.map { Record.ID(recordName: $0) } }
        self.init(
            recordType: try c.decode(String.self, forKey: .recordType), recordID: id, fields: fields,
            parent: try c.decodeIfPresent(JSONReference.self, forKey: .parent)?.reference(defaultZone: zone).withAction(.none),
            share: try c.decodeIfPresent(JSONReference.self, forKey: .share)?.reference(defaultZone: zone).withAction(.none),
            creationDate: created.map { Millis.date($0.timestamp) },
            modificationDate: modified.map { Millis.date($0.timestamp) },
            creatorUserRecordID: user(created), lastModifiedUserRecordID: user(modified),
            recordChangeTag: try c.decodeIfPresent(String.self, forKey: .recordChangeTag))
        if let keys = try c.decodeIfPresent([String].self, forKey: .changedKeys) {
            markChanged(keys, parent: try c.decodeIfPresent(Bool.self, forKey: .parentChanged) ?? false)
        }
        if recordType == Record.shareRecordType {
            var state = ShareState(
                rootRecordID: try c.decodeIfPresent(JSONReference.self, forKey: .rootRecord)?.reference(defaultZone: zone).recordID)
            state.publicPermission = try c.decodeIfPresent(Participant.Permission.self, forKey: .publicPermission) ?? .none
            state.participants = try c.decodeIfPresent([Participant].self, forKey: .participants) ?? []
            state.allowsAccessRequests = try c.decodeIfPresent(Bool.self, forKey: .allowsAccessRequests) ?? false
            state.requesters = try c.decodeIfPresent([AccessRequester].self, forKey: .requesters) ?? []
            state.blockedIdentities = try c.decodeIfPresent([BlockedIdentity].self, forKey: .blockedIdentities) ?? []
            state.url = try c.decodeIfPresent(String.self, forKey: .url)
            state.currentUserParticipantID = try c.decodeIfPresent(String.self, forKey: .currentUserParticipantID)
            shareState = state
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: Keys.self)
        let zone = recordID.zoneID
        try c.encode(recordID.recordName, forKey: .recordName)
        try c.encode(recordType, forKey: .recordType)
        try c.encodeIfPresent(recordChangeTag, forKey: .recordChangeTag)
        try c.encode(JSONZoneID(zone), forKey: .zoneID)
        var fc = c.nestedContainer(keyedBy: DynamicKey.self, forKey: .fields)
        let coding = FieldValueCoding(zone: zone)
        for key in fields.keys.sorted() { try coding.encode(fields[key]!, to: &fc, key: DynamicKey(key)) }
        if let creationDate {
            try c.encode(Stamp(timestamp: Millis.from(creationDate), userRecordName: creatorUserRecordID?.recordName), forKey: .created)
        }
        if let modificationDate {
            try c.encode(
                Stamp(timestamp: Millis.from(modificationDate), userRecordName: lastModifiedUserRecordID?.recordName),
                forKey: .modified)
        }
        try c.encodeIfPresent(parent.map { JSONReference($0, omitZone: zone, includeAction: false) }, forKey: .parent)
        try c.encodeIfPresent(share.map { JSONReference($0, omitZone: zone, includeAction: false) }, forKey: .share)
        if encoder.userInfo[Self.encodeChangedKeys] as? Bool == true {
            try c.encode(changedKeys.sorted(), forKey: .changedKeys)
            if parentChanged { try c.encode(true, forKey: .parentChanged) }
        }
        if let state = shareState {
            try c.encodeIfPresent(
                state.rootRecordID.map { JSONReference(Record.Reference(recordID: $0), omitZone: zone, includeAction: false) },
                forKey: .rootRecord)
            try c.encode(state.publicPermission, forKey: .publicPermission)
            try c.encode(state.participants, forKey: .participants)
            try c.encode(state.allowsAccessRequests, forKey: .allowsAccessRequests)
            try c.encode(state.requesters, forKey: .requesters)
            try c.encode(state.blockedIdentities, forKey: .blockedIdentities)
            try c.encodeIfPresent(state.url, forKey: .url)
            try c.encodeIfPresent(state.currentUserParticipantID, forKey: .currentUserParticipantID)
        }
    }
}

extension Record.Reference {
    func withAction(_ action: Action) -> Record.Reference { Record.Reference(recordID: recordID, action: action) }
}

extension Record {
    /// The record as JSON (the CloudKit Web Services record dictionary).
    public func jsonData(includingChangedKeys: Bool = false) throws(ShareSyncError) -> Data {
        var writer = JSONWriter()
        if (try? writer.record(self, includingChangedKeys: includingChangedKeys)) != nil { return Data(writer.bytes) }
        return try foundationJSONData(includingChangedKeys: includingChangedKeys)
    }

    /// ``jsonData(includingChangedKeys:)`` through `JSONEncoder` (share records, non-finite doubles;
    /// and the reference the hand-written encoder is tested against).
    package func foundationJSONData(includingChangedKeys: Bool = false) throws(ShareSyncError) -> Data {
        let encoder = JSONCoding.encoder(includingChangedKeys: includingChangedKeys)
        do {
            return try encoder.encode(self)
        } catch {
            throw ShareSyncError(
                .invalidArguments, "record cannot be encoded as JSON: \(error)", recordID: recordID, rule: .recordJSON)
        }
    }

    /// Reads a record from JSON; a clear ``ShareSyncError/Code/invalidArguments`` error if it is malformed.
    public init(jsonData: Data) throws(ShareSyncError) {
        if let record = JSONReader.read(jsonData, { r throws(JSONFallback) in try r.record() }) {
            self = record
            return
        }
        if let record = FoundationReadRecords.shared.record(for: jsonData) {
            self = record
            return
        }
        try self.init(foundationJSONData: jsonData)
        FoundationReadRecords.shared.keep(self, for: jsonData)
    }

    /// ``init(jsonData:)`` through `JSONDecoder` (what the hand-written decoder leaves to it; and the
    /// reference it is tested against).
    package init(foundationJSONData jsonData: Data) throws(ShareSyncError) {
        do {
            self = try JSONCoding.decoder().decode(Record.self, from: jsonData)
        } catch {
            throw ShareSyncError(.invalidArguments, "malformed record JSON: \(JSONErrors.describe(error))", rule: .recordJSON)
        }
    }
}

/// Human-readable descriptions of decoding errors.
package enum JSONErrors {
    package static func describe(_ error: any Error) -> String {
        switch error {
        case DecodingError.dataCorrupted(let ctx): return ctx.debugDescription + at(ctx.codingPath)
        case DecodingError.keyNotFound(let key, let ctx): return "missing key \(key.stringValue)" + at(ctx.codingPath)
        case DecodingError.typeMismatch(let type, let ctx): return "expected \(jsonKind(type))" + at(ctx.codingPath)
        case DecodingError.valueNotFound(let type, let ctx): return "missing \(jsonKind(type))" + at(ctx.codingPath)
        default: return "\(error)"
        }
    }

    /// A Swift type as the JSON it is read from ("an object", not "Dictionary<String, Any>").
    private static func jsonKind(_ type: Any.Type) -> String {
        let name = String(describing: type)
        if name.hasPrefix("Dictionary") || name.hasPrefix("KeyedDecodingContainer") { return "an object" }
        if name.hasPrefix("Array") || name.hasPrefix("UnkeyedDecodingContainer") { return "an array" }
        if type is any BinaryInteger.Type || type is any BinaryFloatingPoint.Type || name == "Decimal" { return "a number" }
        switch name {
        case "String", "Substring": return "a string"
        case "Bool": return "true or false"
        default: return "a value of another kind"
        }
    }

    /// The path as a JSON reader writes it: `saving[0].fields.d.value` (Foundation's keys of array
    /// elements read "Index 0", which said nothing to a client).
    private static func at(_ path: [any CodingKey]) -> String {
        guard !path.isEmpty else { return "" }
        var text = ""
        for key in path {
            if let index = key.intValue {
                text += "[\(index)]"
            } else {
                text += (text.isEmpty ? "" : ".") + key.stringValue
            }
        }
        return " at " + text
    }
}

/// The JSON coders every ShareSync JSON form uses: sorted keys, unescaped slashes, dates as
/// milliseconds since 1970, and (when asked) records with their changed keys.
package enum JSONCoding {
    package static func encoder(includingChangedKeys: Bool = false) -> JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .millisecondsSince1970
        if includingChangedKeys { encoder.userInfo[Record.encodeChangedKeys] = true }
        return encoder
    }

    package static func decoder() -> JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .millisecondsSince1970
        return decoder
    }
}

/// The records that only `JSONDecoder` reads (share records, above all: the hand-written reader
/// leaves them to it), by their exact bytes, so that the same bytes are decoded once. The owner reads
/// a zone's share record in every write a participant makes to the zone, to check what it may do:
/// through `JSONDecoder` that was about 7 % of the owner's CPU in `sharesync-bench suite --only
/// latency`'s participant writes. Decoding is a function of the bytes alone, so a record kept here is
/// exactly what decoding them again would give. At most ``capacity`` bytes of JSON are kept; past it
/// the cache starts again empty. A share with 100 participants is a few tens of kilobytes of JSON:
/// the capacity holds several versions of it, and bounds what the cache adds to the owner's memory in
/// the 1,000-connection fan-out (where every accept writes a new version of the share).
package final class FoundationReadRecords: Sendable {
    package static let shared = FoundationReadRecords()
    /// The most bytes of JSON kept (the records decoded from them come on top, of similar size).
    package static let capacity = 256 * 1024

    private let state = Mutex<(records: [Data: Record], bytes: Int)>(([:], 0))
    /// Reads served from the cache, for tests.
    package let hits = Atomic<Int>(0)

    package init() {}

    package func record(for json: Data) -> Record? {
        guard let record = state.withLock({ $0.records[json] }) else { return nil }
        hits.add(1, ordering: .relaxed)
        return record
    }

    package func keep(_ record: Record, for json: Data) {
        guard json.count <= Self.capacity else { return }
        // A copy of the bytes: `json` may be a slice of a larger buffer (a page), which a key would keep alive.
        let key = json.withUnsafeBytes { Data($0) }
        state.withLock { state in
            guard state.records[key] == nil else { return }
            if state.bytes + key.count > Self.capacity { state = ([:], 0) }
            state.records[key] = record
            state.bytes += key.count
        }
    }
}
