/// How a server side of a connection negotiates and which limits it enforces.
public struct ServerConfiguration: Hashable, Sendable {
    /// Protocol versions the server speaks. Default `[1]`.
    public var supportedVersions: Set<Int>
    /// Whether a client may choose the `plain` encoding. Default `true`.
    public var allowPlain: Bool
    /// Whether a client may choose `deflate-base64`. Default `true`.
    public var allowDeflateBase64: Bool
    /// The limits of each connection.
    public var limits: FrameLimits

    /// Creates a configuration; every parameter has the documented default.
    public init(
        supportedVersions: Set<Int> = [1],
        allowPlain: Bool = true,
        allowDeflateBase64: Bool = true,
        limits: FrameLimits = FrameLimits()
    ) {
        self.supportedVersions = supportedVersions
        self.allowPlain = allowPlain
        self.allowDeflateBase64 = allowDeflateBase64
        self.limits = limits
    }

    /// The encodings a client may choose.
    public var allowedEncodings: [FrameEncoding] {
        FrameEncoding.allCases.filter { encoding in
            switch encoding {
            case .deflate: true
            case .deflateBase64: self.allowDeflateBase64
            case .plain: self.allowPlain
            }
        }
    }
}

/// What a client offers in its hello and which limits it enforces.
public struct ClientConfiguration: Hashable, Sendable {
    /// Protocol versions the client speaks. Default `[1]`.
    public var versions: [Int]
    /// Encodings in order of preference. Default `[.deflate, .plain]`.
    public var encodings: [FrameEncoding]
    /// The limits of the connection.
    public var limits: FrameLimits

    /// Creates a configuration; every parameter has the documented default.
    public init(
        versions: [Int] = [1],
        encodings: [FrameEncoding] = [.deflate, .plain],
        limits: FrameLimits = FrameLimits()
    ) {
        self.versions = versions
        self.encodings = encodings
        self.limits = limits
    }

    /// The hello line this configuration sends.
    public var hello: Handshake.ClientHello {
        Handshake.ClientHello(versions: self.versions, encodings: self.encodings)
    }
}

/// The outcome of a successful handshake, fired as a user inbound event and given to the
/// completion promise of the handshake handlers.
public struct NegotiatedSession: Hashable, Sendable {
    /// The protocol version both peers speak.
    public var version: Int
    /// The encoding of every frame after the handshake, both directions.
    public var encoding: FrameEncoding

    /// Creates a session description.
    public init(version: Int, encoding: FrameEncoding) {
        self.version = version
        self.encoding = encoding
    }
}
