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
/// - A token's position is `sequence` (6 bytes), `scanSnapshot + 1` (6 bytes, 0 for none), the epoch
///   that holds it, or for a token in the middle of a paged fetch the epoch it was handed out in (2
///   bytes, ``PositionEpochs``; 0 in tokens issued before epochs) and 2 zero
///   bytes, which ``open(_:)`` checks with the top byte of each 6-byte field (positions stay below
///   2^40, ``maximumSequence``): a token made up or altered opens to a block that passes once in 2^32
///   tries, each one a request to the owner.
/// - A change tag is the first 8 bytes of the block holding `seq` (8 bytes), the epoch of the write
///   (2 bytes) and 6 bytes of 0xFF (never a token's block), in base 36; before epochs, and in epoch
///   0, 8 bytes of 0xFF. Tags are only ever compared for equality; two versions of one record would
///   share a tag once in 2^64, and the same `seq` written in two stretches of history (a database
///   restored from a copy, then written again) gives two unrelated tags.
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

    /// The largest sequence number a token holds: 2^40 - 2 (at a thousand changes a second, 34 years).
    /// Its 6 bytes keep their top byte zero, which ``open(_:)`` checks with the 2 zero bytes after the
    /// epoch: a made-up or altered token passes once in 2^32 tries.
    static let maximumSequence: Int64 = 1 << 40 - 2

    func seal(_ position: ServerChangeToken.Position) throws(ShareSyncError) -> String {
        let range = 0...Self.maximumSequence
        guard range.contains(position.sequence), range.contains(position.scanSnapshot ?? 0) else {
            throw ShareSyncError(.internalError, "a change position past \(Self.maximumSequence) cannot be put in a token")
        }
        var block = [UInt8](repeating: 0, count: 16)
        Self.put(UInt64(position.sequence), bytes: 6, into: &block, at: 0)
        Self.put(position.scanSnapshot.map { UInt64($0) + 1 } ?? 0, bytes: 6, into: &block, at: 6)
        Self.put(UInt64(position.epoch ?? 0), bytes: 2, into: &block, at: 12)
        try permute(&block, inverse: false)
        return Self.base64url(Data(block).base64EncodedData())
    }

    /// Base64 (Foundation's) turned into base64url without padding, byte by byte. Measured reason:
    /// with three `replacingOccurrences` (Foundation bridges each to NSString and searches it),
    /// sealing and opening tokens took 19 % of the owner's CPU in the 100-connection fan-out (perf:
    /// every push seals a token and opens its subscriber's); owner CPU per change 41-46 ms, against
    /// 26 ms before tokens were sealed (same machine, same minutes).
    static func base64url(_ base64: Data) -> String {
        var text = [UInt8]()
        text.reserveCapacity(base64.count)
        for byte in base64 {
            switch byte {
            case UInt8(ascii: "+"): text.append(UInt8(ascii: "-"))
            case UInt8(ascii: "/"): text.append(UInt8(ascii: "_"))
            case UInt8(ascii: "="): continue
            default: text.append(byte)
            }
        }
        return String(decoding: text, as: UTF8.self)
    }

    /// `text` (base64url without padding) as base64 with two `=` of padding, byte by byte, as
    /// ``base64url(_:)`` is made (and why).
    static func base64(fromURL text: Substring) -> Data {
        var base64 = Data(capacity: text.utf8.count + 2)
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "-"): base64.append(UInt8(ascii: "+"))
            case UInt8(ascii: "_"): base64.append(UInt8(ascii: "/"))
            default: base64.append(byte)
            }
        }
        base64.append(contentsOf: [UInt8(ascii: "="), UInt8(ascii: "=")])
        return base64
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
        var malformed: ShareSyncError { ShareSyncError(.invalidArguments, "malformed change token", rule: .changeTokenFormat) }
        // The shape `seal` writes (``isWellFormed(_:)``: 22 base64url characters, 16 bytes), then what
        // decodes. (Checking only the length let 20 characters and `==` through, which Foundation
        // decodes to 15 bytes: refused as internalError, the cipher's.)
        guard isWellFormed(sealed), let data = Data(base64Encoded: Self.base64(fromURL: sealed)) else { throw malformed }
        var block = [UInt8](data)
        try permute(&block, inverse: true)
        guard block[14..<16].allSatisfy({ $0 == 0 }), block[0] == 0, block[6] == 0 else { throw malformed }
        let sequence = Int64(Self.get(block, bytes: 6, at: 0))
        let snapshot = Int64(Self.get(block, bytes: 6, at: 6))
        return ServerChangeToken.Position(
            sequence: sequence, scanSnapshot: snapshot == 0 ? nil : snapshot - 1, epoch: UInt16(Self.get(block, bytes: 2, at: 12)))
    }

    /// The change tag of the record version stored with sequence number `seq`, written in `epoch`.
    func changeTag(_ seq: Int64, epoch: UInt16) throws(ShareSyncError) -> String {
        var block = [UInt8](repeating: 0xFF, count: 16)
        Self.put(UInt64(bitPattern: seq), bytes: 8, into: &block, at: 0)
        if epoch != 0 { Self.put(UInt64(epoch), bytes: 2, into: &block, at: 8) }
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

/// The stretches of a database's history, one per opening that wrote (begun before its first write)
/// and one per backup followed by a write (``PrivateDatabase/backup(to:)``):
/// a token says which one it was issued in, so that a token from a history the database no longer has
/// (it was restored from an older copy, and the copy has since been written again) is known as such,
/// even where its sequence number was reached again. Kept in `meta.positionEpochs` as
/// `epoch:firstSequence` pairs in order; epoch 0, from sequence 0, is the history before epochs (its
/// tokens carry 0).
///
/// Before, a restored database that made as many changes again as the lost copy handed out the same
/// tokens and tags for other contents: a participant holding a token of the lost history took it up
/// again and missed changes without a word, and a save with a tag of the lost history overwrote a
/// different version.
struct PositionEpochs: Sendable {
    /// (epoch, the database's sequence number when it began), in the order they began.
    private(set) var entries: [(epoch: UInt16, start: Int64)]

    init(text: String) {
        entries = [(0, 0)]
        for pair in text.split(separator: ",") {
            let parts = pair.split(separator: ":")
            guard parts.count == 2, let epoch = UInt16(parts[0]), let start = Int64(parts[1]) else { continue }
            entries.append((epoch, start))
        }
    }

    /// The text `meta` keeps (epoch 0 is implied).
    var text: String { entries.dropFirst().map { "\($0.epoch):\($0.start)" }.joined(separator: ",") }

    /// The epoch begun last (0 if none was).
    var current: UInt16 { entries[entries.count - 1].epoch }

    /// Begins a new epoch at `sequence`: a random one other than 0 and, while there are any left, other
    /// than those already used.
    @discardableResult
    mutating func begin(at sequence: Int64) -> UInt16 {
        let used = Set(entries.map(\.epoch))
        // Not 0 (before epochs) and not 0xFFFF (whose tag block would be epoch 0's).
        var epoch = UInt16.random(in: 1...0xFFFE)
        for _ in 0..<1_000 where used.contains(epoch) { epoch = UInt16.random(in: 1...0xFFFE) }
        entries.append((epoch, sequence))
        return epoch
    }

    /// The epoch a position without one is sealed in (the token a fetch ends with; a token in the
    /// middle of a paged fetch carries the epoch it was handed out in): the last one begun before it
    /// (the first, epoch 0, for position 0). An epoch begins at the position it was begun at, and no
    /// token points past the position it was issued at, so the epoch a position is sealed in never
    /// changes: the same position is always the same token (before, each opening spelt the current
    /// position anew, and a write refused as a whole changed the current token).
    func epoch(sealing position: ServerChangeToken.Position) -> UInt16 {
        let at = max(position.sequence, position.scanSnapshot ?? 0)
        return entries.last(where: { $0.start < at })?.epoch ?? entries[0].epoch
    }

    /// Whether `position` can have been issued by this history: its epoch is one of these, and it does
    /// not point past where the next epoch began (a copy restored within that epoch ends it there).
    func holds(_ position: ServerChangeToken.Position) -> Bool {
        let epoch = position.epoch ?? current
        guard let index = entries.lastIndex(where: { $0.epoch == epoch }) else { return false }
        guard index + 1 < entries.count else { return true }
        let end = entries[index + 1].start
        return position.sequence <= end && (position.scanSnapshot ?? 0) <= end
    }
}

/// Seals each position that carries no epoch in the one that holds it (``PositionEpochs/epoch(sealing:)``), and makes
/// change tags in the current epoch, with the database's key.
struct EpochSealing: ChangeTokenSealing {
    let cipher: PositionCipher
    let epochs: PositionEpochs

    func seal(_ position: ServerChangeToken.Position) throws(ShareSyncError) -> String {
        var position = position
        if position.epoch == nil { position.epoch = epochs.epoch(sealing: position) }
        return try cipher.seal(position)
    }

    func open(_ sealed: Substring) throws(ShareSyncError) -> ServerChangeToken.Position { try cipher.open(sealed) }

    func isWellFormed(_ sealed: Substring) -> Bool { cipher.isWellFormed(sealed) }

    /// The change tag of the record version stored with sequence number `seq`, written now.
    func changeTag(_ seq: Int64) throws(ShareSyncError) -> String { try cipher.changeTag(seq, epoch: epochs.current) }
}
