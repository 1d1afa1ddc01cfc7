import Foundation
import NIOCore
import ShareSyncCore
import ShareSyncWire

/// The message reader target. Input: one frame payload.
///
/// It is read as the nodes read frames: its head (`MessageHead`), then as a request, and as what its
/// head routes it to (a push, the results of the requests that carry records, an error response, the
/// authentication messages). For the messages with a hand-written reader (Message+FastJSON.swift),
/// that reader and `JSONDecoder` are checked against each other where the code says they agree: when
/// the hand-written reader reads a message (does not fall back), `JSONDecoder` must read the same
/// message (compared by its Foundation encoding), and the hand-written encoder must write exactly the
/// bytes `JSONEncoder` writes for it.
enum MessageFuzzing {
    static func run(_ input: UnsafeRawBufferPointer) throws(FuzzFailure) {
        let data = Data(input)
        let head = try readHead(input, data)
        try readFast(Request.self, input, data)
        guard let head else { return }
        if head.push != nil {
            try readFast(ChangesPush.self, input, data)
        }
        if head.hasOk {
            try readFast(Response<ZoneChangesResult>.self, input, data)
            try readReceivedPage(input, data)
            try readFast(Response<DatabaseChangesResult>.self, input, data)
            try readFast(Response<FetchRecordsResult>.self, input, data)
            try readFast(Response<ModifyRecordsWireResult>.self, input, data)
            _ = try? MessageCoding.decode(Response<ShareMetadataResult>.self, from: data)
            _ = try? MessageCoding.decode(Response<SubscribeResult>.self, from: data)
        }
        if let error = head.error {
            _ = error.shareSyncError(ownerName: "_861c5add48934dc0bbcf0ec1406315ca")
            _ = try? MessageCoding.decode(ErrorResponse.self, from: data)
        }
        switch head.op {
        case "hello": _ = try? MessageCoding.decode(HelloMessage.self, from: data)
        case "challenge": _ = try? MessageCoding.decode(ChallengeMessage.self, from: data)
        case "authenticate": _ = try? MessageCoding.decode(AuthenticateMessage.self, from: data)
        case "welcome": _ = try? MessageCoding.decode(WelcomeMessage.self, from: data)
        default: break
        }
    }

    /// The head, read as `MessageCoding` reads it; the hand-written reader must agree with `JSONDecoder`.
    static func readHead(_ input: UnsafeRawBufferPointer, _ data: Data) throws(FuzzFailure) -> MessageHead? {
        let decoded = try? MessageCoding.decode(MessageHead.self, from: ByteBuffer(bytes: input))
        guard let fast = JSONReader.read(input, { r throws(JSONFallback) in try MessageHead.readJSON(from: &r) }) else {
            return decoded
        }
        let foundation: MessageHead
        do {
            foundation = try MessageCoding.foundationDecode(MessageHead.self, from: data)
        } catch {
            throw FuzzFailure("MessageHead: the hand-written reader read \(describe(fast)), JSONDecoder failed with \(error) on \(preview(input))")
        }
        try check(
            describe(fast) == describe(foundation),
            "MessageHead: the hand-written reader read \(describe(fast)), JSONDecoder \(describe(foundation)) on \(preview(input))")
        return decoded
    }

    static func describe(_ head: MessageHead) -> String {
        "op \(head.op ?? "-") id \(head.id.map(String.init) ?? "-") push \(head.push ?? "-") ok \(head.hasOk) error \(String(describing: head.error))"
    }

    /// Reads a `fetchZoneChanges` answer as the participant's sync engine does: the token and
    /// `moreComing` read ahead of the records (``ReceivedZoneChanges/continuation(of:)``), then the page
    /// with each record kept as the bytes it came in. Where the hand-written readers read it, both must
    /// agree with the page read with records decoded, and each record's kept bytes must decode to
    /// that record (without its changed keys, which are never stored).
    static func readReceivedPage(_ input: UnsafeRawBufferPointer, _ data: Data) throws(FuzzFailure) {
        let continuation = ReceivedZoneChanges.continuation(of: ByteBuffer(bytes: input))
        _ = try? MessageCoding.decode(Response<ReceivedZoneChanges>.self, from: data)
        let received = JSONReader.read(input, { r throws(JSONFallback) in try Response<ReceivedZoneChanges>.readJSON(from: &r) })?.ok
        let decoded = JSONReader.read(input, { r throws(JSONFallback) in try Response<ZoneChangesResult>.readJSON(from: &r) })?.ok
        try check(
            (received == nil) == (decoded == nil),
            "ReceivedZoneChanges \(received == nil ? "refused" : "read") a page that ZoneChangesResult's reader \(decoded == nil ? "refused" : "read"): \(preview(input))")
        guard let received, let decoded else { return }
        guard let continuation else {
            throw FuzzFailure("ReceivedZoneChanges read a page whose token was not read ahead: \(preview(input))")
        }
        try check(
            continuation.token == decoded.token && continuation.moreComing == decoded.moreComing,
            "the token read ahead (\(continuation)) is not the page's (\(decoded.token), \(decoded.moreComing)): \(preview(input))")
        try check(
            received.changed.count == decoded.changed.count && received.deleted == decoded.deleted && received.order == decoded.order
                && received.token == decoded.token && received.zoneName == decoded.zoneName,
            "ReceivedZoneChanges and ZoneChangesResult read different pages from \(preview(input))")
        for (kept, record) in zip(received.changed, decoded.changed) {
            var expected = record
            expected.clearChangeTracking()
            let stored = try? kept.decoded()
            try check(
                stored == expected && kept.recordID == record.recordID && kept.recordType == record.recordType,
                "a record's kept bytes \(preview(kept.json)) do not decode to the record read from \(preview(input))")
        }
    }

    /// Reads `T` with `MessageCoding`, and checks its hand-written reader and encoder against Foundation's.
    static func readFast<T: Codable & FastJSONDecodable>(_ type: T.Type, _ input: UnsafeRawBufferPointer, _ data: Data) throws(FuzzFailure) {
        _ = try? MessageCoding.decode(type, from: data)
        guard let fast = JSONReader.read(input, { r throws(JSONFallback) in try T.readJSON(from: &r) }) else { return }
        let foundation: T
        do {
            foundation = try MessageCoding.foundationDecode(type, from: data)
        } catch {
            throw FuzzFailure("\(type): the hand-written reader read a message, JSONDecoder failed with \(error) on \(preview(input))")
        }
        for changedKeys in [false, true] {
            let fastJSON = try? MessageCoding.foundationEncodeData(fast, includingChangedKeys: changedKeys)
            let foundationJSON = try? MessageCoding.foundationEncodeData(foundation, includingChangedKeys: changedKeys)
            try check(
                fastJSON == foundationJSON,
                "\(type): the hand-written reader and JSONDecoder read different messages from \(preview(input)):\n"
                    + "\(preview(fastJSON ?? Data()))\n\(preview(foundationJSON ?? Data()))")
            if let foundationJSON, let written = try? MessageCoding.encodeData(fast, includingChangedKeys: changedKeys) {
                try check(
                    written == foundationJSON,
                    "\(type): the hand-written encoder wrote\n\(preview(written))\nJSONEncoder\n\(preview(foundationJSON))")
            }
        }
    }
}
