import Crypto
import Foundation
import ShareSyncCore

/// A node's identity: an Ed25519 (Curve25519 signing) key pair. Its public key names the node on the
/// network: the ``fingerprint`` goes into share URLs and the ``userRecordName`` (`_` + fingerprint)
/// is who the node is to the owners it talks to. See `protocol.md`, "Identities and keys".
public struct NodeIdentity: Sendable {
    /// The name of the key file inside a node's home folder.
    public static let keyFileName = "identity.key"

    private let rawPrivateKey: Data

    /// Creates an identity from the 32 raw bytes of an Ed25519 private key.
    public init(rawPrivateKey: Data) throws(ShareSyncError) {
        do {
            _ = try Curve25519.Signing.PrivateKey(rawRepresentation: rawPrivateKey)
        } catch {
            throw ShareSyncError(.invalidArguments, "not an Ed25519 private key: \(error)", rule: .identityKey)
        }
        self.rawPrivateKey = rawPrivateKey
    }

    /// A new random identity.
    public static func generate() -> NodeIdentity {
        try! NodeIdentity(rawPrivateKey: Curve25519.Signing.PrivateKey().rawRepresentation)
    }

    /// The signing key (also the key of the node's TLS certificate, see `NodeIdentity+TLS.swift`).
    var privateKey: Curve25519.Signing.PrivateKey {
        try! Curve25519.Signing.PrivateKey(rawRepresentation: rawPrivateKey)
    }

    /// The 32 raw bytes of the public key.
    public var rawPublicKey: Data { privateKey.publicKey.rawRepresentation }
    /// The public key as it travels: standard base64 of its 32 raw bytes.
    public var publicKeyBase64: String { rawPublicKey.base64EncodedString() }
    /// Lowercase hex of the first 16 bytes of SHA-256 of the raw public key.
    public var fingerprint: String { Fingerprint.of(rawPublicKey: rawPublicKey) }
    /// `_` followed by the fingerprint: who this node is to the owners it connects to.
    public var userRecordName: String { "_" + fingerprint }

    /// Signs bytes; the signature in standard base64 (64 raw bytes).
    public func signBase64(_ data: Data) -> String {
        (try! privateKey.signature(for: data)).base64EncodedString()
    }

    // MARK: Key files

    /// Reads the key file `identity.key` of a node home folder, or creates the folder (mode 0700)
    /// and a new key (mode 0600) if there is none.
    public static func loadOrCreate(home: String) throws(ShareSyncError) -> NodeIdentity {
        let path = (home as NSString).appendingPathComponent(keyFileName)
        if FileManager.default.fileExists(atPath: path) { return try load(path: path) }
        let identity = generate()
        try identity.save(home: home)
        return identity
    }

    /// Reads a key file: the standard base64 of the 32 raw private-key bytes, and a newline.
    public static func load(path: String) throws(ShareSyncError) -> NodeIdentity {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
            throw ShareSyncError(.invalidArguments, "cannot read the key file \(path)", rule: .identityKey)
        }
        guard let raw = Data(base64Encoded: text.trimmingCharacters(in: .whitespacesAndNewlines)), raw.count == 32 else {
            throw ShareSyncError(.invalidArguments, "the key file \(path) does not hold a base64 Ed25519 key", rule: .identityKey)
        }
        return try NodeIdentity(rawPrivateKey: raw)
    }

    /// Creates the node home folder `home` (and its parents) with mode 0700, or sets that mode on the
    /// folder that is there.
    package static func createHome(_ home: String) throws(ShareSyncError) {
        let fm = FileManager.default
        do {
            if !fm.fileExists(atPath: home) {
                try fm.createDirectory(atPath: home, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            }
            try fm.setAttributes([.posixPermissions: 0o700], ofItemAtPath: home)
        } catch {
            throw ShareSyncError(.internalError, "cannot create the node home \(home): \(error)", rule: .identityKey)
        }
    }

    /// Writes the key to `identity.key` in `home`, creating the folder with mode 0700; the file gets
    /// mode 0600. The key replaces any earlier one at once, and is on the disk when this returns
    /// (``DurableFile``): a crash or a power loss leaves the old key or the new one, never no key.
    public func save(home: String) throws(ShareSyncError) {
        try Self.createHome(home)
        let path = (home as NSString).appendingPathComponent(Self.keyFileName)
        do {
            try DurableFile.write(Data((rawPrivateKey.base64EncodedString() + "\n").utf8), to: path)
        } catch {
            throw ShareSyncError(.internalError, "cannot write the key file in \(home): \(error.message)", rule: .identityKey)
        }
    }
}

/// Key fingerprints (`protocol.md`, "Identities and keys").
public enum Fingerprint {
    /// Lowercase hex of the first 16 bytes of SHA-256 of the raw public key.
    public static func of(rawPublicKey: Data) -> String {
        SHA256.hash(data: rawPublicKey).prefix(16).map { byte in
            let hex = String(byte, radix: 16)
            return byte < 16 ? "0" + hex : hex
        }.joined()
    }

    /// The fingerprint of a base64 public key, or nil if it is not 32 bytes of base64.
    public static func of(publicKeyBase64: String) -> String? {
        guard let raw = Data(base64Encoded: publicKeyBase64), raw.count == 32 else { return nil }
        return of(rawPublicKey: raw)
    }
}

/// The transcripts both sides sign during authentication (`protocol.md`, "Authentication"), nonces and
/// signature checks. Nonces and keys enter the transcripts as the base64 strings sent on the wire.
public enum AuthTranscript {
    /// What the server signs: `"sharesync-server-v1\n" + N_c + "\n" + N_s + "\n" + K_c`.
    public static func server(clientNonce: String, serverNonce: String, clientKey: String) -> Data {
        Data("sharesync-server-v1\n\(clientNonce)\n\(serverNonce)\n\(clientKey)".utf8)
    }

    /// What the client signs: `"sharesync-client-v1\n" + N_s + "\n" + N_c + "\n" + K_s`.
    public static func client(serverNonce: String, clientNonce: String, serverKey: String) -> Data {
        Data("sharesync-client-v1\n\(serverNonce)\n\(clientNonce)\n\(serverKey)".utf8)
    }

    /// 32 fresh random bytes in standard base64.
    public static func makeNonce() -> String {
        var rng = SystemRandomNumberGenerator()
        return Data((0..<32).map { _ in UInt8.random(in: 0...255, using: &rng) }).base64EncodedString()
    }

    /// Whether a string is the standard base64 of exactly 32 bytes (a nonce or a public key).
    public static func isBase64Of32Bytes(_ string: String) -> Bool {
        Data(base64Encoded: string)?.count == 32
    }

    /// Whether `signature` (base64 of 64 bytes) is `publicKey`'s (base64 of 32 bytes) signature of `data`.
    public static func verify(signature: String, publicKey: String, data: Data) -> Bool {
        guard let raw = Data(base64Encoded: publicKey), raw.count == 32,
            let key = try? Curve25519.Signing.PublicKey(rawRepresentation: raw),
            let sig = Data(base64Encoded: signature), sig.count == 64
        else { return false }
        return key.isValidSignature(sig, for: data)
    }
}
