import Foundation
import ShareSyncCore

/// The ERROR object of `protocol.md`: a ``ShareSyncError`` on the wire.
///
/// `code` stays a string so that a code this side does not know survives decoding (it maps to
/// ``ShareSyncError/Code/internalError``).
public struct WireError: Codable, Sendable, Hashable {
    public var code: String
    public var message: String
    public var recordName: String?
    public var zoneName: String?
    public var rule: String?
    public var serverRecord: Record?
    public var partialErrors: [String: WireError]?
    public var retryAfterSeconds: Double?

    public init(
        code: String, message: String, recordName: String? = nil, zoneName: String? = nil, rule: String? = nil,
        serverRecord: Record? = nil, partialErrors: [String: WireError]? = nil, retryAfterSeconds: Double? = nil
    ) {
        self.code = code
        self.message = message
        self.recordName = recordName
        self.zoneName = zoneName
        self.rule = rule
        self.serverRecord = serverRecord
        self.partialErrors = partialErrors
        self.retryAfterSeconds = retryAfterSeconds
    }

    /// The wire form of an error.
    public init(_ error: ShareSyncError) {
        self.init(
            code: error.code.rawValue, message: error.message, recordName: error.recordID?.recordName,
            zoneName: error.zoneID?.zoneName, rule: error.rule?.rawValue, serverRecord: error.serverRecord,
            partialErrors: error.partialErrors?.mapValues { WireError($0) }, retryAfterSeconds: error.retryAfterSeconds)
    }

    /// The error as a ``ShareSyncError``; zone IDs get `ownerName` (the owner of the connection).
    public func shareSyncError(ownerName: String = RecordZone.ID.currentUserDefaultName) -> ShareSyncError {
        let known = ShareSyncError.Code(rawValue: code)
        let zoneID = zoneName.map { RecordZone.ID(zoneName: $0, ownerName: ownerName) }
        let recordID = recordName.map { Record.ID(recordName: $0, zoneID: zoneID ?? .default) }
        return ShareSyncError(
            known ?? .internalError, known == nil ? "\(code): \(message)" : message, recordID: recordID,
            zoneID: zoneID, serverRecord: serverRecord, rule: rule.map(Rule.init(rawValue:)),
            partialErrors: partialErrors?.mapValues { $0.shareSyncError(ownerName: ownerName) },
            retryAfterSeconds: retryAfterSeconds)
    }
}

/// An error response: `{"id": 7, "error": ERROR}`, or `{"id": null, …}` when the frame had no usable id.
public struct ErrorResponse: Codable, Sendable, Hashable {
    public var id: Int?
    public var error: WireError

    public init(id: Int?, error: WireError) {
        self.id = id
        self.error = error
    }

    public init(id: Int?, _ error: ShareSyncError) { self.init(id: id, error: WireError(error)) }

    private enum Keys: String, CodingKey { case id, error }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: Keys.self)
        if let id { try c.encode(id, forKey: .id) } else { try c.encodeNil(forKey: .id) }
        try c.encode(error, forKey: .error)
    }
}

extension FrameError {
    /// The message-layer error a peer is told about before the connection closes: `limitExceeded`
    /// for `lineTooLong`/`frameTooLarge`, `networkFailure` for timeouts, `notAuthenticated` for
    /// `tlsRequired`/`alpnMismatch`, else `invalidArguments`; the rule is the frame error's code.
    public var shareSyncError: ShareSyncError {
        let code: ShareSyncError.Code =
            switch self.code {
            case .lineTooLong, .frameTooLarge: .limitExceeded
            case .idleTimeout, .handshakeTimeout: .networkFailure
            case .tlsRequired, .alpnMismatch: .notAuthenticated
            default: .invalidArguments
            }
        return ShareSyncError(code, message, rule: Rule(rawValue: self.code.rawValue))
    }
}
