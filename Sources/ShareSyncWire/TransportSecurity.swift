import Crypto
import Foundation
import NIOCore
import NIOSSL
import ShareSyncCore
import X509

/// How one connection is protected, fired as a user inbound event once it is known (before any
/// frame): by ``TLSPeerHandler`` when the TLS handshake completed and the peer's certificate key is
/// known, by ``ServerTransportSelector`` when a server accepted a cleartext loopback connection.
///
/// The message layer binds authentication to it: the key a peer proves in the Ed25519
/// challenge-response must be the key of its TLS certificate (`protocol.md`, "Channel binding").
public enum ConnectionSecurity: Hashable, Sendable {
    /// TLS 1.3 with ALPN `sharesync/1`; the peer's certificate carries this Ed25519 key (32 raw bytes).
    case tls(peerPublicKey: Data)
    /// No TLS: a loopback connection allowed for debugging.
    case cleartext
}

/// The TLS profile every node-to-node connection uses (`protocol.md`, "Transport security (TLS)"):
/// TLS 1.3 only, mutual, each side presenting a self-signed certificate for its Ed25519 identity
/// key, verified by the key's fingerprint with no certificate authority; ALPN `sharesync/1`.
public enum TransportSecurity {
    /// Whether a client speaks TLS (the default) or, for debugging on loopback only, cleartext.
    public enum Mode: Hashable, Sendable {
        /// TLS 1.3, mutual, ALPN `sharesync/1`.
        case tls
        /// No TLS. Only to a loopback host (`127.0.0.0/8`, `::1`, `localhost`); the server must allow it.
        case cleartextOnLoopback
    }

    /// The ALPN protocol name both sides require.
    public static let applicationProtocol = "sharesync/1"
    /// The first byte of every TLS connection (a TLS record of content type handshake).
    public static let tlsRecordFirstByte: UInt8 = 0x16
    /// How long a closing TLS connection waits for the peer's `close_notify`.
    public static let shutdownTimeout = TimeAmount.seconds(2)

    /// Whether a host names this machine's loopback interface: an IPv4 address in `127.0.0.0/8`,
    /// `::1` (or `::ffff:127.x.y.z`), or `localhost`. Other names are not resolved and count as remote.
    public static func isLoopback(host: String) -> Bool {
        var name = host.lowercased()
        if name.hasPrefix("["), name.hasSuffix("]") { name = String(name.dropFirst().dropLast()) }
        // `localhost` itself only: a `*.localhost` name may be resolved through DNS to any host.
        if name == "localhost" { return true }
        guard let address = try? SocketAddress(ipAddress: name, port: 0) else { return false }
        switch address {
        case .v4(let v4):
            return withUnsafeBytes(of: v4.address.sin_addr) { $0.first == 127 }
        case .v6(let v6):
            let bytes = withUnsafeBytes(of: v6.address.sin6_addr) { Array($0) }
            if bytes == Array(repeating: 0, count: 15) + [1] { return true }
            return bytes[0..<10].allSatisfy { $0 == 0 } && bytes[10] == 0xFF && bytes[11] == 0xFF && bytes[12] == 127
        default:
            return false
        }
    }

    /// The server side's TLS context: this node's certificate, a client certificate required,
    /// TLS 1.3 only, Ed25519 signatures, ALPN `sharesync/1`. Peers are checked per connection by
    /// ``ServerTransportSelector`` (``peerPublicKey(_:)``), never against a CA.
    public static func serverContext(_ credentials: NodeTLSCredentials) throws(ShareSyncError) -> NIOSSLContext {
        var configuration = TLSConfiguration.makeServerConfiguration(
            certificateChain: [.certificate(credentials.certificate)], privateKey: .privateKey(credentials.privateKey))
        return try context(configuration: &configuration)
    }

    /// The client side's TLS context: this node's certificate, TLS 1.3 only, Ed25519 signatures, ALPN
    /// `sharesync/1`. The owner's key is checked per connection (``TLSPeerHandler``).
    public static func clientContext(_ credentials: NodeTLSCredentials) throws(ShareSyncError) -> NIOSSLContext {
        var configuration = TLSConfiguration.makeClientConfiguration()
        configuration.certificateChain = [.certificate(credentials.certificate)]
        configuration.privateKey = .privateKey(credentials.privateKey)
        return try context(configuration: &configuration)
    }

    private static func context(configuration: inout TLSConfiguration) throws(ShareSyncError) -> NIOSSLContext {
        configuration.minimumTLSVersion = .tlsv13
        configuration.maximumTLSVersion = .tlsv13
        configuration.signingSignatureAlgorithms = [.ed25519]
        configuration.verifySignatureAlgorithms = [.ed25519]
        // Verification on (the peer must present a certificate), but by our callback: no CA, no host names.
        configuration.certificateVerification = .noHostnameVerification
        configuration.trustRoots = .certificates([])
        configuration.applicationProtocols = [applicationProtocol]
        configuration.shutdownTimeout = shutdownTimeout
        do {
            return try NIOSSLContext(configuration: configuration)
        } catch {
            throw ShareSyncError(.internalError, "cannot set up TLS: \(error)", rule: .tlsConfiguration)
        }
    }

    /// Why a peer's certificate chain is not acceptable.
    public struct CertificateProblem: Error, Hashable, Sendable, CustomStringConvertible {
        /// What is wrong, for a person.
        public var description: String
    }

    /// The Ed25519 key (32 raw bytes) of a peer's certificate chain, if the chain is one well-formed
    /// self-signed certificate: X.509, Ed25519 key, Ed25519 signature, issuer = subject, and the
    /// signature verifies with the certificate's own key. Names, dates and extensions are not checked:
    /// the key is what a peer is (its fingerprint is compared by the caller).
    public static func peerPublicKey(_ chain: [NIOSSLCertificate]) -> Result<Data, CertificateProblem> {
        guard chain.count == 1, let leaf = chain.first else {
            return .failure(CertificateProblem(description: "expected one self-signed certificate, got a chain of \(chain.count)"))
        }
        return peerPublicKey(leaf)
    }

    /// The Ed25519 key (32 raw bytes) of one well-formed self-signed certificate (see ``peerPublicKey(_:)-([NIOSSLCertificate])``).
    public static func peerPublicKey(_ certificate: NIOSSLCertificate) -> Result<Data, CertificateProblem> {
        let parsed: Certificate
        do {
            parsed = try Certificate(derEncoded: try certificate.toDERBytes())
        } catch {
            return .failure(CertificateProblem(description: "not a valid X.509 certificate: \(error)"))
        }
        guard let key = Curve25519.Signing.PublicKey(parsed.publicKey) else {
            return .failure(CertificateProblem(description: "the certificate's key is not Ed25519"))
        }
        guard parsed.signatureAlgorithm == .ed25519 else {
            return .failure(CertificateProblem(description: "the certificate is not signed with Ed25519"))
        }
        guard parsed.issuer == parsed.subject, parsed.publicKey.isValidSignature(parsed.signature, for: parsed) else {
            return .failure(CertificateProblem(description: "the certificate is not self-signed by its own key"))
        }
        return .success(key.rawRepresentation)
    }
}
