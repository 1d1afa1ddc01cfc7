import NIOCore

/// Standard base64 (RFC 4648 section 4, alphabet `A-Z a-z 0-9 + /`, with `=` padding), strict:
/// no whitespace, no missing padding, no bits set in the padding.
enum Base64 {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
    private static let reverse: [UInt8] = {
        var table = [UInt8](repeating: 0xFF, count: 256)
        for (index, byte) in alphabet.enumerated() { table[Int(byte)] = UInt8(index) }
        return table
    }()

    static func encode(_ bytes: ByteBuffer, into out: inout ByteBuffer) {
        bytes.withUnsafeReadableBytes { input in
            let length = (input.count + 2) / 3 * 4
            out.writeWithUnsafeMutableBytes(minimumWritableBytes: length) { output in
                alphabet.withUnsafeBufferPointer { table in
                    var i = 0
                    var o = 0
                    while i + 3 <= input.count {
                        let value = UInt32(input[i]) << 16 | UInt32(input[i + 1]) << 8 | UInt32(input[i + 2])
                        output[o] = table[Int(value >> 18)]
                        output[o + 1] = table[Int(value >> 12 & 0x3F)]
                        output[o + 2] = table[Int(value >> 6 & 0x3F)]
                        output[o + 3] = table[Int(value & 0x3F)]
                        i += 3
                        o += 4
                    }
                    let rest = input.count - i
                    if rest > 0 {
                        let value = UInt32(input[i]) << 16 | (rest == 2 ? UInt32(input[i + 1]) << 8 : 0)
                        output[o] = table[Int(value >> 18)]
                        output[o + 1] = table[Int(value >> 12 & 0x3F)]
                        output[o + 2] = rest == 2 ? table[Int(value >> 6 & 0x3F)] : UInt8(ascii: "=")
                        output[o + 3] = UInt8(ascii: "=")
                        o += 4
                    }
                    return o
                }
            }
        }
    }

    static func decode(_ line: ByteBuffer, into out: inout ByteBuffer) throws(FrameError) {
        let count = line.readableBytes
        guard count % 4 == 0 else {
            throw FrameError(.invalidEncoding, "base64 line length \(count) is not a multiple of 4")
        }
        var failure: FrameError?
        _ = line.withUnsafeReadableBytes { input in
            out.writeWithUnsafeMutableBytes(minimumWritableBytes: count / 4 * 3) { output in
                reverse.withUnsafeBufferPointer { table in
                    var o = 0
                    var i = 0
                    while i < count {
                        let last = i + 4 == count
                        let pad = last ? (input[i + 3] == UInt8(ascii: "=") ? (input[i + 2] == UInt8(ascii: "=") ? 2 : 1) : 0) : 0
                        let a = table[Int(input[i])], b = table[Int(input[i + 1])]
                        let c = pad >= 2 ? 0 : table[Int(input[i + 2])]
                        let d = pad >= 1 ? 0 : table[Int(input[i + 3])]
                        guard (a | b | c | d) & 0xC0 == 0 else {
                            failure = FrameError(.invalidEncoding, "invalid base64 character near offset \(i)")
                            return 0
                        }
                        let value = UInt32(a) << 18 | UInt32(b) << 12 | UInt32(c) << 6 | UInt32(d)
                        guard (pad == 1 && value & 0xFF == 0) || (pad == 2 && value & 0xFFFF == 0) || pad == 0 else {
                            failure = FrameError(.invalidEncoding, "non-zero bits in base64 padding")
                            return 0
                        }
                        output[o] = UInt8(value >> 16)
                        if pad < 2 { output[o + 1] = UInt8(value >> 8 & 0xFF) }
                        if pad < 1 { output[o + 2] = UInt8(value & 0xFF) }
                        o += 3 - pad
                        i += 4
                    }
                    return o
                }
            }
        }
        if let failure { throw failure }
    }
}
