/// The plain-text handshake that opens every connection: one line each way, ASCII, ending in `\n`.
///
/// ```
/// client: SHARESYNC versions=1 encodings=deflate,plain
/// server: SHARESYNC version=1 encoding=deflate
///    or:  SHARESYNC-ERROR unsupportedVersion no common protocol version
/// ```
///
/// These are pure values: parse and render them, and negotiate with ``negotiate(_:configuration:)``.
/// The grammar is specified in `protocol.md` ("Handshake").
public enum Handshake {
    /// The first word of both hello lines.
    public static let magic = "SHARESYNC"
    /// The first word of the server's refusal line.
    public static let errorMagic = "SHARESYNC-ERROR"

    /// The client's hello: the versions it speaks and the encodings it accepts, in preference order.
    public struct ClientHello: Hashable, Sendable {
        /// Protocol versions the client speaks.
        public var versions: [Int]
        /// Encoding names in the client's order of preference. Unknown names are kept (and
        /// ignored by negotiation) so newer clients can offer encodings older servers lack.
        public var encodings: [String]

        /// Creates a hello from known encodings.
        public init(versions: [Int], encodings: [FrameEncoding]) {
            self.versions = versions
            self.encodings = encodings.map(\.rawValue)
        }

        /// Creates a hello from encoding names, known or not.
        public init(versions: [Int], encodingNames: [String]) {
            self.versions = versions
            self.encodings = encodingNames
        }

        /// The line, without its newline: `SHARESYNC versions=1 encodings=deflate,plain`.
        public func render() -> String {
            let versions = self.versions.map(String.init).joined(separator: ",")
            return "\(Handshake.magic) versions=\(versions) encodings=\(self.encodings.joined(separator: ","))"
        }

        /// Parses a hello line (without its newline; one trailing `\r` is tolerated).
        /// - Throws: ``FrameError`` with code ``FrameError/Code/malformedHandshake``.
        public init(parsing line: Substring) throws(FrameError) {
            let parameters = try Handshake.parameters(of: line, magic: Handshake.magic)
            guard let versions = parameters["versions"], let encodings = parameters["encodings"] else {
                throw FrameError(.malformedHandshake, "client hello needs versions= and encodings=")
            }
            self.versions = try Handshake.versionList(versions)
            self.encodings = try Handshake.tokenList(encodings, what: "encoding")
        }
    }

    /// The server's answer: the version and encoding it chose.
    public struct ServerHello: Hashable, Sendable {
        /// The chosen protocol version.
        public var version: Int
        /// The chosen encoding.
        public var encoding: FrameEncoding

        /// Creates an answer.
        public init(version: Int, encoding: FrameEncoding) {
            self.version = version
            self.encoding = encoding
        }

        /// The line, without its newline: `SHARESYNC version=1 encoding=deflate`.
        public func render() -> String {
            "\(Handshake.magic) version=\(self.version) encoding=\(self.encoding.rawValue)"
        }

        /// Parses an answer line (without its newline; one trailing `\r` is tolerated).
        /// - Throws: ``FrameError`` with code ``FrameError/Code/malformedHandshake``, or
        ///   ``FrameError/Code/unsupportedEncoding`` when the encoding name is unknown.
        public init(parsing line: Substring) throws(FrameError) {
            let parameters = try Handshake.parameters(of: line, magic: Handshake.magic)
            guard let version = parameters["version"], let encoding = parameters["encoding"] else {
                throw FrameError(.malformedHandshake, "server hello needs version= and encoding=")
            }
            let versions = try Handshake.versionList(version)
            guard versions.count == 1 else {
                throw FrameError(.malformedHandshake, "server hello must name exactly one version")
            }
            guard let known = FrameEncoding(rawValue: String(encoding)) else {
                throw FrameError(.unsupportedEncoding, "server chose unknown encoding '\(encoding.prefix(64))'")
            }
            self.version = versions[0]
            self.encoding = known
        }
    }

    /// What a client can receive in answer to its hello.
    public enum ServerReply: Hashable, Sendable {
        /// The server accepted and chose a version and an encoding.
        case accepted(ServerHello)
        /// The server refused with a `SHARESYNC-ERROR` line; the error carries its code and message.
        case refused(FrameError)

        /// Parses either a `SHARESYNC ...` or a `SHARESYNC-ERROR ...` line.
        public init(parsing line: Substring) throws(FrameError) {
            let trimmed = Handshake.trimmed(line)
            if trimmed.hasPrefix(Handshake.errorMagic + " ") {
                self = .refused(Handshake.parseErrorLine(trimmed))
            } else {
                // The untrimmed line: ServerHello tolerates one trailing `\r` itself, and trimming here
                // too let `\r\r` through (found by the handshake fuzz target).
                self = .accepted(try ServerHello(parsing: line))
            }
        }
    }

    /// Renders the refusal line, without its newline: `SHARESYNC-ERROR <code> <message>`.
    /// Newlines in the message are replaced by spaces.
    public static func renderError(_ error: FrameError) -> String {
        let message = String(error.message.map { $0.isNewline ? " " : $0 })
        return "\(Handshake.errorMagic) \(error.code.rawValue) \(message)"
    }

    /// Chooses the highest common version and the first client-preferred encoding the server allows.
    /// - Throws: ``FrameError`` with ``FrameError/Code/unsupportedVersion`` or
    ///   ``FrameError/Code/unsupportedEncoding``.
    public static func negotiate(
        _ hello: ClientHello,
        configuration: ServerConfiguration
    ) throws(FrameError) -> ServerHello {
        guard let version = hello.versions.filter(configuration.supportedVersions.contains).max() else {
            let offered = hello.versions.map(String.init).joined(separator: ",")
            let supported = configuration.supportedVersions.sorted().map(String.init).joined(separator: ",")
            throw FrameError(
                .unsupportedVersion,
                "no common protocol version (client offered \(offered); server supports \(supported))"
            )
        }
        let allowed = configuration.allowedEncodings
        guard let encoding = hello.encodings.lazy.compactMap(FrameEncoding.init(rawValue:))
            .first(where: allowed.contains)
        else {
            let names = allowed.map(\.rawValue).joined(separator: ",")
            throw FrameError(.unsupportedEncoding, "no common encoding (server allows \(names))")
        }
        return ServerHello(version: version, encoding: encoding)
    }
}
