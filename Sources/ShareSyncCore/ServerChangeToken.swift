import Foundation

/// An opaque position in a change feed, like `CKServerChangeToken`.
///
/// Pass the token a fetch returned to the next fetch to get only what changed since. Tokens are
/// versioned and bound to the database that issued them; store them as ``stringValue``. A token from
/// another database, or older than the history the database keeps, fails with
/// ``ShareSyncError/Code/changeTokenExpired``: fetch again from `nil`.
public struct ServerChangeToken: Sendable, Hashable, Codable, CustomStringConvertible {
    /// The token's string form, safe to store and send.
    public let stringValue: String

    public init(stringValue: String) { self.stringValue = stringValue }

    /// Token layout, version 1: `1.<database id>.<sequence number>`. Database ids are hex, without dots.
    package init(databaseID: String, sequence: Int64) {
        stringValue = "1.\(databaseID).\(sequence)"
    }

    /// The token's parts, or an error naming what is wrong with it.
    package func decode(expectedDatabaseID: String) throws(ShareSyncError) -> Int64 {
        let parts = stringValue.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let seq = Int64(parts[2]), seq >= 0 else {
            throw .invalid("malformed change token", rule: "changeTokenFormat")
        }
        guard parts[0] == "1" else {
            throw .invalid("unsupported change token version \(parts[0])", rule: "changeTokenVersion")
        }
        guard parts[1] == expectedDatabaseID else {
            throw ShareSyncError(
                .changeTokenExpired, "the change token belongs to another database; fetch again from nil",
                rule: "changeTokenDatabase")
        }
        return seq
    }

    public var description: String { stringValue }

    public init(from decoder: any Decoder) throws {
        stringValue = try decoder.singleValueContainer().decode(String.self)
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        try c.encode(stringValue)
    }
}
