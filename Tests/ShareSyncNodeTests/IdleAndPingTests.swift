import Foundation
import NIOCore
import ShareSyncCore
import ShareSyncNode
import ShareSyncStore
import ShareSyncWire
import Testing

/// An owner whose connections count as idle after one second of nothing in either direction.
func ownerWithOneSecondIdleTimeout() async throws -> TestOwner {
    var configuration = OwnerServer.Configuration()
    configuration.transport.limits.idleTimeout = .seconds(1)
    return try await TestOwner.start(configuration)
}

/// A client configuration whose own idle timeout is one second (so its automatic ping interval is a third of that).
let oneSecondIdleClient = ClientConfiguration(limits: FrameLimits(idleTimeout: .seconds(1)))

@Suite("Idle connections and ping: idle means nothing in either direction")
struct IdleAndPingTests {
    @Test func pingIsAnsweredBeforeAndAfterSubscribe() async throws {
        let owner = try await TestOwner.start()
        let client = try await RawClient.plain(port: owner.server.port)
        try await client.authenticate(NodeIdentity.generate())
        try await client.send(#"{"id":7,"op":"ping"}"#)
        #expect(try await client.line() == #"{"id":7,"ok":{}}"#)
        try await client.send(#"{"id":8,"op":"subscribe"}"#)
        #expect(try await client.json()?["id"] as? Int == 8)
        try await client.send(#"{"id":9,"op":"ping"}"#)
        #expect(try await client.line() == #"{"id":9,"ok":{}}"#)
        await client.close()
        try await owner.stop()
    }

    @Test func aSubscriberThatOnlyReceivesPushesIsNotCutOffButASilentConnectionIs() async throws {
        let owner = try await ownerWithOneSecondIdleTimeout()
        let b = NodeIdentity.generate()
        let (url, _) = try owner.shareTopic(invite: [(b, .readOnly)])
        let client = try await RawClient.plain(port: owner.server.port)
        try await client.authenticate(b)
        try await client.sendJSON(["id": 1, "op": "acceptShare", "url": url])
        #expect(try await client.json()?["ok"] != nil)
        try await client.sendJSON(["id": 2, "op": "subscribe"])
        #expect(try await client.json()?["ok"] != nil)

        // Three seconds of pushes, one every quarter second, and the client sends nothing at all.
        var pushes = 0
        for i in 0..<12 {
            try owner.saveNote("note-\(i)", title: "push \(i)")
            try await Task.sleep(for: .milliseconds(250))
            while case (let line?, _) = client.collector.pop() {
                let message = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
                #expect(message["push"] as? String == "changes", "\(line)")
                pushes += 1
            }
        }
        #expect(pushes > 0)
        #expect(client.channel.isActive, "a listener receiving pushes was cut off")

        // Now nothing in either direction: the owner ends the connection, naming the rule.
        var last: [String: Any]?
        repeat { last = try await client.json(5) } while last?["push"] != nil
        #expect(errorCode(last) == "networkFailure")
        #expect(errorRule(last) == "idleTimeout")
        #expect(try await client.closes(within: 5))
        await client.close()
        try await owner.stop()
    }

    @Test func aConnectionSendingOnlyPingsIsNotCutOff() async throws {
        let owner = try await ownerWithOneSecondIdleTimeout()
        let client = try await RawClient.plain(port: owner.server.port)
        try await client.authenticate(NodeIdentity.generate())
        for id in 1...10 {
            try await client.sendJSON(["id": id, "op": "ping"])
            #expect(try await client.line() == #"{"id":\#(id),"ok":{}}"#)
            try await Task.sleep(for: .milliseconds(300))
        }
        #expect(client.channel.isActive)
        await client.close()
        try await owner.stop()
    }

    @Test func aConnectionWithNothingInEitherDirectionIsCutWithIdleTimeout() async throws {
        let owner = try await ownerWithOneSecondIdleTimeout()
        let client = try await RawClient.plain(port: owner.server.port)
        try await client.authenticate(NodeIdentity.generate())
        let started = ContinuousClock.now
        let last = try await client.json(5)
        #expect(errorCode(last) == "networkFailure")
        #expect(errorRule(last) == "idleTimeout")
        #expect(try await client.closes(within: 5))
        #expect(ContinuousClock.now - started >= .milliseconds(900))
        await client.close()
        try await owner.stop()
    }
}

@Suite("Idle connections and ping: the participant side pings when it has sent nothing for a while")
struct ParticipantPingTests {
    @Test func anOwnerConnectionThatPingsSurvivesAQuietSubscriptionAndOneThatDoesNotIsCut() async throws {
        let owner = try await ownerWithOneSecondIdleTimeout()
        let b = NodeIdentity.generate()
        let (url, _) = try owner.shareTopic(invite: [(b, .readOnly)])
        let pinging = try await OwnerConnection.connect(url: url, identity: b, configuration: oneSecondIdleClient)
        try await pinging.acceptShare(url: url)
        let silent = try await OwnerConnection.connect(url: url, identity: b, configuration: oneSecondIdleClient, pingInterval: .never)
        _ = try await pinging.subscribe()
        _ = try await silent.subscribe()
        try await Task.sleep(for: .seconds(3))
        #expect(pinging.isActive, "a connection that pings was cut off")
        try await pinging.ping()
        #expect(try await pinging.fetchDatabaseChanges(since: nil).changedZoneIDs.count == 1)
        #expect(!silent.isActive, "a connection quiet in both directions stayed open")
        await pinging.close()
        await silent.close()
        try await owner.stop()
    }

    @Test func theSyncEngineKeepsAQuietOwnerConnectionOpen() async throws {
        let owner = try await ownerWithOneSecondIdleTimeout()
        let b = try TestParticipant()
        defer { b.remove() }
        let (url, _) = try owner.shareTopic(invite: [(b.identity, .readWrite)])
        let sync = ParticipantSync(
            replica: try SharedDatabaseReplica(path: b.replicaPath), identity: b.identity,
            configuration: .init(initialBackoff: .milliseconds(20), client: oneSecondIdleClient))
        let log = EventLog(sync)
        try sync.start()
        try await sync.accept(url: url)
        let ownerName = owner.identity.userRecordName
        try await expectEventually(sync, "following") { sync.status(owner: ownerName) == .following }
        let disconnections = { log.count { if case .disconnected = $0 { true } else { false } } }
        let before = disconnections()
        try await Task.sleep(for: .seconds(3))
        #expect(disconnections() == before, "the engine's quiet connection was cut: \(log.all)")
        #expect(sync.status(owner: ownerName) == .following)
        try owner.saveNote("later", title: "still connected")
        try await expectReplicaMatches(sync, owner)
        await sync.stop()
        try await owner.stop()
    }
}
