import Foundation
import Logging
import NIOCore
import NIOPosix
import ShareSyncCore
import ShareSyncStore
import ShareSyncWire
import Testing
@testable import ShareSyncNode

/// A CLI command that gives up (its timeout, Ctrl-C) closes its control connection; the daemon then
/// cancels the request it was answering, so the wait it was in ends instead of running to its own
/// timeout for nobody (issue 15: waiting requests are cancellable).
@Suite("Control requests are cancelled when their client goes away")
struct ControlCancellationTests {
    @Test("an accept waiting on an owner that never answers ends as soon as the control client closes")
    func acceptEndsWhenTheClientCloses() async throws {
        // An "owner" that accepts TCP connections and never says a word: the TLS handshake waits for
        // the connect timeout (60 s in these tests).
        let silent = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .bind(host: "127.0.0.1", port: 0).get()
        defer { silent.close(promise: nil) }
        let owner = NodeIdentity.generate()
        let url = "sharesync://127.0.0.1:\(silent.localAddress!.port!)/share/abc?owner=\(owner.fingerprint)"

        let b = try TestParticipant()
        defer { b.remove() }
        // Connecting waits up to 2 minutes: without cancellation the accept would wait that long.
        var slow = ClientConfiguration()
        slow.limits.handshakeTimeout = .seconds(120)
        let sync = ParticipantSync(
            replica: try SharedDatabaseReplica(path: b.replicaPath), identity: b.identity,
            configuration: .init(connectTimeout: .seconds(120), client: slow))
        try sync.start()
        let status = try JSONDecoder().decode(
            NodeStatus.self,
            from: Data(#"{"userRecordName":"_b","fingerprint":"00","displayName":"B","listen":{"host":"127.0.0.1","port":1},"advertised":{"host":"127.0.0.1","port":1},"connections":0}"#.utf8))
        let handler = ControlHandler(
            database: try PrivateDatabase(inMemoryOwnerName: "_b"), participant: sync, status: { status },
            logger: Logger(label: "test"))
        let path = b.folder.appending(path: "control.sock").path
        let server = try await ControlServer.bind(path: path, handler: handler, logger: Logger(label: "test"))
        let serving = Task { await server.run() }

        let client = try await ControlClient.connect(path: path)
        let asking = Task { try await client.send(.accept(url: url, timeoutSeconds: 600)) }
        try await waitFor(seconds: 60) { server.requestsInProgress == 1 }
        // It really waits: still in progress a second later.
        try await Task.sleep(for: .seconds(1))
        #expect(server.requestsInProgress == 1)

        let closed = ContinuousClock.now
        await client.close()
        try await waitFor(seconds: 60) { server.requestsInProgress == 0 }
        #expect(ContinuousClock.now - closed < .seconds(30), "the daemon kept waiting for a client that had gone")
        if case .success = await asking.result { Issue.record("the closed client got an answer") }

        await server.close()
        await serving.value
        await sync.stop()
    }

    private func waitFor(seconds: Double, _ condition: () -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(seconds)
        while !condition(), ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(10)) }
        #expect(condition())
    }
}
