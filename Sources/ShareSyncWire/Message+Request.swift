import Foundation
import ShareSyncCore

/// A request: `{"id": 7, "op": "fetchZoneChanges", …parameters}` (`protocol.md`, the ops table).
public struct Request: Codable, Sendable {
    /// Chosen by the client, unique among its requests in flight; the response carries it.
    public var id: Int
    /// The operation and its parameters.
    public var body: RequestBody

    public init(id: Int, body: RequestBody) {
        self.id = id
        self.body = body
    }

    private enum Keys: String, CodingKey {
        case id, op, url, shouldFetchRootRecord, token, resultsLimit, zoneName, recordNames
        case saving, deleting, savePolicy, atomically, shareRecordName, writeID
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: Keys.self)
        id = try c.decode(Int.self, forKey: .id)
        let op = try c.decode(String.self, forKey: .op)
        switch op {
        case "fetchShareMetadata":
            body = .fetchShareMetadata(
                url: try c.decode(String.self, forKey: .url),
                shouldFetchRootRecord: try c.decodeIfPresent(Bool.self, forKey: .shouldFetchRootRecord) ?? false)
        case "acceptShare":
            body = .acceptShare(url: try c.decode(String.self, forKey: .url))
        case "requestAccess":
            body = .requestAccess(url: try c.decode(String.self, forKey: .url))
        case "fetchDatabaseChanges":
            body = .fetchDatabaseChanges(
                token: try c.decodeIfPresent(ServerChangeToken.self, forKey: .token),
                resultsLimit: try Self.resultsLimit(in: c))
        case "fetchZoneChanges":
            body = .fetchZoneChanges(
                zoneName: try c.decode(String.self, forKey: .zoneName),
                token: try c.decodeIfPresent(ServerChangeToken.self, forKey: .token),
                resultsLimit: try Self.resultsLimit(in: c))
        case "fetchRecords":
            body = .fetchRecords(
                zoneName: try c.decode(String.self, forKey: .zoneName),
                recordNames: try c.decode([String].self, forKey: .recordNames))
        case "modifyRecords":
            body = .modifyRecords(
                zoneName: try c.decode(String.self, forKey: .zoneName),
                saving: try c.decodeIfPresent([Record].self, forKey: .saving) ?? [],
                deleting: try c.decodeIfPresent([String].self, forKey: .deleting) ?? [],
                savePolicy: try c.decodeIfPresent(SavePolicy.self, forKey: .savePolicy) ?? .ifServerRecordUnchanged,
                atomically: try c.decodeIfPresent(Bool.self, forKey: .atomically) ?? true,
                writeID: try c.decodeIfPresent(String.self, forKey: .writeID))
        case "leaveShare":
            body = .leaveShare(
                zoneName: try c.decode(String.self, forKey: .zoneName),
                shareRecordName: try c.decode(String.self, forKey: .shareRecordName))
        case "subscribe":
            body = .subscribe(token: try c.decodeIfPresent(ServerChangeToken.self, forKey: .token))
        case "ping":
            body = .ping
        default:
            throw DecodingError.dataCorruptedError(forKey: .op, in: c, debugDescription: "unknown op \(op.prefix(64))")
        }
    }

    /// `resultsLimit`: a whole number. One past 64 bits is lowered to the owner's maximum, as every
    /// value above it is (`protocol.md`, "resultsLimit"), and one below is the maximum as well.
    private static func resultsLimit(in c: KeyedDecodingContainer<Keys>) throws -> Int? {
        guard c.contains(.resultsLimit), (try? c.decodeNil(forKey: .resultsLimit)) != true else { return nil }
        if let limit = try? c.decode(Int.self, forKey: .resultsLimit) { return limit }
        guard let number = try? c.decode(Double.self, forKey: .resultsLimit), number.isFinite, number.rounded() == number else {
            throw DecodingError.dataCorruptedError(
                forKey: .resultsLimit, in: c, debugDescription: "resultsLimit must be a whole number")
        }
        return number > 0 ? Int.max : 0
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: Keys.self)
        try c.encode(id, forKey: .id)
        try c.encode(body.op, forKey: .op)
        switch body {
        case .fetchShareMetadata(let url, let root):
            try c.encode(url, forKey: .url)
            if root { try c.encode(true, forKey: .shouldFetchRootRecord) }
        case .acceptShare(let url), .requestAccess(let url):
            try c.encode(url, forKey: .url)
        case .fetchDatabaseChanges(let token, let limit):
            try c.encodeIfPresent(token, forKey: .token)
            try c.encodeIfPresent(limit, forKey: .resultsLimit)
        case .fetchZoneChanges(let zoneName, let token, let limit):
            try c.encode(zoneName, forKey: .zoneName)
            try c.encodeIfPresent(token, forKey: .token)
            try c.encodeIfPresent(limit, forKey: .resultsLimit)
        case .fetchRecords(let zoneName, let names):
            try c.encode(zoneName, forKey: .zoneName)
            try c.encode(names, forKey: .recordNames)
        case .modifyRecords(let zoneName, let saving, let deleting, let policy, let atomically, let writeID):
            try c.encode(zoneName, forKey: .zoneName)
            try c.encode(saving, forKey: .saving)
            try c.encode(deleting, forKey: .deleting)
            try c.encode(policy, forKey: .savePolicy)
            try c.encode(atomically, forKey: .atomically)
            try c.encodeIfPresent(writeID, forKey: .writeID)
        case .leaveShare(let zoneName, let shareRecordName):
            try c.encode(zoneName, forKey: .zoneName)
            try c.encode(shareRecordName, forKey: .shareRecordName)
        case .subscribe(let token):
            try c.encodeIfPresent(token, forKey: .token)
        case .ping:
            break
        }
    }
}

/// The operations of `protocol.md` with their parameters.
public enum RequestBody: Sendable {
    case fetchShareMetadata(url: String, shouldFetchRootRecord: Bool)
    case acceptShare(url: String)
    case requestAccess(url: String)
    case fetchDatabaseChanges(token: ServerChangeToken?, resultsLimit: Int?)
    case fetchZoneChanges(zoneName: String, token: ServerChangeToken?, resultsLimit: Int?)
    case fetchRecords(zoneName: String, recordNames: [String])
    /// `writeID`, if given, makes the write happen once: the owner answers a repeat of it (the same
    /// identity and `writeID`: one sent again after its answer was lost) with the first answer, and
    /// applies nothing again.
    case modifyRecords(zoneName: String, saving: [Record], deleting: [String], savePolicy: SavePolicy, atomically: Bool, writeID: String? = nil)
    case leaveShare(zoneName: String, shareRecordName: String)
    case subscribe(token: ServerChangeToken?)
    /// Keeps a quiet connection from being idle; answered at once with `{}` (`protocol.md`, "Idle
    /// connections and ping").
    case ping

    /// The wire name of the operation.
    public var op: String {
        switch self {
        case .fetchShareMetadata: "fetchShareMetadata"
        case .acceptShare: "acceptShare"
        case .requestAccess: "requestAccess"
        case .fetchDatabaseChanges: "fetchDatabaseChanges"
        case .fetchZoneChanges: "fetchZoneChanges"
        case .fetchRecords: "fetchRecords"
        case .modifyRecords: "modifyRecords"
        case .leaveShare: "leaveShare"
        case .subscribe: "subscribe"
        case .ping: "ping"
        }
    }
}

/// A successful response: `{"id": 7, "ok": RESULT}`. Decoding also accepts an error response, so
/// one type reads either (``result``).
public struct Response<Result: Codable & Sendable>: Codable, Sendable {
    public var id: Int?
    public var ok: Result?
    public var error: WireError?

    public init(id: Int, ok: Result) {
        self.id = id
        self.ok = ok
    }

    /// The result, or the error as a ``ShareSyncError`` (zone IDs owned by `ownerName`).
    public func result(ownerName: String) throws(ShareSyncError) -> Result {
        if let error { throw error.shareSyncError(ownerName: ownerName) }
        guard let ok else {
            throw ShareSyncError(.invalidArguments, "response has neither ok nor error", rule: .malformedRequest)
        }
        return ok
    }
}
