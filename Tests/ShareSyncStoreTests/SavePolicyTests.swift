import Foundation
import Testing

import ShareSyncCore
@testable import ShareSyncStore

@Suite("Save policies")
struct SavePolicyTests {
    @Test("ifServerRecordUnchanged: a stale change tag fails with serverRecordChanged carrying the server's record", arguments: Storage.allCases)
    func staleTagConflicts(storage: Storage) throws {
        try withDatabase(storage) { db in
            try db.saveZone(RecordZone(zoneID: topics))
            let original = try db.save(makeRecord("n1", ["title": "Milk", "count": 1]))
            var mine = original
            var theirs = original
            theirs["title"] = "Oat milk"
            let server = try db.save(theirs)

            mine["count"] = 2
            let result = try expectNothingChanges(in: db) { try db.modifyRecords(saving: [mine]) }
            let error = try #require(failure(result.saveResults[mine.recordID]))
            #expect(error.code == .serverRecordChanged)
            #expect(error.recordID == mine.recordID)
            let serverRecord = try #require(error.serverRecord)
            #expect(serverRecord == server)
            #expect(serverRecord.recordChangeTag == server.recordChangeTag)
            #expect(serverRecord.recordChangeTag != original.recordChangeTag)
            #expect(serverRecord["title"] == "Oat milk")
            #expect(serverRecord["count"] == 1)

            // Resolving the conflict on the server's record succeeds.
            var resolved = serverRecord
            resolved["count"] = 2
            let saved = try db.save(resolved)
            #expect(saved["title"] == "Oat milk")
            #expect(saved["count"] == 2)
        }
    }

    @Test("ifServerRecordUnchanged: saving a brand-new record whose ID exists conflicts", arguments: Storage.allCases)
    func newRecordWithExistingIDConflicts(storage: Storage) throws {
        try withDatabase(storage) { db in
            try db.saveZone(RecordZone(zoneID: topics))
            let server = try db.save(makeRecord("n1", ["title": "Milk"]))
            let result = try expectNothingChanges(in: db) {
                try db.modifyRecords(saving: [makeRecord("n1", ["title": "Eggs"])])
            }
            let error = failure(result.saveResults[recordID("n1")])
            #expect(error?.code == .serverRecordChanged)
            #expect(error?.serverRecord == server)
        }
    }

    @Test("ifServerRecordUnchanged: a record saved with a change tag after it was deleted fails with unknownItem", arguments: Storage.allCases)
    func tagOfDeletedRecord(storage: Storage) throws {
        try withDatabase(storage) { db in
            try db.saveZone(RecordZone(zoneID: topics))
            var saved = try db.save(makeRecord("n1", ["title": "Milk"]))
            try db.delete([saved.recordID])
            saved["title"] = "Eggs"
            let result = try expectNothingChanges(in: db) { try db.modifyRecords(saving: [saved]) }
            #expect(failure(result.saveResults[saved.recordID])?.code == .unknownItem)
        }
    }

    @Test("changedKeys: only keys changed through the subscript are written, other server fields are kept, even with a stale tag", arguments: Storage.allCases)
    func changedKeysWritesOnlyChangedKeys(storage: Storage) throws {
        try withDatabase(storage) { db in
            try db.saveZone(RecordZone(zoneID: topics))
            let original = try db.save(makeRecord("n1", ["title": "Milk", "body": "2 litres", "count": 1, "done": false]))
            var theirs = original
            theirs["body"] = "3 litres"
            theirs["done"] = true
            let server = try db.save(theirs)

            var mine = original  // stale: it has the first change tag and the old body
            mine["title"] = "Oat milk"
            mine["count"] = nil  // removing a key is a change too
            mine["extra"] = "new"
            #expect(mine.changedKeys == ["title", "count", "extra"])
            let saved = try db.save(mine, policy: .changedKeys)

            #expect(saved["title"] == "Oat milk")
            #expect(saved["body"] == "3 litres")
            #expect(saved["done"] == true)
            #expect(saved["count"] == nil)
            #expect(saved["extra"] == "new")
            #expect(saved.allKeys == ["body", "done", "extra", "title"])
            #expect(saved.recordChangeTag != server.recordChangeTag)
            #expect(saved.creationDate == original.creationDate)
            #expect(try db.fetchRecord(recordID("n1")) == saved)
        }
    }

    @Test("changedKeys: a record fetched and saved without changes keeps the server's fields", arguments: Storage.allCases)
    func changedKeysWithNoChanges(storage: Storage) throws {
        try withDatabase(storage) { db in
            try db.saveZone(RecordZone(zoneID: topics))
            let original = try db.save(makeRecord("n1", ["title": "Milk"]))
            var theirs = original
            theirs["title"] = "Eggs"
            try db.save(theirs)
            let saved = try db.save(original, policy: .changedKeys)
            #expect(saved["title"] == "Eggs")
        }
    }

    @Test("changedKeys: a parent that was set is written", arguments: Storage.allCases)
    func changedKeysWritesParent(storage: Storage) throws {
        try withDatabase(storage) { db in
            try db.saveZone(RecordZone(zoneID: topics))
            let saved = try db.save([makeRecord("topic", type: "Topic"), makeRecord("n1", ["title": "Milk"])])
            var mine = try #require(saved["n1"])
            mine.setParent(recordID("topic"))
            let updated = try db.save(mine, policy: .changedKeys)
            #expect(updated.parent?.recordID == recordID("topic"))
            #expect(updated["title"] == "Milk")
        }
    }

    @Test("allKeys: the client's record replaces the server's, whatever the tag", arguments: Storage.allCases)
    func allKeysOverwrites(storage: Storage) throws {
        let clock = TestClock()
        try withDatabase(storage, clock: clock) { db in
            try db.saveZone(RecordZone(zoneID: topics))
            let original = try db.save(makeRecord("n1", ["title": "Milk", "body": "2 litres"]))
            var theirs = original
            theirs["count"] = 7
            try db.save(theirs)

            clock.advance(by: 10)
            // A brand-new record (no tag) with the same ID: fields missing from it disappear.
            let replaced = try db.save(makeRecord("n1", ["title": "Eggs"]), policy: .allKeys)
            #expect(replaced.allKeys == ["title"])
            #expect(replaced["title"] == "Eggs")
            #expect(replaced.creationDate == original.creationDate)
            #expect(replaced.modificationDate == clock.now)

            // A stale record overwrites too.
            var stale = original
            stale["body"] = "1 litre"
            let again = try db.save(stale, policy: .allKeys)
            #expect(again.allKeys == ["body", "title"])
            #expect(again["title"] == "Milk")
            #expect(again["body"] == "1 litre")
            #expect(try db.fetchRecord(recordID("n1")) == again)
        }
    }

    @Test("every policy saves a record that does not exist yet", arguments: Storage.allCases, SavePolicy.allCases)
    func policiesCreate(storage: Storage, policy: SavePolicy) throws {
        try withDatabase(storage) { db in
            try db.saveZone(RecordZone(zoneID: topics))
            let saved = try db.save(makeRecord("n1", ["title": "Milk"]), policy: policy)
            #expect(saved["title"] == "Milk")
            #expect(try db.fetchRecord(recordID("n1")) == saved)
        }
    }
}
