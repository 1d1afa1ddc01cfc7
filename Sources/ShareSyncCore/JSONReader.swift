import Foundation

/// Reads JSON over UTF-8 bytes for the hand-written decoders: strict RFC 8259 syntax, and a
/// ``JSONFallback`` for anything it does not read itself, so that the caller can hand the input to
/// Foundation's `JSONDecoder` for the answer (or the error) it has always given.
///
/// What the reader leaves to Foundation: `null`, a lone UTF-16 surrogate escape, invalid UTF-8, a
/// control character inside a string, an integer written with a fraction or exponent or out of
/// `Int64`'s range, a double that is not finite or underflows, nesting deeper than 64 levels.
package struct JSONReader {
    private let base: UnsafePointer<UInt8>
    private let end: Int
    private var index = 0
    /// Decoded bytes of a string with escapes.
    private var scratch: [UInt8] = []

    private init(_ base: UnsafePointer<UInt8>, count: Int) {
        self.base = base
        self.end = count
    }

    /// Reads one JSON value from `bytes` with `body`, then checks that only whitespace follows; `nil`
    /// when the reader falls back.
    package static func read<T>(
        _ bytes: UnsafeRawBufferPointer, _ body: (inout JSONReader) throws(JSONFallback) -> T
    ) -> T? {
        guard let base = bytes.baseAddress, !bytes.isEmpty else { return nil }
        var reader = JSONReader(base.assumingMemoryBound(to: UInt8.self), count: bytes.count)
        do {
            let value = try body(&reader)
            reader.skipWhitespace()
            return reader.index == reader.end ? value : nil
        } catch {
            return nil
        }
    }

    /// ``read(_:_:)-(UnsafeRawBufferPointer,_)`` over `Data`.
    package static func read<T>(_ data: Data, _ body: (inout JSONReader) throws(JSONFallback) -> T) -> T? {
        data.withUnsafeBytes { read($0, body) }
    }

    // MARK: Structure

    @inline(__always)
    private mutating func skipWhitespace() {
        while index < end {
            switch base[index] {
            case 0x20, 0x0A, 0x0D, 0x09: index += 1
            default: return
            }
        }
    }

    /// The next byte that is not whitespace, not consumed.
    @inline(__always)
    package mutating func peek() throws(JSONFallback) -> UInt8 {
        skipWhitespace()
        guard index < end else { throw JSONFallback() }
        return base[index]
    }

    /// Consumes `byte` (after whitespace), or falls back.
    @inline(__always)
    package mutating func expect(_ byte: UInt8) throws(JSONFallback) {
        guard try peek() == byte else { throw JSONFallback() }
        index += 1
    }

    /// A key of an object, as raw bytes between its quotes.
    package struct Key {
        fileprivate let start: UnsafePointer<UInt8>
        fileprivate let count: Int
        fileprivate let hasEscapes: Bool
        fileprivate let isASCII: Bool

        /// Whether the key is written in ASCII without escapes (so that no other spelling of it is
        /// equal to it as a Swift `String`, except through the Kelvin sign and two other characters
        /// beyond ASCII).
        package var isPlainASCII: Bool { isASCII && !hasEscapes }

        /// Whether the key is `literal` (a key written with escapes never is: it falls back).
        @inline(__always)
        package func `is`(_ literal: StaticString) -> Bool {
            count == literal.utf8CodeUnitCount && !hasEscapes && memcmp(start, literal.utf8Start, count) == 0
        }
    }

    /// Reads an object, calling `member` for each key with the reader at its value; `member` reads
    /// the value (or falls back).
    package mutating func object(_ member: (inout JSONReader, Key) throws(JSONFallback) -> Void) throws(JSONFallback) {
        try expect(UInt8(ascii: "{"))
        if try peek() == UInt8(ascii: "}") {
            index += 1
            return
        }
        while true {
            let key = try scanString()
            try expect(UInt8(ascii: ":"))
            try member(&self, key)
            switch try peek() {
            case UInt8(ascii: ","): index += 1
            case UInt8(ascii: "}"):
                index += 1
                return
            default: throw JSONFallback()
            }
        }
    }

    /// Reads an array, calling `element` with the reader at each element.
    package mutating func array(_ element: (inout JSONReader) throws(JSONFallback) -> Void) throws(JSONFallback) {
        try expect(UInt8(ascii: "["))
        if try peek() == UInt8(ascii: "]") {
            index += 1
            return
        }
        while true {
            try element(&self)
            switch try peek() {
            case UInt8(ascii: ","): index += 1
            case UInt8(ascii: "]"):
                index += 1
                return
            default: throw JSONFallback()
            }
        }
    }

    /// Reads an array of values read by `element`.
    package mutating func elements<T>(_ element: (inout JSONReader) throws(JSONFallback) -> T) throws(JSONFallback) -> [T] {
        var values: [T] = []
        try array { r throws(JSONFallback) in values.append(try element(&r)) }
        return values
    }

    /// Reads a value with `body` and returns it with a copy of the bytes it spans.
    package mutating func captured<T>(_ body: (inout JSONReader) throws(JSONFallback) -> T) throws(JSONFallback) -> (T, Data) {
        skipWhitespace()
        let start = index
        let value = try body(&self)
        return (value, Data(bytes: base + start, count: index - start))
    }

    /// Skips the value at the reader after checking that it is well-formed JSON the reader reads
    /// (see the type's description for what falls back).
    package mutating func skipValue(depth: Int = 0) throws(JSONFallback) {
        guard depth < 64 else { throw JSONFallback() }
        switch try peek() {
        case UInt8(ascii: "{"):
            // Keys are not checked for duplicates: Foundation only minds them in objects it decodes.
            try object { r, _ throws(JSONFallback) in try r.skipValue(depth: depth + 1) }
        case UInt8(ascii: "["): try array { r throws(JSONFallback) in try r.skipValue(depth: depth + 1) }
        case UInt8(ascii: "\""): _ = try scanString()
        case UInt8(ascii: "t"), UInt8(ascii: "f"): _ = try bool()
        default: _ = try double()
        }
    }

    // MARK: Strings

    /// Scans a string at the reader, checking its escapes and UTF-8, and returns its raw bytes
    /// (compare them with ``Key/is(_:)``, decode them with ``string(_:)-(Key)``).
    package mutating func scanString() throws(JSONFallback) -> Key {
        try expect(UInt8(ascii: "\""))
        let start = index
        var escapes = false
        var ascii = true
        while true {
            // Eight bytes at a time up to the first that needs a look (most of a string's bytes).
            while index + 8 <= end {
                let special = Self.specialBytes(UInt64(littleEndian: UnsafeRawPointer(base + index).loadUnaligned(as: UInt64.self)))
                if special != 0 {
                    index += special.trailingZeroBitCount >> 3
                    break
                }
                index += 8
            }
            guard index < end else { throw JSONFallback() }
            let b = base[index]
            if b == UInt8(ascii: "\"") { break }
            if b == UInt8(ascii: "\\") {
                escapes = true
                index += 1
                guard index < end else { throw JSONFallback() }
                if base[index] == UInt8(ascii: "u") {
                    // A surrogate must come as a high-low pair; a lone one falls back.
                    let unit = try hex4(at: index + 1)
                    index += 4
                    if (0xD800...0xDBFF).contains(unit) {
                        guard index + 2 < end, base[index + 1] == UInt8(ascii: "\\"), base[index + 2] == UInt8(ascii: "u"),
                            (0xDC00...0xDFFF).contains(try hex4(at: index + 3))
                        else { throw JSONFallback() }
                        index += 6
                    } else if (0xDC00...0xDFFF).contains(unit) {
                        throw JSONFallback()
                    }
                } else {
                    switch base[index] {
                    case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"), UInt8(ascii: "b"), UInt8(ascii: "f"),
                        UInt8(ascii: "n"), UInt8(ascii: "r"), UInt8(ascii: "t"):
                        break
                    default: throw JSONFallback()
                    }
                }
            } else if b < 0x20 {
                throw JSONFallback()
            } else if b >= 0x80 {
                ascii = false
            }
            index += 1
        }
        let key = Key(start: base + start, count: index - start, hasEscapes: escapes, isASCII: ascii)
        index += 1
        if !ascii, !Self.isValidUTF8(key.start, count: key.count) { throw JSONFallback() }
        return key
    }

    /// The high bit set in each byte of `word` (little-endian: the first byte is the lowest) that is
    /// a quote, a backslash, a control character or not ASCII, and possibly in bytes after the first
    /// such byte; zero if there is none. The lowest set bit is always a true one, so the first byte
    /// that needs a look is `trailingZeroBitCount / 8` (the zero-byte tests of "Bit Twiddling Hacks"
    /// only err above a true match, through the borrow). Measured (`sharesync-bench codec`, 3 A/B
    /// pairs): record decode 517-576k → 599-623k records/s, pages of 400 511-515k → 577-579k; the
    /// bench's participant in the 100k initial sync 0.75-0.76 → 0.67-0.74 s of CPU.
    @inline(__always)
    static func specialBytes(_ word: UInt64) -> UInt64 {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let high: UInt64 = 0x8080_8080_8080_8080
        let quote = word ^ (ones &* 0x22)
        let backslash = word ^ (ones &* 0x5C)
        let zeroByte = ((quote &- ones) & ~quote) | ((backslash &- ones) & ~backslash)
        let control = (word &- ones &* 0x20) & ~word
        return (zeroByte | control | word) & high
    }

    private func hex4(at position: Int) throws(JSONFallback) -> UInt16 {
        guard position + 4 <= end else { throw JSONFallback() }
        var value: UInt16 = 0
        for i in position..<position + 4 {
            let b = base[i]
            let digit: UInt8
            switch b {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = b - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = b - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = b - UInt8(ascii: "A") + 10
            default: throw JSONFallback()
            }
            value = value << 4 | UInt16(digit)
        }
        return value
    }

    /// Strict UTF-8: no overlong forms, no surrogates, nothing above U+10FFFF.
    private static func isValidUTF8(_ p: UnsafePointer<UInt8>, count: Int) -> Bool {
        var i = 0
        func continuation(_ at: Int, _ range: ClosedRange<UInt8> = 0x80...0xBF) -> Bool {
            at < count && range.contains(p[at])
        }
        while i < count {
            let b = p[i]
            switch b {
            case 0x00...0x7F: i += 1
            case 0xC2...0xDF:
                guard continuation(i + 1) else { return false }
                i += 2
            case 0xE0...0xEF:
                let second: ClosedRange<UInt8> = b == 0xE0 ? 0xA0...0xBF : b == 0xED ? 0x80...0x9F : 0x80...0xBF
                guard continuation(i + 1, second), continuation(i + 2) else { return false }
                i += 3
            case 0xF0...0xF4:
                let second: ClosedRange<UInt8> = b == 0xF0 ? 0x90...0xBF : b == 0xF4 ? 0x80...0x8F : 0x80...0xBF
                guard continuation(i + 1, second), continuation(i + 2), continuation(i + 3) else { return false }
                i += 4
            default: return false
            }
        }
        return true
    }

    /// Reads a string.
    package mutating func string() throws(JSONFallback) -> String {
        try string(scanString())
    }

    /// Reads a key or string as a `String`, with its escapes decoded.
    package mutating func string(_ key: Key) throws(JSONFallback) -> String {
        let raw = UnsafeBufferPointer(start: key.start, count: key.count)
        guard key.hasEscapes else { return String(decoding: raw, as: UTF8.self) }
        scratch.removeAll(keepingCapacity: true)
        var i = 0
        while i < raw.count {
            let b = raw[i]
            guard b == UInt8(ascii: "\\") else {
                scratch.append(b)
                i += 1
                continue
            }
            let escape = raw[i + 1]
            i += 2
            switch escape {
            case UInt8(ascii: "b"): scratch.append(0x08)
            case UInt8(ascii: "f"): scratch.append(0x0C)
            case UInt8(ascii: "n"): scratch.append(0x0A)
            case UInt8(ascii: "r"): scratch.append(0x0D)
            case UInt8(ascii: "t"): scratch.append(0x09)
            case UInt8(ascii: "u"):
                // scanString checked the digits and the surrogate pairs.
                let start = key.start - base
                var scalar = UInt32(try hex4(at: start + i))
                i += 4
                if (0xD800...0xDBFF).contains(scalar) {
                    let low = UInt32(try hex4(at: start + i + 2))
                    scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                    i += 6
                }
                guard let unicode = Unicode.Scalar(scalar) else { throw JSONFallback() }
                scratch.append(contentsOf: UTF8.encode(unicode)!)
            default: scratch.append(escape)
            }
        }
        return String(decoding: scratch, as: UTF8.self)
    }

    // MARK: Literals and numbers

    /// Reads `true` or `false`.
    package mutating func bool() throws(JSONFallback) -> Bool {
        let first = try peek()
        if first == UInt8(ascii: "t"), index + 4 <= end, memcmp(base + index, "true", 4) == 0 {
            index += 4
            return true
        }
        if first == UInt8(ascii: "f"), index + 5 <= end, memcmp(base + index, "false", 5) == 0 {
            index += 5
            return false
        }
        throw JSONFallback()
    }

    /// The extent of a number at the reader, checked against JSON's grammar.
    private mutating func scanNumber() throws(JSONFallback) -> (start: Int, negative: Bool, integral: Bool, digits: Int) {
        _ = try peek()
        let start = index
        let negative = base[index] == UInt8(ascii: "-")
        if negative { index += 1 }
        func isDigit(_ i: Int) -> Bool { i < end && (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(base[i]) }
        guard isDigit(index) else { throw JSONFallback() }
        let digitsStart = index
        if base[index] == UInt8(ascii: "0") {
            index += 1
            guard !isDigit(index) else { throw JSONFallback() }
        } else {
            while isDigit(index) { index += 1 }
        }
        let digits = index - digitsStart
        var integral = true
        if index < end, base[index] == UInt8(ascii: ".") {
            integral = false
            index += 1
            guard isDigit(index) else { throw JSONFallback() }
            while isDigit(index) { index += 1 }
        }
        if index < end, base[index] | 0x20 == UInt8(ascii: "e") {
            integral = false
            index += 1
            if index < end, base[index] == UInt8(ascii: "+") || base[index] == UInt8(ascii: "-") { index += 1 }
            guard isDigit(index) else { throw JSONFallback() }
            while isDigit(index) { index += 1 }
        }
        return (start, negative, integral, digits)
    }

    /// Reads an integer written without fraction or exponent, within `Int64`.
    package mutating func int64() throws(JSONFallback) -> Int64 {
        let number = try scanNumber()
        guard number.integral, number.digits <= 19 else { throw JSONFallback() }
        var magnitude: UInt64 = 0
        for i in (index - number.digits)..<index { magnitude = magnitude * 10 + UInt64(base[i] - UInt8(ascii: "0")) }
        if number.negative {
            guard magnitude <= UInt64(Int64.max) + 1 else { throw JSONFallback() }
            return magnitude == UInt64(Int64.max) + 1 ? .min : -Int64(magnitude)
        }
        guard magnitude <= UInt64(Int64.max) else { throw JSONFallback() }
        return Int64(magnitude)
    }

    /// Reads an `Int`.
    package mutating func int() throws(JSONFallback) -> Int {
        Int(try int64())
    }

    /// Reads a double; one that overflows, or underflows to zero or a subnormal, falls back.
    package mutating func double() throws(JSONFallback) -> Double {
        let number = try scanNumber()
        if number.integral, number.digits <= 15 {
            // Exact: every integer below 10^15 is a double.
            var magnitude: Int64 = 0
            for i in (index - number.digits)..<index { magnitude = magnitude * 10 + Int64(base[i] - UInt8(ascii: "0")) }
            let value = Double(magnitude)
            return number.negative ? -value : value
        }
        let text = String(decoding: UnsafeBufferPointer(start: base + number.start, count: index - number.start), as: UTF8.self)
        guard let value = Double(text), value.isFinite, value.isNormal else { throw JSONFallback() }
        return value
    }
}
