import Foundation

import ShareSyncCore

// Seeded random records for the equivalence tests of the hand-written JSON coders (core and wire).

/// SplitMix64: small, fast, and the same sequence on every platform.
public struct SeededGenerator: RandomNumberGenerator {
    public var state: UInt64

    public init(seed: UInt64) { state = seed }

    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// Random records covering every field type and the JSON that is tricky to get byte for byte.
public struct RandomRecords {
    public var rng: SeededGenerator

    public init(seed: UInt64) { rng = SeededGenerator(seed: seed) }

    /// Pieces of strings: escapes, slashes, control characters, combining marks, emoji, a BOM,
    /// line separators, characters whose normal form is ASCII (the Kelvin sign).
    public static let pieces: [String] = [
        "a", "Z", "note", " ", "0", "-", "_", "\"", "\\", "/", "//", "\\/", "\u{0}", "\u{1}", "\u{8}", "\u{9}", "\u{A}",
        "\u{C}", "\u{D}", "\u{1F}", "\u{7F}", "é", "e\u{301}", "\u{301}", "😀", "👩‍👩‍👧", "🇫🇷", "中文", "\u{2028}",
        "\u{2029}", "\u{FEFF}", "\u{212A}", "\u{FFFD}", "\u{10FFFF}", "\u{D7FF}", "\u{E000}", "ü", "Ω", "{", "}", "[",
        "]", ":", ",", "true", "null", "\\u0041", "\u{80}", "\u{7FF}", "\u{800}", "\u{FFFF}", "\u{10000}",
    ]

    public static let doubles: [Double] = [
        0, -0.0, 1, -1, 0.1, 0.2, 0.30000000000000004, 1.5, -0.25, 1e300, -1e300, .leastNonzeroMagnitude, -.leastNonzeroMagnitude, .leastNormalMagnitude,
        Double.leastNormalMagnitude.nextDown, .greatestFiniteMagnitude, 1e15, 1e16, 1e17, 1e21, 1e22, 1e-5, 1e-7, 123456789012345.0,
        1234567890123456.0, 9007199254740992, 9007199254740994, 4503599627370496.5, 999999999999999.9, 100, 1e-300,
        3.141592653589793, 2.718281828459045, 1.0 / 3, 37.5, -122.25, 90, -180, 0.5, 1e14, 123.456e10,
    ]

    public static let integers: [Int64] = [
        0, 1, -1, 9, 10, -10, 42, 1_700_000_000_123, .max, .min, .max - 1, .min + 1, Int64(Int32.max), Int64(Int32.min),
        1 << 53, -(1 << 53), 1_000_000_000_000_000_000,
    ]

    public mutating func int(_ range: ClosedRange<Int>) -> Int { Int.random(in: range, using: &rng) }
    public mutating func chance(_ p: Double) -> Bool { Double.random(in: 0..<1, using: &rng) < p }
    public mutating func pick<T>(_ values: [T]) -> T { values[int(0...values.count - 1)] }

    public mutating func string(maxPieces: Int = 6) -> String {
        if chance(0.3) { return pick(["milk", "Topic 1", "note-17", "", "garden paint ship", "_defaultZone"]) }
        return (0..<int(0...maxPieces)).map { _ in pick(Self.pieces) }.joined()
    }

    public mutating func name() -> String { chance(0.7) ? "note-\(int(0...99999))" : string() }

    public mutating func double() -> Double {
        switch int(0...3) {
        case 0: return pick(Self.doubles)
        case 1: return Double(int(-1_000_000...1_000_000)) / pick([1, 10, 100, 1000, 3, 7])
        case 2:
            var d: Double
            repeat { d = Double(bitPattern: rng.next()) } while !d.isFinite
            return d
        default: return Double(int(-1_000_000_000...1_000_000_000))
        }
    }

    public mutating func int64() -> Int64 {
        chance(0.5) ? pick(Self.integers) : Int64(bitPattern: rng.next()) >> int(0...63)
    }

    public mutating func date() -> Date {
        switch int(0...4) {
        case 0: return Date(timeIntervalSince1970: Double(int(-2_000_000_000...2_000_000_000)))
        case 1: return Date(timeIntervalSince1970: Double(int(-2_000_000_000_000...2_000_000_000_000)) / 1000)
        case 2: return Date(timeIntervalSince1970: Double.random(in: -1e10...1e10, using: &rng))  // fractional ms
        case 3: return Date(timeIntervalSince1970: pick([0, -0.0005, 0.0005, 1e14, -1e14, 1e15, -1e20, 0.0015, -0.0015]))
        default: return Date(timeIntervalSince1970: 1_700_000_000 + Double(int(0...1_000_000)) / 1000)
        }
    }

    public mutating func bytes() -> Data { Data((0..<int(0...24)).map { _ in UInt8.random(in: 0...255, using: &rng) }) }

    public mutating func zone() -> RecordZone.ID {
        switch int(0...3) {
        case 0: return .default
        case 1: return RecordZone.ID(zoneName: "Topics")
        case 2: return RecordZone.ID(zoneName: string(), ownerName: "_" + string())
        default: return RecordZone.ID(zoneName: "Shared", ownerName: "_owner")
        }
    }

    public mutating func reference(near zone: RecordZone.ID) -> Record.Reference {
        Record.Reference(
            recordID: Record.ID(recordName: name(), zoneID: chance(0.7) ? zone : self.zone()),
            action: chance(0.5) ? .none : .deleteSelf)
    }

    public mutating func location() -> Location { Location(latitude: double(), longitude: double()) }

    public mutating func list<T>(_ element: (inout RandomRecords) -> T) -> [T] {
        (0..<int(0...4)).map { _ in element(&self) }
    }

    public mutating func value(near zone: RecordZone.ID) -> FieldValue {
        switch int(0...16) {
        case 0, 1: return .string(string(maxPieces: 12))
        case 2: return .int64(int64())
        case 3: return .double(double())
        case 4: return .bool(chance(0.5))
        case 5: return .date(date())
        case 6: return .bytes(bytes())
        case 7: return .reference(reference(near: zone))
        case 8: return .location(location())
        case 9: return .list(.string(list { $0.string() }))
        case 10: return .list(.int64(list { $0.int64() }))
        case 11: return .list(.double(list { $0.double() }))
        case 12: return .list(.bool(list { $0.chance(0.5) }))
        case 13: return .list(.date(list { $0.date() }))
        case 14: return .list(.bytes(list { $0.bytes() }))
        case 15: return .list(.reference(list { $0.reference(near: zone) }))
        default: return .list(.location(list { $0.location() }))
        }
    }

    /// A random ordinary record (never a share).
    /// Bytes that JSON readers trip on: structure, digits, the letters of literals and escapes, and
    /// bytes that are not valid UTF-8 on their own.
    public static let interestingBytes: [UInt8] =
        Array(#"{}[]",:\/0123456789-+.eEtfnu "#.utf8) + [0x00, 0x1F, 0x7F, 0x80, 0xC0, 0xED, 0xF4, 0xFF]

    /// `bytes` with 1 to 3 bytes changed, inserted or removed at random places, the byte one of
    /// ``interestingBytes`` 70 % of the time.
    public mutating func mutated(_ bytes: [UInt8]) -> [UInt8] {
        var bytes = bytes
        for _ in 0..<int(1...3) {
            let at = int(0...bytes.count - 1)
            let byte = chance(0.7) ? pick(Self.interestingBytes) : UInt8.random(in: 0...255, using: &rng)
            switch int(0...2) {
            case 0: bytes[at] = byte
            case 1: bytes.insert(byte, at: at)
            default: bytes.remove(at: at)
            }
        }
        return bytes
    }

    public mutating func record() -> Record {
        let zone = self.zone()
        var fields: [String: FieldValue] = [:]
        for _ in 0..<int(0...8) { fields[chance(0.5) ? pick(["title", "body", "date", "a", "B", "_x", "Ω"]) : string()] = value(near: zone) }
        func stampUser(_ r: inout RandomRecords) -> Record.ID? { r.chance(0.7) ? Record.ID(recordName: "_" + r.string()) : nil }
        let created = chance(0.7) ? date() : nil
        let modified = chance(0.7) ? date() : nil
        var record = Record(
            recordType: chance(0.8) ? pick(["Note", "Topic", "Item"]) : string(), recordID: Record.ID(recordName: name(), zoneID: zone),
            fields: fields,
            parent: chance(0.5) ? Record.Reference(recordID: reference(near: zone).recordID, action: .none) : nil,
            share: chance(0.2) ? Record.Reference(recordID: reference(near: zone).recordID, action: .none) : nil,
            creationDate: created, modificationDate: modified,
            creatorUserRecordID: created == nil ? nil : stampUser(&self),
            lastModifiedUserRecordID: modified == nil ? nil : stampUser(&self),
            recordChangeTag: chance(0.6) ? pick(["1", "2b", "ff0", string()]) : nil)
        if chance(0.5) { record.markChanged(list { $0.chance(0.5) ? $0.pick(fields.keys.sorted() + ["gone"]) : $0.string() }, parent: chance(0.5)) }
        return record
    }
}
