import Testing

@testable import ShareSyncCore

/// The string scanner skips eight bytes at a time with `JSONReader.specialBytes`; it must find
/// exactly the first byte a byte-by-byte scan would stop at.
@Suite("JSON reader: eight bytes at a time")
struct JSONReaderWordTests {
    static func isSpecial(_ b: UInt8) -> Bool { b == 0x22 || b == 0x5C || b < 0x20 || b >= 0x80 }

    static func firstSpecial(_ bytes: [UInt8]) -> Int { bytes.firstIndex(where: isSpecial) ?? 8 }

    static func word(_ bytes: [UInt8]) -> UInt64 {
        bytes.enumerated().reduce(0) { $0 | UInt64($1.element) << (8 * UInt64($1.offset)) }
    }

    static func found(_ bytes: [UInt8]) -> Int {
        let mask = JSONReader.specialBytes(word(bytes))
        return mask == 0 ? 8 : mask.trailingZeroBitCount / 8
    }

    @Test("every byte value at every position, after plain bytes and before any bytes")
    func everyByteAtEveryPosition() {
        var rng = SystemRandomNumberGenerator()
        let plain = (0x20...0x7F).map(UInt8.init).filter { !Self.isSpecial($0) }
        for position in 0..<8 {
            for value in 0...255 {
                for _ in 0..<4 {
                    var bytes = (0..<8).map { _ in plain.randomElement(using: &rng)! }
                    bytes[position] = UInt8(value)
                    // What follows the byte may be anything, the borrow's playground included.
                    for i in (position + 1)..<8 { bytes[i] = UInt8.random(in: 0...255, using: &rng) }
                    #expect(Self.found(bytes) == Self.firstSpecial(bytes), "\(bytes)")
                }
            }
        }
    }

    @Test("random words")
    func randomWords() {
        var rng = SystemRandomNumberGenerator()
        for _ in 0..<50_000 {
            let bytes = (0..<8).map { _ in UInt8.random(in: 0...255, using: &rng) }
            #expect(Self.found(bytes) == Self.firstSpecial(bytes), "\(bytes)")
        }
    }
}
