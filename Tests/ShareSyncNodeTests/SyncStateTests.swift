import Foundation
import ShareSyncCore
import ShareSyncNode
import ShareSyncWire
import Testing

/// What the owner server keeps of each participant's sync (``OwnerServer/syncState(of:)``, shown by
/// `status`): positions it served, and nothing a caller merely names.
@Suite("Owner sync state")
struct SyncStateTests {
    @Test("a served page moves a participant's position; a stranger's requests for zones it cannot see leave nothing")
    func onlyServedPositionsAreKept() async throws {
        let owner = try await TestOwner.start()
        let bob = NodeIdentity.generate()
        let stranger = NodeIdentity.generate()
        let (url, _) = try owner.shareTopic(invite: [(bob, .readWrite)])

        let bobs = try await OwnerConnection.connect(url: url, identity: bob)
        _ = try await bobs.acceptShare(url: url)
        let page = try await bobs.fetchZoneChanges(zoneName: "Topics", since: nil)
        let bobState = try #require(owner.server.syncState(of: bob.userRecordName))
        #expect(bobState.zoneTokens["Topics"] == page.changeToken)
        #expect(bobState.lastSync != nil)

        // The stranger sends Bob's token for the shared zone and for zones of its own choosing: each is
        // refused, and the owner keeps no position for any of them.
        let strangers = try await OwnerConnection.connect(url: url, identity: stranger)
        for zoneName in ["Topics"] + (0..<20).map({ "Invented\($0)" }) {
            let refused = await expectShareSyncError {
                _ = try await strangers.fetchZoneChanges(zoneName: zoneName, since: page.changeToken)
            }
            #expect(refused != nil, "\(zoneName) was answered")
        }
        #expect(owner.server.syncState(of: stranger.userRecordName)?.zoneTokens.isEmpty ?? true)
        // Asking for database changes, it sees nothing: the owner keeps no state for it at all (one
        // was kept per key that ever asked, so new keys grew the owner without bound).
        let nothing = try await strangers.fetchDatabaseChanges(since: nil)
        #expect(nothing.changedZoneIDs.isEmpty)
        #expect(owner.server.syncState(of: stranger.userRecordName) == nil)
        // Bob, who sees the zone, is noted as before.
        _ = try await bobs.fetchDatabaseChanges(since: nil)
        #expect(owner.server.syncState(of: bob.userRecordName)?.lastSync != nil)
        await strangers.close()
        await bobs.close()
        try await owner.stop()
    }
}
