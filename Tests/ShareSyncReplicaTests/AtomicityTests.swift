import Foundation
import Testing

import ShareSyncCore
@testable import ShareSyncStore

@Suite("Each apply is one transaction")
struct AtomicityTests {
    /// A replica holding one page of Alice's zone, token 1.
    func seeded(_ replica: SharedDatabaseReplica) throws {
        try replica.apply(page(saving: [try fetchedRecord("milk", ["title": "Milk"])], token: token(1)), owner: alice.ownerName)
    }

    @Test("a page whose zone belongs to another owner is rejected and changes nothing", arguments: Storage.allCases)
    func wrongOwner(storage: Storage) throws {
        try withReplica(storage) { replica in
            try seeded(replica)
            let bobsPage = page(zone(of: bob), saving: [try fetchedRecord("x", in: zone(of: bob))], token: token(2))
            let error = try expectRejected(.invalidArguments, in: replica) { try replica.apply(bobsPage, owner: alice.ownerName) }
            #expect(error?.rule == .replicaOwnerMismatch)
        }
    }

    @Test("a record failing midway rolls back the records before it and the token", arguments: Storage.allCases)
    func failureMidway(storage: Storage) throws {
        try withReplica(storage) { replica in
            try seeded(replica)
            // Stored one by one: "bread" and the deletion of "milk" are written before "stray" fails.
            let stray = try fetchedRecord("stray", in: zone("Elsewhere"))
            let changes = ZoneChanges(
                zoneID: zone(),
                changes: [
                    .changed(try fetchedRecord("bread")),
                    .deleted(DeletedRecord(recordID: Record.ID(recordName: "milk", zoneID: zone()), recordType: "Note")),
                    .changed(stray),
                ],
                changeToken: token(2), moreComing: false)
            let error = try expectRejected(.invalidArguments, in: replica) { try replica.apply(changes, owner: alice.ownerName) }
            #expect(error?.rule == .replicaZoneMismatch)
            #expect(error?.recordID == stray.recordID)
            #expect(try replica.zoneChangeToken(owner: alice.ownerName, zoneName: "Topics") == token(1))
            #expect(try replica.fetchRecord(Record.ID(recordName: "milk", zoneID: zone())) != nil)
        }
    }

    @Test("a record that cannot be stored as JSON rolls back the whole page", arguments: Storage.allCases)
    func unstorableRecord(storage: Storage) throws {
        try withReplica(storage) { replica in
            try seeded(replica)
            var broken = Record(recordType: "Note", recordID: Record.ID(recordName: "nan", zoneID: zone()))
            broken["value"] = .double(.nan)
            let changes = page(saving: [try fetchedRecord("bread"), broken], deleting: ["milk"], token: token(2))
            try expectRejected(.invalidArguments, in: replica) { try replica.apply(changes, owner: alice.ownerName) }
        }
    }

    @Test("a push with one bad zone applies none of its zones nor its token", arguments: Storage.allCases)
    func pushIsAtomic(storage: Storage) throws {
        try withReplica(storage) { replica in
            try seeded(replica)
            let push = DatabaseChanges(
                changedZoneIDs: [zone(), zone("Garden")], deletedZoneIDs: [], changeToken: token(3), moreComing: false)
            let good = page(zone("Garden"), saving: [try fetchedRecord("rose", in: zone("Garden"))], token: token(3))
            let bad = page(zone(of: bob), saving: [], token: token(3))
            try expectRejected(.invalidArguments, in: replica) {
                try replica.apply(databaseChanges: push, zoneChanges: [good, bad], token: token(3), owner: alice.ownerName)
            }
            #expect(try replica.databaseChangeToken(owner: alice.ownerName) == nil)
        }
    }

    @Test("changes for an owner that was never added, or was removed, are refused", arguments: Storage.allCases)
    func unknownOwner(storage: Storage) throws {
        try withReplica(storage) { replica in
            let carol = RecordZone.ID(zoneName: "Topics", ownerName: "_c3")
            let error = try expectRejected(.unknownItem, in: replica) {
                try replica.apply(page(carol, saving: [try fetchedRecord("x", in: carol)], token: token(1)), owner: "_c3")
            }
            #expect(error?.rule == .replicaUnknownOwner)

            try seeded(replica)
            try replica.removeOwner(alice.ownerName)
            try expectRejected(.unknownItem, in: replica) {
                try replica.apply(page(saving: [try fetchedRecord("late")], token: token(2)), owner: alice.ownerName)
            }
            #expect(try replica.allZones().isEmpty)
        }
    }

    @Test("readers running alongside never see half of a page", arguments: Storage.allCases)
    func readersSeeWholePages(storage: Storage) throws {
        try withReplica(storage) { replica in
            let pageSize = 40
            let pages = try (0..<25).map { p in
                page(saving: try (0..<pageSize).map { try fetchedRecord("r\(p)-\($0)") }, token: token(Int64(p + 1)))
            }
            let counts = Box<[Int]>([])
            DispatchQueue.concurrentPerform(iterations: 2) { worker in
                if worker == 0 {
                    for changes in pages { try? replica.apply(changes, owner: alice.ownerName) }
                } else {
                    for _ in 0..<200 {
                        let count = (try? replica.recordCount(owner: alice.ownerName, zoneName: "Topics")) ?? -1
                        counts.withLock { $0.append(count) }
                    }
                }
            }
            #expect(counts.withLock { $0 }.allSatisfy { $0 >= 0 && $0 % pageSize == 0 })
            #expect(try replica.recordCount(owner: alice.ownerName, zoneName: "Topics") == pageSize * pages.count)
            #expect(try replica.zoneChangeToken(owner: alice.ownerName, zoneName: "Topics") == token(25))
        }
    }
}
