import Foundation
import NIOCore
import NIOPosix
import NIOSSL
import ShareSyncCore
import ShareSyncNode
import ShareSyncStore
import ShareSyncTestSupport
import ShareSyncWire
import Testing

/// Transport security (`protocol.md`, "Transport security (TLS)"), through the real server and client
/// on loopback.
@Suite("Transport security (TLS)")
struct TLSTests {
    @Test("records do not cross the network in cleartext: a relay between participant and owner sees none of them")
    func recordsAreEncrypted() async throws {
        let owner = try await TestOwner.start(OwnerServer.Configuration(allowCleartext: true))
        let b = NodeIdentity.generate()
        let (url, _) = try owner.shareTopic(invite: [(b, .readWrite)])
        let secret = "secret-" + UUID().uuidString
        try owner.saveNote("note-1", title: secret)
        // `plain` frames: without TLS every value would cross exactly as it is.
        let plain = ClientConfiguration(encodings: [.plain])

        func session(_ security: TransportSecurity.Mode) async throws -> TCPRelay {
            let relay = try await TCPRelay.start(to: owner.server.port)
            let connection = try await OwnerConnection.connect(
                host: "127.0.0.1", port: relay.port, identity: b, expectedOwnerFingerprint: owner.identity.fingerprint,
                configuration: plain, security: security)
            try await connection.acceptShare(url: url)
            let changes = try await connection.fetchZoneChanges(zoneName: "Topics", since: nil)
            #expect(changes.changedRecords.contains { $0["title"] == .string(secret) })
            await connection.close()
            await relay.stop()
            return relay
        }

        let tls = try await session(.tls)
        #expect(tls.captured.withLock { $0.count } > 1000)
        for text in [secret, "Groceries", "acceptShare", "fetchZoneChanges", "SHARESYNC", b.publicKeyBase64, owner.identity.userRecordName] {
            #expect(!tls.sawBytes(of: text), "\(text) crossed the relay in cleartext")
        }
        // Control: the same session in the loopback cleartext mode shows them, so the relay would have caught a leak.
        let clear = try await session(.cleartextOnLoopback)
        #expect(clear.sawBytes(of: secret))
        #expect(clear.sawBytes(of: "Groceries"))
        try await owner.stop()
    }

    @Test("a client presenting no certificate is refused before the handshake line is answered")
    func clientWithoutCertificate() async throws {
        let owner = try await TestOwner.start()
        let client = try await RawClient.connect(port: owner.server.port, .tlsWithoutCertificate)
        try? await client.send("SHARESYNC versions=1 encodings=plain")  // may fail: the server may have closed already
        #expect(try await client.line() == nil, "the connection should close without an answer")
        await client.close()
        #expect(try await OwnerConnection.connect(url: try owner.shareTopic().url, identity: .generate()).isActive)
        try await owner.stop()
    }

    @Test("a client whose hello claims a key other than its certificate's is refused: tlsKeyMismatch")
    func helloKeyMustBeTheCertificateKey() async throws {
        let owner = try await TestOwner.start()
        let certified = NodeIdentity.generate()
        let claimed = NodeIdentity.generate()
        let client = try await RawClient.plain(port: owner.server.port, .tls(certified))
        try await client.sendJSON(["op": "hello", "publicKey": claimed.publicKeyBase64, "nonce": AuthTranscript.makeNonce()])
        let answer = try await client.json()
        #expect(errorCode(answer) == "notAuthenticated")
        #expect(errorRule(answer) == "tlsKeyMismatch")
        #expect(try await client.closes())
        await client.close()
        try await owner.stop()
    }

    @Test("an owner whose certificate key is not the URL's fingerprint is refused with ownerFingerprintMismatch")
    func ownerCertificateMustMatchTheURL() async throws {
        let owner = try await TestOwner.start()
        let (url, _) = try owner.shareTopic(publicPermission: .readOnly)
        let parsed = try #require(ShareURL(string: url))
        let other = NodeIdentity.generate().fingerprint
        let impostorURL = ShareURL(host: parsed.host, port: parsed.port, token: parsed.token, ownerFingerprint: other).absoluteString
        let error = await expectShareSyncError { _ = try await OwnerConnection.connect(url: impostorURL, identity: .generate()) }
        #expect(error?.code == .notAuthenticated)
        #expect(error?.rule == .ownerFingerprintMismatch)
        #expect(error?.message.contains("TLS certificate has key \(owner.identity.fingerprint)") == true, "\(error?.message ?? "")")
        #expect(error?.message.contains(other) == true)
        try await owner.stop()
    }

    @Test("an owner whose challenge proves a key other than its TLS certificate's is refused: tlsKeyMismatch")
    func ownerChallengeMustProveTheCertificateKey() async throws {
        let certified = NodeIdentity.generate()
        let fake = try await FakeOwner.start(certificate: certified, provingWith: NodeIdentity.generate())
        let error = await expectShareSyncError {
            _ = try await OwnerConnection.connect(
                host: "127.0.0.1", port: fake.port, identity: .generate(), expectedOwnerFingerprint: certified.fingerprint)
        }
        #expect(error?.code == .notAuthenticated)
        #expect(error?.rule == .tlsKeyMismatch)
        await fake.stop()
    }

    @Test("a TLS handshake that fails on the client's side is a named notAuthenticated error, not a bare networkFailure")
    func clientSideHandshakeFailures() async throws {
        // A peer that does not speak TLS (it answers like a cleartext-only node would).
        let cleartextOnly = try await TinyServer.start { channel in
            try channel.pipeline.syncOperations.addHandler(TinyServer.ReplyAndClose(line: "SHARESYNC-ERROR malformedHandshake not a hello"))
        }
        let notTLS = await expectShareSyncError {
            _ = try await OwnerConnection.connect(host: "127.0.0.1", port: cleartextOnly.port, identity: .generate(), expectedOwnerFingerprint: NodeIdentity.generate().fingerprint)
        }
        #expect(notTLS?.code == .notAuthenticated)
        #expect(notTLS?.rule == .tlsHandshakeFailed)
        await cleartextOnly.stop()

        // A TLS 1.3 server with the owner's certificate that does not agree to ALPN sharesync/1.
        let owner = NodeIdentity.generate()
        let credentials = try owner.tlsCredentials()
        var configuration = TLSConfiguration.makeServerConfiguration(
            certificateChain: [.certificate(credentials.certificate)], privateKey: .privateKey(credentials.privateKey))
        configuration.minimumTLSVersion = .tlsv13
        configuration.signingSignatureAlgorithms = [.ed25519]
        configuration.verifySignatureAlgorithms = [.ed25519]
        configuration.applicationProtocols = ["other/1"]
        let context = try NIOSSLContext(configuration: configuration)
        let otherProtocol = try await TinyServer.start { channel in
            try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: context))
        }
        let alpn = await expectShareSyncError {
            _ = try await OwnerConnection.connect(
                host: "127.0.0.1", port: otherProtocol.port, identity: .generate(), expectedOwnerFingerprint: owner.fingerprint)
        }
        #expect(alpn?.code == .notAuthenticated)
        #expect(alpn?.rule == .alpnMismatch)
        await otherProtocol.stop()
    }

    @Test("a cleartext connection to a TLS-only server gets SHARESYNC-ERROR tlsRequired, then the close")
    func cleartextToTLSOnlyServer() async throws {
        let owner = try await TestOwner.start()
        let client = try await RawClient.connect(port: owner.server.port, .cleartext)
        try await client.send("SHARESYNC versions=1 encodings=plain")
        let line = try await client.line()
        #expect(line?.hasPrefix("SHARESYNC-ERROR tlsRequired ") == true, "\(line ?? "closed")")
        #expect(line?.contains("TLS 1.3") == true)
        #expect(try await client.closes())
        await client.close()

        let error = await expectShareSyncError {
            _ = try await OwnerConnection.connect(url: try owner.shareTopic().url, identity: .generate(), security: .cleartextOnLoopback)
        }
        #expect(error?.code == .notAuthenticated)
        #expect(error?.rule == .tlsRequired)
        try await owner.stop()
    }

    @Test("cleartext is refused off loopback: a server will not start, a client will not connect")
    func cleartextOnlyOnLoopback() async throws {
        let db = try PrivateDatabase(inMemoryOwnerName: "_owner")
        for host in ["0.0.0.0", "::", "192.0.2.1"] {
            let error = await expectShareSyncError {
                let server = try await OwnerServer.start(
                    database: db, identity: .generate(), configuration: OwnerServer.Configuration(host: host, allowCleartext: true))
                try await server.shutdown()
            }
            #expect(error?.code == .invalidArguments)
            #expect(error?.rule == .cleartextNotLoopback)
            #expect(error?.message.contains(host) == true)
        }
        let client = await expectShareSyncError {
            _ = try await OwnerConnection.connect(
                host: "192.0.2.1", port: 7420, identity: .generate(), expectedOwnerFingerprint: "00", security: .cleartextOnLoopback)
        }
        #expect(client?.rule == .cleartextNotLoopback)
        for host in ["127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost", "::ffff:127.0.0.1"] {
            #expect(TransportSecurity.isLoopback(host: host), "\(host)")
        }
        for host in ["0.0.0.0", "::", "10.0.0.1", "192.0.2.1", "example.org", "128.0.0.1", "::2"] {
            #expect(!TransportSecurity.isLoopback(host: host), "\(host)")
        }
    }

    @Test("a server that allows cleartext on loopback serves TLS and cleartext clients alike")
    func cleartextAllowedServesBoth() async throws {
        let owner = try await TestOwner.start(OwnerServer.Configuration(allowCleartext: true))
        let (url, _) = try owner.shareTopic(publicPermission: .readOnly)
        for security in [TransportSecurity.Mode.tls, .cleartextOnLoopback] {
            let connection = try await OwnerConnection.connect(url: url, identity: .generate(), security: security)
            #expect(try await connection.fetchShareMetadata(url: url).share.publicPermission == .readOnly)
            await connection.close()
        }
        try await owner.stop()
    }

    @Test("a TLS client without ALPN sharesync/1 gets SHARESYNC-ERROR alpnMismatch", arguments: [["h2"], []])
    func alpnMismatch(offered: [String]) async throws {
        let owner = try await TestOwner.start()
        let client = try await RawClient.connect(port: owner.server.port, .tls(.generate(), alpn: offered))
        try? await client.send("SHARESYNC versions=1 encodings=plain")  // may fail: the server refuses as soon as TLS is up
        let line = try await client.line()
        #expect(line?.hasPrefix("SHARESYNC-ERROR alpnMismatch ") == true, "\(line ?? "closed")")
        #expect(try await client.closes())
        await client.close()
        try await owner.stop()
    }

    @Test("the handshake timeout covers TLS: silent and stalled peers are closed")
    func handshakeTimeoutCoversTLS() async throws {
        var configuration = OwnerServer.Configuration()
        configuration.transport.limits.handshakeTimeout = .milliseconds(500)
        let owner = try await TestOwner.start(configuration, keepHandshakeTimeout: true)
        let silent = try await RawClient.connect(port: owner.server.port, .cleartext)
        #expect(try await silent.closes(within: 10))
        await silent.close()
        // A TLS record header, then nothing: the TLS handshake never completes.
        let stalled = try await RawClient.connect(port: owner.server.port, .cleartext)
        // (Under a loaded run the 500 ms may already be over and the peer closed: then so much the better.)
        try? await stalled.channel.writeAndFlush(ByteBuffer(bytes: [0x16, 0x03, 0x01]))
        #expect(try await stalled.closes(within: 10))
        await stalled.close()
        // A TLS client that completes TLS but sends no handshake line (told why, if TLS was up in time).
        let quiet = try await RawClient.connect(port: owner.server.port, .tls(.generate()))
        if let line = try await quiet.line() { #expect(line.hasPrefix("SHARESYNC-ERROR handshakeTimeout"), "\(line)") }
        #expect(try await quiet.closes(within: 10))
        await quiet.close()
        try await owner.stop()
    }

    @Test("a node's certificate is self-signed for its Ed25519 identity key")
    func certificate() throws {
        let identity = NodeIdentity.generate()
        let credentials = try identity.tlsCredentials()
        #expect(try TransportSecurity.peerPublicKey(credentials.certificate).get() == identity.rawPublicKey)
        #expect(credentials.certificatePEM.hasPrefix("-----BEGIN CERTIFICATE-----"))
        #expect(credentials.privateKeyPEM.hasPrefix("-----BEGIN PRIVATE KEY-----"))
        let now = Int(Date().timeIntervalSince1970)
        #expect(abs(credentials.certificate.notValidBefore - (now - 3600)) < 60)
        #expect(abs(credentials.certificate.notValidAfter - (now + 10 * 365 * 86_400)) < 60)
        // Another identity's certificate is well-formed too, with its own key.
        let other = try NodeIdentity.generate().tlsCredentials()
        #expect(try TransportSecurity.peerPublicKey([other.certificate]).get() != identity.rawPublicKey)
        #expect((try? TransportSecurity.peerPublicKey([credentials.certificate, other.certificate]).get()) == nil)
    }
}

/// A TLS server whose certificate is one identity's but whose challenge is signed by another key:
/// what a relay would look like that passes TLS with one key and the challenge with another.
struct FakeOwner {
    let channel: any Channel
    let group: MultiThreadedEventLoopGroup
    var port: Int { channel.localAddress?.port ?? 0 }

    static func start(certificate: NodeIdentity, provingWith prover: NodeIdentity) async throws -> FakeOwner {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let tls = try TransportSecurity.serverContext(try certificate.tlsCredentials())
        let channel = try await ServerBootstrap(group: group)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let pipeline = channel.pipeline.syncOperations
                    try TransportSecurity.addServerHandlers(to: pipeline, context: tls, allowCleartext: false)
                    try FrameCodec.addServerHandlers(to: pipeline)
                    try pipeline.addHandler(ChallengeResponder(prover: prover))
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        return FakeOwner(channel: channel, group: group)
    }

    func stop() async {
        try? await channel.close()
        try? await group.shutdownGracefully()
    }

    /// Answers a hello with a valid challenge signed by `prover`.
    final class ChallengeResponder: ChannelInboundHandler, Sendable {
        typealias InboundIn = ByteBuffer
        typealias OutboundOut = ByteBuffer
        let prover: NodeIdentity

        init(prover: NodeIdentity) { self.prover = prover }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            guard let hello = try? MessageCoding.decode(HelloMessage.self, from: Self.unwrapInboundIn(data)) else { return }
            let nonce = AuthTranscript.makeNonce()
            let signature = prover.signBase64(AuthTranscript.server(clientNonce: hello.nonce, serverNonce: nonce, clientKey: hello.publicKey))
            let challenge = ChallengeMessage(publicKey: prover.publicKeyBase64, nonce: nonce, signature: signature)
            guard let payload = try? MessageCoding.encode(challenge, allocator: context.channel.allocator) else { return }
            context.writeAndFlush(Self.wrapOutboundOut(payload), promise: nil)
        }
    }
}

/// A bare TCP server on 127.0.0.1 (port 0) whose connections get the handlers `install` adds.
struct TinyServer {
    let channel: any Channel
    let group: MultiThreadedEventLoopGroup
    var port: Int { channel.localAddress?.port ?? 0 }

    static func start(_ install: @escaping @Sendable (any Channel) throws -> Void) async throws -> TinyServer {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let channel = try await ServerBootstrap(group: group)
            .childChannelInitializer { channel in channel.eventLoop.makeCompletedFuture { try install(channel) } }
            .bind(host: "127.0.0.1", port: 0).get()
        return TinyServer(channel: channel, group: group)
    }

    func stop() async {
        try? await channel.close()
        try? await group.shutdownGracefully()
    }

    /// Answers the first bytes with one line, then closes.
    final class ReplyAndClose: ChannelInboundHandler, Sendable {
        typealias InboundIn = ByteBuffer
        typealias OutboundOut = ByteBuffer
        let line: String

        init(line: String) { self.line = line }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let bound = NIOLoopBound(context, eventLoop: context.eventLoop)
            context.writeAndFlush(Self.wrapOutboundOut(ByteBuffer(string: line + "\n"))).whenComplete { _ in bound.value.close(promise: nil) }
        }
    }
}

@Suite("Python interoperability over TLS")
struct PythonTLSTests {
    static var root: URL {
        var url = URL(fileURLWithPath: #filePath)
        for _ in 0..<3 { url.deleteLastPathComponent() }
        return url
    }

    static let scriptPath = "Examples/python/tls_client.py"

    /// Runs python3 to its end (at most 60 s) on a dispatch thread, so the wait blocks no task thread.
    static func python(_ arguments: [String]) async throws -> ChildProcess.Outcome {
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async {
                continuation.resume(with: Result { try ChildProcess.run("/usr/bin/env", ["python3"] + arguments, timeout: 60) })
            }
        }
    }

    @Test("protocol.md prints the Python TLS client byte for byte as the file the test runs")
    func protocolShowsTheScript() throws {
        let script = try String(contentsOf: Self.root.appendingPathComponent(Self.scriptPath), encoding: .utf8)
        let text = try String(contentsOf: Self.root.appendingPathComponent("protocol.md"), encoding: .utf8)
        let section = try #require(text.range(of: "#### Python client over TLS"))
        let open = try #require(text[section.upperBound...].range(of: "```python\n"))
        let close = try #require(text[open.upperBound...].range(of: "\n```\n"))
        #expect(String(text[open.upperBound..<close.lowerBound]) + "\n" == script)
    }

    @Test("a Python client with only the standard ssl module connects over TLS 1.3 + ALPN, authenticates and accepts a share")
    func pythonClient() async throws {
        let owner = try await TestOwner.start()
        let b = NodeIdentity.generate()
        let (url, _) = try owner.shareTopic(invite: [(b, .readWrite)])
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("tls-python-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let credentials = try b.tlsCredentials()
        let cert = folder.appendingPathComponent("cert.pem").path
        let key = folder.appendingPathComponent("key.pem").path
        try credentials.certificatePEM.write(toFile: cert, atomically: true, encoding: .utf8)
        try credentials.privateKeyPEM.write(toFile: key, atomically: true, encoding: .utf8)

        let script = Self.root.appendingPathComponent(Self.scriptPath).path
        let outcome = try await Self.python([script, cert, key, url])
        #expect(outcome.status == 0, "\(outcome.stderr)")
        let messages = outcome.stdout.split(separator: "\n").compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
        #expect(messages.count == 3, "\(outcome.stdout)")
        #expect(messages.first?["op"] as? String == "challenge")
        #expect(messages.dropFirst().first?["userRecordName"] as? String == b.userRecordName)
        let accepted = try #require(messages.last?["ok"] as? [String: Any], "\(outcome.stdout)")
        #expect(accepted["participantStatus"] as? String == "accepted")

        // Its key is pinned too: the same script refuses an owner that is not the URL's.
        let parsed = try #require(ShareURL(string: url))
        let wrong = ShareURL(host: parsed.host, port: parsed.port, token: parsed.token, ownerFingerprint: NodeIdentity.generate().fingerprint)
        let refused = try await Self.python([script, cert, key, wrong.absoluteString])
        #expect(refused.status != 0)
        #expect(refused.stderr.contains("not the share URL's owner"), "\(refused.stderr)")
        try await owner.stop()
    }
}
