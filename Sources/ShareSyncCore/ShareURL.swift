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

    /// Parses a share URL; `nil` if it is not one.
    public init?(string: String) {
        guard let components = URLComponents(string: string), components.scheme?.lowercased() == Self.scheme,
            let host = components.host, !host.isEmpty
        else { return nil }
        let parts = components.path.split(separator: "/")
        guard parts.count == 2, parts[0] == "share", Self.isToken(parts[1]) else { return nil }
        let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        guard HostName.isValid(bare), (1...65535).contains(components.port ?? 7420) else { return nil }
        self.host = bare
        self.port = components.port ?? 7420
        self.token = String(parts[1])
        let items = components.queryItems ?? []
        // One of each at most: with two, which one counts would depend on who reads the URL.
        let owners = items.filter { $0.name == "owner" }
        let invitations = items.filter { $0.name == "invite" }
        guard owners.count <= 1, invitations.count <= 1 else { return nil }
        self.ownerFingerprint = owners.first?.value?.lowercased()
        self.invitation = invitations.first?.value
        // A fingerprint is hex: anything else (a percent-encoded `&invite=…`, say) would read back
        // differently once the URL is written out again.
        if let ownerFingerprint, !ownerFingerprint.allSatisfy(\.isHexDigit) { return nil }
        if let invitation, !Self.isToken(Substring(invitation)) { return nil }
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
