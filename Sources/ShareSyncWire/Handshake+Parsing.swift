extension Handshake {
    static func trimmed(_ line: Substring) -> Substring {
        line.last == "\r" ? line.dropLast() : line
    }

    /// Splits `MAGIC key=value key=value` (single spaces). Unknown keys are kept (and ignored by
    /// callers) so later versions can add parameters; a repeated key is malformed.
    static func parameters(of line: Substring, magic: String) throws(FrameError) -> [Substring: Substring] {
        let line = trimmed(line)
        guard line.utf8.count <= FrameLimits.maximumHandshakeLineLength else {
            throw FrameError(.malformedHandshake, "handshake line longer than \(FrameLimits.maximumHandshakeLineLength) bytes")
        }
        guard line.utf8.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) else {
            throw FrameError(.malformedHandshake, "handshake line must be printable ASCII")
        }
        let words = line.split(separator: " ", omittingEmptySubsequences: false)
        guard let first = words.first, first == magic else {
            throw FrameError(.malformedHandshake, "handshake line must start with '\(magic) '")
        }
        var result: [Substring: Substring] = [:]
        for word in words.dropFirst() {
            guard let equals = word.firstIndex(of: "="), equals != word.startIndex else {
                throw FrameError(.malformedHandshake, "expected key=value, got '\(word.prefix(64))'")
            }
            let key = word[..<equals]
            guard result.updateValue(word[word.index(after: equals)...], forKey: key) == nil else {
                throw FrameError(.malformedHandshake, "parameter '\(key)' given twice")
            }
        }
        return result
    }

    /// A non-empty comma-separated list of decimal versions in 1...999999.
    static func versionList(_ value: Substring) throws(FrameError) -> [Int] {
        var versions: [Int] = []
        for token in value.split(separator: ",", omittingEmptySubsequences: false) {
            guard (1...6).contains(token.count), token.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
                let version = Int(token), version >= 1
            else {
                throw FrameError(.malformedHandshake, "bad version '\(token.prefix(16))'")
            }
            versions.append(version)
        }
        return versions
    }

    /// A non-empty comma-separated list of tokens of `a-z`, `0-9` and `-`.
    static func tokenList(_ value: Substring, what: String) throws(FrameError) -> [String] {
        var tokens: [String] = []
        for token in value.split(separator: ",", omittingEmptySubsequences: false) {
            let valid = token.utf8.allSatisfy { ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2D }
            guard !token.isEmpty, token.count <= 64, valid else {
                throw FrameError(.malformedHandshake, "bad \(what) name '\(token.prefix(64))'")
            }
            tokens.append(String(token))
        }
        return tokens
    }

    /// `SHARESYNC-ERROR <code> <message>`; a line without a code reads as malformedHandshake.
    static func parseErrorLine(_ line: Substring) -> FrameError {
        let rest = line.dropFirst(Handshake.errorMagic.count + 1)
        let parts = rest.split(separator: " ", maxSplits: 1, omittingEmptySubsequences: false)
        guard let code = parts.first, !code.isEmpty else {
            return FrameError(.malformedHandshake, "server refused without a code")
        }
        let message = parts.count > 1 ? String(parts[1]) : ""
        return FrameError(FrameError.Code(rawValue: String(code.prefix(64))), message)
    }
}
