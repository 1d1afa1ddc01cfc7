import Foundation
import Testing

import ShareSyncCore
@testable import ShareSyncStore

@Suite("Atomic and non-atomic batches")
struct AtomicBatchTests {
    @Test("atomic: one invalid record saves nothing; it has its own error and the others batchRequestFailed", arguments: Storage.allCases)
    func atomicBatchFailsAsAWhole(storage: Storage) throws {
        try withDatabase(storage) { db in
            try db.saveZone(RecordZone(zoneID: topics))
            try db.save(makeRecord("existing", ["title": "Keep me"]))
            let batch = [makeRecord("a", ["n": 1]), makeRecord("bad", ["n": .double(.nan)]), makeRecord("c", ["n": 3])]
            let result = try expectNothingChanges(in: db) {
                try db.modifyRecords(saving: batch, deleting: [recordID("existing")], atomically: true)
            }
            let own = failure(result.saveResults[recordID("bad")])
            #expect(own?.code == .invalidArguments)
            #expect(own?.rule == .finiteDouble)
            for id in [recordID("a"), recordID("c")] {
                let error = failure(result.saveResults[id])
                #expect(error?.code == .batchRequestFailed)
                #expect(error?.recordID == id)
            }
            #expect(failure(result.deleteResults[recordID("existing")])?.code == .batchRequestFailed)
            #expect(result.errors.count == 4)
            #expect(try db.exists(recordID("existing")))
            #expect(try !db.exists(recordID("a")))

            let thrown = expectError(.partialFailure) { try result.get() }
            #expect(thrown?.partialErrors?["bad"]?.code == .invalidArguments)
            #expect(thrown?.partialErrors?["a"]?.code == .batchRequestFailed)
        }
    }

    @Test("atomic is the default", arguments: Storage.allCases)
    func atomicByDefault(storage: Storage) throws {
        try withDatabase(storage) { db in
            try db.saveZone(RecordZone(zoneID: topics))
            let result = try expectNothingChanges(in: db) {
                try db.modifyRecords(saving: [makeRecord("a"), makeRecord("1bad", type: "1Note")])
            }
            #expect(failure(result.saveResults[recordID("a")])?.code == .batchRequestFailed)
        }
    }

    @Test("non-atomic: valid records are saved, invalid ones fail individually", arguments: Storage.allCases)
    func nonAtomicBatchAppliesEachItem(storage: Storage) throws {
        try withDatabase(storage) { db in
            try db.saveZone(RecordZone(zoneID: topics))
            let stale = try db.save(makeRecord("conflict", ["n": 0]))
            var newer = stale
            newer["n"] = 1
            try db.save(newer)
            try db.save(makeRecord("toDelete"))

            let batch = [
                makeRecord("a", ["n": 1]), makeRecord("bad", ["n": .double(.infinity)]), stale, makeRecord("c", ["n": 3]),
            ]
            let result = try db.modifyRecords(saving: batch, deleting: [recordID("toDelete")], atomically: false)
            #expect(try result.saveResults[recordID("a")]?.get()["n"] == 1)
            #expect(try result.saveResults[recordID("c")]?.get()["n"] == 3)
            #expect(failure(result.saveResults[recordID("bad")])?.rule == .finiteDouble)
            #expect(failure(result.saveResults[recordID("conflict")])?.code == .serverRecordChanged)
            #expect(try result.deleteResults[recordID("toDelete")]?.get() != nil)
            #expect(Set(result.errors.keys) == ["bad", "conflict"])

            #expect(try db.fetchRecord(recordID("a"))["n"] == 1)
            #expect(try db.fetchRecord(recordID("c"))["n"] == 3)
            #expect(try db.fetchRecord(recordID("conflict"))["n"] == 1)
            #expect(try !db.exists(recordID("bad")))
            #expect(try !db.exists(recordID("toDelete")))
        }
    }

    @Test("non-atomic: when every item fails, nothing changes", arguments: Storage.allCases)
    func nonAtomicAllFailing(storage: Storage) throws {
        try withDatabase(storage) { db in
            try db.saveZone(RecordZone(zoneID: topics))
            try db.save(makeRecord("a"))
            let result = try expectNothingChanges(in: db) {
                try db.modifyRecords(
                    saving: [makeRecord("b", ["has space": 1]), makeRecord("_c")], atomically: false)
            }
            #expect(result.errors.count == 2)
        }
    }
}

@Suite("deleteSelf references")
struct DeleteSelfTests {
    @Test("deleting a record deletes its deleteSelf referrers, transitively; plain references and parents do not cascade", arguments: Storage.allCases)
    func cascade(storage: Storage) throws {
        try withDatabase(storage) { db in
            try db.saveZone(RecordZone(zoneID: topics))
            var child = makeRecord("child", ["title": "Has a parent"])
            child.setParent(recordID("a"))
            try db.save([
                makeRecord("a", type: "Topic", ["title": "A"]),
                makeRecord("b", type: "Item", ["owner": deleteSelf("a")]),
                makeRecord("c", type: "Comment", ["about": deleteSelf("b")]),
                makeRecord("plain", ["link": .reference(Record.Reference(recordID: recordID("a"), action: .none))]),
                child,
                makeRecord("other"),
                makeRecord("unrelated", ["owner": deleteSelf("other")]),
            ])
            let before = try db.currentChangeToken()

            let result = try db.modifyRecords(deleting: [recordID("a")])
            #expect(result.errors.isEmpty)
            #expect(Array(result.deleteResults.keys) == [recordID("a")])

            for name in ["a", "b", "c"] { #expect(try !db.exists(recordID(name)), "\(name) should be deleted") }
            for name in ["plain", "child", "other", "unrelated"] { #expect(try db.exists(recordID(name)), "\(name) should remain") }

            let changes = try db.allZoneChanges(topics, since: before).changes
            #expect(changes.allSatisfy { $0.isDeletion })
            let deleted = changes.compactMap { if case .deleted(let d) = $0 { d } else { nil } }
            #expect(Set(deleted) == [
                DeletedRecord(recordID: recordID("a"), recordType: "Topic"),
                DeletedRecord(recordID: recordID("b"), recordType: "Item"),
                DeletedRecord(recordID: recordID("c"), recordType: "Comment"),
            ])
            #expect(deleted.count == 3)
        }
    }

    @Test("a deleteSelf reference must name a record that exists or is saved in the same request (referenceViolation)", arguments: Storage.allCases)
    func deleteSelfTargetMustExist(storage: Storage) throws {
        try withDatabase(storage) { db in
            try db.saveZone(RecordZone(zoneID: topics))
            try db.save([makeRecord("a")])
            let before = try db.currentChangeToken()
            // To a record that exists nowhere: refused, naming the field and the record; the atomic
            // batch's other item is not saved either.
            let refused = try db.modifyRecords(saving: [makeRecord("ok"), makeRecord("b", ["owner": deleteSelf("ghost")])])
            let error = try #require(refused.errors["b"])
            #expect(error.code == .referenceViolation && error.rule == .deleteSelfTargetMissing, "\(error)")
            #expect(error.message.contains("owner") && error.message.contains("ghost"), "\(error.message)")
            #expect(refused.errors["ok"]?.code == .batchRequestFailed)
            #expect(try !db.exists(recordID("ok")) && !db.exists(recordID("b")))
            #expect(try db.allZoneChanges(topics, since: before).changes.isEmpty)
            // In a reference list too.
            let inList = try db.modifyRecords(saving: [
                makeRecord("b", ["refs": .list(.reference([Record.Reference(recordID: recordID("a"), action: .deleteSelf),
                                                            Record.Reference(recordID: recordID("ghost"), action: .deleteSelf)]))])
            ])
            #expect(inList.errors["b"]?.code == .referenceViolation && inList.errors["b"]?.rule == .deleteSelfTargetMissing)

            // Its target saved in the same request, even after it: taken, and the cascade works.
            try db.save([makeRecord("c", ["owner": deleteSelf("d")]), makeRecord("d")])
            // A target in the same request whose own save fails does not count (not atomic: the
            // target is tried first, fails, and then the reference names nothing).
            var failing = makeRecord("x")
            failing.recordChangeTag = "9"  // saved as a change of a record that is not there
            let partly = try db.modifyRecords(saving: [makeRecord("w", ["owner": deleteSelf("x")]), failing], atomically: false)
            #expect(partly.errors["x"]?.code == .unknownItem)
            #expect(partly.errors["w"]?.code == .referenceViolation, "\(partly.errors)")
            // To a record that exists, or with action none to any name: taken.
            try db.save([makeRecord("e", ["owner": deleteSelf("a")]),
                         makeRecord("f", ["link": .reference(Record.Reference(recordID: recordID("ghost"), action: .none))])])
            try db.delete([recordID("d"), recordID("a")])
            for name in ["c", "e"] { #expect(try !db.exists(recordID(name)), "\(name) went with its target") }
            #expect(try db.exists(recordID("f")))

            // An import takes it as it is (its batches may name records of later ones); a record that
            // has such a reference can still be edited, keeping it.
            _ = try db.importRecords([makeRecord("g", ["owner": deleteSelf("later")])]).get()
            var g = try db.fetchRecord(recordID("g"))
            g["title"] = "edited"
            #expect(try db.save(g)["title"] == "edited")
            g = try db.fetchRecord(recordID("g"))
            g["other"] = deleteSelf("ghost2")  // a new one is checked
            #expect(try db.modifyRecords(saving: [g]).errors["g"]?.code == .referenceViolation)
        }
    }

    @Test("deleteSelf references inside a reference list cascade too", arguments: Storage.allCases)
    func cascadeThroughList(storage: Storage) throws {
        try withDatabase(storage) { db in
            try db.saveZone(RecordZone(zoneID: topics))
            let refs = [Record.Reference(recordID: recordID("x")), Record.Reference(recordID: recordID("a"), action: .deleteSelf)]
            try db.save([makeRecord("a"), makeRecord("x"), makeRecord("b", ["refs": .list(.reference(refs))])])
            try db.delete([recordID("a")])
            #expect(try !db.exists(recordID("b")))
            #expect(try db.exists(recordID("x")))
        }
    }

    @Test("a referrer re-saved without its deleteSelf reference no longer cascades", arguments: Storage.allCases)
    func removedReferenceDoesNotCascade(storage: Storage) throws {
        try withDatabase(storage) { db in
            try db.saveZone(RecordZone(zoneID: topics))
            var saved = try db.save([makeRecord("a"), makeRecord("b", ["owner": deleteSelf("a")])])
            var b = try #require(saved["b"])
            b["owner"] = .reference(Record.Reference(recordID: recordID("a"), action: .none))
            saved["b"] = try db.save(b)
            try db.delete([recordID("a")])
            #expect(try db.exists(recordID("b")))
        }
    }

    @Test("a cycle of deleteSelf references is deleted whole, without looping", arguments: Storage.allCases)
    func cycleOfReferences(storage: Storage) throws {
        try withDatabase(storage) { db in
            try db.saveZone(RecordZone(zoneID: topics))
            try db.save([
                makeRecord("a", ["next": deleteSelf("b")]), makeRecord("b", ["next": deleteSelf("c")]),
                makeRecord("c", ["next": deleteSelf("a")]),
            ])
            let before = try db.currentChangeToken()
            try db.delete([recordID("b")])
            for name in ["a", "b", "c"] { #expect(try !db.exists(recordID(name))) }
            #expect(try db.allZoneChanges(topics, since: before).changes.count == 3)
        }
    }
}
