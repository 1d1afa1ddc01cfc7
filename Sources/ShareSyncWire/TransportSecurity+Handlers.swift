import NIOCore
import NIOSSL
import NIOTLS
import ShareSyncCore

extension TransportSecurity {
    /// Adds the server side of the transport security in front of the framing: a
    /// ``ServerTransportSelector`` that starts TLS (or, if allowed, cleartext) on the first byte.
    /// Put it first, before ``FrameCodec/addServerHandlers(to:configuration:completion:)``, so the
    /// handshake timeout covers the TLS handshake too.
    public static func addServerHandlers(
        to pipeline: ChannelPipeline.SynchronousOperations, context: NIOSSLContext, allowCleartext: Bool
    ) throws {
        try pipeline.addHandler(ServerTransportSelector(context: context, allowCleartext: allowCleartext))
    }

    /// Adds the client side of TLS in front of the framing: swift-nio-ssl's client handler, whose
    /// verification accepts only a well-formed self-signed Ed25519 certificate (with
    /// `expectedPeerFingerprint`, only one whose key has that fingerprint), then a ``TLSPeerHandler``.
    public static func addClientHandlers(
        to pipeline: ChannelPipeline.SynchronousOperations, context: NIOSSLContext, expectedPeerFingerprint: String?
    ) throws {
        let peer = TLSPeerHandler(role: .client(expectedFingerprint: expectedPeerFingerprint?.lowercased()))
        let tls = try NIOSSLClientHandler(context: context, serverHostname: nil) { chain, promise in
            promise.succeed(peer.verify(chain))
        }
        try pipeline.addHandlers([tls, peer])
    }
}

/// The first handler of a server connection: looks at the first byte the client sends. `0x16`
/// (a TLS handshake record) installs swift-nio-ssl's server handler and a ``TLSPeerHandler`` in its
/// place; anything else is cleartext, passed on as it is (with a ``ConnectionSecurity/cleartext``
/// event) when allowed, else answered with `SHARESYNC-ERROR tlsRequired …` and closed.
public final class ServerTransportSelector: ChannelInboundHandler, RemovableChannelHandler {
    public typealias InboundIn = ByteBuffer
    public typealias InboundOut = ByteBuffer

    private let context: NIOSSLContext
    private let allowCleartext: Bool
    private var refused = false

    /// Creates the selector for one connection.
    public init(context: NIOSSLContext, allowCleartext: Bool) {
        self.context = context
        self.allowCleartext = allowCleartext
    }

    public func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !refused, let first = Self.unwrapInboundIn(data).readableBytesView.first else { return }
        let pipeline = context.pipeline.syncOperations
        if first == TransportSecurity.tlsRecordFirstByte {
            let peer = TLSPeerHandler(role: .server)
            let tls = NIOSSLServerHandler(context: self.context) { chain, promise in promise.succeed(peer.verify(chain)) }
            do {
                try pipeline.addHandlers([tls, peer], position: .after(self))
            } catch {
                context.fireErrorCaught(error)
                return
            }
        } else if allowCleartext {
            context.fireUserInboundEventTriggered(ConnectionSecurity.cleartext)
        } else {
            refused = true
            let error = FrameError(
                .tlsRequired,
                "this node speaks only TLS 1.3 with ALPN \(TransportSecurity.applicationProtocol) and a client certificate "
                    + "(protocol.md, Transport security); cleartext is refused")
            var line = context.channel.allocator.buffer(string: Handshake.renderError(error))
            line.writeInteger(ByteStuffing.newline)
            let bound = NIOLoopBound(context, eventLoop: context.eventLoop)
            context.writeAndFlush(NIOAny(line)).whenComplete { _ in bound.value.close(promise: nil) }
            return
        }
        context.fireChannelRead(data)
        pipeline.removeHandler(context: context, promise: nil)
    }
}

@available(*, unavailable)
extension ServerTransportSelector: Sendable {}

/// Sits after swift-nio-ssl's handler on either side. It does the certificate check for the TLS
/// handler (``verify(_:)``), and when the TLS handshake completes it requires ALPN `sharesync/1`
/// and fires ``ConnectionSecurity/tls(peerPublicKey:)`` with the key of the peer's certificate.
///
/// Server: without ALPN `sharesync/1` it answers `SHARESYNC-ERROR alpnMismatch …` and closes.
/// Client: it turns TLS failures into a ``ShareSyncError`` naming what failed (fired through the
/// pipeline): `notAuthenticated` with rule `ownerFingerprintMismatch` (the owner's certificate key is
/// not the expected one), `badCertificate`, `alpnMismatch`, or `tlsHandshakeFailed` (the owner
/// refused the handshake, or is not speaking TLS); after application data, `networkFailure`.
public final class TLSPeerHandler: ChannelInboundHandler {
    public typealias InboundIn = ByteBuffer
    public typealias InboundOut = ByteBuffer

    /// Which side this handler speaks for.
    public enum Role: Sendable {
        /// The server: any well-formed self-signed Ed25519 certificate is accepted (the key is the identity).
        case server
        /// The client: with an expected fingerprint, the owner's certificate key must have it.
        case client(expectedFingerprint: String?)
    }

    private let role: Role
    private var verificationFailure: ShareSyncError?
    private var sawApplicationData = false
    private var failed = false

    /// Creates the handler; see ``TransportSecurity/addClientHandlers(to:context:expectedPeerFingerprint:)``.
    public init(role: Role) {
        self.role = role
    }

    /// The verification swift-nio-ssl runs on the peer's certificates (its custom verification
    /// callback, on the event loop): see ``TransportSecurity/peerPublicKey(_:)-([NIOSSLCertificate])``.
    func verify(_ chain: [NIOSSLCertificate]) -> NIOSSLVerificationResult {
        switch TransportSecurity.peerPublicKey(chain) {
        case .failure(let problem):
            verificationFailure = ShareSyncError(
                .notAuthenticated, "the peer's TLS certificate is not acceptable: \(problem)", rule: .badCertificate)
            return .failed
        case .success(let key):
            if case .client(let expected?) = role {
                let fingerprint = Fingerprint.of(rawPublicKey: key)
                guard fingerprint == expected else {
                    verificationFailure = ShareSyncError(
                        .notAuthenticated,
                        "the owner's TLS certificate has key \(fingerprint), but the share URL names \(expected); not talking to it",
                        rule: .ownerFingerprintMismatch)
                    return .failed
                }
            }
            return .certificateVerified
        }
    }

    public func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !failed else { return }
        sawApplicationData = true
        context.fireChannelRead(data)
    }

    public func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        guard let tlsEvent = event as? TLSUserEvent, case .handshakeCompleted(let negotiated) = tlsEvent else {
            return context.fireUserInboundEventTriggered(event)
        }
        guard negotiated == TransportSecurity.applicationProtocol else {
            return refuse(
                FrameError(
                    .alpnMismatch,
                    "the TLS handshake agreed on ALPN \(negotiated.map { "\"\($0)\"" } ?? "none"); "
                        + "ShareSync requires \(TransportSecurity.applicationProtocol)"),
                context: context)
        }
        let certificate = try? context.pipeline.syncOperations.nioSSL_peerCertificate()
        guard let certificate, case .success(let key) = TransportSecurity.peerPublicKey(certificate) else {
            return refuse(ShareSyncError(.notAuthenticated, "the peer presented no usable TLS certificate", rule: .badCertificate), context: context)
        }
        context.fireUserInboundEventTriggered(event)
        context.fireUserInboundEventTriggered(ConnectionSecurity.tls(peerPublicKey: key))
    }

    public func errorCaught(context: ChannelHandlerContext, error: any Error) {
        guard case .client = role, error is NIOSSLError || error is BoringSSLError else {
            return context.fireErrorCaught(error)
        }
        if let failure = verificationFailure {
            verificationFailure = nil
            return context.fireErrorCaught(failure)
        }
        if sawApplicationData {
            return context.fireErrorCaught(ShareSyncError(.networkFailure, "the TLS connection to the owner failed: \(error)"))
        }
        context.fireErrorCaught(
            ShareSyncError(
                .notAuthenticated,
                "the TLS handshake with the owner failed (\(error)); the owner must speak TLS 1.3 with ALPN "
                    + "\(TransportSecurity.applicationProtocol) and accept this node's certificate",
                rule: .tlsHandshakeFailed))
    }

    private func refuse(_ error: FrameError, context: ChannelHandlerContext) {
        switch role {
        case .server:
            failed = true
            var line = context.channel.allocator.buffer(string: Handshake.renderError(error))
            line.writeInteger(ByteStuffing.newline)
            let bound = NIOLoopBound(context, eventLoop: context.eventLoop)
            context.writeAndFlush(NIOAny(line)).whenComplete { _ in bound.value.close(promise: nil) }
        case .client:
            refuse(error.shareSyncError, context: context)
        }
    }

    private func refuse(_ error: ShareSyncError, context: ChannelHandlerContext) {
        failed = true
        context.fireErrorCaught(error)
        context.close(promise: nil)
    }
}

@available(*, unavailable)
extension TLSPeerHandler: Sendable {}
