import Crypto
import Foundation
import NIOSSL
import ShareSyncCore
import X509

/// A node's TLS credentials: a self-signed X.509 certificate for its Ed25519 identity key, and
/// that key, ready for swift-nio-ssl and as PEM text (for other TLS stacks, e.g. Python's `ssl`).
///
/// The certificate's contents are specified in `protocol.md`, "Transport security (TLS)". Peers do
/// not verify the certificate's names, dates or issuer, only its key (by fingerprint), so a node
/// makes a fresh certificate whenever it needs one (each server start, each client connection).
public struct NodeTLSCredentials: Sendable {
    /// The certificate, parsed by swift-nio-ssl.
    public let certificate: NIOSSLCertificate
    /// The private key, parsed by swift-nio-ssl.
    public let privateKey: NIOSSLPrivateKey
    /// The certificate in PEM (`-----BEGIN CERTIFICATE-----`).
    public let certificatePEM: String
    /// The private key in PEM: PKCS #8 (`-----BEGIN PRIVATE KEY-----`), RFC 8410.
    public let privateKeyPEM: String
}

extension NodeIdentity {
    /// How long before "now" a certificate's validity starts (clock skew between peers).
    public static let certificateBackdating: TimeInterval = 3600
    /// How long after "now" a certificate's validity ends: 10 years (365-day years).
    public static let certificateLifetime: TimeInterval = 10 * 365 * 86_400

    /// A fresh self-signed certificate for this identity's key (see ``NodeTLSCredentials``).
    ///
    /// X.509 v3; random 20-byte serial; subject and issuer `CN=_<fingerprint>` (the user record name);
    /// validity from `now` - 1 hour to `now` + 10 years; key and signature Ed25519 (RFC 8410);
    /// extensions: basic constraints `CA:FALSE` (critical), key usage `digitalSignature` (critical),
    /// extended key usage `serverAuth, clientAuth`.
    public func tlsCredentials(now: Date = Date()) throws(ShareSyncError) -> NodeTLSCredentials {
        do {
            let key = Certificate.PrivateKey(privateKey)
            let name = try DistinguishedName { CommonName(userRecordName) }
            let extensions = try Certificate.Extensions {
                Critical(BasicConstraints.notCertificateAuthority)
                Critical(KeyUsage(digitalSignature: true))
                try ExtendedKeyUsage([.serverAuth, .clientAuth])
            }
            let certificate = try Certificate(
                version: .v3, serialNumber: Certificate.SerialNumber(), publicKey: key.publicKey,
                notValidBefore: now - Self.certificateBackdating, notValidAfter: now + Self.certificateLifetime,
                issuer: name, subject: name, signatureAlgorithm: .ed25519, extensions: extensions, issuerPrivateKey: key)
            let certificatePEM = try certificate.serializeAsPEM().pemString
            let keyPEM = try key.serializeAsPEM().pemString
            return NodeTLSCredentials(
                certificate: try NIOSSLCertificate(bytes: Array(certificatePEM.utf8), format: .pem),
                privateKey: try NIOSSLPrivateKey(bytes: Array(keyPEM.utf8), format: .pem),
                certificatePEM: certificatePEM, privateKeyPEM: keyPEM)
        } catch {
            throw ShareSyncError(.internalError, "cannot make the TLS certificate of \(userRecordName): \(error)", rule: .tlsCertificate)
        }
    }
}
