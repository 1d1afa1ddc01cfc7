import Foundation

/// A share's URL: where the owner's node is, the owner's key fingerprint, and the share's secret token.
///
/// Form: `sharesync://HOST:PORT/share/TOKEN?owner=FINGERPRINT`, plus `&invite=SECRET` on an
/// invitation (one-time) link. The token is unguessable; the fingerprint lets a participant check that
/// it reached the real owner.
public struct ShareURL: Sendable, Hashable, CustomStringConvertible {
    /// The scheme, `sharesync`.
    public static let scheme = "sharesync"

    /// The owner node's host name or address.
    public var host: String
    /// The owner node's TCP port.
    public var port: Int
    /// The share's secret token.
    public var token: String
    /// The owner's key fingerprint (see protocol.md), if known.
    public var ownerFingerprint: String?
    /// The invitation secret of a one-time URL.
    public var invitation: String?

    /// A URL from its parts (see the properties).
    public init(host: String, port: Int, token: String, ownerFingerprint: String?, invitation: String? = nil) {
        self.host = host
        self.port = port
        self.token = token
        self.ownerFingerprint = ownerFingerprint
        self.invitation = invitation
    }

    /// Parses a share URL; `nil` if it is not one (``problem(with:)`` says why).
    public init?(string: String) {
        guard case .success(let url) = Self.parse(string) else { return nil }
        self = url
    }

    /// What keeps `string` from being a share URL, for an error message (`nil` if it is one): the
    /// first part found wrong, such as "the path is not /share/TOKEN".
    public static func problem(with string: String) -> String? {
        if case .failure(let problem) = parse(string) { return problem.reason }
        return nil
    }

    private struct Problem: Error {
        let reason: String
        init(_ reason: String) { self.reason = reason }
    }

    private static func parse(_ string: String) -> Result<ShareURL, Problem> {
        guard let components = URLComponents(string: string) else { return .failure(Problem("it is not a URL")) }
        guard components.scheme?.lowercased() == Self.scheme else {
            return .failure(Problem("it does not start with \(Self.scheme)://"))
        }
        guard let host = components.host, !host.isEmpty else { return .failure(Problem("it names no host")) }
        // `sharesync://trusted.example@other.example/…` reaches other.example: refused, not shown to a
        // reader as a URL of trusted.example.
        guard components.user == nil, components.password == nil else {
            return .failure(Problem("it has a user part before its host (user@host), which share URLs never have"))
        }
        let parts = components.path.split(separator: "/")
        guard parts.count == 2, parts[0] == "share" else { return .failure(Problem("its path is not /share/TOKEN")) }
        guard Self.isToken(parts[1]) else {
            return .failure(Problem("its token is not 1 to 128 letters, digits, - and _"))
        }
        let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        guard HostName.isValid(bare) else { return .failure(Problem("its host is not a host name or an IP address")) }
        guard (1...65535).contains(components.port ?? 7420) else { return .failure(Problem("its port is not 1 to 65535")) }
        let items = components.queryItems ?? []
        // One of each at most: with two, which one counts would depend on who reads the URL.
        let owners = items.filter { $0.name == "owner" }
        let invitations = items.filter { $0.name == "invite" }
        guard owners.count <= 1 else { return .failure(Problem("it gives owner= twice")) }
        guard invitations.count <= 1 else { return .failure(Problem("it gives invite= twice")) }
        let ownerFingerprint = owners.first?.value?.lowercased()
        let invitation = invitations.first?.value
        // A fingerprint is hex: anything else (a percent-encoded `&invite=…`, say) would read back
        // differently once the URL is written out again.
        if let ownerFingerprint, !ownerFingerprint.allSatisfy(\.isHexDigit) {
            return .failure(Problem("its owner= is not a hexadecimal key fingerprint"))
        }
        if let invitation, !Self.isToken(Substring(invitation)) {
            return .failure(Problem("its invite= is not 1 to 128 letters, digits, - and _"))
        }
        return .success(ShareURL(
            host: bare, port: components.port ?? 7420, token: String(parts[1]), ownerFingerprint: ownerFingerprint, invitation: invitation))
    }

    /// The URL without its invitation part.
    public var shareURL: ShareURL { var u = self; u.invitation = nil; return u }

    /// The same URL with an invitation secret.
    public func with(invitation: String) -> ShareURL { var u = self; u.invitation = invitation; return u }

    /// The URL as a string.
    public var absoluteString: String {
        var s = "\(Self.scheme)://\(host.contains(":") ? "[\(host)]" : host):\(port)/share/\(token)"
        var query: [String] = []
        if let ownerFingerprint { query.append("owner=\(ownerFingerprint)") }
        if let invitation { query.append("invite=\(invitation)") }
        if !query.isEmpty { s += "?" + query.joined(separator: "&") }
        return s
    }

    /// The URL as text (``absoluteString``).
    public var description: String { absoluteString }

    static func isToken(_ s: Substring) -> Bool {
        !s.isEmpty && s.count <= 128 && s.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "_") }
    }
}
