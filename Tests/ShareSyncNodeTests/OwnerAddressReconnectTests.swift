import Foundation
import ShareSyncCore
import ShareSyncStore
import ShareSyncWire
import Testing
@testable import ShareSyncNode

/// `owner address` on a participant that is connected: the engine leaves the old address and
/// connects at the new one at once (as its help says), rather than going on over the old connection.
@Suite("owner address while connected")
struct OwnerAddressReconnectTests {
    @Test("the connection to the old address ends and the engine follows the owner at the new one; a dead address shows at once")
    func anAddressSetByHandTakesEffectAtOnce() async throws {
        let owner = try await TestOwner.start()
        let b = try TestParticipant()
        defer { b.remove() }
        let (url, _) = try owner.shareTopic(invite: [(b.identity, .readWrite)])
        let sync = try b.makeSync()
        let log = EventLog(sync)
        try sync.start()
        try await sync.accept(url: url)
        let ownerName = owner.identity.userRecordName
        let bName = b.identity.userRecordName
        try await expectEventually(sync, "following") { sync.status(owner: ownerName) == .following }
        #expect(owner.server.connectedIdentities.contains(bName))

        // The same owner, also reachable at a second port; the first stays up.
        let failures = { log.count { if case .disconnected(_, _?, _) = $0 { true } else { false } } }
        let failuresBefore = failures()
        let second = try await owner.restartServer(port: 0)
        // It advertises where it is: the participant hears that address in its welcome.
        second.setAdvertisedAddress(WireAddress(host: "127.0.0.1", port: second.port), announce: false)
        try sync.setOwnerAddress(owner: ownerName, host: "127.0.0.1", port: second.port)
        try await eventually("connected at the new address only", timeout: .seconds(15)) {
            second.connectedIdentities.contains(bName) && !owner.server.connectedIdentities.contains(bName)
                && sync.status(owner: ownerName) == .following
        }
        // A reconnection asked for is not a failure: the connection it ended reports none.
        #expect(failures() == failuresBefore, "\(log.all)")
        try await eventually("the reconnection's event (no error, no wait)") {
            log.count { if case .disconnected(_, nil, .zero) = $0 { true } else { false } } >= 1
        }
        try owner.saveNote("after-move", title: "arrives over the new connection")
        try await expectReplicaMatches(sync, owner)

        // A mistyped address (nothing listens on port 1) shows now, not at the next disconnection, and
        // is not covered up by the address the owner announced (before, the link fell back on it and
        // followed the owner as if the typo worked).
        try await eventually("the announced address heard") {
            (try? sync.replica.announcedAddress(owner: ownerName))?.port == second.port
        }
        try sync.setOwnerAddress(owner: ownerName, host: "127.0.0.1", port: 1)
        try await eventually("the link fails at the dead address", timeout: .seconds(15)) {
            !second.connectedIdentities.contains(bName)
                && [.networkFailure, .networkUnavailable].contains(sync.lastFailure(owner: ownerName)?.code)
        }
        #expect(sync.status(owner: ownerName) != .following)

        await sync.stop()
        try await second.shutdown()
        try await owner.stop()
    }
}
