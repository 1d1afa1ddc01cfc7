import Foundation

/// An opaque position in a change feed, like `CKServerChangeToken`.
///
/// Pass the token a fetch returned to the next fetch to get only what changed since. Tokens are
/// versioned and bound to the database that issued them; store them as ``stringValue``. A token from
/// another database, older than the history the database keeps, or ahead of it, fails with
/// ``ShareSyncError/Code/changeTokenExpired``: fetch again from `nil`.
public struct ServerChangeToken: Sendable, Hashable, Codable, CustomStringConvertible {
    /// The token's string form, safe to store and send.
    public let stringValue: String

    /// A token from its string form (as ``stringValue`` gave it).
    public init(stringValue: String) { self.stringValue = stringValue }

    /// Token layout, version 1: `1.<database id>.<sequence number>`. Database ids are hex, without
    /// dots. A token between the pages of a fetch that started from nil also names the sequence number
    /// at which that fetch began: `1s.<database id>.<sequence number>.<snapshot>`.
    package init(databaseID: String, sequence: Int64, scanSnapshot: Int64? = nil) {
        if let scanSnapshot {
            stringValue = "1s.\(databaseID).\(sequence).\(scanSnapshot)"
        } else {
            stringValue = "1.\(databaseID).\(sequence)"
        }
    }

    /// Where a token points: after `sequence`; for a fetch from nil still under way, `scanSnapshot` is
    /// where it began (deletions before that never concern its holder).
    package struct Position: Sendable, Hashable {
        package var sequence: Int64
        package var scanSnapshot: Int64?
        /// Deletions after this sequence number concern the holder.
        package var deletionsAfter: Int64 { max(sequence, scanSnapshot ?? sequence) }
        /// The oldest history the holder still needs.
        package var oldestNeeded: Int64 { scanSnapshot ?? sequence }

        package init(sequence: Int64, scanSnapshot: Int64?) {
            self.sequence = sequence
            self.scanSnapshot = scanSnapshot
        }
    }

    /// The token's position, or an error naming what is wrong with it.
    package func position(expectedDatabaseID: String) throws(ShareSyncError) -> Position {
        let parts = stringValue.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count >= 3, let version = parts.first, !version.isEmpty else {
            throw .invalid("malformed change token", rule: .changeTokenFormat)
        }
        guard version == "1" || version == "1s" else {
            throw .invalid("unsupported change token version \(version)", rule: .changeTokenVersion)
        }
        let scan = version == "1s"
        guard parts.count == (scan ? 4 : 3), let seq = Int64(parts[2]), seq >= 0 else {
            throw .invalid("malformed change token", rule: .changeTokenFormat)
        }
        var snapshot: Int64?
        if scan {
            guard let s = Int64(parts[3]), s >= 0 else { throw .invalid("malformed change token", rule: .changeTokenFormat) }
            snapshot = s
        }
        guard parts[1] == expectedDatabaseID else {
            throw ShareSyncError(
                .changeTokenExpired, "the change token belongs to another database; fetch again from nil",
                rule: .changeTokenDatabase)
        }
        // Only the spelling the database issues: numbers with a sign or leading zeros would give one
        // position any number of tokens, and the owner keys pushes by their token.
        guard ServerChangeToken(databaseID: expectedDatabaseID, sequence: seq, scanSnapshot: snapshot) == self else {
            throw .invalid("malformed change token (not as the database issued it)", rule: .changeTokenFormat)
        }
        return Position(sequence: seq, scanSnapshot: snapshot)
    }

    /// The token's sequence number, or an error naming what is wrong with it.
    package func decode(expectedDatabaseID: String) throws(ShareSyncError) -> Int64 {
        try position(expectedDatabaseID: expectedDatabaseID).oldestNeeded
    }

    /// The token's string form.
    public var description: String { stringValue }

    public init(from decoder: any Decoder) throws {
        stringValue = try decoder.singleValueContainer().decode(String.self)
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        try c.encode(stringValue)
    }
}
