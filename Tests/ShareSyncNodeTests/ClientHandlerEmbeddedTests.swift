import Foundation
import NIOCore
import NIOEmbedded
import ShareSyncCore
import ShareSyncTestSupport
import Testing
@testable import ShareSyncNode
@testable import ShareSyncWire

/// The participant's end of the link (framing handshake, frame codec, ``ClientSession`` and the
/// ``OwnerConnection`` over it) on a `NIOAsyncTestingChannel`, with the test playing the owner.
/// Everything the owner sends is fed one byte at a time and in random splits, as swift-nio tests its
/// codecs: the handshake line, the challenge, the welcome, then answers, a `changes` push and an
/// `ownerAddress` push in one stream.
@Suite struct ClientHandlerEmbeddedTests {
    /// The owner's side of one testing channel: it encodes what it sends with its own frame encoder
    /// and reads what the client wrote through a decoder channel of its own.
    final class Owner: @unchecked Sendable {
        let identity = NodeIdentity.generate()
        let channel = NIOAsyncTestingChannel()
        let session: ClientSession
        private let encoding: FrameEncoding
        private var encoder: FrameEncoder?
        /// Decodes what the client wrote (a testing channel: the test's awaits may resume on any thread).
        private let reader = NIOAsyncTestingChannel()
        private var rng: SeededGenerator
        /// How many bytes each write to the client carries (1 = byte by byte).
        private let chunk: (inout SeededGenerator) -> Int

        init(encoding: FrameEncoding, seed: UInt64, chunk: @escaping (inout SeededGenerator) -> Int, pinnedKey: String? = nil) async throws {
            self.encoding = encoding
            self.rng = SeededGenerator(seed: seed)
            self.chunk = chunk
            let settings = ClientSession.Settings(
                identity: NodeIdentity.generate(), expectedOwnerFingerprint: pinnedKey ?? identity.fingerprint, displayName: "B",
                requiresTLS: false, pingInterval: nil, authenticationTimeout: .seconds(30))
            let channel = self.channel
            session = try await channel.eventLoop.submit {
                try ClientSession.install(
                    on: channel, tls: nil, configuration: ClientConfiguration(encodings: [encoding]), settings: settings)
            }.get()
            let reader = self.reader
            try await reader.eventLoop.submit {
                try reader.pipeline.syncOperations.addHandler(FrameCodec.decoderHandler(encoding: encoding))
            }.get()
        }

        /// Writes `bytes` to the client in this owner's chunk sizes.
        func feed(_ bytes: ByteBuffer) async throws {
            var input = bytes
            while input.readableBytes > 0, channel.isActive {
                let slice = input.readSlice(length: min(max(chunk(&rng), 1), input.readableBytes))!
                try await channel.writeInbound(slice)
            }
        }

        /// The frames (as lines) of `messages`.
        func frames(_ messages: [ByteBuffer]) throws -> ByteBuffer {
            let encoder = try self.encoder ?? FrameEncoder(encoding: encoding)
            self.encoder = encoder
            var out = ByteBuffer()
            for message in messages { try encoder.encode(message, into: &out) }
            return out
        }

        func frames<T: Encodable>(_ messages: T...) throws -> ByteBuffer {
            try frames(messages.map { try MessageCoding.encode($0) })
        }

        /// The next frame the client wrote, decoded as `T`.
        func read<T: Decodable>(_ type: T.Type) async throws -> T {
            for _ in 0..<10_000 {
                if let frame = try await reader.readInbound(as: ByteBuffer.self) { return try MessageCoding.decode(T.self, from: frame) }
                try await reader.writeInbound(try await channel.waitForOutboundWrite(as: ByteBuffer.self))
            }
            throw ShareSyncError(.internalError, "no frame from the client")
        }

        /// Connects and plays the owner up to `welcome`; returns the task opening the connection.
        func authenticate() async throws -> Task<OwnerConnection, any Error> {
            let session = self.session
            let started = session.start(onEventLoop: false)
            let opening = Task { try await OwnerConnection.open(started) }
            try await channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 7420))
            let line = try await channel.waitForOutboundWrite(as: ByteBuffer.self)
            #expect(String(buffer: line) == "SHARESYNC versions=1 encodings=\(encoding.rawValue)\n")
            try await feed(ByteBuffer(string: "SHARESYNC version=1 encoding=\(encoding.rawValue)\n"))
            let hello = try await read(HelloMessage.self)
            #expect(hello.displayName == "B")
            let serverNonce = AuthTranscript.makeNonce()
            let signature = identity.signBase64(
                AuthTranscript.server(clientNonce: hello.nonce, serverNonce: serverNonce, clientKey: hello.publicKey))
            try await feed(try frames(ChallengeMessage(publicKey: identity.publicKeyBase64, nonce: serverNonce, signature: signature)))
            let authenticate: AuthenticateMessage
            do {
                authenticate = try await read(AuthenticateMessage.self)
            } catch {
                return opening  // the client refused the challenge and closed
            }
            let proof = AuthTranscript.client(serverNonce: serverNonce, clientNonce: hello.nonce, serverKey: identity.publicKeyBase64)
            #expect(AuthTranscript.verify(signature: authenticate.signature, publicKey: hello.publicKey, data: proof))
            try await feed(try frames(WelcomeMessage(
                userRecordName: "_b", ownerName: identity.userRecordName, address: WireAddress(host: "10.0.0.1", port: 7420))))
            return opening
        }

        /// Reads the client's next request and answers it with `ok` (its JSON).
        func answerNextRequest(ok: String) async throws -> Request {
            let request = try await read(Request.self)
            try await feed(try frames([ByteBuffer(string: #"{"id":\#(request.id),"ok":\#(ok)}"#)]))
            return request
        }
    }

    /// Byte by byte, then random splits of 1-40 and of 1-400 bytes, each for both compressed encodings
    /// and the plain one.
    static let feeds: [(FrameEncoding, UInt64, Int)] = FrameEncoding.allCases.flatMap { encoding in
        [(encoding, 0, 1), (encoding, 1, 40), (encoding, 2, 40), (encoding, 3, 400), (encoding, 4, 400)]
    }

    static func chunking(_ largest: Int) -> (inout SeededGenerator) -> Int {
        { largest == 1 ? 1 : Int($0.next() % UInt64(largest)) + 1 }
    }

    static let push = ByteBuffer(string: #"""
        {"push":"changes","databaseChanges":{"changedZones":["Topics"],"deletedZones":[],"token":"dDE","moreComing":false},\#
        "zoneChanges":[],"token":"dDE"}
        """#)

    /// Subscribes through the connection, the owner answering.
    static func subscribe(_ connection: OwnerConnection, _ owner: Owner) async throws -> AsyncStream<OwnerConnection.Push> {
        let subscribing = Task { try await connection.subscribe() }
        let request = try await owner.answerNextRequest(ok: #"{"token":"dDA"}"#)
        guard case .subscribe = request.body else { throw ShareSyncError(.internalError, "expected a subscribe, got \(request.body)") }
        return try await subscribing.value
    }

    @Test("authenticates, then routes answers, a push and an address announcement fed in pieces", arguments: feeds)
    func authenticatesAndRoutesEverythingFedInPieces(encoding: FrameEncoding, seed: UInt64, largest: Int) async throws {
        let owner = try await Owner(encoding: encoding, seed: seed, chunk: Self.chunking(largest))
        let connection = try await owner.authenticate().value
        #expect(connection.ownerName == owner.identity.userRecordName)
        #expect(connection.announcedAddress == WireAddress(host: "10.0.0.1", port: 7420))
        let pushes = try await Self.subscribe(connection, owner)

        let fetching = Task { try await connection.fetchDatabaseChanges(since: nil) }
        let fetch = try await owner.read(Request.self)
        let response = ByteBuffer(
            string: #"{"id":\#(fetch.id),"ok":{"changedZones":["Topics"],"deletedZones":[],"token":"dDI","moreComing":false}}"#)
        try await owner.feed(try owner.frames([
            Self.push, response, try MessageCoding.encode(OwnerAddressPush(address: WireAddress(host: "owner.example", port: 9000))),
        ]))
        #expect(try await fetching.value.changeToken == ServerChangeToken(stringValue: "dDI"))
        var received = pushes.makeAsyncIterator()
        let push = try #require(await received.next())
        #expect(push.databaseChanges.changedZoneIDs.map(\.zoneName) == ["Topics"])
        #expect(push.changeToken == ServerChangeToken(stringValue: "dDE"))
        try await eventually { connection.announcedAddress == WireAddress(host: "owner.example", port: 9000) }
        #expect(connection.isActive)
        await connection.close()
    }

    @Test("a push that cannot be read closes the connection and fails what waits; nothing is skipped", arguments: feeds)
    func anUndecodablePushClosesTheConnection(encoding: FrameEncoding, seed: UInt64, largest: Int) async throws {
        let owner = try await Owner(encoding: encoding, seed: seed, chunk: Self.chunking(largest))
        let connection = try await owner.authenticate().value
        let pushes = try await Self.subscribe(connection, owner)
        let waiting = Task { try await connection.fetchDatabaseChanges(since: nil) }
        _ = try await owner.read(Request.self)
        try await owner.feed(try owner.frames([Self.push, ByteBuffer(string: #"{"push":"changes","token":17}"#)]))
        var tokens: [String] = []
        for await push in pushes { tokens.append(push.changeToken.stringValue) }  // ends: the stream was finished
        #expect(tokens == ["dDE"], "the readable push before it was delivered, then the stream ended")
        let failure = await expectShareSyncError { _ = try await waiting.value }
        #expect(failure?.code == .networkFailure)
        #expect(failure?.message.contains("cannot be read") == true)
        try await eventually { !connection.isActive }
        await connection.close()
    }

    @Test("an owner that proves another key than the URL's is refused, however its challenge is split", arguments: feeds)
    func aWrongOwnerKeyIsRefused(encoding: FrameEncoding, seed: UInt64, largest: Int) async throws {
        let pinned = NodeIdentity.generate().fingerprint
        let owner = try await Owner(encoding: encoding, seed: seed, chunk: Self.chunking(largest), pinnedKey: pinned)
        let opening = try await owner.authenticate()
        let failure = await expectShareSyncError { _ = try await opening.value }
        #expect(failure?.code == .notAuthenticated)
        #expect(failure?.rule == .ownerFingerprintMismatch)
        try await eventually { !owner.channel.isActive }
    }
}

/// Waits (at most `timeout`, polling every 5 ms) until `condition` holds; records an issue naming
/// `what` if it never does. For state that wakes no engine event (a server's, a channel's).
func eventually(
    _ what: String = "the condition", timeout: Duration = .seconds(10), sourceLocation: SourceLocation = #_sourceLocation,
    _ condition: () -> Bool
) async throws {
    let deadline = ContinuousClock.now + timeout
    while !condition() {
        guard ContinuousClock.now < deadline else {
            Issue.record("\(what) did not hold within \(timeout)", sourceLocation: sourceLocation)
            return
        }
        try await Task.sleep(for: .milliseconds(5))
    }
}
