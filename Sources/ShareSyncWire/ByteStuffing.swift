import NIOCore

/// The escape that makes deflate output newline-free in the `deflate` encoding:
/// `0x0A` is written `0x1B 0x01`, `0x1B` is written `0x1B 0x02`; every other byte is itself.
/// Any other byte after `0x1B`, or a `0x1B` at the end of a line, is an invalid escape.
enum ByteStuffing {
    static let newline: UInt8 = 0x0A
    static let escape: UInt8 = 0x1B
    static let escapedNewline: UInt8 = 0x01
    static let escapedEscape: UInt8 = 0x02

    /// Appends the escaped form of `bytes` to `out`.
    static func escape(_ bytes: ByteBuffer, into out: inout ByteBuffer) {
        bytes.withUnsafeReadableBytes { input in
            var specials = 0
            for byte in input where byte == newline || byte == escape { specials += 1 }
            out.writeWithUnsafeMutableBytes(minimumWritableBytes: input.count + specials) { output in
                if specials == 0 {
                    output.copyMemory(from: input)
                    return input.count
                }
                var o = 0
                for byte in input {
                    if byte == newline {
                        output[o] = escape; output[o + 1] = escapedNewline; o += 2
                    } else if byte == escape {
                        output[o] = escape; output[o + 1] = escapedEscape; o += 2
                    } else {
                        output[o] = byte; o += 1
                    }
                }
                return o
            }
        }
    }

    /// Appends the unescaped form of `line` to `out`.
    /// - Throws: ``FrameError`` with ``FrameError/Code/invalidEncoding`` on a bad escape.
    static func unescape(_ line: ByteBuffer, into out: inout ByteBuffer) throws(FrameError) {
        var failure: FrameError?
        _ = line.withUnsafeReadableBytes { input in
            out.writeWithUnsafeMutableBytes(minimumWritableBytes: input.count) { output in
                var o = 0
                var i = 0
                while i < input.count {
                    let byte = input[i]
                    if byte == escape {
                        guard i + 1 < input.count else {
                            failure = FrameError(.invalidEncoding, "escape byte 0x1B at the end of a line")
                            return 0
                        }
                        switch input[i + 1] {
                        case escapedNewline: output[o] = newline
                        case escapedEscape: output[o] = escape
                        default:
                            let hex = String(input[i + 1], radix: 16)
                            failure = FrameError(.invalidEncoding, "invalid escape 0x1B 0x\(hex) at offset \(i)")
                            return 0
                        }
                        i += 2
                    } else if byte == newline {
                        failure = FrameError(.invalidEncoding, "raw newline inside a line at offset \(i)")
                        return 0
                    } else {
                        output[o] = byte
                        i += 1
                    }
                    o += 1
                }
                return o
            }
        }
        if let failure { throw failure }
    }
}
