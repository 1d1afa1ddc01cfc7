import Foundation
import Testing

import ShareSyncCore
@testable import ShareSyncStore

@Suite("Owners")
struct OwnerTests {
    @Test("owners are listed with their addresses; setOwner updates an address and keeps the data", arguments: Storage.allCases)
    func setAndList(storage: Storage) throws {
        try withReplica(storage) { replica in
            #expect(try replica.owners() == [alice, bob])
            try replica.apply(page(saving: [try fetchedRecord("milk")], token: token(1)), owner: alice.ownerName)
            try replica.apply(databaseChanges: DatabaseChanges(changedZoneIDs: [zone()], deletedZoneIDs: [], changeToken: token(2), moreComing: false), owner: alice.ownerName)

            var moved = alice
            moved.host = "alice.new.example"
            moved.port = 9000
            try replica.setOwner(moved)
            #expect(try replica.owner(named: alice.ownerName) == moved)
            #expect(try replica.owners().count == 2)
            #expect(try replica.recordCount(owner: alice.ownerName, zoneName: "Topics") == 1)
            #expect(try replica.databaseChangeToken(owner: alice.ownerName) == token(2))
        }
    }

    @Test("an owner's first announced address is only remembered; a different later one is followed, data kept", arguments: Storage.allCases)
    func announcedAddress(storage: Storage) throws {
        try withReplica(storage) { replica in
            try replica.apply(page(saving: [try fetchedRecord("milk")], token: token(1)), owner: alice.ownerName)
            // First announcement, different from the address used (a forwarded port): remembered only.
            #expect(try replica.noteAnnouncedAddress(owner: alice.ownerName, host: "alice.internal", port: 7420) == nil)
            #expect(try replica.owner(named: alice.ownerName) == alice)
            // The same announcement again: nothing.
            #expect(try replica.noteAnnouncedAddress(owner: alice.ownerName, host: "alice.internal", port: 7420) == nil)
            #expect(try replica.owner(named: alice.ownerName) == alice)
            // A new one: the owner moved, and is followed there; records and tokens stay.
            let moved = try #require(try replica.noteAnnouncedAddress(owner: alice.ownerName, host: "alice.new.example", port: 7421))
            #expect(moved.host == "alice.new.example" && moved.port == 7421 && moved.fingerprint == alice.fingerprint)
            #expect(try replica.owner(named: alice.ownerName) == moved)
            #expect(try replica.recordCount(owner: alice.ownerName, zoneName: "Topics") == 1)
            // Bob is untouched; an unknown owner is ignored.
            #expect(try replica.owner(named: bob.ownerName) == bob)
            #expect(try replica.noteAnnouncedAddress(owner: "_nobody", host: "x", port: 1) == nil)
        }
    }

    @Test("an owner is forgotten only once nothing of it is left: no zone, queued write, untold leave or zone to fetch again", arguments: Storage.allCases)
    func removeIfNothingLeft(storage: Storage) throws {
        try withReplica(storage) { replica in
            try replica.apply(page(saving: [try fetchedRecord("milk")], token: token(1)), owner: alice.ownerName)
            #expect(try !replica.removeOwnerIfNothingLeft(alice.ownerName), "a zone is left")
            try replica.apply(
                databaseChanges: DatabaseChanges(changedZoneIDs: [], deletedZoneIDs: [zone()], changeToken: token(2), moreComing: false),
                owner: alice.ownerName)
            #expect(try replica.fetchAllZones(owner: alice.ownerName).isEmpty)
            let queued = try replica.enqueue(owner: alice.ownerName, operation: OutboxOperation(zoneName: "Topics", deleting: ["x"]))
            #expect(try !replica.removeOwnerIfNothingLeft(alice.ownerName), "a write is queued")
            try replica.removeOperation(id: queued.id)
            let leave = PendingLeave(owner: alice.ownerName, zoneName: "Topics", shareName: "share-1")
            try replica.leaveLocally(leave)
            #expect(try !replica.removeOwnerIfNothingLeft(alice.ownerName), "a leave is not told yet")
            // Told: the zone is noted to be fetched again (another share of it may be this node's).
            try replica.resolvePendingLeave(leave)
            #expect(try replica.zonesToRefetch(owner: alice.ownerName) == ["Topics"])
            #expect(try !replica.removeOwnerIfNothingLeft(alice.ownerName), "a zone is to be fetched again")
            try replica.refetched(owner: alice.ownerName, zoneName: "Topics")
            #expect(try replica.owner(named: alice.ownerName) == alice)
            // Nothing left: forgotten, and only alice.
            #expect(try replica.removeOwnerIfNothingLeft(alice.ownerName))
            #expect(try replica.owners() == [bob])
            #expect(try !replica.removeOwnerIfNothingLeft(alice.ownerName), "already forgotten")
            // An owner being fetched (a zone staged for replacement) is kept too.
            try replica.beginZoneReplacement(owner: bob.ownerName, zoneName: "Topics")
            #expect(try !replica.removeOwnerIfNothingLeft(bob.ownerName), "a zone is being fetched")
            #expect(try replica.owners() == [bob])
        }
    }

    @Test("removeOwner forgets the owner's zones, records and tokens, and no one else's", arguments: Storage.allCases)
    func remove(storage: Storage) throws {
        try withReplica(storage) { replica in
            try replica.apply(page(saving: [try fetchedRecord("milk")], token: token(1)), owner: alice.ownerName)
            try replica.apply(page(zone(of: bob), saving: [try fetchedRecord("milk", in: zone(of: bob))], token: token(1)), owner: bob.ownerName)
            try replica.removeOwner(alice.ownerName)
            #expect(try replica.owners() == [bob])
            #expect(try replica.allZones() == [zone(of: bob)])
            #expect(try replica.fetchRecord(Record.ID(recordName: "milk", zoneID: zone(of: alice))) == nil)
            #expect(try replica.zoneChangeToken(owner: alice.ownerName, zoneName: "Topics") == nil)
            #expect(try replica.recordCount(owner: bob.ownerName, zoneName: "Topics") == 1)

            // Added again, it starts from scratch.
            try replica.setOwner(alice)
            #expect(try replica.databaseChangeToken(owner: alice.ownerName) == nil)
            #expect(try replica.fetchAllZones(owner: alice.ownerName).isEmpty)
        }
    }
}
