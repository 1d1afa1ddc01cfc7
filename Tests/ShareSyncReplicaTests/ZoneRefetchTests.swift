import Foundation
import Testing

import ShareSyncCore
@testable import ShareSyncStore

/// A zone left locally whose leave the owner now has is fetched again from the start at the next
/// catch-up (another share of it may still be this node's); until then pushes leave it alone.
@Suite("Zones to fetch again after a resolved leave")
struct ZoneRefetchTests {
    @Test("a resolved leave marks the zone; a push of it is left out; the catch-up's pages from the start bring it back")
    func pushesWaitForTheRefetch() throws {
        let replica = try SharedDatabaseReplica(inMemory: ())
        try replica.setOwner(alice)
        let old = try fetchedRecord("kept", tag: "1")
        try replica.apply(ZoneChanges(zoneID: zone(), changes: [.changed(old)], changeToken: token(5), moreComing: false), owner: alice.ownerName)

        let leave = PendingLeave(owner: alice.ownerName, zoneName: "Topics", shareName: "first")
        try replica.leaveLocally(leave)
        try replica.resolvePendingLeave(leave)
        #expect(try replica.zonesToRefetch(owner: alice.ownerName) == ["Topics"])
        #expect(try replica.fetchAllZones(owner: alice.ownerName).isEmpty, "not shown, even empty")

        // A push of the zone, before the catch-up: it carries only the latest change. Applied, it
        // stored a current token, and the catch-up went on from there without "kept".
        let newer = try fetchedRecord("new", tag: "2")
        try replica.apply(
            databaseChanges: DatabaseChanges(changedZoneIDs: [zone()], deletedZoneIDs: [], changeToken: token(9), moreComing: false),
            zoneChanges: [ZoneChanges(zoneID: zone(), changes: [.changed(newer)], changeToken: token(9), moreComing: false)],
            token: token(9), owner: alice.ownerName)
        #expect(try replica.fetchAllZones(owner: alice.ownerName).isEmpty)
        #expect(try replica.zoneChangeToken(owner: alice.ownerName, zoneName: "Topics") == nil)
        #expect(try replica.databaseChangeToken(owner: alice.ownerName) == token(9))

        // The catch-up's page from the start, then the mark goes.
        try replica.apply(
            ZoneChanges(zoneID: zone(), changes: [.changed(old), .changed(newer)], changeToken: token(9), moreComing: false),
            owner: alice.ownerName)
        try replica.refetched(owner: alice.ownerName, zoneName: "Topics")
        #expect(try replica.records(owner: alice.ownerName, zoneName: "Topics").map(\.recordID.recordName) == ["kept", "new"])
        #expect(try replica.zonesToRefetch(owner: alice.ownerName).isEmpty)
        // A late second resolution of the same leave (the link's, after an accept's) leaves the zone
        // fetched again in place: it purged it and marked it again before.
        try replica.resolvePendingLeave(leave)
        #expect(try replica.recordCount(owner: alice.ownerName, zoneName: "Topics") == 2)
        #expect(try replica.zonesToRefetch(owner: alice.ownerName).isEmpty)
    }
}
