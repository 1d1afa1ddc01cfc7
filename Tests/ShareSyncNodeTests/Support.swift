import Foundation
import NIOCore
import NIOPosix
import NIOSSL
import ShareSyncCore
import ShareSyncNode
import ShareSyncStore
import ShareSyncWire
import Synchronization
import Testing

struct TimeoutError: Error {}

/// Runs `body`, failing after `seconds`.
func withTimeout<T: Sendable>(_ seconds: Double = 10, _ body: @escaping @Sendable () async throws -> T) async throws -> T {
    try await withThrowingTaskGroup(of: T.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try await Task.sleep(for: .seconds(seconds))
            throw TimeoutError()
        }
        defer { group.cancelAll() }
        return try await group.next()!
    }
}

/// An owner node on 127.0.0.1, port 0, with a zone "Topics" and a "topic" record.
struct TestOwner {
    let identity = NodeIdentity.generate()
    let db: PrivateDatabase
    let server: OwnerServer
    let zone = RecordZone.ID(zoneName: "Topics")

    /// Starts the owner; the handshake timeout is 60 s unless `keepHandshakeTimeout`.
    static func start(
        _ configuration: OwnerServer.Configuration = .init(), limits: Limits = Limits(), keepHandshakeTimeout: Bool = false
    ) async throws -> TestOwner {
        try await TestOwner(configuration: configuration, limits: limits, keepHandshakeTimeout: keepHandshakeTimeout)
    }

    private init(configuration: OwnerServer.Configuration, limits: Limits, keepHandshakeTimeout: Bool) async throws {
        // Generous: under a loaded test run the test's own task may wait seconds to be scheduled (CI
        // runs on 2 cores have held a test's connection past 60 s before it authenticated).
        var configuration = configuration
        if !keepHandshakeTimeout { configuration.transport.limits.handshakeTimeout = .seconds(180) }
        db = try PrivateDatabase(inMemoryOwnerName: identity.userRecordName, limits: limits)
        try db.saveZone(RecordZone(zoneID: zone))
        var topic = Record(recordType: "Topic", recordID: Record.ID(recordName: "topic", zoneID: zone))
        topic["title"] = "Groceries"
        _ = try db.modifyRecords(saving: [topic]).get()
        server = try await OwnerServer.start(database: db, identity: identity, configuration: configuration)
        db.setShareURLBase(ShareURLBase(host: "127.0.0.1", port: server.port, ownerFingerprint: identity.fingerprint))
    }

    func id(_ name: String) -> Record.ID { Record.ID(recordName: name, zoneID: zone) }

    /// Shares the topic with the given identities; returns the share's URL and record name.
    func shareTopic(
        invite: [(NodeIdentity, Participant.Permission)] = [], publicPermission: Participant.Permission = .none
    ) throws -> (url: String, shareName: String) {
        var share = try invited(Share(rootRecord: try db.fetchRecord(id("topic"))), invite)
        share.publicPermission = publicPermission
        return try save(share)
    }

    /// Shares the topic with a new identity (read-write), which connects and accepts: the identity,
    /// the share's URL and the accepted connection.
    func acceptedParticipant() async throws -> (b: NodeIdentity, url: String, connection: OwnerConnection) {
        let b = NodeIdentity.generate()
        let (url, _) = try shareTopic(invite: [(b, .readWrite)])
        let connection = try await OwnerConnection.connect(url: url, identity: b)
        try await connection.acceptShare(url: url)
        return (b, url, connection)
    }

    /// Shares the whole zone with the given identities (its participants read the zone's own feed);
    /// returns the share's URL and record name.
    func shareZone(invite: [(NodeIdentity, Participant.Permission)]) throws -> (url: String, shareName: String) {
        try save(invited(Share(recordZoneID: zone), invite))
    }

    /// A share with the given identities added as participants.
    private func invited(_ share: Share, _ invite: [(NodeIdentity, Participant.Permission)]) throws -> Share {
        var share = share
        for (who, permission) in invite {
            try share.addParticipant(Participant(lookupInfo: .init(userRecordName: who.userRecordName), permission: permission))
        }
        return share
    }

    /// Saves a new share as the owner; returns its URL and record name.
    private func save(_ share: Share) throws -> (url: String, shareName: String) {
        let saved = try db.modifyRecords(saving: [share.record]).get()
        let record = saved.first { $0.recordType == Record.shareRecordType }!
        return (Share(record)!.url!, record.recordID.recordName)
    }

    /// Saves a note under the topic, as the owner.
    func saveNote(_ name: String, title: String) throws {
        var note = Record(recordType: "Note", recordID: id(name))
        note["title"] = .string(title)
        note.setParent(id("topic"))
        _ = try db.modifyRecords(saving: [note], savePolicy: .allKeys).get()
    }

    func stop() async throws { try await server.shutdown() }
}

/// Collects the lines a raw TCP peer receives.
final class LineCollector: ChannelInboundHandler, Sendable {
    typealias InboundIn = ByteBuffer
    private struct State {
        var pending: [UInt8] = []
        var lines: [String] = []
        var closed = false
    }
    private let state = Mutex(State())

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let bytes = Self.unwrapInboundIn(data).readableBytesView
        state.withLock { s in
            for byte in bytes {
                if byte == 0x0A {
                    s.lines.append(String(decoding: s.pending, as: UTF8.self))
                    s.pending = []
                } else {
                    s.pending.append(byte)
                }
            }
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        state.withLock { $0.closed = true }
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }

    func pop() -> (String?, Bool) {
        state.withLock { s in (s.lines.isEmpty ? nil : s.lines.removeFirst(), s.closed) }
    }
}

/// How a ``RawClient`` reaches the server.
enum RawTransport {
    /// TLS 1.3 with `identity`'s certificate, offering these ALPN protocols; any server certificate is accepted.
    case tls(NodeIdentity, alpn: [String] = [TransportSecurity.applicationProtocol])
    /// TLS 1.3 without a client certificate.
    case tlsWithoutCertificate
    /// No TLS (the server must allow cleartext).
    case cleartext

    /// The TLS client context for this transport, or nil for cleartext.
    func tlsContext() throws -> NIOSSLContext? {
        var configuration = TLSConfiguration.makeClientConfiguration()
        switch self {
        case .cleartext:
            return nil
        case .tls(let identity, let alpn):
            let credentials = try identity.tlsCredentials()
            configuration.certificateChain = [.certificate(credentials.certificate)]
            configuration.privateKey = .privateKey(credentials.privateKey)
            configuration.applicationProtocols = alpn
        case .tlsWithoutCertificate:
            configuration.applicationProtocols = [TransportSecurity.applicationProtocol]
        }
        configuration.minimumTLSVersion = .tlsv13
        // BoringSSL offers Ed25519 only when asked to (the nodes' certificates are Ed25519).
        configuration.verifySignatureAlgorithms = [.ed25519]
        configuration.signingSignatureAlgorithms = [.ed25519]
        configuration.certificateVerification = .noHostnameVerification
        configuration.trustRoots = .certificates([])
        return try NIOSSLContext(configuration: configuration)
    }
}

/// A TCP peer that writes and reads raw lines (the handshake by hand, then `plain` frames), over TLS
/// or cleartext.
struct RawClient {
    let channel: any Channel
    let collector: LineCollector
    let group: MultiThreadedEventLoopGroup

    /// Connects; `receiveBuffer` sets the socket's receive buffer (and stops the kernel growing it).
    static func connect(port: Int, _ transport: RawTransport, receiveBuffer: Int? = nil) async throws -> RawClient {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let collector = LineCollector()
        let tls = try transport.tlsContext()
        var bootstrap = ClientBootstrap(group: group)
        if let receiveBuffer {
            bootstrap = bootstrap.channelOption(.socketOption(.so_rcvbuf), value: SocketOptionValue(receiveBuffer))
        }
        let channel = try await bootstrap
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    if let tls {
                        // Any server certificate: these tests look at what the server accepts.
                        try channel.pipeline.syncOperations.addHandler(
                            NIOSSLClientHandler(context: tls, serverHostname: nil) { _, promise in promise.succeed(.certificateVerified) })
                    }
                    try channel.pipeline.syncOperations.addHandler(collector)
                }
            }
            .connect(host: "127.0.0.1", port: port).get()
        return RawClient(channel: channel, collector: collector, group: group)
    }

    /// Connects and negotiates `plain`.
    static func plain(port: Int, _ transport: RawTransport, receiveBuffer: Int? = nil) async throws -> RawClient {
        let client = try await connect(port: port, transport, receiveBuffer: receiveBuffer)
        try await client.send("SHARESYNC versions=1 encodings=plain")
        #expect(try await client.line() == "SHARESYNC version=1 encoding=plain")
        return client
    }

    func send(_ line: String) async throws {
        try await channel.writeAndFlush(channel.allocator.buffer(string: line + "\n"))
    }

    func sendJSON(_ object: [String: Any]) async throws {
        let data = try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])
        try await send(String(decoding: data, as: UTF8.self))
    }

    /// The next line, or nil if the connection closed first; fails after `seconds` (30 by default:
    /// with every test of the suite started at once on two cores, an event loop can wait many seconds).
    func line(_ seconds: Double = 30) async throws -> String? {
        let deadline = ContinuousClock.now + .seconds(seconds)
        while true {
            let (line, closed) = collector.pop()
            if let line { return line }
            if closed { return nil }
            guard ContinuousClock.now < deadline else { throw TimeoutError() }
            try await Task.sleep(for: .milliseconds(5))
        }
    }

    func json(_ seconds: Double = 30) async throws -> [String: Any]? {
        guard let line = try await line(seconds) else { return nil }
        return try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
    }

    /// Whether the server closes the connection within `seconds` (draining lines meanwhile).
    func closes(within seconds: Double = 10) async throws -> Bool {
        do {
            while try await line(seconds) != nil {}
            return true
        } catch is TimeoutError {
            return false
        }
    }

    /// Authenticates in plain mode, claiming `identity`'s key and signing with `signer` (over TLS the
    /// server requires `identity` to be the key of the client certificate).
    /// Returns the server's answer to `authenticate` and the messages exchanged.
    @discardableResult
    func authenticate(_ identity: NodeIdentity, signingWith signer: NodeIdentity? = nil, nonce: String = AuthTranscript.makeNonce())
        async throws -> (answer: [String: Any]?, challenge: [String: Any], signature: String)
    {
        try await sendJSON(["op": "hello", "publicKey": identity.publicKeyBase64, "nonce": nonce])
        let challenge = try #require(try await json())
        let serverKey = try #require(challenge["publicKey"] as? String)
        let serverNonce = try #require(challenge["nonce"] as? String)
        let signature = (signer ?? identity).signBase64(
            AuthTranscript.client(serverNonce: serverNonce, clientNonce: nonce, serverKey: serverKey))
        try await sendJSON(["op": "authenticate", "signature": signature])
        return (try await json(), challenge, signature)
    }

    func close() async {
        try? await channel.close()
        try? await group.shutdownGracefully()
    }
}

func errorCode(_ object: [String: Any]?) -> String? {
    (object?["error"] as? [String: Any])?["code"] as? String
}

func errorRule(_ object: [String: Any]?) -> String? {
    (object?["error"] as? [String: Any])?["rule"] as? String
}

/// Runs `body` expecting a ShareSyncError; returns it.
func expectShareSyncError(_ body: () async throws -> Void) async -> ShareSyncError? {
    do {
        try await body()
        Issue.record("expected a ShareSyncError")
        return nil
    } catch let error as ShareSyncError {
        return error
    } catch {
        Issue.record("expected a ShareSyncError, got \(error)")
        return nil
    }
}

/// 1.5 MB of random bytes in base64, made once: slices of it are text that deflate cannot shrink much.
private let randomText: [UInt8] = {
    var generator = SystemRandomNumberGenerator()
    var words = [UInt64](repeating: 0, count: 1_100_000 / 8)
    for i in words.indices { words[i] = generator.next() }
    let data = words.withUnsafeBytes { Data($0) }
    return Array(data.base64EncodedString().utf8)
}()

/// `count` bytes of text (at most about 1.4 MB) that deflate barely shrinks; different `index`es give
/// different text, and consecutive ones never repeat within deflate's 32 KiB window.
func incompressibleText(_ count: Int, index: Int) -> String {
    let span = randomText.count - count
    let start = (index &* 40_009) % max(1, span)
    return String(decoding: randomText[start..<(start + count)], as: UTF8.self)
}

/// A value behind a lock, shareable by closures.
final class Box<T: Sendable>: Sendable {
    let value: Mutex<T>
    init(_ initial: T) { value = Mutex(initial) }
}

/// An owner connection made for one test, that serves only what it implements: every other request
/// fails with `internalError` ("not served by this test owner"), and it is always open, announcing nothing.
protocol PartialOwnerDatabase: OwnerDatabase {}

extension PartialOwnerDatabase {
    private var unused: ShareSyncError { ShareSyncError(.internalError, "not served by this test owner") }
    var isActive: Bool { true }
    var announcedAddress: WireAddress? { nil }
    func onAddressAnnounced(_ body: (@Sendable (WireAddress) -> Void)?) {}
    func fetchShareMetadata(url: String, shouldFetchRootRecord: Bool) async throws(ShareSyncError) -> ShareMetadata { throw unused }
    func acceptShare(url: String) async throws(ShareSyncError) -> ShareMetadata { throw unused }
    func requestAccess(url: String) async throws(ShareSyncError) { throw unused }
    func leaveShare(zoneName: String, shareRecordName: String) async throws(ShareSyncError) { throw unused }
    func fetchDatabaseChanges(since token: ServerChangeToken?, resultsLimit: Int?) async throws(ShareSyncError) -> DatabaseChanges {
        throw unused
    }
    func startFetchZoneChanges(zoneName: String, since token: ServerChangeToken?, resultsLimit: Int?)
        async throws(ShareSyncError) -> PendingZoneChanges
    { throw unused }
    func fetchRecords(zoneName: String, recordNames: [String]) async throws(ShareSyncError) -> [Record.ID: Result<Record, ShareSyncError>] {
        throw unused
    }
    func modifyRecords(
        zoneName: String, saving: [Record], deleting: [String], savePolicy: SavePolicy, atomically: Bool, writeID: String?,
        progress: WriteProgress?
    ) async throws(ShareSyncError) -> ModifyRecordsResult { throw unused }
    func subscribe(since token: ServerChangeToken?, receiver: PushReceiver) async throws(ShareSyncError) { throw unused }
    func close() async {}
}
