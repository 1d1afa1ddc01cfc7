import Foundation
import Logging
import ShareSyncCore
import ShareSyncStore
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
        await sync.stop()
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
