import Foundation
import Testing

import ShareSyncCore
@testable import ShareSyncStore

@Suite("Saving, deleting and fetching records")
struct ModifyRecordsTests {
    @Test("modifyRecords returns one result per record saved and per record ID deleted", arguments: Storage.allCases)
    func resultPerRecord(storage: Storage) throws {
        try withDatabase(storage) { db in
            try db.saveZone(RecordZone(zoneID: topics))
            try db.save(makeRecord("old", ["title": "Old"]))
            let result = try db.modifyRecords(
                saving: [makeRecord("a", ["title": "A"]), makeRecord("b", ["count": 2])],
                deleting: [recordID("old"), recordID("neverExisted")], atomically: false)
            #expect(Set(result.saveResults.keys) == [recordID("a"), recordID("b")])
            #expect(Set(result.deleteResults.keys) == [recordID("old"), recordID("neverExisted")])
            #expect(result.errors.keys.sorted() == ["neverExisted"])
            #expect(try result.saveResults[recordID("a")]?.get()["title"] == "A")
            #expect(try result.saveResults[recordID("b")]?.get()["count"] == 2)
            #expect(try !db.exists(recordID("old")))
        }
    }

    @Test("the database sets the system fields, and the change tag changes on every save", arguments: Storage.allCases)
    func systemFields(storage: Storage) throws {
        let clock = TestClock()
        try withDatabase(storage, clock: clock) { db in
            try db.saveZone(RecordZone(zoneID: topics))
            let created = clock.now
            let first = try db.save(makeRecord("n1", ["title": "Milk"]))
            #expect(first.recordChangeTag != nil)
            #expect(first.creationDate == created)
            #expect(first.modificationDate == created)
            #expect(first.creatorUserRecordID?.recordName == ownerName)
            #expect(first.lastModifiedUserRecordID?.recordName == ownerName)
            #expect(first.changedKeys.isEmpty)
            #expect(try db.fetchRecord(recordID("n1")) == first)

            var tags: Set<String?> = [first.recordChangeTag]
            var current = first
            for i in 1...3 {
                clock.advance(by: 61.5)
                current["title"] = .string("Milk \(i)")
                current = try db.save(current)
                #expect(!tags.contains(current.recordChangeTag), "save \(i) kept an old change tag")
                tags.insert(current.recordChangeTag)
                #expect(current.creationDate == created)
                #expect(current.modificationDate == clock.now)
                #expect(current.creatorUserRecordID?.recordName == ownerName)
                #expect(current.lastModifiedUserRecordID?.recordName == ownerName)
                #expect(try db.fetchRecord(recordID("n1")) == current)
            }
        }
    }

    @Test("a saved record keeps every kind of field value", arguments: Storage.allCases)
    func fieldValuesRoundTrip(storage: Storage) throws {
        try withDatabase(storage) { db in
            try db.saveZone(RecordZone(zoneID: topics))
            let fields: [String: FieldValue] = [
                "s": "text ✓", "i": .int64(.max), "d": 2.5, "b": true,
                "t": .date(Date(timeIntervalSince1970: 1_700_000_000.123)), "y": .bytes(Data([0, 1, 255])),
                "r": .reference(Record.Reference(recordID: recordID("other"))),
                "l": .location(Location(latitude: 48.85, longitude: 2.35)),
                "sl": .list(.string(["a", "b"])), "il": .list(.int64([1, -2])),
                "rl": .list(.reference([Record.Reference(recordID: recordID("x"), action: .deleteSelf)])),
            ]
            var record = makeRecord("n1", fields)
            record.setParent(recordID("parent"))
            try db.save(makeRecord("x"))  // a deleteSelf reference names a record that exists
            let saved = try db.save(record)
            #expect(saved.fields == fields)
            #expect(saved.parent?.recordID == recordID("parent"))
            #expect(try db.fetchRecord(recordID("n1")).fields == fields)
        }
    }

    @Test("fetchRecords fails with unknownItem for each missing record", arguments: Storage.allCases)
    func fetchMissingRecords(storage: Storage) throws {
        try withDatabase(storage) { db in
            try db.saveZone(RecordZone(zoneID: topics))
            let saved = try db.save([makeRecord("a", ["n": 1]), makeRecord("b", ["n": 2])])
            let ids = [recordID("a"), recordID("missing1"), recordID("b"), recordID("missing2"), recordID("c", in: .default)]
            let results = try db.fetchRecords(ids)
            #expect(results.count == ids.count)
            #expect(try results[recordID("a")]?.get() == saved["a"])
            #expect(try results[recordID("b")]?.get() == saved["b"])
            for id in [recordID("missing1"), recordID("missing2"), recordID("c", in: .default)] {
                let error = failure(results[id])
                #expect(error?.code == .unknownItem)
                #expect(error?.recordID == id)
            }
            expectError(.unknownItem) { try db.fetchRecord(recordID("missing1")) }
        }
    }

    @Test("deleting a record that does not exist fails with unknownItem (as CloudKit) and changes nothing", arguments: Storage.allCases)
    func deletingMissingRecord(storage: Storage) throws {
        try withDatabase(storage) { db in
            try db.saveZone(RecordZone(zoneID: topics))
            try db.save(makeRecord("a"))
            let result = try expectNothingChanges(in: db) { try db.modifyRecords(deleting: [recordID("ghost")]) }
            #expect(result.errors["ghost"]?.code == .unknownItem)
            #expect(result.errors["ghost"]?.message.contains("ghost") == true)
            #expect(result.deleteResults.count == 1)
            // Atomic: the request's other deletion does not happen either.
            let both = try expectNothingChanges(in: db) { try db.modifyRecords(deleting: [recordID("a"), recordID("ghost")]) }
            #expect(both.errors["ghost"]?.code == .unknownItem)
            #expect(both.errors["a"]?.code == .batchRequestFailed)
            // Deleted once, then again: the second deletion is unknownItem.
            #expect(try db.modifyRecords(deleting: [recordID("a")]).errors.isEmpty)
            #expect(try db.modifyRecords(deleting: [recordID("a")]).errors["a"]?.code == .unknownItem)
        }
    }

    @Test("a record deleted earlier in the same request by a deleteSelf cascade counts as deleted", arguments: Storage.allCases)
    func deletingCascadedRecord(storage: Storage) throws {
        try withDatabase(storage) { db in
            try db.saveZone(RecordZone(zoneID: topics))
            try db.save(makeRecord("a"))
            try db.save(makeRecord("b", ["owner": deleteSelf("a")]))
            let result = try db.modifyRecords(deleting: [recordID("a"), recordID("b")])
            #expect(result.errors.isEmpty)
            #expect(failure(try db.fetchRecords([recordID("b")])[recordID("b")])?.code == .unknownItem)
        }
    }

    @Test("the same record twice in one request is refused", arguments: Storage.allCases)
    func duplicateItems(storage: Storage) throws {
        try withDatabase(storage) { db in
            try db.saveZone(RecordZone(zoneID: topics))
            let result = try expectNothingChanges(in: db) {
                try db.modifyRecords(saving: [makeRecord("a", ["n": 1]), makeRecord("a", ["n": 2])])
            }
            #expect(failure(result.saveResults[recordID("a")])?.rule == .duplicateItem)
        }
    }

    @Test("not atomic: a record named twice is applied in neither item, and the answer says so once; the others are saved", arguments: Storage.allCases)
    func duplicateItemsNotAtomic(storage: Storage) throws {
        try withDatabase(storage) { db in
            try db.saveZone(RecordZone(zoneID: topics))
            try db.save(makeRecord("gone", ["n": 1]))
            let result = try db.modifyRecords(
                saving: [makeRecord("twice", ["n": 1]), makeRecord("twice", ["n": 2]), makeRecord("gone", ["n": 2]), makeRecord("ok")],
                deleting: [recordID("gone")], atomically: false)
            // Before, the first of each was applied: "twice" saved with n 1 and "gone" saved, while the
            // answer also refused them, keyed by the same names.
            #expect(failure(result.saveResults[recordID("twice")])?.rule == .duplicateItem)
            #expect(failure(result.saveResults[recordID("gone")])?.rule == .duplicateItem)
            #expect(failure(result.deleteResults[recordID("gone")])?.rule == .duplicateItem)
            #expect(try !db.exists(recordID("twice")))
            #expect(try db.fetchRecord(recordID("gone"))["n"] == 1)
            #expect(try db.exists(recordID("ok")))
        }
    }
}
