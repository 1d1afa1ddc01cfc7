import Foundation

/// An opaque position in a change feed, like `CKServerChangeToken`.
///
/// Pass the token a fetch returned to the next fetch to get only what changed since. Tokens are
/// versioned and bound to the database that issued them; store them as ``stringValue``. A token from
/// another database, older than the history the database keeps, ahead of it, or from a history the
/// database no longer has (restored from a copy), fails with ``ShareSyncError/Code/changeTokenExpired``:
/// fetch again from `nil`. The token a fetch ends with is the same text for the same position, across
/// restarts too; a token from the middle of a paged fetch carries the stretch of history it was handed
/// out in, and may differ.
public struct ServerChangeToken: Sendable, Hashable, Codable, CustomStringConvertible {
    /// What an expired token's error tells its holder to do, at the end of every such message (in the
    /// API's terms; the control channel gives it in its own, `NodeChangeFeeds`).
    package static let expiredAdvice = "fetch again from nil"

    /// The token's string form, safe to store and send.
    public let stringValue: String

    /// A token from its string form (as ``stringValue`` gave it).
    public init(stringValue: String) { self.stringValue = stringValue }

    /// Token layout, version 2: `2.<database id>.<sealed position>`. Database ids are hex, without
    /// dots; the position (``Position``) is sealed by the database that issued the token
    /// (``ChangeTokenSealing``), so that a holder learns nothing from it (in version 1,
    /// `1.<database id>.<sequence>`, the sequence was the owner's count of changes in every zone, shared
    /// or not) and cannot make up another.
    package init(databaseID: String, position: Position, sealing: some ChangeTokenSealing) throws(ShareSyncError) {
        stringValue = "2.\(databaseID).\(try sealing.seal(position))"
    }

    /// Where a token points: after `sequence`; for a fetch from nil still under way, `scanSnapshot` is
    /// where it began (deletions before that never concern its holder).
    package struct Position: Sendable, Hashable {
        package var sequence: Int64
        package var scanSnapshot: Int64?
        /// The stretch of the database's history the token was issued in (``ChangeTokenSealing``): nil
        /// for a position made now, which is sealed with the current one.
        package var epoch: UInt16?
        /// Deletions after this sequence number concern the holder.
        package var deletionsAfter: Int64 { max(sequence, scanSnapshot ?? sequence) }
        /// The oldest history the holder still needs.
        package var oldestNeeded: Int64 { scanSnapshot ?? sequence }

        package init(sequence: Int64, scanSnapshot: Int64? = nil, epoch: UInt16? = nil) {
            self.sequence = sequence
            self.scanSnapshot = scanSnapshot
            self.epoch = epoch
        }
    }

    /// The token's position, or an error naming what is wrong with it.
    package func position(expectedDatabaseID: String, sealing: some ChangeTokenSealing) throws(ShareSyncError) -> Position {
        if let odd = stringValue.unicodeScalars.first(where: { !Self.isTokenCharacter($0) }) {
            // Said before the version: " 2.…" is a token with a space, not a token of version " 2".
            throw .invalid(
                "malformed change token: it holds \(Self.describe(odd)), which no token has; send it exactly as it was given",
                rule: .changeTokenFormat)
        }
        let parts = stringValue.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count >= 3, let version = parts.first, !version.isEmpty else {
            throw .invalid("malformed change token", rule: .changeTokenFormat)
        }
        if version == "1" || version == "1s" {
            // Issued before positions were sealed: its holder fetches again, once.
            throw ShareSyncError(
                .changeTokenExpired, "the change token is of an earlier version (\(version)); \(ServerChangeToken.expiredAdvice)",
                rule: .changeTokenVersion)
        }
        guard version == "2" else {
            throw .invalid("unsupported change token version \(version)", rule: .changeTokenVersion)
        }
        guard parts.count == 3, !parts[2].isEmpty else { throw .invalid("malformed change token", rule: .changeTokenFormat) }
        // Its shape before its database: a made-up or mangled token is malformed, not another database's
        // (which would send its holder to fetch everything again).
        guard !parts[1].isEmpty, parts[1].utf8.allSatisfy({ Self.isLowercaseHex($0) }) else {
            throw .invalid("malformed change token: its database id is not lowercase hex", rule: .changeTokenFormat)
        }
        guard sealing.isWellFormed(parts[2]) else {
            throw .invalid("malformed change token: its position is not as a database writes one", rule: .changeTokenFormat)
        }
        guard parts[1] == expectedDatabaseID else {
            throw ShareSyncError(
                .changeTokenExpired, "the change token belongs to another database; \(ServerChangeToken.expiredAdvice)",
                rule: .changeTokenDatabase)
        }
        let position = try sealing.open(parts[2])
        // Only the spelling the database issues (the owner keys pushes by their token).
        guard try ServerChangeToken(databaseID: expectedDatabaseID, position: position, sealing: sealing) == self else {
            throw .invalid("malformed change token (not as the database issued it)", rule: .changeTokenFormat)
        }
        return position
    }

    static func isLowercaseHex(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(byte)
    }

    /// The characters of every version's tokens: ASCII letters, digits, `.`, `-` and `_`.
    static func isTokenCharacter(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar {
        case "a"..."z", "A"..."Z", "0"..."9", ".", "-", "_": true
        default: false
        }
    }

    /// A character of a malformed token, as an error names it.
    static func describe(_ scalar: Unicode.Scalar) -> String {
        let hex = String(scalar.value, radix: 16, uppercase: true)
        let code = "U+" + String(repeating: "0", count: max(0, 4 - hex.count)) + hex
        switch scalar {
        case " ": return "a space (U+0020)"
        case "\t": return "a tab (U+0009)"
        case "\n": return "a line feed (U+000A)"
        case "\r": return "a carriage return (U+000D)"
        default:
            // Printable ASCII is shown as well; anything else (controls, bidi and format marks) by its code only.
            let shown = (0x21...0x7E).contains(scalar.value) ? " '\(Character(scalar))'" : ""
            return "the character \(code)\(shown)"
        }
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

/// Seals a token's ``ServerChangeToken/Position`` into the opaque last part of its string and opens it
/// again: the owner's database does it with a key only it holds.
package protocol ChangeTokenSealing: Sendable {
    /// The position as text without dots, the same text for the same position and epoch (a position
    /// without an epoch is sealed in the one the sealer picks for it).
    func seal(_ position: ServerChangeToken.Position) throws(ShareSyncError) -> String
    /// The position `sealed` holds; `invalidArguments`, rule `changeTokenFormat`, if it holds none
    /// (not made by ``seal(_:)`` with this key).
    func open(_ sealed: Substring) throws(ShareSyncError) -> ServerChangeToken.Position
    /// Whether `sealed` has the shape of what ``seal(_:)`` writes, with whatever key (checked before a
    /// token's database: a token of another database is well formed; a made-up one may not be).
    func isWellFormed(_ sealed: Substring) -> Bool
}
