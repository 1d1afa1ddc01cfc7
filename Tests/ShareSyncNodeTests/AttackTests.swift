import Foundation
import NIOCore
import ShareSyncCore
import ShareSyncNode
import ShareSyncStore
import ShareSyncWire
import Testing

@Suite("Attacks and misbehaving peers")
struct AttackTests {
    @Test("a client that claims one key but signs with another is refused and closed")
    func wrongKey() async throws {
        let owner = try await TestOwner.start()
        let claimed = NodeIdentity.generate()
        // Its TLS certificate is for the claimed key; only the signature is wrong.
        let client = try await RawClient.plain(port: owner.server.port, .tls(claimed))
        let (answer, _, _) = try await client.authenticate(claimed, signingWith: NodeIdentity.generate())
        #expect(errorCode(answer) == "notAuthenticated")
        #expect(errorRule(answer) == "badSignature")
        #expect(try await client.closes())
        await client.close()
        try await owner.stop()
    }

    @Test("a signature recorded on one connection is refused on another (cleartext: the fresh challenge; TLS: the certificate key)")
    func replay() async throws {
        // Cleartext allowed (loopback), so the challenge-response is all that stands in the way.
        let owner = try await TestOwner.start(OwnerServer.Configuration(allowCleartext: true))
        let victim = NodeIdentity.generate()
        let nonce = AuthTranscript.makeNonce()
        let first = try await RawClient.plain(port: owner.server.port, .tls(victim))
        let recorded = try await first.authenticate(victim, nonce: nonce)
        #expect(recorded.answer?["op"] as? String == "welcome")
        await first.close()

        // The attacker replays the victim's hello (same key, same nonce) and the recorded signature.
        let attacker = try await RawClient.plain(port: owner.server.port, .cleartext)
        try await attacker.sendJSON(["op": "hello", "publicKey": victim.publicKeyBase64, "nonce": nonce])
        let challenge = try #require(try await attacker.json())
        #expect(challenge["nonce"] as? String != recorded.challenge["nonce"] as? String)
        try await attacker.sendJSON(["op": "authenticate", "signature": recorded.signature])
        let answer = try await attacker.json()
        #expect(errorCode(answer) == "notAuthenticated")
        #expect(errorRule(answer) == "badSignature")
        #expect(try await attacker.closes())
        await attacker.close()

        // Over TLS the attacker cannot even present the victim's hello: its certificate has another key.
        let tlsAttacker = try await RawClient.plain(port: owner.server.port, .tls(NodeIdentity.generate()))
        try await tlsAttacker.sendJSON(["op": "hello", "publicKey": victim.publicKeyBase64, "nonce": nonce])
        let refusal = try await tlsAttacker.json()
        #expect(errorCode(refusal) == "notAuthenticated")
        #expect(errorRule(refusal) == "tlsKeyMismatch")
        #expect(try await tlsAttacker.closes())
        await tlsAttacker.close()
        try await owner.stop()
    }

    @Test("a frame over 64 KiB before welcome is refused before it is decoded, and closed; after welcome large frames pass")
    func largeFrameBeforeWelcome() async throws {
        let owner = try await TestOwner.start()
        let stranger = NodeIdentity.generate()
        let client = try await RawClient.plain(port: owner.server.port, .tls(stranger))
        // 100 KB: before, up to 16 MiB were inflated and parsed for anyone who connects.
        try await client.sendJSON([
            "op": "hello", "publicKey": stranger.publicKeyBase64, "nonce": AuthTranscript.makeNonce(),
            "displayName": String(repeating: "A", count: 100_000),
        ])
        let answer = try await client.json()
        #expect(errorCode(answer) == "limitExceeded")
        #expect(errorRule(answer) == "frameTooLarge")
        #expect(try await client.closes())
        await client.close()
        // Nor is a long line buffered before welcome: 200 KB without a newline is refused at once
        // (the line limit is 16 MiB after welcome).
        let buffering = NodeIdentity.generate()
        let streamer = try await RawClient.plain(port: owner.server.port, .tls(buffering))
        try await streamer.channel.writeAndFlush(streamer.channel.allocator.buffer(string: String(repeating: "A", count: 200_000)))
        let cut = try await streamer.json()
        #expect(errorRule(cut) == "lineTooLong", "\(String(describing: cut))")
        #expect(try await streamer.closes())
        await streamer.close()
        // Authenticated, a 100 KB frame is read (here a ping with padding, answered).
        let member = NodeIdentity.generate()
        let other = try await RawClient.plain(port: owner.server.port, .tls(member))
        #expect(try await other.authenticate(member).answer?["op"] as? String == "welcome")
        try await other.sendJSON(["id": 5, "op": "ping", "padding": String(repeating: "A", count: 100_000)])
        #expect(try await other.json()?["id"] as? Int == 5)
        await other.close()
        try await owner.stop()
    }

    @Test("before welcome, a small compressed frame that inflates past 64 KiB is refused as too large, and closed")
    func compressedLargeFrameBeforeWelcome() async throws {
        let owner = try await TestOwner.start()
        let stranger = NodeIdentity.generate()
        let client = try await RawClient.connect(port: owner.server.port, .tls(stranger))
        // deflate-base64: the deflate path, in text lines the raw client reads.
        try await client.send("SHARESYNC versions=1 encodings=deflate-base64")
        #expect(try await client.line() == "SHARESYNC version=1 encoding=deflate-base64")
        let hello = try JSONSerialization.data(withJSONObject: [
            "op": "hello", "publicKey": stranger.publicKeyBase64, "nonce": AuthTranscript.makeNonce(),
            "displayName": String(repeating: "A", count: 100_000),
        ])
        let encoder = try FrameEncoder(encoding: .deflateBase64)
        let line = try encoder.encode(ByteBuffer(bytes: hello))
        // 100 KB of payload in under 1 KB on the wire: only the inflated size can be refused.
        #expect(line.readableBytes < 1_000)
        try await client.channel.writeAndFlush(line)
        let decoder = try FrameDecoder(encoding: .deflateBase64)
        let answerLine = try #require(try await client.line())
        let payload = try decoder.decode(line: ByteBuffer(string: answerLine))
        let answer = try JSONSerialization.jsonObject(with: Data(payload.readableBytesView)) as? [String: Any]
        #expect(errorCode(answer) == "limitExceeded")
        #expect(errorRule(answer) == "frameTooLarge")
        #expect(try await client.closes())
        await client.close()
        try await owner.stop()
    }

    @Test("a hello with a name over 256 bytes is refused and closed; one of 256 is welcome")
    func oversizedHelloName() async throws {
        let owner = try await TestOwner.start()
        // A name of 10 KB: kept for the connection's life, and copied into share records, before.
        let stranger = NodeIdentity.generate()
        let client = try await RawClient.plain(port: owner.server.port, .tls(stranger))
        try await client.sendJSON([
            "op": "hello", "publicKey": stranger.publicKeyBase64, "nonce": AuthTranscript.makeNonce(),
            "displayName": String(repeating: "A", count: 10_000),
        ])
        let answer = try await client.json()
        #expect(errorCode(answer) == "notAuthenticated")
        #expect(errorRule(answer) == "malformedHello")
        #expect((answer?["error"] as? [String: Any])?["message"] as? String == "the hello's displayName is longer than 256 bytes")
        #expect(try await client.closes())
        await client.close()
        for (field, bytes) in [("emailAddress", 257), ("phoneNumber", 257), ("displayName", 256)] {
            let key = NodeIdentity.generate()
            let other = try await RawClient.plain(port: owner.server.port, .tls(key))
            try await other.sendJSON([
                "op": "hello", "publicKey": key.publicKeyBase64, "nonce": AuthTranscript.makeNonce(),
                field: String(repeating: "é", count: bytes / 2) + (bytes % 2 == 1 ? "a" : ""),
            ])
            let reply = try await other.json()
            if bytes > 256 {
                #expect(errorRule(reply) == "malformedHello", "\(field)")
            } else {
                #expect(reply?["op"] as? String == "challenge", "\(field): \(String(describing: reply))")
            }
            await other.close()
        }
        // This node's own client cuts a longer name to the limit (a home named before it existed): it
        // is welcome, and the owner sees the first 256 bytes of whole characters.
        let (url, _) = try owner.shareTopic(publicPermission: .readOnly)
        let longName = String(repeating: "é", count: 300)
        let member = NodeIdentity.generate()
        let connection = try await OwnerConnection.connect(url: url, identity: member, displayName: longName)
        _ = try await connection.acceptShare(url: url)
        await connection.close()
        #expect(HelloMessage.withinFieldLimit(longName) == String(repeating: "é", count: 128))
        try await owner.stop()
    }

    @Test("anything but hello and authenticate before welcome is notAuthenticated")
    func requestBeforeAuthentication() async throws {
        let owner = try await TestOwner.start()
        let client = try await RawClient.plain(port: owner.server.port, .tls(NodeIdentity.generate()))
        try await client.sendJSON(["id": 1, "op": "fetchDatabaseChanges"])
        let answer = try await client.json()
        #expect(errorCode(answer) == "notAuthenticated")
        #expect(try await client.closes())
        await client.close()
        try await owner.stop()
    }

    @Test("a forged URL token is participantMayNeedVerification")
    func forgedToken() async throws {
        let owner = try await TestOwner.start()
        let b = NodeIdentity.generate()
        let (url, _) = try owner.shareTopic(invite: [(b, .readWrite)])
        let parsed = try #require(ShareURL(string: url))
        let forged = ShareURL(host: parsed.host, port: parsed.port, token: "forged-token", ownerFingerprint: parsed.ownerFingerprint)
            .absoluteString
        let connection = try await OwnerConnection.connect(url: forged, identity: b)
        let error = await expectShareSyncError { _ = try await connection.fetchShareMetadata(url: forged) }
        #expect(error?.code == .participantMayNeedVerification)
        let accept = await expectShareSyncError { try await connection.acceptShare(url: forged) }
        #expect(accept?.code == .participantMayNeedVerification)
        await connection.close()
        try await owner.stop()
    }

    @Test("an uninvited identity cannot see or accept a private share")
    func uninvited() async throws {
        let owner = try await TestOwner.start()
        let (url, _) = try owner.shareTopic(invite: [(NodeIdentity.generate(), .readWrite)])
        let stranger = try await OwnerConnection.connect(url: url, identity: NodeIdentity.generate())
        let metadata = await expectShareSyncError { _ = try await stranger.fetchShareMetadata(url: url) }
        #expect(metadata?.code == .participantMayNeedVerification)
        let accept = await expectShareSyncError { try await stranger.acceptShare(url: url) }
        #expect(accept?.code == .participantMayNeedVerification)
        #expect(try await stranger.fetchDatabaseChanges(since: nil).changedZoneIDs.isEmpty)
        let read = try await stranger.fetchRecords(zoneName: "Topics", recordNames: ["topic"])
        #expect(read.values.allSatisfy { if case .failure(let e) = $0 { e.code == .unknownItem } else { false } })
        await stranger.close()
        try await owner.stop()
    }

    @Test("a client refuses an owner whose key does not match the URL's fingerprint")
    func wrongOwnerFingerprint() async throws {
        let owner = try await TestOwner.start()
        let (url, _) = try owner.shareTopic(publicPermission: .readOnly)
        let parsed = try #require(ShareURL(string: url))
        let impostorURL = ShareURL(
            host: parsed.host, port: parsed.port, token: parsed.token, ownerFingerprint: NodeIdentity.generate().fingerprint
        ).absoluteString
        let error = await expectShareSyncError { _ = try await OwnerConnection.connect(url: impostorURL, identity: NodeIdentity.generate()) }
        #expect(error?.code == .notAuthenticated)
        #expect(error?.rule == .ownerFingerprintMismatch)
        try await owner.stop()
    }

    @Test("garbage frames get an error frame and a close; another client keeps working")
    func garbage() async throws {
        var configuration = OwnerServer.Configuration()
        configuration.transport.limits.maximumLineLength = 4096
        let owner = try await TestOwner.start(configuration)
        let b = NodeIdentity.generate()
        let (url, _) = try owner.shareTopic(invite: [(b, .readWrite)])
        let good = try await OwnerConnection.connect(url: url, identity: b)
        try await good.acceptShare(url: url)

        // Malformed requests are answered (with the id when there is one) and the connection stays.
        let sloppyIdentity = NodeIdentity.generate()
        let sloppy = try await RawClient.plain(port: owner.server.port, .tls(sloppyIdentity))
        #expect(try await sloppy.authenticate(sloppyIdentity).answer?["op"] as? String == "welcome")
        try await sloppy.send("this is not json")
        let notJSON = try await sloppy.json()
        #expect(notJSON?["id"] is NSNull)
        #expect(errorRule(notJSON) == "malformedRequest")
        try await sloppy.sendJSON(["id": 5, "op": "noSuchOp"])
        let unknownOp = try await sloppy.json()
        #expect(unknownOp?["id"] as? Int == 5)
        #expect(errorCode(unknownOp) == "invalidArguments")
        try await sloppy.sendJSON(["id": 6, "op": "fetchDatabaseChanges"])
        #expect(try await sloppy.json()?["ok"] != nil)

        // A line over the limit is a frame error: an error frame naming the rule, then the close.
        try await sloppy.send(String(repeating: "x", count: 10_000))
        let tooLong = try await sloppy.json()
        #expect(errorRule(tooLong) == "lineTooLong")
        #expect(errorCode(tooLong) == "limitExceeded")
        #expect(try await sloppy.closes())
        await sloppy.close()

        // Bad deflate data: the connection closes.
        let deflater = try await RawClient.connect(port: owner.server.port, .tls(NodeIdentity.generate()))
        try await deflater.send("SHARESYNC versions=1 encodings=deflate")
        #expect(try await deflater.line() == "SHARESYNC version=1 encoding=deflate")
        try await deflater.send("\u{1B}\u{7}garbage")
        #expect(try await deflater.closes())
        await deflater.close()

        // A broken handshake gets the SHARESYNC-ERROR line.
        let rude = try await RawClient.connect(port: owner.server.port, .tls(NodeIdentity.generate()))
        try await rude.send("HELLO THERE")
        let refusal = try await rude.line()
        #expect(refusal?.hasPrefix("SHARESYNC-ERROR malformedHandshake") == true, "\(refusal ?? "closed")")
        #expect(try await rude.closes())
        await rude.close()

        #expect(try await good.fetchZoneChanges(zoneName: "Topics", since: nil).changedRecords.count == 2)
        await good.close()
        try await owner.stop()
    }

    @Test("too many requests in flight are requestRateLimited; too many connections per identity are refused")
    func limits() async throws {
        var configuration = OwnerServer.Configuration()
        configuration.maximumRequestsInFlight = 1
        configuration.maximumConnectionsPerIdentity = 2
        let owner = try await TestOwner.start(configuration)
        let identity = NodeIdentity.generate()
        let client = try await RawClient.plain(port: owner.server.port, .tls(identity))
        try await client.authenticate(identity)
        let burst = (1...20).map { #"{"id":\#($0),"op":"fetchDatabaseChanges"}"# }.joined(separator: "\n")
        try await client.send(burst)
        var codes: [String] = []
        for _ in 1...20 {
            let answer = try await client.json()
            codes.append(errorCode(answer) ?? "ok")
        }
        #expect(codes.contains("ok"))
        #expect(codes.contains("requestRateLimited"))

        let second = try await RawClient.plain(port: owner.server.port, .tls(identity))
        #expect(try await second.authenticate(identity).answer?["op"] as? String == "welcome")
        let third = try await RawClient.plain(port: owner.server.port, .tls(identity))
        let refused = try await third.authenticate(identity).answer
        #expect(errorCode(refused) == "requestRateLimited")
        #expect(try await third.closes())
        // Closing one makes room again.
        await second.close()
        try await Task.sleep(for: .milliseconds(200))
        let fourth = try await RawClient.plain(port: owner.server.port, .tls(identity))
        #expect(try await fourth.authenticate(identity).answer?["op"] as? String == "welcome")
        for c in [client, third, fourth] { await c.close() }
        try await owner.stop()
    }

    @Test("a subscription replaced right after its answer reads and writes no push")
    func replacedSubscriptionsPushNothing() async throws {
        var configuration = OwnerServer.Configuration()
        configuration.maximumRequestsInFlight = 200
        let owner = try await TestOwner.start(configuration)
        let identity = NodeIdentity.generate()
        let (url, _) = try owner.shareZone(invite: [(identity, .readOnly)])
        for i in 0..<120 { try owner.saveNote("note-\(i)", title: String(repeating: "x", count: 2_000)) }
        let client = try await RawClient.plain(port: owner.server.port, .tls(identity))
        try await client.authenticate(identity)
        try await client.sendJSON(["id": 1, "op": "acceptShare", "url": url])
        #expect(try await client.json()?["ok"] != nil)
        try await client.sendJSON(["id": 2, "op": "fetchDatabaseChanges"])
        let token = try #require(((try await client.json())?["ok"] as? [String: Any])?["token"] as? String)
        #expect(token.hasPrefix("2."))
        // 100 subscribes at once, each from another position (so no two share a read): each replaces
        // the one before. A replaced subscription's stream still held the wake-up its answer gave it,
        // so each read a push of up to 240 KB and wrote it; a client reading only the answers made
        // the owner hold all of them (its in-flight count had ended with the answer).
        let burst = try (0..<100).map { #"{"id":\#(100 + $0),"op":"subscribe","token":"\#(try owner.db.changeToken(at: Int64(1 + $0)))"}"# }
        try await client.send(burst.joined(separator: "\n"))
        var answers = 0
        var pushes = 0
        while answers < 100 {
            let frame = try #require(try await client.json())
            if frame["push"] != nil { pushes += 1 } else if frame["ok"] != nil { answers += 1 } else { Issue.record("\(frame)") }
        }
        // The current subscription's push, if it has not come yet (a loaded run may take seconds), then
        // whatever else is still coming.
        while pushes == 0, let frame = try? await client.json(30) { if frame["push"] != nil { pushes += 1 } }
        while let frame = try? await client.json(0.5) { if frame["push"] != nil { pushes += 1 } }
        #expect(pushes >= 1, "the current subscription pushes")
        #expect(pushes < 50, "\(pushes) pushes for 100 subscribes, each replacing the one before")
        await client.close()
        try await owner.stop()
    }

    @Test("an owner whose welcome names another owner is refused: an owner's name is its proved key's")
    func anOwnerCannotSpeakAsAnother() async throws {
        let alice = NodeIdentity.generate()
        let evil = NodeIdentity.generate()
        // Evil's node, with a database that calls its owner Alice.
        let db = try PrivateDatabase(inMemoryOwnerName: alice.userRecordName)
        let zone = RecordZone.ID(zoneName: "Topics")
        try db.saveZone(RecordZone(zoneID: zone))
        _ = try db.modifyRecords(saving: [Record(recordType: "Topic", recordID: Record.ID(recordName: "topic", zoneID: zone))]).get()
        var configuration = OwnerServer.Configuration()
        configuration.transport.limits.handshakeTimeout = .seconds(60)
        let server = try await OwnerServer.start(database: db, identity: evil, configuration: configuration)
        db.setShareURLBase(ShareURLBase(host: "127.0.0.1", port: server.port, ownerFingerprint: evil.fingerprint))
        let b = NodeIdentity.generate()
        var share = Share(rootRecord: try db.fetchRecord(Record.ID(recordName: "topic", zoneID: zone)))
        try share.addParticipant(Participant(lookupInfo: .init(userRecordName: b.userRecordName), permission: .readWrite))
        let url = try #require(Share(try db.modifyRecords(saving: [share.record]).get().first { $0.recordType == Record.shareRecordType }!)?.url)
        // The URL pins Evil's key, which Evil proves; its welcome then says it is Alice. Before, the
        // participant took that name and stored Evil's address and key under Alice.
        let error = await expectShareSyncError { _ = try await OwnerConnection.connect(url: url, identity: b, displayName: "B") }
        #expect(error?.code == .notAuthenticated && error?.rule == .ownerFingerprintMismatch, "\(String(describing: error))")
        try await server.shutdown()
    }

    @Test("subscribing again and again does not raise the limit of requests in flight")
    func resubscribingKeepsTheLimit() async throws {
        var configuration = OwnerServer.Configuration()
        configuration.maximumRequestsInFlight = 1
        let owner = try await TestOwner.start(configuration)
        let identity = NodeIdentity.generate()
        let client = try await RawClient.plain(port: owner.server.port, .tls(identity))
        try await client.authenticate(identity)
        // Each subscribe replaces the one before, whose task then ends. A subscription's request
        // counted as ended twice, at its answer and at the end of its task: 50 subscribes gave 50
        // more requests in flight than the limit allows.
        for id in 1...50 {
            try await client.send(#"{"id":\#(id),"op":"subscribe"}"#)
            #expect(try await client.json()?["id"] as? Int == id)
        }
        try await Task.sleep(for: .milliseconds(200))  // the replaced subscriptions' tasks end
        let burst = (100..<140).map { #"{"id":\#($0),"op":"fetchDatabaseChanges"}"# }.joined(separator: "\n")
        try await client.send(burst)
        var codes: [String] = []
        for _ in 0..<40 { codes.append(errorCode(try await client.json()) ?? "ok") }
        #expect(codes.contains("ok"))
        #expect(codes.filter { $0 == "requestRateLimited" }.count >= 20, "\(codes)")
        await client.close()
        try await owner.stop()
    }
}
