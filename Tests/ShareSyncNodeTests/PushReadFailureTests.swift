import Foundation
import ShareSyncCore
import ShareSyncWire
import Testing
@testable import ShareSyncNode

/// A push the owner fails to read twice in a row closes the connection: the participant comes back
/// and catches up from its stored tokens, instead of staying "in sync" while a committed change waits
/// for the next commit (on a quiet owner, for good). A single failed read is tried once more.
@Suite("A push that cannot be read")
struct PushReadFailureTests {
    /// An owner sharing its topic with `b`, who accepted it, fetched the database's changes and subscribed.
    private func subscribedParticipant() async throws -> (
        owner: TestOwner, b: NodeIdentity, url: String, connection: OwnerConnection, token: ServerChangeToken,
        stream: AsyncStream<OwnerConnection.Push>
    ) {
        let owner = try await TestOwner.start()
        let (b, url, connection) = try await owner.acceptedParticipant()
        let token = try await connection.fetchDatabaseChanges(since: nil).changeToken
        return (owner, b, url, connection, token, try await connection.subscribe(since: token))
    }

    @Test("a read that fails once is tried again: the push comes on the same connection")
    func failedPushReadIsRetriedOnce() async throws {
        let (owner, _, _, connection, _, stream) = try await subscribedParticipant()

        owner.server.registry.pushReadFailures.store(1, ordering: .relaxed)
        try owner.saveNote("after", title: "x")
        let names = try await withTimeout(20) { () -> [String] in
            for await push in stream {
                let names = push.zoneChanges.flatMap(\.changes).compactMap { change -> String? in
                    if case .changed(let record) = change { return record.recordID.recordName }
                    return nil
                }
                if !names.isEmpty { return names }
            }
            return []
        }
        #expect(names == ["after"])
        #expect(owner.server.registry.pushReadFailures.load(ordering: .relaxed) == 0, "the failing read was tried")
        await connection.close()
        try await owner.stop()
    }

    @Test("the subscription's connection closes; a new connection catches up and gets the change")
    func failedPushReadClosesTheConnection() async throws {
        let (owner, b, url, connection, token, stream) = try await subscribedParticipant()

        owner.server.registry.pushReadFailures.store(2, ordering: .relaxed)  // the read and its retry
        try owner.saveNote("after", title: "x")
        // The stream ends with no push (before: it stayed open, and the push waited for another commit).
        let pushes = try await withTimeout(20) {
            var count = 0
            for await _ in stream { count += 1 }
            return count
        }
        #expect(pushes == 0)
        #expect(owner.server.registry.pushReadFailures.load(ordering: .relaxed) == 0, "the read was tried")
        await connection.close()

        let again = try await OwnerConnection.connect(url: url, identity: b)
        let zones = try await again.fetchDatabaseChanges(since: token)
        #expect(zones.changedZoneIDs.map(\.zoneName) == ["Topics"])
        await again.close()
        try await owner.stop()
    }
}
