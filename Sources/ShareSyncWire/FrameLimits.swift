import NIOCore
import Synchronization

/// The limits one connection enforces. All are configurable; the defaults are documented in
/// `protocol.md` ("Limits").
public struct FrameLimits: Hashable, Sendable {
    /// The default maximum payload size: 16 MiB.
    public static let defaultMaximumFrameSize = 16 * 1024 * 1024
    /// The default maximum encoded line length: 16 MiB + 64 KiB, which leaves room for the few
    /// bytes deflate and the escaping add to an incompressible 16 MiB payload.
    public static let defaultMaximumLineLength = 16 * 1024 * 1024 + 64 * 1024
    /// The longest handshake line accepted, in bytes, without its newline.
    public static let maximumHandshakeLineLength = 1024

    /// Maximum length in bytes of one encoded line, without its newline. Longer lines are rejected
    /// with ``FrameError/Code/lineTooLong`` as soon as that many bytes are buffered, and the encoder
    /// refuses to produce them.
    public var maximumLineLength: Int
    /// Maximum size in bytes of one payload, after inflating. Inflating stops at this size with
    /// ``FrameError/Code/frameTooLarge`` (the decompression-bomb guard); the encoder refuses
    /// larger payloads with the same code.
    public var maximumFrameSize: Int
    /// How long a peer may take to complete the handshake. Default 10 seconds.
    public var handshakeTimeout: TimeAmount
    /// How long a connection may be quiet in both directions after the handshake (nothing received,
    /// nothing sent) before it fails with ``FrameError/Code/idleTimeout``; `nil` disables it. Default
    /// 120 seconds. See ``IdleTimeoutHandler``.
    public var idleTimeout: TimeAmount?

    /// Creates limits; every parameter has the documented default.
    public init(
        maximumLineLength: Int = FrameLimits.defaultMaximumLineLength,
        maximumFrameSize: Int = FrameLimits.defaultMaximumFrameSize,
        handshakeTimeout: TimeAmount = .seconds(10),
        idleTimeout: TimeAmount? = .seconds(120)
    ) {
        self.maximumLineLength = max(1, maximumLineLength)
        self.maximumFrameSize = max(0, maximumFrameSize)
        self.handshakeTimeout = handshakeTimeout
        self.idleTimeout = idleTimeout
    }
}

/// How frame payloads are written as lines after the handshake. The raw value is the wire name.
public enum FrameEncoding: String, Hashable, Sendable, CaseIterable {
    /// Shared-context raw deflate, made newline-free by byte stuffing. The default.
    case deflate = "deflate"
    /// Shared-context raw deflate, written as standard base64 (for text-only peers).
    case deflateBase64 = "deflate-base64"
    /// The payload bytes as they are (no newline allowed in a payload). For debugging with `nc`.
    case plain = "plain"
}

/// A lower frame size limit that a connection lifts once its peer has authenticated: a server that
/// accepts connections from anyone decodes only small frames until then (a `hello` and an
/// `authenticate` are a few hundred bytes). Without it, any peer could make the server inflate and
/// parse a 16 MiB frame per connection, on the event loop, before proving a key: 256 such
/// connections at once came to 4 GiB. Shared by the connection (which lifts it) and its decoder.
public final class FrameSizeGate: Sendable {
    private let limit: Atomic<Int>

    /// A gate that lets frames of at most `limit` bytes through until ``lift()``.
    public init(limit: Int) { self.limit = Atomic(max(0, limit)) }

    /// The largest frame let through now (`Int.max` once lifted: the frame limits alone apply).
    public var current: Int { limit.load(ordering: .relaxed) }

    /// Lets frames up to the frame limits through from now on.
    public func lift() { limit.store(.max, ordering: .relaxed) }
}

