import Foundation
import NIOCore
import ShareSyncCore

// Hand-written JSON for the messages that carry pages of records (fetchZoneChanges results, change
// pushes, fetchRecords and modifyRecords), with the record coder of ShareSyncCore inside. They write
// exactly the bytes `JSONEncoder` writes (keys sorted) and read what `JSONDecoder` reads; anything
// else (an error inside a result, a share record, an unknown key, `null`…) is a `JSONFallback`, and
// `MessageCoding` then uses the Codable path, which answers (or fails) as it always has.

/// A message `MessageCoding` can encode without `JSONEncoder`.
package protocol FastJSONEncodable {
    /// Writes the message as `MessageCoding.encode` does through `JSONEncoder`.
    func writeJSON(to writer: inout JSONWriter, includingChangedKeys: Bool) throws(JSONFallback)
}

/// A message `MessageCoding` can decode without `JSONDecoder`.
package protocol FastJSONDecodable {
    /// Reads the message as `MessageCoding.decode` does through `JSONDecoder`.
    static func readJSON(from reader: inout JSONReader) throws(JSONFallback) -> Self
}

extension MessageCoding {
    /// The message's JSON bytes from the hand-written encoder, or `nil` to use `JSONEncoder`.
    static func fastEncode<T>(_ message: T, includingChangedKeys: Bool) -> [UInt8]? {
        guard let message = message as? any FastJSONEncodable else { return nil }
        var writer = JSONWriter(capacity: 4096)
        do {
            try message.writeJSON(to: &writer, includingChangedKeys: includingChangedKeys)
            return writer.bytes
        } catch {
            return nil
        }
    }

    /// The message from the hand-written decoder, or `nil` to use `JSONDecoder`.
    static func fastDecode<T>(_ type: T.Type, from bytes: UnsafeRawBufferPointer) -> T? {
        guard let fastType = type as? any FastJSONDecodable.Type else { return nil }
        func read<M: FastJSONDecodable>(_ type: M.Type) -> T? {
            JSONReader.read(bytes) { r throws(JSONFallback) in try M.readJSON(from: &r) } as? T
        }
        return read(fastType)
    }
}

extension JSONWriter {
    fileprivate mutating func strings(_ values: [String]) {
        array(values) { $0.string($1) }
    }

    fileprivate mutating func records(_ records: [Record], includingChangedKeys: Bool) throws(JSONFallback) {
        try array(records) { w, record throws(JSONFallback) in try w.record(record, includingChangedKeys: includingChangedKeys) }
    }
}

extension JSONReader {
    /// Reads `{}`, the only errors map the hand-written decoders read.
    fileprivate mutating func noErrors() throws(JSONFallback) {
        try object { _, _ throws(JSONFallback) in throw JSONFallback() }
    }

    /// Marks a key as read, falling back on one written twice.
    fileprivate static func first(_ bit: Int, in seen: inout UInt32) throws(JSONFallback) {
        guard seen & 1 << bit == 0 else { throw JSONFallback() }
        seen |= 1 << bit
    }
}

// MARK: Results

extension ZoneChangesResult {
    init(
        zoneName: String, changed: [Record], deleted: [Deleted], order: String, token: ServerChangeToken, moreComing: Bool
    ) {
        self.zoneName = zoneName
        self.changed = changed
        self.deleted = deleted
        self.order = order
        self.token = token
        self.moreComing = moreComing
    }
}

extension DatabaseChangesResult {
    init(changedZones: [String], deletedZones: [String], token: ServerChangeToken, moreComing: Bool) {
        self.changedZones = changedZones
        self.deletedZones = deletedZones
        self.token = token
        self.moreComing = moreComing
    }
}

extension ZoneChangesResult: FastJSONEncodable, FastJSONDecodable {
    package func writeJSON(to writer: inout JSONWriter, includingChangedKeys: Bool) throws(JSONFallback) {
        writer.raw(#"{"changed":"#)
        try writer.records(changed, includingChangedKeys: includingChangedKeys)
        Self.writeTail(to: &writer, deleted: deleted, moreComing: moreComing, order: order, token: token, zoneName: zoneName)
    }

    /// Everything after `changed`, and the closing brace.
    fileprivate static func writeTail(
        to writer: inout JSONWriter, deleted: [Deleted], moreComing: Bool, order: String, token: ServerChangeToken, zoneName: String
    ) {
        writer.raw(#","deleted":["#)
        for (i, item) in deleted.enumerated() {
            writer.raw(i > 0 ? #",{"recordName":"# : #"{"recordName":"#)
            writer.string(item.recordName)
            writer.raw(#","recordType":"#)
            writer.string(item.recordType)
            writer.raw("}")
        }
        writer.raw(#"],"moreComing":"#)
        writer.bool(moreComing)
        writer.raw(#","order":"#)
        writer.string(order)
        writer.raw(#","token":"#)
        writer.string(token.stringValue)
        writer.raw(#","zoneName":"#)
        writer.string(zoneName)
        writer.raw("}")
    }

    package static func readJSON(from reader: inout JSONReader) throws(JSONFallback) -> ZoneChangesResult {
        let page = try readPage(from: &reader) { r throws(JSONFallback) in try r.record() }
        return ZoneChangesResult(
            zoneName: page.zoneName, changed: page.changed, deleted: page.deleted, order: page.order, token: page.token,
            moreComing: page.moreComing)
    }

    /// Reads a page's members, each changed record with `changed`.
    fileprivate static func readPage<Item>(
        from reader: inout JSONReader, changed readChanged: (inout JSONReader) throws(JSONFallback) -> Item
    ) throws(JSONFallback) -> (
        zoneName: String, changed: [Item], deleted: [Deleted], order: String, token: ServerChangeToken, moreComing: Bool
    ) {
        var seen: UInt32 = 0
        var changed: [Item]?
        var deleted: [Deleted]?
        var moreComing: Bool?
        var order: String?
        var token: String?
        var zoneName: String?
        try reader.object { r, key throws(JSONFallback) in
            if key.is("changed") {
                try JSONReader.first(0, in: &seen)
                changed = try r.elements(readChanged)
            } else if key.is("deleted") {
                try JSONReader.first(1, in: &seen)
                deleted = try r.elements { r throws(JSONFallback) in try Deleted.readJSON(from: &r) }
            } else if key.is("moreComing") {
                try JSONReader.first(2, in: &seen)
                moreComing = try r.bool()
            } else if key.is("order") {
                try JSONReader.first(3, in: &seen)
                order = try r.string()
            } else if key.is("token") {
                try JSONReader.first(4, in: &seen)
                token = try r.string()
            } else if key.is("zoneName") {
                try JSONReader.first(5, in: &seen)
                zoneName = try r.string()
            } else {
                throw JSONFallback()
            }
        }
        guard let changed, let deleted, let moreComing, let order, let token, let zoneName else { throw JSONFallback() }
        return (zoneName, changed, deleted, order, ServerChangeToken(stringValue: token), moreComing)
    }
}

/// A `fetchZoneChanges` result as the participant's sync engine reads it: the JSON of
/// ``ZoneChangesResult``, with each record read as a record (so a malformed one is refused as
/// before) and then kept as the bytes it came in, which the replica stores, instead of being encoded
/// again. Only ever decoded; the Codable path (what the hand-written reader leaves to `JSONDecoder`)
/// decodes a ``ZoneChangesResult`` and encodes its records.
package struct ReceivedZoneChanges: Codable, Sendable, FastJSONDecodable {
    package var zoneName: String
    package var changed: [EncodedRecord]
    package var deleted: [ZoneChangesResult.Deleted]
    package var order: String
    package var token: ServerChangeToken
    package var moreComing: Bool

    package static func readJSON(from reader: inout JSONReader) throws(JSONFallback) -> ReceivedZoneChanges {
        let page = try ZoneChangesResult.readPage(from: &reader) { r throws(JSONFallback) in try r.encodedRecord() }
        return ReceivedZoneChanges(
            zoneName: page.zoneName, changed: page.changed, deleted: page.deleted, order: page.order, token: page.token,
            moreComing: page.moreComing)
    }

    package func encode(to encoder: any Encoder) throws {
        var result = ZoneChangesResult(ZoneChanges(zoneID: RecordZone.ID(zoneName: zoneName), changes: [], changeToken: token, moreComing: moreComing))
        result.changed = try changed.map { record throws(ShareSyncError) in try record.decoded() }
        result.deleted = deleted
        result.order = order
        try result.encode(to: encoder)
    }

    /// The change token and `moreComing` of the `fetchZoneChanges` answer in `frame`, read in one pass
    /// that checks the syntax of the records without decoding them (a few percent of the time decoding
    /// takes): the participant asks for the next page with them, then decodes this one while the owner
    /// serves the next. Nil for anything else: an error answer, a key the fast reader does not know,
    /// JSON it leaves to `JSONDecoder`; the caller then waits for the decoded page. The page decoded
    /// later is still checked in full, and a page that then fails is refused as before.
    package static func continuation(of frame: ByteBuffer) -> (token: ServerChangeToken, moreComing: Bool)? {
        frame.withUnsafeReadableBytes { bytes in
            JSONReader.read(bytes) { r throws(JSONFallback) -> (token: ServerChangeToken, moreComing: Bool) in
                var token: String?
                var moreComing: Bool?
                var seen: UInt32 = 0
                try r.object { r, key throws(JSONFallback) in
                    if key.is("id") {
                        try JSONReader.first(0, in: &seen)
                        _ = try r.int()
                    } else if key.is("ok") {
                        try JSONReader.first(1, in: &seen)
                        try r.object { r, key throws(JSONFallback) in
                            if key.is("token"), token == nil {
                                token = try r.string()
                            } else if key.is("moreComing"), moreComing == nil {
                                moreComing = try r.bool()
                            } else {
                                try r.skipValue()
                            }
                        }
                    } else {
                        throw JSONFallback()
                    }
                }
                guard let token, let moreComing else { throw JSONFallback() }
                return (ServerChangeToken(stringValue: token), moreComing)
            }
        }
    }

    /// The page in the owner's zone `zoneName` of `ownerName`, its changes in commit order
    /// (``ZoneChangesResult/zoneChanges(ownerName:)``, with each record's bytes kept).
    package func zoneChanges(ownerName: String) throws(ShareSyncError) -> EncodedZoneChanges {
        let zoneID = RecordZone.ID(zoneName: zoneName, ownerName: ownerName)
        let changes = try ZoneChangesResult.merge(
            order: order, changed: changed, deleted: deleted, in: zoneID, EncodedZoneChanges.Change.changed, EncodedZoneChanges.Change.deleted)
        return EncodedZoneChanges(zoneID: zoneID, changes: changes, changeToken: token, moreComing: moreComing)
    }
}

extension ReceivedZoneChanges {
    // In an extension, so that the struct keeps its memberwise initializer.
    package init(from decoder: any Decoder) throws {
        let result = try ZoneChangesResult(from: decoder)
        self.init(
            zoneName: result.zoneName, changed: try result.changed.map { record throws(ShareSyncError) in try EncodedRecord(record) },
            deleted: result.deleted, order: result.order, token: result.token, moreComing: result.moreComing)
    }
}

/// A `fetchZoneChanges` result as the owner's server writes it: the same JSON as
/// ``ZoneChangesResult``, with each record already JSON (as the participant sees it, spliced from
/// the stored bytes by the store) instead of a ``Record`` encoded again. Only ever encoded; decoding
/// reads a ``ZoneChangesResult`` and encodes its records.
package struct ZoneChangesPage: Codable, Sendable, FastJSONEncodable {
    package var zoneName: String
    package var changedJSON: [Data]
    package var deleted: [ZoneChangesResult.Deleted]
    package var order: String
    package var token: ServerChangeToken
    package var moreComing: Bool

    /// The changes in commit order: `.changed` with a record's JSON, `.deleted` with its name and type.
    package enum Change {
        case changed(Data)
        case deleted(recordName: String, recordType: String)
    }

    package init(zoneName: String, changes: [Change], token: ServerChangeToken, moreComing: Bool) {
        self.zoneName = zoneName
        changedJSON = []
        deleted = []
        order = ""
        for change in changes {
            switch change {
            case .changed(let json):
                changedJSON.append(json)
                order.append("c")
            case .deleted(let name, let type):
                deleted.append(ZoneChangesResult.Deleted(recordName: name, recordType: type))
                order.append("d")
            }
        }
        self.token = token
        self.moreComing = moreComing
    }

    package func writeJSON(to writer: inout JSONWriter, includingChangedKeys: Bool) throws(JSONFallback) {
        // Stored JSON never holds changed keys: a page asked for with them takes the Codable path.
        guard !includingChangedKeys else { throw JSONFallback() }
        writer.raw(#"{"changed":["#)
        for (i, json) in changedJSON.enumerated() {
            if i > 0 { writer.raw(",") }
            writer.json(json)
        }
        writer.raw("]")
        ZoneChangesResult.writeTail(to: &writer, deleted: deleted, moreComing: moreComing, order: order, token: token, zoneName: zoneName)
    }

    /// The equivalent ``ZoneChangesResult`` (each record decoded).
    package func result() throws(ShareSyncError) -> ZoneChangesResult {
        var result = ZoneChangesResult(ZoneChanges(zoneID: RecordZone.ID(zoneName: zoneName), changes: [], changeToken: token, moreComing: moreComing))
        result.changed = try changedJSON.map { json throws(ShareSyncError) in try Record(jsonData: json) }
        result.deleted = deleted
        result.order = order
        return result
    }

    package func encode(to encoder: any Encoder) throws {
        try result().encode(to: encoder)
    }

    package init(from decoder: any Decoder) throws {
        let result = try ZoneChangesResult(from: decoder)
        zoneName = result.zoneName
        changedJSON = try result.changed.map { record throws(ShareSyncError) in try record.jsonData() }
        deleted = result.deleted
        order = result.order
        token = result.token
        moreComing = result.moreComing
    }
}

extension ZoneChangesResult.Deleted {
    fileprivate static func readJSON(from reader: inout JSONReader) throws(JSONFallback) -> Self {
        var recordName: String?
        var recordType: String?
        try reader.object { r, key throws(JSONFallback) in
            if key.is("recordName"), recordName == nil {
                recordName = try r.string()
            } else if key.is("recordType"), recordType == nil {
                recordType = try r.string()
            } else {
                throw JSONFallback()
            }
        }
        guard let recordName, let recordType else { throw JSONFallback() }
        return Self(recordName: recordName, recordType: recordType)
    }
}

extension DatabaseChangesResult: FastJSONEncodable, FastJSONDecodable {
    package func writeJSON(to writer: inout JSONWriter, includingChangedKeys: Bool) {
        writer.raw(#"{"changedZones":"#)
        writer.strings(changedZones)
        writer.raw(#","deletedZones":"#)
        writer.strings(deletedZones)
        writer.raw(#","moreComing":"#)
        writer.bool(moreComing)
        writer.raw(#","token":"#)
        writer.string(token.stringValue)
        writer.raw("}")
    }

    package static func readJSON(from reader: inout JSONReader) throws(JSONFallback) -> DatabaseChangesResult {
        var seen: UInt32 = 0
        var changedZones: [String]?
        var deletedZones: [String]?
        var moreComing: Bool?
        var token: String?
        try reader.object { r, key throws(JSONFallback) in
            if key.is("changedZones") {
                try JSONReader.first(0, in: &seen)
                changedZones = try r.elements { r throws(JSONFallback) in try r.string() }
            } else if key.is("deletedZones") {
                try JSONReader.first(1, in: &seen)
                deletedZones = try r.elements { r throws(JSONFallback) in try r.string() }
            } else if key.is("moreComing") {
                try JSONReader.first(2, in: &seen)
                moreComing = try r.bool()
            } else if key.is("token") {
                try JSONReader.first(3, in: &seen)
                token = try r.string()
            } else {
                throw JSONFallback()
            }
        }
        guard let changedZones, let deletedZones, let moreComing, let token else { throw JSONFallback() }
        return DatabaseChangesResult(
            changedZones: changedZones, deletedZones: deletedZones, token: ServerChangeToken(stringValue: token),
            moreComing: moreComing)
    }
}

extension ChangesPush: FastJSONEncodable, FastJSONDecodable {
    package func writeJSON(to writer: inout JSONWriter, includingChangedKeys: Bool) throws(JSONFallback) {
        try Self.writeJSON(
            databaseChanges: databaseChanges, moreComing: moreComing, push: push, token: token, zoneChanges: zoneChanges, to: &writer,
            includingChangedKeys: includingChangedKeys)
    }

    /// The push's JSON, with its zones written by `Zone` (a ``ZoneChangesResult``, or a
    /// ``ZoneChangesPage`` of records already JSON).
    fileprivate static func writeJSON<Zone: FastJSONEncodable>(
        databaseChanges: DatabaseChangesResult, moreComing: Bool?, push: String, token: ServerChangeToken, zoneChanges: [Zone],
        to writer: inout JSONWriter, includingChangedKeys: Bool
    ) throws(JSONFallback) {
        writer.raw(#"{"databaseChanges":"#)
        databaseChanges.writeJSON(to: &writer, includingChangedKeys: includingChangedKeys)
        if let moreComing {
            writer.raw(moreComing ? #","moreComing":true"# : #","moreComing":false"#)
        }
        writer.raw(#","push":"#)
        writer.string(push)
        writer.raw(#","token":"#)
        writer.string(token.stringValue)
        writer.raw(#","zoneChanges":["#)
        for (i, zone) in zoneChanges.enumerated() {
            if i > 0 { writer.raw(",") }
            try zone.writeJSON(to: &writer, includingChangedKeys: includingChangedKeys)
        }
        writer.raw("]}")
    }

    package static func readJSON(from reader: inout JSONReader) throws(JSONFallback) -> ChangesPush {
        var seen: UInt32 = 0
        var databaseChanges: DatabaseChangesResult?
        var push: String?
        var token: String?
        var zoneChanges: [ZoneChangesResult]?
        var moreComing: Bool?
        try reader.object { r, key throws(JSONFallback) in
            if key.is("databaseChanges") {
                try JSONReader.first(0, in: &seen)
                databaseChanges = try DatabaseChangesResult.readJSON(from: &r)
            } else if key.is("moreComing") {
                try JSONReader.first(4, in: &seen)
                moreComing = try r.bool()
            } else if key.is("push") {
                try JSONReader.first(1, in: &seen)
                push = try r.string()
            } else if key.is("token") {
                try JSONReader.first(2, in: &seen)
                token = try r.string()
            } else if key.is("zoneChanges") {
                try JSONReader.first(3, in: &seen)
                zoneChanges = try r.elements { r throws(JSONFallback) in try ZoneChangesResult.readJSON(from: &r) }
            } else {
                throw JSONFallback()
            }
        }
        guard let databaseChanges, let push, let token, let zoneChanges else { throw JSONFallback() }
        var message = ChangesPush(databaseChanges: databaseChanges, zoneChanges: zoneChanges, token: ServerChangeToken(stringValue: token))
        message.push = push
        message.moreComing = moreComing
        return message
    }
}

extension FetchRecordsResult: FastJSONEncodable, FastJSONDecodable {
    package func writeJSON(to writer: inout JSONWriter, includingChangedKeys: Bool) throws(JSONFallback) {
        guard errors.isEmpty else { throw JSONFallback() }
        writer.raw(#"{"errors":{},"records":"#)
        try writer.records(records, includingChangedKeys: includingChangedKeys)
        writer.raw("}")
    }

    package static func readJSON(from reader: inout JSONReader) throws(JSONFallback) -> FetchRecordsResult {
        var seen: UInt32 = 0
        var records: [Record]?
        try reader.object { r, key throws(JSONFallback) in
            if key.is("errors") {
                try JSONReader.first(0, in: &seen)
                try r.noErrors()
            } else if key.is("records") {
                try JSONReader.first(1, in: &seen)
                records = try r.elements { r throws(JSONFallback) in try r.record() }
            } else {
                throw JSONFallback()
            }
        }
        guard let records, seen & 1 != 0 else { throw JSONFallback() }
        return FetchRecordsResult(records: records, errors: [:])
    }
}

extension ModifyRecordsWireResult: FastJSONEncodable, FastJSONDecodable {
    package func writeJSON(to writer: inout JSONWriter, includingChangedKeys: Bool) throws(JSONFallback) {
        guard errors.isEmpty else { throw JSONFallback() }
        writer.raw(#"{"deleted":"#)
        writer.strings(deleted)
        writer.raw(#","errors":{},"saved":"#)
        try writer.records(saved, includingChangedKeys: includingChangedKeys)
        writer.raw("}")
    }

    package static func readJSON(from reader: inout JSONReader) throws(JSONFallback) -> ModifyRecordsWireResult {
        var seen: UInt32 = 0
        var deleted: [String]?
        var saved: [Record]?
        try reader.object { r, key throws(JSONFallback) in
            if key.is("deleted") {
                try JSONReader.first(0, in: &seen)
                deleted = try r.elements { r throws(JSONFallback) in try r.string() }
            } else if key.is("errors") {
                try JSONReader.first(1, in: &seen)
                try r.noErrors()
            } else if key.is("saved") {
                try JSONReader.first(2, in: &seen)
                saved = try r.elements { r throws(JSONFallback) in try r.record() }
            } else {
                throw JSONFallback()
            }
        }
        guard let deleted, let saved, seen & 2 != 0 else { throw JSONFallback() }
        return ModifyRecordsWireResult(saved: saved, deleted: deleted, errors: [:])
    }
}

// MARK: Envelopes

extension Response {
    init(id: Int?, ok: Result?, error: WireError?) {
        self.id = id
        self.ok = ok
        self.error = error
    }
}

extension MessageHead {
    init(op: String?, id: Int?, push: String?, error: WireError?, hasOk: Bool) {
        self.op = op
        self.id = id
        self.push = push
        self.error = error
        self.hasOk = hasOk
    }
}

extension Response: FastJSONEncodable where Result: FastJSONEncodable {
    package func writeJSON(to writer: inout JSONWriter, includingChangedKeys: Bool) throws(JSONFallback) {
        guard error == nil else { throw JSONFallback() }
        writer.raw("{")
        if let id {
            writer.raw(#""id":"#)
            writer.int(Int64(id))
        }
        if let ok {
            writer.raw(id == nil ? #""ok":"# : #","ok":"#)
            try ok.writeJSON(to: &writer, includingChangedKeys: includingChangedKeys)
        }
        writer.raw("}")
    }
}

extension Response: FastJSONDecodable where Result: FastJSONDecodable {
    package static func readJSON(from reader: inout JSONReader) throws(JSONFallback) -> Response<Result> {
        var seen: UInt32 = 0
        var id: Int?
        var ok: Result?
        try reader.object { r, key throws(JSONFallback) in
            if key.is("id") {
                try JSONReader.first(0, in: &seen)
                id = try r.int()
            } else if key.is("ok") {
                try JSONReader.first(1, in: &seen)
                ok = try Result.readJSON(from: &r)
            } else {
                throw JSONFallback()
            }
        }
        return Response(id: id, ok: ok, error: nil)
    }
}

extension Request: FastJSONEncodable, FastJSONDecodable {
    /// Only `modifyRecords` (the one that carries records) is written by hand.
    package func writeJSON(to writer: inout JSONWriter, includingChangedKeys: Bool) throws(JSONFallback) {
        guard case .modifyRecords(let zoneName, let saving, let deleting, let savePolicy, let atomically, let writeID) = body else {
            throw JSONFallback()
        }
        writer.raw(#"{"atomically":"#)
        writer.bool(atomically)
        writer.raw(#","deleting":"#)
        writer.strings(deleting)
        writer.raw(#","id":"#)
        writer.int(Int64(id))
        writer.raw(#","op":"modifyRecords","savePolicy":"#)
        writer.string(savePolicy.rawValue)
        writer.raw(#","saving":"#)
        try writer.records(saving, includingChangedKeys: includingChangedKeys)
        if let writeID {
            writer.raw(#","writeID":"#)
            writer.string(writeID)
        }
        writer.raw(#","zoneName":"#)
        writer.string(zoneName)
        writer.raw("}")
    }

    /// Only `modifyRecords` is read by hand.
    package static func readJSON(from reader: inout JSONReader) throws(JSONFallback) -> Request {
        var seen: UInt32 = 0
        var id: Int?
        var isModifyRecords = false
        var zoneName: String?
        var saving: [Record]?
        var deleting: [String]?
        var savePolicy: SavePolicy?
        var atomically: Bool?
        var writeID: String?
        try reader.object { r, key throws(JSONFallback) in
            if key.is("id") {
                try JSONReader.first(0, in: &seen)
                id = try r.int()
            } else if key.is("op") {
                try JSONReader.first(1, in: &seen)
                guard try r.scanString().is("modifyRecords") else { throw JSONFallback() }
                isModifyRecords = true
            } else if key.is("zoneName") {
                try JSONReader.first(2, in: &seen)
                zoneName = try r.string()
            } else if key.is("saving") {
                try JSONReader.first(3, in: &seen)
                saving = try r.elements { r throws(JSONFallback) in try r.record() }
            } else if key.is("deleting") {
                try JSONReader.first(4, in: &seen)
                deleting = try r.elements { r throws(JSONFallback) in try r.string() }
            } else if key.is("savePolicy") {
                try JSONReader.first(5, in: &seen)
                guard let policy = SavePolicy(rawValue: try r.string()) else { throw JSONFallback() }
                savePolicy = policy
            } else if key.is("atomically") {
                try JSONReader.first(6, in: &seen)
                atomically = try r.bool()
            } else if key.is("writeID") {
                try JSONReader.first(7, in: &seen)
                writeID = try r.string()
            } else {
                throw JSONFallback()
            }
        }
        guard let id, isModifyRecords, let zoneName else { throw JSONFallback() }
        return Request(
            id: id,
            body: .modifyRecords(
                zoneName: zoneName, saving: saving ?? [], deleting: deleting ?? [],
                savePolicy: savePolicy ?? .ifServerRecordUnchanged, atomically: atomically ?? true, writeID: writeID))
    }
}

extension MessageHead: FastJSONDecodable {
    /// Reads the routing fields of a frame and checks the rest is JSON, without decoding it.
    package static func readJSON(from reader: inout JSONReader) throws(JSONFallback) -> MessageHead {
        var seen: UInt32 = 0
        var head = MessageHead(op: nil, id: nil, push: nil, error: nil, hasOk: false)
        try reader.object { r, key throws(JSONFallback) in
            if key.is("op") {
                try JSONReader.first(0, in: &seen)
                head.op = try r.string()
            } else if key.is("id") {
                try JSONReader.first(1, in: &seen)
                head.id = try r.int()
            } else if key.is("push") {
                try JSONReader.first(2, in: &seen)
                head.push = try r.string()
            } else if key.is("ok") {
                try JSONReader.first(3, in: &seen)
                head.hasOk = true
                try r.skipValue()
            } else if key.is("error") || !key.isPlainASCII {
                // An error is rare; a key with escapes or beyond ASCII might be one of the above.
                throw JSONFallback()
            } else {
                try r.skipValue()
            }
        }
        return head
    }
}

/// A ``ChangesPush`` as the owner's server writes it: the same JSON, with each zone's records already
/// JSON (spliced from the stored bytes by the store, as in ``ZoneChangesPage``) instead of records
/// decoded, presented and encoded again for every subscriber. Only ever encoded; a client decodes a
/// ``ChangesPush``.
package struct SplicedChangesPush: Encodable, Sendable, FastJSONEncodable {
    package var databaseChanges: DatabaseChangesResult
    package var zoneChanges: [ZoneChangesPage]
    package var token: ServerChangeToken
    /// True on a push cut by the response size; nil otherwise (the key is then absent).
    package var moreComing: Bool?

    package init(databaseChanges: DatabaseChangesResult, zoneChanges: [ZoneChangesPage], token: ServerChangeToken, moreComing: Bool) {
        self.databaseChanges = databaseChanges
        self.zoneChanges = zoneChanges
        self.token = token
        self.moreComing = moreComing ? true : nil
    }

    package func writeJSON(to writer: inout JSONWriter, includingChangedKeys: Bool) throws(JSONFallback) {
        try ChangesPush.writeJSON(
            databaseChanges: databaseChanges, moreComing: moreComing, push: "changes", token: token, zoneChanges: zoneChanges,
            to: &writer, includingChangedKeys: includingChangedKeys)
    }

    /// The equivalent ``ChangesPush`` (each record decoded).
    package func push() throws(ShareSyncError) -> ChangesPush {
        ChangesPush(
            databaseChanges: databaseChanges, zoneChanges: try zoneChanges.map { zone throws(ShareSyncError) in try zone.result() },
            token: token, moreComing: moreComing ?? false)
    }

    /// The Codable path (taken only if the hand-written writer falls back): the decoded push.
    package func encode(to encoder: any Encoder) throws {
        try push().encode(to: encoder)
    }
}
