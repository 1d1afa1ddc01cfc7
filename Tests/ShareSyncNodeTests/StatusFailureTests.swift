import Foundation
import Logging
import ShareSyncCore
@testable import ShareSyncStore
import Testing
@testable import ShareSyncNode

/// `status` says why a link is not following its owner, lists owners none of whose zones have
/// arrived, and fails (rather than showing "none") when the node cannot read its own database.
@Suite("status: failures reach the user")
struct StatusFailureTests {
    private static let baseStatus = NodeStatus(
        userRecordName: "_b", fingerprint: "00", displayName: "B", listen: HostAndPort(host: "127.0.0.1", port: 1),
        advertised: HostAndPort(host: "127.0.0.1", port: 1), connections: 0)

    private func status(_ handler: ControlHandler) async throws -> NodeStatus {
        try ControlResponse<NodeStatus>.result(of: await handler.respond(toLine: Data(#"{"status":{}}"#.utf8)))
    }

    @Test("an owner whose link keeps failing is listed, with no zones yet and the failure")
    func failingLinkShowsItsError() async throws {
        let b = try TestParticipant()
        defer { b.remove() }
        let replica = try SharedDatabaseReplica(path: b.replicaPath)
        // Nobody listens on port 1: every attempt is refused.
        try replica.setOwner(OwnerInfo(ownerName: "_gone", host: "127.0.0.1", port: 1, fingerprint: String(repeating: "a", count: 64)))
        let sync = ParticipantSync(
            replica: replica, identity: b.identity,
            configuration: .init(initialBackoff: .milliseconds(20), maximumBackoff: .milliseconds(200)))
        try sync.start()
        let base = Self.baseStatus
        let handler = ControlHandler(
            database: try PrivateDatabase(inMemoryOwnerName: "_b"), participant: sync, status: { base }, logger: Logger(label: "test"))
        var link: OwnerLinkStatus?
        for _ in 0..<200 {
            link = try await status(handler).owners?.first { $0.ownerName == "_gone" }
            if link?.lastError != nil { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(link?.zones == 0)
        #expect(link?.synced == false)
        #expect(link?.connected == false)
        #expect(link?.address == HostAndPort(host: "127.0.0.1", port: 1))
        #expect([.networkFailure, .networkUnavailable].contains(link?.lastError?.code), "\(String(describing: link))")
        // In words: before, SwiftNIO's own description ("Connection errors: SingleConnectionFailure(…)").
        let message = link?.lastError?.message ?? ""
        #expect(message.hasSuffix("cannot connect to 127.0.0.1:1: connection refused"), "\(message)")
        #expect(!message.contains("SingleConnectionFailure"))
        await sync.stop()
    }

    @Test("a part of the replica that cannot be read is named in errors; the other parts are still shown")
    func unreadableReplicaPartsAreNamed() async throws {
        let b = try TestParticipant()
        defer { b.remove() }
        let replica = try SharedDatabaseReplica(path: b.replicaPath)
        try replica.setOwner(OwnerInfo(ownerName: "_gone", host: "127.0.0.1", port: 1, fingerprint: String(repeating: "a", count: 64)))
        // Not started: no link reads the replica meanwhile, so each injected failure meets status's own reads.
        let sync = ParticipantSync(replica: replica, identity: b.identity)
        let base = Self.baseStatus
        let handler = ControlHandler(
            database: try PrivateDatabase(inMemoryOwnerName: "_b"), participant: sync, status: { base }, logger: Logger(label: "test"))

        // The first read (the outbox's counts) fails; the zones and owners are read after it.
        replica.readFailures.store(1, ordering: .relaxed)
        let one = try await status(handler)
        #expect(one.outbox == nil)
        #expect(one.errors?.count == 1)
        #expect(one.errors?.first?.message.contains("the replica's outbox could not be read") == true, "\(String(describing: one.errors))")
        #expect(one.owners?.map(\.ownerName) == ["_gone"])
        #expect(one.userRecordName == "_b")

        // Every read fails: each part is named, and the node's own lines are still there.
        replica.readFailures.store(1000, ordering: .relaxed)
        let all = try await status(handler)
        replica.readFailures.store(0, ordering: .relaxed)
        #expect(all.outbox == nil && all.replicas == nil && all.owners == nil)
        let messages = all.errors?.map(\.message) ?? []
        #expect(messages.count == 3, "\(messages)")
        for part in ["outbox", "zones", "owners"] {
            #expect(messages.contains { $0.contains("the replica's \(part) could not be read") }, "\(part): \(messages)")
        }
        #expect(all.fingerprint == "00")

        let healthy = try await status(handler)
        #expect(healthy.errors == nil)
        #expect(healthy.outbox != nil && healthy.replicas != nil && healthy.owners != nil)
    }

    @Test("a status whose own database cannot be read is an error, not an empty list")
    func unreadableSharesFail() async throws {
        let handler = ControlHandler(
            database: try PrivateDatabase(inMemoryOwnerName: "_b"),
            status: { () throws(ShareSyncError) -> NodeStatus in throw ShareSyncError(.internalError, "the private database cannot be read") },
            logger: Logger(label: "test"))
        await #expect(throws: ControlError.self) { _ = try await status(handler) }
    }
}
