import Foundation
import NIOCore
import ShareSyncCore

/// JSON coding of the message layer (`protocol.md`, "Messages"): one JSON object per frame.
///
/// Records inside messages use their JSON form (``Record`` is `Codable`; timestamps in milliseconds).
/// Decoding failures become ``ShareSyncError/Code/invalidArguments`` with rule `malformedRequest`.
public enum MessageCoding {
    /// Encodes a message as a frame payload. `includingChangedKeys` adds `changedKeys` to records
    /// (for save requests).
    public static func encode<T: Encodable>(
        _ message: T, includingChangedKeys: Bool = false, allocator: ByteBufferAllocator = ByteBufferAllocator()
    ) throws(ShareSyncError) -> ByteBuffer {
        if let bytes = fastEncode(message, includingChangedKeys: includingChangedKeys) { return allocator.buffer(bytes: bytes) }
        return allocator.buffer(bytes: try encodeData(message, includingChangedKeys: includingChangedKeys))
    }

    /// Encodes a message as JSON bytes.
    public static func encodeData<T: Encodable>(_ message: T, includingChangedKeys: Bool = false) throws(ShareSyncError) -> Data {
        if let bytes = fastEncode(message, includingChangedKeys: includingChangedKeys) { return Data(bytes) }
        return try foundationEncodeData(message, includingChangedKeys: includingChangedKeys)
    }

    /// ``encodeData(_:includingChangedKeys:)`` through `JSONEncoder` only (what the hand-written
    /// encoders of the hot messages are tested against).
    package static func foundationEncodeData<T: Encodable>(
        _ message: T, includingChangedKeys: Bool = false
    ) throws(ShareSyncError) -> Data {
        let encoder = JSONCoding.encoder(includingChangedKeys: includingChangedKeys)
        do {
            return try encoder.encode(message)
        } catch let error as ShareSyncError {
            throw error
        } catch {
            throw ShareSyncError(.internalError, "message cannot be encoded as JSON: \(error)", rule: .messageJSON)
        }
    }

    /// Decodes a frame payload; malformed JSON or a missing or mistyped field is
    /// ``ShareSyncError/Code/invalidArguments`` with rule `malformedRequest`.
    public static func decode<T: Decodable>(_ type: T.Type, from buffer: ByteBuffer) throws(ShareSyncError) -> T {
        if let message = buffer.withUnsafeReadableBytes({ fastDecode(type, from: $0) }) { return message }
        return try foundationDecode(type, from: Data(buffer.readableBytesView))
    }

    /// Decodes JSON bytes, as ``decode(_:from:)-(_,ByteBuffer)``.
    public static func decode<T: Decodable>(_ type: T.Type, from data: Data) throws(ShareSyncError) -> T {
        if let message = data.withUnsafeBytes({ fastDecode(type, from: $0) }) { return message }
        return try foundationDecode(type, from: data)
    }

    /// ``decode(_:from:)-(_,Data)`` through `JSONDecoder` only (what the hand-written decoders of the
    /// hot messages are tested against).
    package static func foundationDecode<T: Decodable>(_ type: T.Type, from data: Data) throws(ShareSyncError) -> T {
        do {
            return try JSONCoding.decoder().decode(type, from: data)
        } catch let error as ShareSyncError {
            throw ShareSyncError(error.code, error.message, rule: .malformedRequest)
        } catch {
            // Foundation says "not valid JSON" of valid JSON whose id does not fit an integer field.
            if case DecodingError.dataCorrupted(let context) = error, context.codingPath.isEmpty, let misfit = numberMisfit(in: data) {
                throw ShareSyncError(.invalidArguments, "malformed message: \(misfit)", rule: .malformedRequest)
            }
            throw ShareSyncError(.invalidArguments, "malformed message: \(describe(error))", rule: .malformedRequest)
        }
    }

    /// What is wrong with valid JSON that `JSONDecoder` calls "not valid JSON" when it is an `id` that
    /// is not a whole number, or out of range (`{"id":1.5}`); `nil` otherwise (the decoder's own words
    /// are given then).
    static func numberMisfit(in data: Data) -> String? {
        if let huge = numberPastDouble(in: data) { return "the number \(huge) is out of range (past what a double holds)" }
        guard let object = try? JSONSerialization.jsonObject(with: data, options: [.fragmentsAllowed]) else { return nil }
        guard let id = (object as? [String: Any])?["id"] as? NSNumber, Int64(exactly: id.doubleValue) == nil else { return nil }
        guard id.doubleValue.rounded() == id.doubleValue else { return "id must be a whole number (it is \(id))" }
        return "id must be a whole number from -2^63 to 2^63 - 1 (it is \(id))"
    }

    /// The first number outside the JSON strings of `data` that a double cannot hold (`1e400`), at most
    /// 40 characters of it; nil if there is none. Foundation calls such JSON "not valid JSON".
    static func numberPastDouble(in data: Data) -> String? {
        var inString = false
        var escaped = false
        var token: [UInt8] = []
        func check() -> String? {
            defer { token.removeAll(keepingCapacity: true) }
            guard !token.isEmpty, let text = String(bytes: token, encoding: .utf8), let number = Double(text) else { return nil }
            return number.isFinite ? nil : String(text.prefix(40))
        }
        for byte in data {
            if inString {
                if escaped { escaped = false } else if byte == UInt8(ascii: "\\") { escaped = true } else if byte == UInt8(ascii: "\"") { inString = false }
                continue
            }
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "+"), UInt8(ascii: "."), UInt8(ascii: "e"), UInt8(ascii: "E"):
                token.append(byte)
            default:
                if let huge = check() { return huge }
                if byte == UInt8(ascii: "\"") { inString = true }
            }
        }
        return check()
    }

    static func describe(_ error: any Error) -> String { JSONErrors.describe(error) }

}

// MARK: Authentication

/// Step 1, client → server: the client's key and nonce.
public struct HelloMessage: Codable, Sendable, Hashable {
    public var op = "hello"
    public var publicKey: String
    public var nonce: String
    public var displayName: String?
    public var emailAddress: String?
    public var phoneNumber: String?

    public init(publicKey: String, nonce: String, displayName: String? = nil, emailAddress: String? = nil, phoneNumber: String? = nil) {
        self.publicKey = publicKey
        self.nonce = nonce
        self.displayName = displayName
        self.emailAddress = emailAddress
        self.phoneNumber = phoneNumber
    }

    /// The most UTF-8 bytes each of `displayName`, `emailAddress` and `phoneNumber` may have. The
    /// owner keeps them for the connection's life and copies the name into share records (a public
    /// share's participants, access requests), so an unbounded one cost memory per connection and
    /// could fill a share record up to its size limit.
    public static let maximumFieldBytes = 256

    /// `text`, or its longest prefix of whole characters within ``maximumFieldBytes`` bytes.
    public static func withinFieldLimit(_ text: String) -> String {
        guard text.utf8.count > maximumFieldBytes else { return text }
        var cut = ""
        for character in text {
            guard cut.utf8.count + character.utf8.count <= maximumFieldBytes else { break }
            cut.append(character)
        }
        return cut
    }

    /// The first of the optional fields longer than ``maximumFieldBytes``, or `nil`.
    public var oversizedField: String? {
        [("displayName", displayName), ("emailAddress", emailAddress), ("phoneNumber", phoneNumber)]
            .first { ($0.1?.utf8.count ?? 0) > Self.maximumFieldBytes }?.0
    }
}

/// Step 2, server → client: the owner's key, its nonce and its signature of the server transcript.
public struct ChallengeMessage: Codable, Sendable, Hashable {
    public var op = "challenge"
    public var publicKey: String
    public var nonce: String
    public var signature: String

    public init(publicKey: String, nonce: String, signature: String) {
        self.publicKey = publicKey
        self.nonce = nonce
        self.signature = signature
    }
}

/// Step 3, client → server: the client's signature of the client transcript.
public struct AuthenticateMessage: Codable, Sendable, Hashable {
    public var op = "authenticate"
    public var signature: String

    public init(signature: String) { self.signature = signature }
}

/// Step 4, server → client: who the client is to this owner, who the owner is, and the owner's limits.
public struct WelcomeMessage: Codable, Sendable, Hashable {
    public var op = "welcome"
    public var userRecordName: String
    public var ownerName: String
    /// The limits the owner enforces on this connection's requests, so that a client splits its
    /// requests to fit. Absent from owners that predate it: assume the documented defaults.
    public var limits: WireLimits?
    /// The address the owner advertises (the one in its share URLs), if it advertises one. A client
    /// that sees it differ from the address the owner announced before stores it as the owner's new
    /// address (protocol.md, "Owners that move").
    public var address: WireAddress?

    public init(userRecordName: String, ownerName: String, limits: WireLimits? = nil, address: WireAddress? = nil) {
        self.userRecordName = userRecordName
        self.ownerName = ownerName
        self.limits = limits
        self.address = address
    }
}

/// Where an owner's node is reached: a host name or IP address and a TCP port.
public struct WireAddress: Codable, Sendable, Hashable, CustomStringConvertible {
    public var host: String
    public var port: Int

    public init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    public var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
}

/// A push, server → every authenticated client: the owner advertises a new address (it is moving, or
/// its share URLs now name another host or port). Clients store it and reconnect there from then on.
///
/// ```
/// {"push":"ownerAddress","address":{"host":"alice.example.org","port":7420}}
/// ```
public struct OwnerAddressPush: Codable, Sendable, Hashable {
    public var push = "ownerAddress"
    public var address: WireAddress

    public init(address: WireAddress) { self.address = address }
}

/// The owner's limits, as the welcome announces them (protocol.md, "Limits of requests and answers").
public struct WireLimits: Codable, Sendable, Hashable {
    /// The most records and record names one `modifyRecords` or `fetchRecords` may carry. Default 400.
    public var maximumItemsPerRequest: Int
    /// The largest record, in bytes of its JSON form. Default 1,000,000.
    public var maximumRecordSize: Int
    /// The most bytes of records one answer carries, and the largest `modifyRecords` request. Default 4 MiB.
    public var maximumResponseSize: Int
    /// The largest frame payload the owner reads or writes. Default 16 MiB.
    public var maximumFrameSize: Int

    /// Creates limits; every parameter has the documented default.
    public init(
        maximumItemsPerRequest: Int = 400, maximumRecordSize: Int = 1_000_000, maximumResponseSize: Int = 4 * 1024 * 1024,
        maximumFrameSize: Int = FrameLimits.defaultMaximumFrameSize
    ) {
        self.maximumItemsPerRequest = maximumItemsPerRequest
        self.maximumRecordSize = maximumRecordSize
        self.maximumResponseSize = maximumResponseSize
        self.maximumFrameSize = maximumFrameSize
    }
}

extension WireLimits {
    /// These limits, each kept within what a client can work with: an owner's welcome may say
    /// anything, and a zero, negative or huge value made the client trap (a batch size of 0, a
    /// response size of Int.min) or send requests no owner takes. Items 1...10,000; record size and
    /// response size 1 KiB...1 GiB; frame size 64 KiB...1 GiB.
    public var withinReason: WireLimits {
        func clamp(_ value: Int, _ range: ClosedRange<Int>) -> Int { min(max(value, range.lowerBound), range.upperBound) }
        return WireLimits(
            maximumItemsPerRequest: clamp(maximumItemsPerRequest, 1...10_000),
            maximumRecordSize: clamp(maximumRecordSize, 1024...(1 << 30)),
            maximumResponseSize: clamp(maximumResponseSize, 1024...(1 << 30)),
            maximumFrameSize: clamp(maximumFrameSize, 65_536...(1 << 30)))
    }
}

/// The fields every frame may carry, read first to route it: `op` (authentication), `id` and
/// `error` (responses), `push`.
public struct MessageHead: Decodable, Sendable {
    public var op: String?
    public var id: Int?
    public var push: String?
    public var error: WireError?
    public var hasOk: Bool

    private enum Keys: String, CodingKey { case op, id, push, error, ok }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: Keys.self)
        op = try? c.decodeIfPresent(String.self, forKey: .op)
        id = try? c.decodeIfPresent(Int.self, forKey: .id)
        push = try? c.decodeIfPresent(String.self, forKey: .push)
        // Not a reason to lose the rest: a request with a malformed `error` key is still answered by its id.
        error = try? c.decodeIfPresent(WireError.self, forKey: .error)
        hasOk = c.contains(.ok)
    }
}

extension MessageHead {
    /// The request id of a successful response written as owners write them, `{"id":N,"ok":…`, read
    /// from the first bytes only; nil for any other frame (read the whole head then). The request
    /// that waits for the response decodes it all (and refuses it if it is malformed), so a page of
    /// records is not scanned twice: measured, the head's scan of a page was 38 % of the
    /// participant's event loop during an initial sync.
    package static func responseID(_ frame: ByteBuffer) -> Int? {
        let prefix: [UInt8] = Array(#"{"id":"#.utf8)
        let ok: [UInt8] = Array(#","ok":"#.utf8)
        return frame.withUnsafeReadableBytes { bytes -> Int? in
            guard bytes.count > prefix.count + ok.count + 1, bytes.starts(with: prefix) else { return nil }
            var i = prefix.count
            var id = 0
            while i < bytes.count, i - prefix.count < 18, bytes[i] >= UInt8(ascii: "0"), bytes[i] <= UInt8(ascii: "9") {
                id = id * 10 + Int(bytes[i] - UInt8(ascii: "0"))
                i += 1
            }
            guard i > prefix.count, bytes[prefix.count] != UInt8(ascii: "0") || i == prefix.count + 1,
                bytes.count - i > ok.count, bytes[i..<(i + ok.count)].elementsEqual(ok)
            else { return nil }
            return id
        }
    }
}
