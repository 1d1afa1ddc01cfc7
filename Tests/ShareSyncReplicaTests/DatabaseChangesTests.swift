import Foundation
import Testing

import ShareSyncCore
@testable import ShareSyncStore

@Suite("Database changes, pushes, purges and zone replacement")
struct DatabaseChangesTests {
    @Test("database changes store the token, list changed zones and purge deleted ones", arguments: Storage.allCases)
    func databaseChanges(storage: Storage) throws {
        try withReplica(storage) { replica in
            try replica.apply(page(zone("Topics"), saving: [try fetchedRecord("milk")], token: token(1)), owner: alice.ownerName)
            try replica.apply(page(zone("Topics", of: bob), saving: [try fetchedRecord("milk", in: zone(of: bob))], token: token(1, of: bob)), owner: bob.ownerName)
            #expect(try replica.databaseChangeToken(owner: alice.ownerName) == nil)

            let changes = DatabaseChanges(
                changedZoneIDs: [zone("Garden")], deletedZoneIDs: [zone("Topics")], changeToken: token(4), moreComing: false)
            try replica.apply(databaseChanges: changes, owner: alice.ownerName)

            #expect(try replica.databaseChangeToken(owner: alice.ownerName) == token(4))
            #expect(try replica.fetchAllZones(owner: alice.ownerName).map(\.zoneID) == [zone("Garden")])
            #expect(try replica.zoneChangeToken(owner: alice.ownerName, zoneName: "Garden") == nil)
            #expect(try replica.zoneChangeToken(owner: alice.ownerName, zoneName: "Topics") == nil)
            #expect(try replica.recordCount(owner: alice.ownerName, zoneName: "Topics") == 0)
            // Bob's zone of the same name is untouched.
            #expect(try replica.recordCount(owner: bob.ownerName, zoneName: "Topics") == 1)
            #expect(try replica.databaseChangeToken(owner: bob.ownerName) == nil)
        }
    }

    @Test("database changes naming another owner's zone are rejected", arguments: Storage.allCases)
    func databaseChangesWrongOwner(storage: Storage) throws {
        try withReplica(storage) { replica in
            try replica.apply(page(zone(of: bob), saving: [try fetchedRecord("milk", in: zone(of: bob))], token: token(1)), owner: bob.ownerName)
            let changes = DatabaseChanges(
                changedZoneIDs: [zone("Garden")], deletedZoneIDs: [zone(of: bob)], changeToken: token(4), moreComing: false)
            try expectRejected(.invalidArguments, in: replica) {
                try replica.apply(databaseChanges: changes, owner: alice.ownerName)
            }
        }
    }

    @Test("a push applies database changes, every zone's changes and its token together", arguments: Storage.allCases)
    func push(storage: Storage) throws {
        try withReplica(storage) { replica in
            try replica.apply(page(zone("Old"), saving: [try fetchedRecord("x", in: zone("Old"))], token: token(1)), owner: alice.ownerName)
            let databaseChanges = DatabaseChanges(
                changedZoneIDs: [zone("Topics"), zone("Garden")], deletedZoneIDs: [zone("Old")], changeToken: token(5),
                moreComing: false)
            let zoneChanges = [
                page(zone("Topics"), saving: [try fetchedRecord("milk")], token: token(5)),
                page(zone("Garden"), saving: [try fetchedRecord("rose", in: zone("Garden"))], token: token(5)),
            ]
            try replica.apply(databaseChanges: databaseChanges, zoneChanges: zoneChanges, token: token(6), owner: alice.ownerName)

            #expect(try replica.allZones() == [zone("Garden"), zone("Topics")])
            #expect(try replica.recordCount(owner: alice.ownerName, zoneName: "Old") == 0)
            #expect(try replica.recordCount(owner: alice.ownerName, zoneName: "Topics") == 1)
            #expect(try replica.recordCount(owner: alice.ownerName, zoneName: "Garden") == 1)
            #expect(try replica.zoneChangeToken(owner: alice.ownerName, zoneName: "Garden") == token(5))
            #expect(try replica.databaseChangeToken(owner: alice.ownerName) == token(6))
        }
    }

    @Test("purgeZone removes a revoked zone's records and token, and only that zone's", arguments: Storage.allCases)
    func purge(storage: Storage) throws {
        try withReplica(storage) { replica in
            try replica.apply(page(zone("Topics"), saving: [try fetchedRecord("milk")], token: token(1)), owner: alice.ownerName)
            try replica.apply(page(zone("Garden"), saving: [try fetchedRecord("rose", in: zone("Garden"))], token: token(2)), owner: alice.ownerName)
            try replica.purgeZone(owner: alice.ownerName, zoneName: "Topics")

            #expect(try replica.allZones() == [zone("Garden")])
            #expect(try replica.fetchRecord(Record.ID(recordName: "milk", zoneID: zone())) == nil)
            #expect(try replica.zoneChangeToken(owner: alice.ownerName, zoneName: "Topics") == nil)
            #expect(try replica.recordCount(owner: alice.ownerName, zoneName: "Garden") == 1)
            try replica.purgeZone(owner: alice.ownerName, zoneName: "Topics")  // nothing left: no error
        }
    }

    @Test("replaceZone swaps in a refetch: records not refetched are gone, the token is the last page's", arguments: Storage.allCases)
    func replaceZone(storage: Storage) throws {
        try withReplica(storage) { replica in
            try replica.apply(page(saving: [try fetchedRecord("milk"), try fetchedRecord("gone")], token: token(1)), owner: alice.ownerName)
            let pages = [
                page(saving: [try fetchedRecord("milk", ["title": "New milk"])], token: token(20), moreComing: true),
                page(saving: [try fetchedRecord("eggs")], token: token(21)),
            ]
            try replica.replaceZone(owner: alice.ownerName, zoneName: "Topics", with: pages)

            #expect(try replica.records(owner: alice.ownerName, zoneName: "Topics").map(\.recordID.recordName) == ["eggs", "milk"])
            #expect(try replica.fetchRecord(Record.ID(recordName: "milk", zoneID: zone()))?["title"] == "New milk")
            #expect(try replica.zoneChangeToken(owner: alice.ownerName, zoneName: "Topics") == token(21))
        }
    }

    @Test("replaceZone with an incomplete or mismatched refetch changes nothing", arguments: Storage.allCases)
    func replaceZoneRejected(storage: Storage) throws {
        try withReplica(storage) { replica in
            try replica.apply(page(saving: [try fetchedRecord("milk")], token: token(1)), owner: alice.ownerName)
            try expectRejected(.invalidArguments, in: replica) {
                try replica.replaceZone(owner: alice.ownerName, zoneName: "Topics", with: [page(token: token(2), moreComing: true)])
            }
            try expectRejected(.invalidArguments, in: replica) {
                try replica.replaceZone(owner: alice.ownerName, zoneName: "Topics", with: [])
            }
            try expectRejected(.invalidArguments, in: replica) {
                try replica.replaceZone(
                    owner: alice.ownerName, zoneName: "Topics",
                    with: [page(saving: [try fetchedRecord("eggs")], token: token(2), moreComing: true), page(zone("Garden"), token: token(3))])
            }
        }
    }

    @Test("a staged replacement stays invisible until committed, then swaps contents and token", arguments: Storage.allCases)
    func stagedReplacement(storage: Storage) throws {
        try withReplica(storage) { replica in
            try replica.apply(page(saving: [try fetchedRecord("milk"), try fetchedRecord("gone")], token: token(1)), owner: alice.ownerName)
            try replica.beginZoneReplacement(owner: alice.ownerName, zoneName: "Topics")
            try replica.stageZoneReplacement(page(saving: [try fetchedRecord("milk", ["title": "New"])], token: token(30), moreComing: true), owner: alice.ownerName)
            #expect(try replica.recordCount(owner: alice.ownerName, zoneName: "Topics") == 2)
            #expect(try replica.zoneChangeToken(owner: alice.ownerName, zoneName: "Topics") == token(1))
            // Not complete yet: the commit is refused.
            try expectRejected(.invalidArguments, in: replica) {
                try replica.commitZoneReplacement(owner: alice.ownerName, zoneName: "Topics")
            }

            try replica.stageZoneReplacement(page(saving: [try fetchedRecord("eggs")], token: token(31)), owner: alice.ownerName)
            try replica.commitZoneReplacement(owner: alice.ownerName, zoneName: "Topics")
            #expect(try replica.records(owner: alice.ownerName, zoneName: "Topics").map(\.recordID.recordName) == ["eggs", "milk"])
            #expect(try replica.fetchRecord(Record.ID(recordName: "milk", zoneID: zone()))?["title"] == "New")
            #expect(try replica.zoneChangeToken(owner: alice.ownerName, zoneName: "Topics") == token(31))

            // A commit consumes the staging area.
            try expectRejected(.invalidArguments, in: replica) {
                try replica.commitZoneReplacement(owner: alice.ownerName, zoneName: "Topics")
            }
        }
    }

    @Test("a discarded replacement leaves the zone as it was; staging without begin is refused", arguments: Storage.allCases)
    func discardedReplacement(storage: Storage) throws {
        try withReplica(storage) { replica in
            try replica.apply(page(saving: [try fetchedRecord("milk")], token: token(1)), owner: alice.ownerName)
            try expectRejected(.invalidArguments, in: replica) {
                try replica.stageZoneReplacement(page(token: token(2)), owner: alice.ownerName)
            }
            try replica.beginZoneReplacement(owner: alice.ownerName, zoneName: "Topics")
            try replica.stageZoneReplacement(page(token: token(2)), owner: alice.ownerName)
            let before = try ReplicaSnapshot(replica)
            try replica.discardZoneReplacement(owner: alice.ownerName, zoneName: "Topics")
            #expect(try ReplicaSnapshot(replica) == before)
            try expectRejected(.invalidArguments, in: replica) {
                try replica.commitZoneReplacement(owner: alice.ownerName, zoneName: "Topics")
            }
        }
    }
}
