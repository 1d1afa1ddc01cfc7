import Foundation

/// Thrown by the hand-written JSON coders when they meet something they leave to Foundation's
/// `JSONEncoder`/`JSONDecoder`: a share record, a non-finite double, an unknown key, an escape or
/// number form they do not read, malformed input. The caller then runs the Foundation path, which
/// gives the same result (or the same error) as before the fast path existed.
package struct JSONFallback: Error {
    package init() {}
}

/// Writes JSON bytes exactly as `JSONCoding.encoder()` does (swift-foundation's `JSONWriter` with
/// `.sortedKeys` and `.withoutEscapingSlashes`): no whitespace, strings escaped the same way, integers
/// in decimal, doubles as `description` without a trailing `.0`.
///
/// The writer does not sort keys: callers write them in sorted (UTF-8 byte) order.
package struct JSONWriter {
    /// The JSON written so far.
    package var bytes: [UInt8] = []

    package init(capacity: Int = 512) {
        bytes.reserveCapacity(capacity)
    }

    /// Writes ASCII text as is: punctuation, literals and keys known not to need escapes.
    @inline(__always)
    package mutating func raw(_ text: StaticString) {
        bytes.append(contentsOf: UnsafeBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
    }

    @inline(__always)
    package mutating func byte(_ byte: UInt8) {
        bytes.append(byte)
    }

    /// Writes an array, each element written by `element`.
    package mutating func array<T, E: Error>(_ values: [T], _ element: (inout JSONWriter, T) throws(E) -> Void) throws(E) {
        raw("[")
        for (i, value) in values.enumerated() {
            if i > 0 { raw(",") }
            try element(&self, value)
        }
        raw("]")
    }

    /// Writes bytes that are already JSON.
    package mutating func json(_ json: some Collection<UInt8>) {
        bytes.append(contentsOf: json)
    }

    /// Writes a string with Foundation's escapes: `\"`, `\\`, `\b`, `\f`, `\n`, `\r`, `\t`, and
    /// `\u00XX` (lowercase hex) for the other control characters; everything else, `/` included, as is.
    package mutating func string(_ string: String) {
        var string = string
        string.withUTF8 { utf8 in
            bytes.append(UInt8(ascii: "\""))
            var mark = 0
            for i in 0..<utf8.count {
                let b = utf8[i]
                guard b < 0x20 || b == UInt8(ascii: "\"") || b == UInt8(ascii: "\\") else { continue }
                if i > mark { bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[mark..<i])) }
                mark = i + 1
                bytes.append(UInt8(ascii: "\\"))
                switch b {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"): bytes.append(b)
                case 0x08: bytes.append(UInt8(ascii: "b"))
                case 0x0C: bytes.append(UInt8(ascii: "f"))
                case 0x0A: bytes.append(UInt8(ascii: "n"))
                case 0x0D: bytes.append(UInt8(ascii: "r"))
                case 0x09: bytes.append(UInt8(ascii: "t"))
                default:
                    let hex: StaticString = "0123456789abcdef"
                    bytes.append(contentsOf: [UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0")])
                    bytes.append(hex.utf8Start[Int(b >> 4)])
                    bytes.append(hex.utf8Start[Int(b & 0xF)])
                }
            }
            if utf8.count > mark { bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[mark...])) }
            bytes.append(UInt8(ascii: "\""))
        }
    }

    /// Writes an integer in decimal.
    package mutating func int(_ value: Int64) {
        var magnitude = value.magnitude
        if value < 0 { bytes.append(UInt8(ascii: "-")) }
        // 20 digits hold UInt64.max.
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 20) { digits in
            var start = 20
            repeat {
                start -= 1
                digits[start] = UInt8(ascii: "0") + UInt8(truncatingIfNeeded: magnitude % 10)
                magnitude /= 10
            } while magnitude > 0
            bytes.append(contentsOf: UnsafeBufferPointer(rebasing: digits[start..<20]))
        }
    }

    /// Writes a finite double as Foundation does: its `description`, less a trailing `.0`.
    /// A non-finite double is a ``JSONFallback`` (Foundation's encoder refuses it with its own error).
    package mutating func double(_ value: Double) throws(JSONFallback) {
        guard value.isFinite else { throw JSONFallback() }
        if value.rounded(.towardZero) == value, value.magnitude < 1e15 {
            // An integral double below 2^53 prints as the integer (with "-0" for negative zero).
            if value == 0, value.sign == .minus { bytes.append(UInt8(ascii: "-")) }
            return int(Int64(value))
        }
        var text = value.description
        if text.hasSuffix(".0") { text.removeLast(2) }
        text.withUTF8 { bytes.append(contentsOf: $0) }
    }

    package mutating func bool(_ value: Bool) {
        if value { raw("true") } else { raw("false") }
    }
}
