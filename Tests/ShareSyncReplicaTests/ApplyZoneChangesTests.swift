import Foundation
import Testing

import ShareSyncCore
@testable import ShareSyncStore

@Suite("Applying zone changes")
struct ApplyZoneChangesTests {
    @Test("applied records read back by zone, by ID and by count", arguments: Storage.allCases)
    func applyThenRead(storage: Storage) throws {
        try withReplica(storage) { replica in
            let milk = try fetchedRecord("milk", ["title": "Milk"])
            let eggs = try fetchedRecord("eggs", ["title": "Eggs", "count": 12])
            try replica.apply(page(saving: [milk, eggs], token: token(1)), owner: alice.ownerName)

            #expect(try replica.records(owner: alice.ownerName, zoneName: "Topics") == [eggs, milk])
            #expect(try replica.fetchRecord(milk.recordID) == milk)
            #expect(try replica.fetchRecord(milk.recordID)?["title"] == "Milk")
            #expect(try replica.fetchRecord(Record.ID(recordName: "bread", zoneID: zone())) == nil)
            #expect(try replica.recordCount(owner: alice.ownerName, zoneName: "Topics") == 2)
            #expect(try replica.fetchAllZones(owner: alice.ownerName) == [RecordZone(zoneID: zone())])
            #expect(try replica.allZones() == [zone()])
        }
    }

    @Test("a later page updates changed records and removes deleted ones", arguments: Storage.allCases)
    func updatesAndDeletions(storage: Storage) throws {
        try withReplica(storage) { replica in
            let milk = try fetchedRecord("milk", ["title": "Milk"])
            let eggs = try fetchedRecord("eggs", ["title": "Eggs"])
            try replica.apply(page(saving: [milk, eggs], token: token(1)), owner: alice.ownerName)

            let oatMilk = try fetchedRecord("milk", ["title": "Oat milk"])
            try replica.apply(page(saving: [oatMilk], deleting: ["eggs", "never-seen"], token: token(2)), owner: alice.ownerName)

            #expect(try replica.records(owner: alice.ownerName, zoneName: "Topics") == [oatMilk])
            #expect(try replica.fetchRecord(eggs.recordID) == nil)
            #expect(try replica.recordCount(owner: alice.ownerName, zoneName: "Topics") == 1)
        }
    }

    @Test("applying the same page twice leaves the same contents", arguments: Storage.allCases)
    func idempotent(storage: Storage) throws {
        try withReplica(storage) { replica in
            let changes = page(saving: [try fetchedRecord("milk")], deleting: ["eggs"], token: token(3))
            try replica.apply(changes, owner: alice.ownerName)
            let once = try ReplicaSnapshot(replica)
            try replica.apply(changes, owner: alice.ownerName)
            #expect(try ReplicaSnapshot(replica) == once)
        }
    }

    @Test("each page stores its zone token; zones never fetched have none", arguments: Storage.allCases)
    func zoneTokens(storage: Storage) throws {
        try withReplica(storage) { replica in
            #expect(try replica.zoneChangeToken(owner: alice.ownerName, zoneName: "Topics") == nil)
            try replica.apply(page(token: token(5)), owner: alice.ownerName)
            #expect(try replica.zoneChangeToken(owner: alice.ownerName, zoneName: "Topics") == token(5))
            try replica.apply(page(saving: [try fetchedRecord("milk")], token: token(9), moreComing: true), owner: alice.ownerName)
            #expect(try replica.zoneChangeToken(owner: alice.ownerName, zoneName: "Topics") == token(9))
            #expect(try replica.zoneChangeToken(owner: alice.ownerName, zoneName: "Other") == nil)
            #expect(try replica.zoneChangeToken(owner: bob.ownerName, zoneName: "Topics") == nil)
        }
    }

    @Test("two owners' zones of the same name are kept apart", arguments: Storage.allCases)
    func ownersKeptApart(storage: Storage) throws {
        try withReplica(storage) { replica in
            let alicesMilk = try fetchedRecord("milk", in: zone(of: alice), ["title": "Alice's milk"])
            let bobsMilk = try fetchedRecord("milk", in: zone(of: bob), ["title": "Bob's milk"])
            try replica.apply(page(zone(of: alice), saving: [alicesMilk], token: token(1, of: alice)), owner: alice.ownerName)
            try replica.apply(page(zone(of: bob), saving: [bobsMilk], token: token(7, of: bob)), owner: bob.ownerName)

            #expect(try replica.fetchRecord(alicesMilk.recordID)?["title"] == "Alice's milk")
            #expect(try replica.fetchRecord(bobsMilk.recordID)?["title"] == "Bob's milk")
            #expect(try replica.fetchRecord(bobsMilk.recordID)?.recordID.zoneID.ownerName == bob.ownerName)
            #expect(try replica.zoneChangeToken(owner: alice.ownerName, zoneName: "Topics") == token(1, of: alice))
            #expect(try replica.zoneChangeToken(owner: bob.ownerName, zoneName: "Topics") == token(7, of: bob))
            #expect(try replica.allZones() == [zone(of: alice), zone(of: bob)])

            // Deleting Bob's record leaves Alice's alone.
            try replica.apply(page(zone(of: bob), deleting: ["milk"], token: token(8, of: bob)), owner: bob.ownerName)
            #expect(try replica.fetchRecord(bobsMilk.recordID) == nil)
            #expect(try replica.fetchRecord(alicesMilk.recordID) == alicesMilk)
        }
    }

    @Test("share records and references survive the round trip", arguments: Storage.allCases)
    func richRecords(storage: Storage) throws {
        try withReplica(storage) { replica in
            var topic = Record(recordType: "Topic", recordID: Record.ID(recordName: "topic", zoneID: zone()))
            topic["title"] = "Groceries"
            var item = Record(recordType: "Item", recordID: Record.ID(recordName: "item", zoneID: zone()))
            item.setParent(topic.recordID)
            item["topic"] = .reference(Record.Reference(recordID: topic.recordID, action: .deleteSelf))
            item["when"] = .date(Date(timeIntervalSince1970: 1_800_000_000.5))
            let records = try [topic, item].map { try Record(jsonData: $0.jsonData()) }
            try replica.apply(page(saving: records, token: token(1)), owner: alice.ownerName)
            #expect(try replica.fetchRecord(item.recordID) == records[1])
            #expect(try replica.fetchRecord(item.recordID)?.parent?.recordID == topic.recordID)
        }
    }
}
