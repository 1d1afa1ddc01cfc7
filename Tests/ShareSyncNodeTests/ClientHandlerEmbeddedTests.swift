import Foundation
import NIOCore
import NIOEmbedded
import ShareSyncCore
import ShareSyncTestSupport
import Testing
@testable import ShareSyncNode
@testable import ShareSyncWire

/// The participant's end of the link (framing handshake, frame codec, ``ClientConnectionHandler``) on
/// an `EmbeddedChannel`, with the test playing the owner. Everything the owner sends is fed one byte
/// at a time and in random splits, as swift-nio tests its codecs: the handshake line, the challenge,
/// the welcome, then a response, a `changes` push and an `ownerAddress` push in one stream.
@Suite struct ClientHandlerEmbeddedTests {
    /// The owner's side of one embedded connection: it encodes what it sends with its own frame
    /// encoder and reads what the client wrote through a decoder channel of its own.
    final class Owner {
        let identity = NodeIdentity.generate()
        let channel = EmbeddedChannel()
        let handler: ClientConnectionHandler
        let authenticated: EventLoopPromise<WelcomeMessage>
        let pushes: AsyncStream<ChangesPush>
        private let encoding: FrameEncoding
        private var encoder: FrameEncoder?
        private let reader = EmbeddedChannel()
        private var rng: SeededGenerator
        /// How many bytes each write to the client carries (1 = byte by byte).
        private let chunk: (inout SeededGenerator) -> Int

        init(encoding: FrameEncoding, seed: UInt64, chunk: @escaping (inout SeededGenerator) -> Int, pinnedKey: String? = nil) throws {
            self.encoding = encoding
            self.rng = SeededGenerator(seed: seed)
            self.chunk = chunk
            authenticated = channel.eventLoop.makePromise(of: WelcomeMessage.self)
            handler = ClientConnectionHandler(
                identity: NodeIdentity.generate(), expectedOwnerFingerprint: pinnedKey ?? identity.fingerprint, displayName: "B",
                requiresTLS: false, requestIDs: RequestIDs(), pingInterval: nil, authenticated: authenticated)
            let (stream, continuation) = AsyncStream<ChangesPush>.makeStream()
            pushes = stream
            handler.setPushes(continuation)
            let pipeline = channel.pipeline.syncOperations
            try FrameCodec.addClientHandlers(to: pipeline, configuration: ClientConfiguration(encodings: [encoding]))
            try pipeline.addHandlers([handler, FrameErrorHandler()])
            try reader.pipeline.syncOperations.addHandler(FrameCodec.decoderHandler(encoding: encoding))
        }

        /// Writes `bytes` to the client in this owner's chunk sizes.
        func feed(_ bytes: ByteBuffer) throws {
            var input = bytes
            while input.readableBytes > 0, channel.isActive {
                let slice = input.readSlice(length: min(max(chunk(&rng), 1), input.readableBytes))!
                try channel.writeInbound(slice)
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
        func read<T: Decodable>(_ type: T.Type) throws -> T {
            while let line = try channel.readOutbound(as: ByteBuffer.self) { try reader.writeInbound(line) }
            let frame = try #require(try reader.readInbound(as: ByteBuffer.self))
            return try MessageCoding.decode(T.self, from: frame)
        }

        /// Connects and plays the owner up to `welcome`; returns the client's hello.
        @discardableResult
        func authenticate() throws -> HelloMessage {
            try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 7420)).wait()
            let line = try #require(try channel.readOutbound(as: ByteBuffer.self))
            #expect(String(buffer: line) == "SHARESYNC versions=1 encodings=\(encoding.rawValue)\n")
            try feed(ByteBuffer(string: "SHARESYNC version=1 encoding=\(encoding.rawValue)\n"))
            let hello = try read(HelloMessage.self)
            #expect(hello.displayName == "B")
            let serverNonce = AuthTranscript.makeNonce()
            let signature = identity.signBase64(
                AuthTranscript.server(clientNonce: hello.nonce, serverNonce: serverNonce, clientKey: hello.publicKey))
            try feed(try frames(ChallengeMessage(publicKey: identity.publicKeyBase64, nonce: serverNonce, signature: signature)))
            guard channel.isActive else { return hello }
            let authenticate = try read(AuthenticateMessage.self)
            let proof = AuthTranscript.client(serverNonce: serverNonce, clientNonce: hello.nonce, serverKey: identity.publicKeyBase64)
            #expect(AuthTranscript.verify(signature: authenticate.signature, publicKey: hello.publicKey, data: proof))
            try feed(try frames(WelcomeMessage(
                userRecordName: "_b", ownerName: identity.userRecordName, address: WireAddress(host: "10.0.0.1", port: 7420))))
            return hello
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

    @Test("authenticates, then routes a response, a push and an address announcement fed in pieces", arguments: feeds)
    func authenticatesAndRoutesEverythingFedInPieces(encoding: FrameEncoding, seed: UInt64, largest: Int) async throws {
        let owner = try Owner(encoding: encoding, seed: seed, chunk: Self.chunking(largest))
        // The channel's part runs without suspending, on one thread, as EmbeddedChannel wants.
        try Self.routeEverything(owner)
        var pushes = owner.pushes.makeAsyncIterator()
        let push = try #require(await pushes.next())
        #expect(push.databaseChanges.changedZones == ["Topics"])
        #expect(push.token == ServerChangeToken(stringValue: "dDE"))
    }

    static func routeEverything(_ owner: Owner) throws {
        try owner.authenticate()
        let welcome = try owner.authenticated.futureResult.wait()
        #expect(welcome.ownerName == owner.identity.userRecordName)
        #expect(owner.handler.announcements.latest == WireAddress(host: "10.0.0.1", port: 7420))
        let answer = owner.channel.eventLoop.makePromise(of: ByteBuffer.self)
        #expect(owner.handler.register(id: 7, promise: answer))
        let response = ByteBuffer(string: #"{"id":7,"ok":{"token":"dDA"}}"#)
        try owner.feed(try owner.frames([
            Self.push, response, try MessageCoding.encode(OwnerAddressPush(address: WireAddress(host: "owner.example", port: 9000))),
        ]))
        #expect(try answer.futureResult.wait() == response)
        #expect(owner.handler.announcements.latest == WireAddress(host: "owner.example", port: 9000))
        #expect(owner.channel.isActive)
        _ = try? owner.channel.finish()
    }

    @Test("a push that cannot be read closes the connection and fails what waits; nothing is skipped", arguments: feeds)
    func anUndecodablePushClosesTheConnection(encoding: FrameEncoding, seed: UInt64, largest: Int) async throws {
        let owner = try Owner(encoding: encoding, seed: seed, chunk: Self.chunking(largest))
        try Self.feedAnUndecodablePush(owner)
        var pushes = owner.pushes.makeAsyncIterator()
        #expect(await pushes.next() != nil)  // the readable push before it was delivered
        #expect(await pushes.next() == nil)  // then the stream ended: the engine resumes from its token
    }

    static func feedAnUndecodablePush(_ owner: Owner) throws {
        try owner.authenticate()
        _ = try owner.authenticated.futureResult.wait()
        let answer = owner.channel.eventLoop.makePromise(of: ByteBuffer.self)
        #expect(owner.handler.register(id: 3, promise: answer))
        try owner.feed(try owner.frames([Self.push, ByteBuffer(string: #"{"push":"changes","token":17}"#)]))
        #expect(!owner.channel.isActive)
        #expect(throws: ShareSyncError.self) { try answer.futureResult.wait() }
    }

    @Test("an owner that proves another key than the URL's is refused, however its challenge is split", arguments: feeds)
    func aWrongOwnerKeyIsRefused(encoding: FrameEncoding, seed: UInt64, largest: Int) throws {
        let pinned = NodeIdentity.generate().fingerprint
        let owner = try Owner(encoding: encoding, seed: seed, chunk: Self.chunking(largest), pinnedKey: pinned)
        try owner.authenticate()
        #expect(!owner.channel.isActive)
        do {
            _ = try owner.authenticated.futureResult.wait()
            Issue.record("authenticated with the wrong owner")
        } catch let error as ShareSyncError {
            #expect(error.code == .notAuthenticated)
            #expect(error.rule?.rawValue == "ownerFingerprintMismatch")
        }
    }
}
