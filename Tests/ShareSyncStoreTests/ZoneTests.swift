import Foundation
import Testing

import ShareSyncCore
@testable import ShareSyncStore

@Suite("Zones of the private database")
struct ZoneTests {
    @Test("a saved zone can be fetched, is listed after the default zone, and is gone once deleted", arguments: Storage.allCases)
    func saveFetchListDelete(storage: Storage) throws {
        try withDatabase(storage) { db in
            #expect(try db.fetchAllZones() == [RecordZone(zoneID: .default)])
            let saved = try db.saveZones([RecordZone(zoneName: "Work"), RecordZone(zoneName: "Home")])
            #expect(saved.map(\.zoneID.zoneName) == ["Work", "Home"])
            #expect(try db.fetchZone(RecordZone.ID(zoneName: "Work")).zoneID == RecordZone.ID(zoneName: "Work"))
            #expect(try db.fetchAllZones().map(\.zoneID.zoneName) == ["_defaultZone", "Home", "Work"])

            try db.deleteZone(RecordZone.ID(zoneName: "Work"))
            expectError(.zoneNotFound) { try db.fetchZone(RecordZone.ID(zoneName: "Work")) }
            #expect(try db.fetchAllZones().map(\.zoneID.zoneName) == ["_defaultZone", "Home"])
        }
    }

    @Test("saving a zone that exists keeps its records and changes nothing", arguments: Storage.allCases)
    func savingExistingZoneChangesNothing(storage: Storage) throws {
        try withDatabase(storage) { db in
            try db.saveZone(RecordZone(zoneID: topics))
            try db.save(makeRecord("n1", ["title": "Milk"]))
            try expectNothingChanges(in: db) {
                let zone = try db.saveZone(RecordZone(zoneID: topics))
                #expect(zone.zoneID == topics)
            }
        }
    }

    @Test("deleting a zone deletes its records", arguments: Storage.allCases)
    func deletingZoneDeletesRecords(storage: Storage) throws {
        try withDatabase(storage) { db in
            try db.saveZone(RecordZone(zoneID: topics))
            try db.save([makeRecord("n1", ["title": "Milk"]), makeRecord("n2", ["title": "Eggs"])])
            try db.deleteZone(topics)

            // As in CloudKit, a record of a zone that does not exist is zoneNotFound.
            let results = try db.fetchRecords([recordID("n1"), recordID("n2")])
            #expect(failure(results[recordID("n1")])?.code == .zoneNotFound)
            #expect(failure(results[recordID("n2")])?.code == .zoneNotFound)
            expectError(.zoneNotFound) { try db.fetchZoneChanges(topics, since: nil) }

            // A zone created again with the same name starts empty.
            try db.saveZone(RecordZone(zoneID: topics))
            let changes = try db.fetchZoneChanges(topics, since: nil)
            #expect(changes.changes.isEmpty)
            #expect(try !db.exists(recordID("n1")))
        }
    }

    @Test("the default zone cannot be deleted", arguments: Storage.allCases)
    func defaultZoneCannotBeDeleted(storage: Storage) throws {
        try withDatabase(storage) { db in
            try db.save(makeRecord("n1", in: .default, ["title": "Milk"]))
            try expectNothingChanges(in: db) {
                let error = expectError(.invalidArguments, rule: .defaultZone) { try db.deleteZone(.default) }
                #expect(error?.zoneID == .default)
            }
            #expect(try db.exists(recordID("n1", in: .default)))
        }
    }

    @Test("deleting a zone that does not exist fails with zoneNotFound", arguments: Storage.allCases)
    func deletingMissingZone(storage: Storage) throws {
        try withDatabase(storage) { db in
            try expectNothingChanges(in: db) {
                expectError(.zoneNotFound) { try db.deleteZone(RecordZone.ID(zoneName: "Nowhere")) }
            }
        }
    }

    @Test("saving records into a missing zone fails per record with zoneNotFound and changes nothing", arguments: Storage.allCases)
    func savingIntoMissingZone(storage: Storage) throws {
        try withDatabase(storage) { db in
            try db.saveZone(RecordZone(zoneID: topics))
            let missing = RecordZone.ID(zoneName: "Missing")
            let records = [makeRecord("m1", in: missing, ["title": "A"]), makeRecord("m2", in: missing, ["title": "B"])]
            let result = try expectNothingChanges(in: db) { try db.modifyRecords(saving: records) }
            #expect(result.saveResults.count == 2)
            for record in records {
                let error = failure(result.saveResults[record.recordID])
                #expect(error?.code == .zoneNotFound)
                #expect(error?.zoneID?.zoneName == "Missing")
            }
            expectError(.zoneNotFound) { try db.fetchZone(missing) }

            // Without atomicity, records in existing zones are still saved.
            let mixed = try db.modifyRecords(
                saving: [makeRecord("ok", ["title": "C"]), makeRecord("m3", in: missing)], atomically: false)
            #expect(failure(mixed.saveResults[recordID("m3", in: missing)])?.code == .zoneNotFound)
            #expect(try db.fetchRecord(recordID("ok"))["title"] == "C")
        }
    }

    @Test("a zone name breaking the syntax is refused with invalidArguments and changes nothing", arguments: Storage.allCases)
    func zoneNameSyntax(storage: Storage) throws {
        try withDatabase(storage) { db in
            try expectNothingChanges(in: db) {
                for name in ["bad zone", "_private", "", "zone/1"] {
                    expectError(.invalidArguments, rule: .zoneNameSyntax) { try db.saveZone(RecordZone(zoneName: name)) }
                }
                // One bad zone in a request keeps the good ones from being created.
                expectError(.invalidArguments, rule: .zoneNameSyntax) {
                    try db.saveZones([RecordZone(zoneName: "Good"), RecordZone(zoneName: "bad zone")])
                }
            }
        }
    }

    @Test("a zone of another owner is not in this database", arguments: Storage.allCases)
    func zoneOfAnotherOwner(storage: Storage) throws {
        try withDatabase(storage) { db in
            let foreign = RecordZone.ID(zoneName: "Topics", ownerName: "_someoneElse")
            try expectNothingChanges(in: db) {
                expectError(.zoneNotFound) { try db.saveZone(RecordZone(zoneID: foreign)) }
                expectError(.zoneNotFound) { try db.fetchZone(foreign) }
            }
        }
    }
}

@Suite("A zone deleted and created again")
struct ZoneRecreationTests {
    @Test(
        "a token from before a zone was deleted and created again does not hide the deletion of its old records",
        arguments: Storage.allCases)
    func recreatedZoneKeepsDeletionVisible(storage: Storage) throws {
        try withDatabase(storage) { db in
            try db.saveZone(RecordZone(zoneID: topics))
            try db.save([makeRecord("old1"), makeRecord("old2")])
            let token = try db.currentChangeToken()
            try db.deleteZone(topics)
            try db.saveZone(RecordZone(zoneID: topics))
            try db.save(makeRecord("new"))

            // Either the database feed reports the deletion, or the zone feed reports the old records
            // as deleted, or the old token is refused: a client holding it must not keep old1 and old2.
            let database = try db.fetchDatabaseChanges(since: token)
            if database.deletedZoneIDs.contains(topics) { return }
            do {
                let changes = try db.allZoneChanges(topics, since: token).changes
                let deleted = Set(changes.filter(\.isDeletion).map(\.recordName))
                #expect(deleted.isSuperset(of: ["old1", "old2"]), "the old records' deletion is lost: \(changes)")
            } catch let error as ShareSyncError where error.code == .changeTokenExpired {
                // Refusing the old token is fine too.
            }
        }
    }
}
