import Crypto
import Foundation
import ShareSyncCore
import _CryptoExtras

/// Hides the owner's change counter (`meta.seq`, one number for every change in every zone, shared or
/// not) from the change tokens and record change tags its database hands out: before, a participant
/// read in them how much the owner changed elsewhere, and when.
///
/// Both are one AES-128 block under a key that only this database holds (`meta.positionKey`, made
/// when the database is first opened), enciphered with the AES permutation itself: the same input
/// always gives the same text, which tokens need (the owner keys pushes by their token), and
/// different inputs give unrelated texts.
/// - A token's position is `sequence` (6 bytes), `scanSnapshot + 1` (6 bytes, 0 for none) and 4 zero
///   bytes, which ``open(_:)`` checks: a token made up or altered opens to a block whose last bytes
///   are not zero but once in 2^32 tries, each one a request to the owner.
/// - A change tag is the first 8 bytes of the block holding `seq` (8 bytes) and 8 bytes of 0xFF (never
///   a token's block), in base 36. Tags are only ever compared for equality; two versions of one
///   record would share a tag once in 2^64.
struct PositionCipher: ChangeTokenSealing {
    /// Never changed after `init`; swift-crypto 3 does not mark `SymmetricKey` `Sendable`, though
    /// reading one from several threads is safe (its bytes are immutable storage).
    nonisolated(unsafe) private let key: SymmetricKey

    /// The cipher of the key `hex` (32 hex digits), as `meta` keeps it.
    init(hex: String) throws(ShareSyncError) {
        var bytes: [UInt8] = []
        var digits = hex.utf8.makeIterator()
        while let high = digits.next() {
            guard let low = digits.next(), let h = Self.hexValue(high), let l = Self.hexValue(low) else { break }
            bytes.append(h << 4 | l)
        }
        guard bytes.count == 16, hex.utf8.count == 32 else {
            throw ShareSyncError(.internalError, "the database's position key (meta.positionKey) is not 32 hex digits")
        }
        key = SymmetricKey(data: bytes)
    }

    /// A new random key as 32 hex digits.
    static func newKeyHex() -> String {
        SymmetricKey(size: .bits128).withUnsafeBytes { bytes in bytes.map { String(format: "%02x", $0) }.joined() }
    }

    private static func hexValue(_ digit: UInt8) -> UInt8? {
        switch digit {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): digit - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): digit - UInt8(ascii: "a") + 10
        default: nil
        }
    }

    /// The largest sequence number a block holds (6 bytes): at a million changes a second, 8.9 years.
    static let maximumSequence: Int64 = 1 << 48 - 2

    func seal(_ position: ServerChangeToken.Position) throws(ShareSyncError) -> String {
        let range = 0...Self.maximumSequence
        guard range.contains(position.sequence), range.contains(position.scanSnapshot ?? 0) else {
            throw ShareSyncError(.internalError, "a change position past \(Self.maximumSequence) cannot be put in a token")
        }
        var block = [UInt8](repeating: 0, count: 16)
        Self.put(UInt64(position.sequence), bytes: 6, into: &block, at: 0)
        Self.put(position.scanSnapshot.map { UInt64($0) + 1 } ?? 0, bytes: 6, into: &block, at: 6)
        try permute(&block, inverse: false)
        return Data(block).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
    }

    /// 22 characters of base64url (16 bytes). (Whether its last character's spare bits are zero is
    /// left to ``open(_:)``, which refuses what does not decode to a position of this key.)
    func isWellFormed(_ sealed: Substring) -> Bool {
        sealed.utf8.count == 22
            && sealed.utf8.allSatisfy { byte in
                switch byte {
                case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                    UInt8(ascii: "-"), UInt8(ascii: "_"):
                    true
                default: false
                }
            }
    }

    func open(_ sealed: Substring) throws(ShareSyncError) -> ServerChangeToken.Position {
        let malformed = ShareSyncError(.invalidArguments, "malformed change token", rule: .changeTokenFormat)
        // 16 bytes are 22 base64url characters without padding.
        guard sealed.utf8.count == 22,
            let data = Data(base64Encoded: sealed.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/") + "==")
        else { throw malformed }
        var block = [UInt8](data)
        try permute(&block, inverse: true)
        guard block[12..<16].allSatisfy({ $0 == 0 }) else { throw malformed }
        let sequence = Int64(Self.get(block, bytes: 6, at: 0))
        let snapshot = Int64(Self.get(block, bytes: 6, at: 6))
        return ServerChangeToken.Position(sequence: sequence, scanSnapshot: snapshot == 0 ? nil : snapshot - 1)
    }

    /// The change tag of the record version stored with sequence number `seq`.
    func changeTag(_ seq: Int64) throws(ShareSyncError) -> String {
        var block = [UInt8](repeating: 0xFF, count: 16)
        Self.put(UInt64(bitPattern: seq), bytes: 8, into: &block, at: 0)
        try permute(&block, inverse: false)
        return String(Self.get(block, bytes: 8, at: 0), radix: 36)
    }

    private func permute(_ block: inout [UInt8], inverse: Bool) throws(ShareSyncError) {
        do {
            if inverse { try AES.inversePermute(&block, key: key) } else { try AES.permute(&block, key: key) }
        } catch {
            throw ShareSyncError(.internalError, "cannot encipher a change position: \(error)")
        }
    }

    private static func put(_ value: UInt64, bytes: Int, into block: inout [UInt8], at offset: Int) {
        for i in 0..<bytes { block[offset + i] = UInt8(truncatingIfNeeded: value >> (8 * (bytes - 1 - i))) }
    }

    private static func get(_ block: [UInt8], bytes: Int, at offset: Int) -> UInt64 {
        (0..<bytes).reduce(0) { $0 << 8 | UInt64(block[offset + $1]) }
    }
}
