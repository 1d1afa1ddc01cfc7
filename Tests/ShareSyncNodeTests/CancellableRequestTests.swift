import Foundation
import NIOCore
import NIOPosix
import ShareSyncCore
import ShareSyncNode
import ShareSyncWire
import Synchronization
import Testing

/// A request whose caller gives up stops waiting at once (issue 15: "waiting requests are
/// cancellable"), and its answer, when it comes late, is dropped without disturbing the connection.
/// The owner here is a stand-in on loopback (cleartext) that authenticates, answers `ping` and
/// `subscribe` at once, and answers every other request only when the test opens a gate, with an
/// error. No answer can come before the gate opens, so a request that returns before then stopped
/// waiting because it was cancelled, however slow the machine is.
@Suite struct CancellableRequestTests {
    /// Holds the stand-in's late answers until the test opens it.
    final class Gate: Sendable {
        private let state = Mutex<(open: Bool, held: [@Sendable () -> Void])>((false, []))

        /// Runs `action` now if the gate is open, else when it opens.
        func whenOpen(_ action: @escaping @Sendable () -> Void) {
            let runNow = state.withLock { state -> Bool in
                if state.open { return true }
                state.held.append(action)
                return false
            }
            if runNow { action() }
        }

        func open() {
            let held = state.withLock { state -> [@Sendable () -> Void] in
                state.open = true
                defer { state.held = [] }
                return state.held
            }
            held.forEach { $0() }
        }
    }

    /// The stand-in owner's side of one connection.
    final class SlowOwnerHandler: ChannelInboundHandler, @unchecked Sendable {
        typealias InboundIn = ByteBuffer
        typealias OutboundOut = ByteBuffer

        struct Head: Decodable {
            var id: Int?
            var op: String
        }

        let identity: NodeIdentity
        let gate: Gate
        /// The subscription's cursor expires as soon as it starts (an error with no id), and a request
        /// is never answered: when the gate opens, the connection closes instead.
        let expiresSubscription: Bool
        private var clientNonce = ""
        private var clientKey = ""
        private var serverNonce = ""

        init(identity: NodeIdentity, gate: Gate, expiresSubscription: Bool = false) {
            self.identity = identity
            self.gate = gate
            self.expiresSubscription = expiresSubscription
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let frame = Self.unwrapInboundIn(data)
            guard let head = try? MessageCoding.decode(Head.self, from: frame) else { return }
            switch head.op {
            case "hello":
                guard let hello = try? MessageCoding.decode(HelloMessage.self, from: frame) else { return }
                clientNonce = hello.nonce
                clientKey = hello.publicKey
                serverNonce = AuthTranscript.makeNonce()
                let signature = identity.signBase64(
                    AuthTranscript.server(clientNonce: clientNonce, serverNonce: serverNonce, clientKey: clientKey))
                send(ChallengeMessage(publicKey: identity.publicKeyBase64, nonce: serverNonce, signature: signature), context: context)
            case "authenticate":
                send(WelcomeMessage(userRecordName: "_participant", ownerName: identity.userRecordName), context: context)
            case "ping":
                write(#"{"id":\#(head.id ?? 0),"ok":{}}"#, context: context)
            case "subscribe":
                write(#"{"id":\#(head.id ?? 0),"ok":{"token":"dDA"}}"#, context: context)
                if expiresSubscription {
                    write(#"{"id":null,"error":{"code":"changeTokenExpired","message":"the history moved past the subscription"}}"#, context: context)
                    return
                }
                // A push after the late answers below, to show the subscription survived them.
                let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
                let loop = context.eventLoop
                gate.whenOpen {
                    loop.scheduleTask(in: .milliseconds(100)) {
                        let (handler, context) = bound.value
                        handler.write(
                            #"{"push":"changes","databaseChanges":{"changedZones":["Late"],"deletedZones":[],"token":"dDE","moreComing":false},"zoneChanges":[],"token":"dDE"}"#,
                            context: context)
                    }
                }
            default:
                // Answered late, with an error a connection-wide error would look like (but with an id).
                let id = head.id ?? 0
                let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
                let loop = context.eventLoop
                if expiresSubscription {
                    gate.whenOpen { loop.execute { bound.value.1.close(promise: nil) } }
                    return
                }
                gate.whenOpen {
                    loop.execute {
                        let (handler, context) = bound.value
                        handler.write(
                            #"{"id":\#(id),"error":{"code":"changeTokenExpired","message":"late answer","rule":"changeTokenExpired"}}"#,
                            context: context)
                    }
                }
            }
        }

        private func send<T: Encodable>(_ message: T, context: ChannelHandlerContext) {
            guard let payload = try? MessageCoding.encode(message) else { return }
            context.writeAndFlush(Self.wrapOutboundOut(payload), promise: nil)
        }

        private func write(_ json: String, context: ChannelHandlerContext) {
            context.writeAndFlush(Self.wrapOutboundOut(ByteBuffer(string: json)), promise: nil)
        }
    }

    static func startSlowOwner(_ identity: NodeIdentity, gate: Gate, expiresSubscription: Bool = false) async throws -> any Channel {
        try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try FrameCodec.addServerHandlers(to: channel.pipeline.syncOperations)
                    try channel.pipeline.syncOperations.addHandler(
                        SlowOwnerHandler(identity: identity, gate: gate, expiresSubscription: expiresSubscription))
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
    }

    @Test("a cancelled request stops waiting at once with operationCancelled; its late answer is dropped and the connection goes on")
    func aCancelledRequestStopsWaitingAndItsLateAnswerIsDropped() async throws {
        let owner = NodeIdentity.generate()
        let gate = Gate()
        let server = try await Self.startSlowOwner(owner, gate: gate)
        defer { server.close(promise: nil) }
        let port = try #require(server.localAddress?.port)
        let connection = try await OwnerConnection.connect(
            host: "127.0.0.1", port: port, identity: .generate(), expectedOwnerFingerprint: owner.fingerprint,
            security: .cleartextOnLoopback, pingInterval: .never)
        var pushes = try await connection.subscribe().makeAsyncIterator()

        let request = Task { try await connection.fetchDatabaseChanges(since: nil) }
        try await Task.sleep(for: .milliseconds(200))
        request.cancel()
        // The gate is shut, so the owner has not answered: only the cancellation can end the wait
        // (a request that kept waiting would fail here on the timeout).
        do {
            _ = try await withTimeout(30) { try await request.value }
            Issue.record("the cancelled request returned a result")
        } catch let error as ShareSyncError {
            #expect(error.code == .operationCancelled, "\(error)")
        } catch is TimeoutError {
            Issue.record("the request kept waiting after its task was cancelled")
        }

        // The late answer (an error with the abandoned request's id) comes and is dropped: the
        // connection still answers, and the subscription still delivers the push that follows it.
        gate.open()
        let push = try #require(await pushes.next())
        #expect(push.databaseChanges.changedZoneIDs.map(\.zoneName) == ["Late"])
        try await connection.ping()
        #expect(connection.isActive)
        await connection.close()
    }

    @Test("a subscription that expires ends its pushes only: a request the connection then leaves unanswered fails as a network failure, not changeTokenExpired")
    func anExpiredSubscriptionIsNotTheConnectionsError() async throws {
        let owner = NodeIdentity.generate()
        let gate = Gate()
        let server = try await Self.startSlowOwner(owner, gate: gate, expiresSubscription: true)
        defer { server.close(promise: nil) }
        let port = try #require(server.localAddress?.port)
        let connection = try await OwnerConnection.connect(
            host: "127.0.0.1", port: port, identity: .generate(), expectedOwnerFingerprint: owner.fingerprint,
            security: .cleartextOnLoopback, pingInterval: .never)
        let pushes = try await connection.subscribe()
        let ended = try await withTimeout(30) { () async -> Bool in
            for await _ in pushes { return false }
            return true
        }
        #expect(ended, "the expiry ends the pushes")
        try await connection.ping()  // the connection goes on
        #expect(connection.isActive)

        // A write in flight when the connection closes: its outcome is unknown, so it may be sent
        // again (a participant keeps it pending). Before, it failed with the subscription's
        // changeTokenExpired, and a participant kept the write as refused.
        let write = Task {
            try await connection.modifyRecords(
                zoneName: "Topics", saving: [Record(recordType: "Note", recordID: Record.ID(recordName: "n", zoneID: RecordZone.ID(zoneName: "Topics")))])
        }
        try await Task.sleep(for: .milliseconds(100))
        gate.open()
        do {
            _ = try await withTimeout(30) { try await write.value }
            Issue.record("the unanswered write returned a result")
        } catch let error as ShareSyncError {
            #expect(error.code == .networkFailure, "\(error)")
        }
        // A request sent after the close fails the same way.
        do {
            try await connection.ping()
            Issue.record("a ping on the closed connection was answered")
        } catch {
            #expect(error.code == .networkFailure, "\(error)")
        }
        await connection.close()
    }
}
