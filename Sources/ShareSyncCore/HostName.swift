/// Which host names ShareSync accepts for a node's address: what an owner advertises, what a
/// participant stores for an owner (given by `owner address`, or announced by the owner), and the
/// host of a share URL.
///
/// A DNS name (at most 253 bytes, dot-separated labels of 1 to 63 letters, digits, `-` or `_`, not
/// starting or ending with `-`, and one final dot allowed; several all-digit labels must make an IPv4
/// address), an IPv4 address, or an IPv6 address written without brackets (hex
/// digits, `:` and `.`, with at least two `:`). Anything else (spaces, `/`, `?`, `#`, `@`, brackets)
/// would make share URLs that do not parse back, or send participants to an address nobody can reach.
public enum HostName {
    /// Whether `host` is a name or address a node can be reached at.
    public static func isValid(_ host: String) -> Bool {
        let bytes = Array(host.utf8)
        guard !bytes.isEmpty, bytes.count <= 253 else { return false }
        if bytes.contains(UInt8(ascii: ":")) {
            // IPv6: hex digits, colons and (for an embedded IPv4 tail) dots.
            return bytes.count <= 45 && bytes.filter { $0 == UInt8(ascii: ":") }.count >= 2
                && bytes.allSatisfy { isHexDigit($0) || $0 == UInt8(ascii: ":") || $0 == UInt8(ascii: ".") }
        }
        // A fully qualified name may end with a dot (`example.org.`).
        let name = bytes.last == UInt8(ascii: ".") ? bytes.dropLast() : bytes[...]
        guard !name.isEmpty else { return false }
        let labels = name.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        for label in labels {
            guard (1...63).contains(label.count), label.first != UInt8(ascii: "-"), label.last != UInt8(ascii: "-"),
                label.allSatisfy({ isAlphanumeric($0) || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: "_") })
            else { return false }
        }
        // All-numeric labels: a dotted IPv4 address, or a single label (a container named by digits).
        if labels.count > 1, labels.allSatisfy({ $0.allSatisfy(isDigit) }) {
            return labels.count == 4 && labels.allSatisfy { $0.count <= 3 && Int(String(decoding: $0, as: UTF8.self))! <= 255 }
        }
        return true
    }

    private static func isDigit(_ b: UInt8) -> Bool { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(b) }
    private static func isHexDigit(_ b: UInt8) -> Bool {
        isDigit(b) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(b) || (UInt8(ascii: "A")...UInt8(ascii: "F")).contains(b)
    }
    private static func isAlphanumeric(_ b: UInt8) -> Bool {
        isDigit(b) || (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(b) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(b)
    }
}
