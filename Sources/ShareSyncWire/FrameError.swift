/// An error raised by the ShareSync transport: the handshake, the line framing or a frame encoding.
///
/// Every error names the rule that was broken (``code``) and says, in ``message``, what was seen.
/// Decoders throw it; the NIO handlers fire it through the pipeline with `fireErrorCaught` so the
/// layer above can tell the peer which rule it broke before closing. Match on the code:
///
/// ```swift
/// catch let error as FrameError where error.code == .lineTooLong { ... }
/// ```
///
/// The rules are specified in `protocol.md`.
public struct FrameError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The rule that was broken. Its `rawValue` is the code sent in a `SHARESYNC-ERROR` line.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        /// The wire spelling of the code, e.g. `lineTooLong`.
        public let rawValue: String

        /// Creates a code from its wire spelling (used for codes received from a peer).
        public init(rawValue: String) { self.rawValue = rawValue }

        public var description: String { self.rawValue }

        /// A line (encoded frame or handshake line) is longer than the configured maximum.
        public static let lineTooLong = Code(rawValue: "lineTooLong")
        /// A frame's payload is, or inflates to, more than the configured maximum.
        public static let frameTooLarge = Code(rawValue: "frameTooLarge")
        /// A line is not valid in the negotiated encoding (bad escape, bad base64, newline in a payload).
        public static let invalidEncoding = Code(rawValue: "invalidEncoding")
        /// The deflate data of a frame is corrupt.
        public static let inflateFailed = Code(rawValue: "inflateFailed")
        /// The connection ended in the middle of a line.
        public static let truncatedFrame = Code(rawValue: "truncatedFrame")
        /// A handshake line does not follow the grammar.
        public static let malformedHandshake = Code(rawValue: "malformedHandshake")
        /// The peers have no protocol version in common.
        public static let unsupportedVersion = Code(rawValue: "unsupportedVersion")
        /// The peers have no frame encoding in common.
        public static let unsupportedEncoding = Code(rawValue: "unsupportedEncoding")
        /// The handshake did not complete in time.
        public static let handshakeTimeout = Code(rawValue: "handshakeTimeout")
        /// Nothing was received for longer than the idle timeout.
        public static let idleTimeout = Code(rawValue: "idleTimeout")
        /// A cleartext connection reached a server that speaks only TLS (`protocol.md`, "Transport security").
        public static let tlsRequired = Code(rawValue: "tlsRequired")
        /// The TLS handshake did not agree on the ALPN protocol `sharesync/1`.
        public static let alpnMismatch = Code(rawValue: "alpnMismatch")
    }

    /// The rule that was broken.
    public var code: Code
    /// What was seen, for a person to act on.
    public var message: String

    /// Creates an error naming the broken rule.
    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "FrameError(\(self.code)): \(self.message)" }

    static func lineTooLong(_ length: Int, limit: Int) -> FrameError {
        FrameError(.lineTooLong, "line of at least \(length) bytes exceeds the maximum of \(limit) bytes")
    }

    static func frameTooLarge(_ size: Int, limit: Int) -> FrameError {
        FrameError(.frameTooLarge, "frame of at least \(size) bytes exceeds the maximum of \(limit) bytes")
    }
}
