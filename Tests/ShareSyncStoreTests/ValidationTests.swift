import Foundation
import Testing

import ShareSyncCore
@testable import ShareSyncStore

/// A record that breaks one rule of the data model, and the rule it breaks.
struct BadRecordCase: Sendable, CustomTestStringConvertible {
    var testDescription: String
    var rule: Rule
    var record: @Sendable () -> Record

    static let all: [BadRecordCase] = [
        BadRecordCase(testDescription: "record type 1Note", rule: .recordTypeSyntax) {
            makeRecord("n1", type: "1Note", ["title": "Milk"])
        },
        BadRecordCase(testDescription: "field key 'has space'", rule: .fieldKeySyntax) {
            makeRecord("n1", ["has space": "Milk"])
        },
        BadRecordCase(testDescription: "field key of the database's own", rule: .fieldKeySyntax) {
            makeRecord("n1", ["cloudkit.mine": "Milk"])
        },
        BadRecordCase(testDescription: "record name _private", rule: .recordNameSyntax) {
            makeRecord("_private", ["title": "Milk"])
        },
        BadRecordCase(testDescription: "record name with a space", rule: .recordNameSyntax) {
            makeRecord("my note", ["title": "Milk"])
        },
        BadRecordCase(testDescription: "NaN double", rule: .finiteDouble) {
            makeRecord("n1", ["weight": .double(.nan)])
        },
        BadRecordCase(testDescription: "infinite double in a list", rule: .finiteDouble) {
            makeRecord("n1", ["weights": .list(.double([1, -.infinity]))])
        },
        BadRecordCase(testDescription: "latitude out of range", rule: .locationRange) {
            makeRecord("n1", ["where": .location(Location(latitude: 91, longitude: 0))])
        },
        BadRecordCase(testDescription: "reference into another zone", rule: .referenceSameZone) {
            makeRecord("n1", ["link": .reference(Record.Reference(recordID: recordID("x", in: .default)))])
        },
        BadRecordCase(testDescription: "deleteSelf reference list into another zone", rule: .referenceSameZone) {
            makeRecord("n1", ["links": .list(.reference([Record.Reference(recordID: recordID("x", in: .default), action: .deleteSelf)]))])
        },
        BadRecordCase(testDescription: "record name longer than 255 bytes", rule: .recordNameSyntax) {
            makeRecord(String(repeating: "n", count: 256))
        },
        BadRecordCase(testDescription: "empty record type", rule: .recordTypeSyntax) {
            makeRecord("n1", type: "")
        },
        BadRecordCase(testDescription: "parent in another zone", rule: .parentSameZone) {
            var record = makeRecord("n1")
            record.setParent(recordID("x", in: .default))
            return record
        },
        BadRecordCase(testDescription: "record is its own parent", rule: .parentCycle) {
            var record = makeRecord("n1")
            record.setParent(recordID("n1"))
            return record
        },
    ]
}

@Suite("Bad input is refused and changes nothing")
struct ValidationTests {
    @Test("a record breaking a rule fails with invalidArguments naming the rule", arguments: Storage.allCases, BadRecordCase.all)
    func badRecord(storage: Storage, bad: BadRecordCase) throws {
        try withDatabase(storage) { db in
            try db.saveZone(RecordZone(zoneID: topics))
            try db.save(makeRecord("existing", ["title": "Keep"]))
            let record = bad.record()
            for atomically in [true, false] {
                let result = try expectNothingChanges(in: db) {
                    try db.modifyRecords(saving: [record], atomically: atomically)
                }
                let error = failure(result.saveResults[record.recordID])
                #expect(error?.code == .invalidArguments, "\(String(describing: error))")
                #expect(error?.rule == bad.rule, "\(String(describing: error))")
                if bad.rule != .recordTypeSyntax { #expect(error?.recordID == record.recordID) }
            }
        }
    }

    @Test(
        "an invalid record type error names the record",
        arguments: Storage.allCases)
    func recordTypeErrorNamesRecord(storage: Storage) throws {
        try withDatabase(storage) { db in
            try db.saveZone(RecordZone(zoneID: topics))
            let record = makeRecord("n1", type: "1Note")
            let result = try db.modifyRecords(saving: [record])
            let error = failure(result.saveResults[record.recordID])
            #expect(error?.rule == .recordTypeSyntax)
            #expect(error?.recordID == record.recordID)
            #expect(error?.zoneID == topics)
        }
    }

    @Test("a parent cycle through other records fails with parentCycle", arguments: Storage.allCases)
    func parentCycle(storage: Storage) throws {
        try withDatabase(storage) { db in
            try db.saveZone(RecordZone(zoneID: topics))
            var b = makeRecord("b")
            b.setParent(recordID("a"))
            var c = makeRecord("c")
            c.setParent(recordID("b"))
            var saved = try db.save([makeRecord("a"), b, c])
            var a = try #require(saved["a"])
            a.setParent(recordID("c"))  // a ← b ← c ← a
            let result = try expectNothingChanges(in: db) { try db.modifyRecords(saving: [a]) }
            let error = failure(result.saveResults[a.recordID])
            #expect(error?.code == .invalidArguments)
            #expect(error?.rule == .parentCycle)
            saved["a"] = try db.fetchRecord(recordID("a"))
            #expect(saved["a"]?.parent == nil)
        }
    }

    @Test("a record's type cannot change", arguments: Storage.allCases, [SavePolicy.allKeys, .changedKeys])
    func recordTypeIsImmutable(storage: Storage, policy: SavePolicy) throws {
        try withDatabase(storage) { db in
            try db.saveZone(RecordZone(zoneID: topics))
            try db.save(makeRecord("n1", type: "Note", ["title": "Milk"]))
            let result = try expectNothingChanges(in: db) {
                try db.modifyRecords(saving: [makeRecord("n1", type: "Topic", ["title": "Milk"])], savePolicy: policy)
            }
            let error = failure(result.saveResults[recordID("n1")])
            #expect(error?.code == .invalidArguments)
            #expect(error?.rule == .recordTypeImmutable)
            #expect(try db.fetchRecord(recordID("n1")).recordType == "Note")
        }
    }

    @Test("a record over the size limit fails with limitExceeded and is not stored", arguments: Storage.allCases)
    func recordSizeLimit(storage: Storage) throws {
        var limits = Limits()
        limits.maximumRecordSize = 2_000
        try withDatabase(storage, limits: limits) { db in
            try db.saveZone(RecordZone(zoneID: topics))
            try db.save(makeRecord("small", ["title": .string(String(repeating: "a", count: 1_000))]))
            let big = makeRecord("big", ["title": .string(String(repeating: "a", count: 2_500))])
            let result = try expectNothingChanges(in: db) { try db.modifyRecords(saving: [big]) }
            let error = failure(result.saveResults[big.recordID])
            #expect(error?.code == .limitExceeded)
            #expect(error?.rule == .recordSize)
            #expect(try !db.exists(big.recordID))

            // Growing an existing record past the limit fails too, and keeps the stored version.
            var small = try db.fetchRecord(recordID("small"))
            small["body"] = .string(String(repeating: "b", count: 1_500))
            let grown = try expectNothingChanges(in: db) { try db.modifyRecords(saving: [small]) }
            #expect(failure(grown.saveResults[small.recordID])?.rule == .recordSize)
        }
    }

    @Test("the default size limit is 1 MB", arguments: Storage.allCases)
    func defaultRecordSizeLimit(storage: Storage) throws {
        try withDatabase(storage) { db in
            try db.saveZone(RecordZone(zoneID: topics))
            #expect(db.limits.maximumRecordSize == 1_000_000)
            let ok = makeRecord("ok", ["data": .bytes(Data(repeating: 7, count: 700_000))])
            #expect(try db.save(ok)["data"] == .bytes(Data(repeating: 7, count: 700_000)))

            let big = makeRecord("big", ["data": .bytes(Data(repeating: 7, count: 1_100_000))])
            let result = try expectNothingChanges(in: db) { try db.modifyRecords(saving: [big]) }
            let error = failure(result.saveResults[big.recordID])
            #expect(error?.code == .limitExceeded)
            #expect(error?.rule == .recordSize)
        }
    }

    @Test("more items than maximumItemsPerRequest fail the whole request and store nothing", arguments: Storage.allCases)
    func itemsPerRequestLimit(storage: Storage) throws {
        try withDatabase(storage) { db in
            try db.saveZone(RecordZone(zoneID: topics))
            try db.save(makeRecord("existing"))
            let limit = db.limits.maximumItemsPerRequest
            #expect(limit == 400)
            let records = (0...limit).map { makeRecord("n\($0)") }
            try expectNothingChanges(in: db) {
                expectError(.limitExceeded, rule: .itemsPerRequest) { try db.modifyRecords(saving: records) }
                expectError(.limitExceeded, rule: .itemsPerRequest) {
                    try db.modifyRecords(saving: records, atomically: false)
                }
                // Saves and deletions count together.
                expectError(.limitExceeded, rule: .itemsPerRequest) {
                    try db.modifyRecords(
                        saving: Array(records.prefix(limit)), deleting: [recordID("existing")], atomically: false)
                }
            }
            // Exactly the limit is fine.
            #expect(try db.modifyRecords(saving: Array(records.prefix(limit))).errors.isEmpty)
        }
    }

    @Test("a custom items limit is enforced", arguments: Storage.allCases)
    func customItemsLimit(storage: Storage) throws {
        var limits = Limits()
        limits.maximumItemsPerRequest = 3
        try withDatabase(storage, limits: limits) { db in
            try db.saveZone(RecordZone(zoneID: topics))
            try expectNothingChanges(in: db) {
                expectError(.limitExceeded, rule: .itemsPerRequest) {
                    try db.modifyRecords(deleting: (1...4).map { recordID("n\($0)") })
                }
            }
        }
    }

    @Test("a record decoded from malformed JSON is refused; a well-formed one saves", arguments: Storage.allCases)
    func recordFromJSON(storage: Storage) throws {
        try withDatabase(storage) { db in
            try db.saveZone(RecordZone(zoneID: topics))
            let garbage = #expect(throws: ShareSyncError.self) { try Record(jsonData: Data("{not json".utf8)) }
            #expect(garbage?.code == .invalidArguments)
            let unknownType = #expect(throws: ShareSyncError.self) {
                try Record(jsonData: Data(#"{"recordName":"n1","recordType":"Note","fields":{"x":{"type":"BLOB","value":1}}}"#.utf8))
            }
            #expect(unknownType?.code == .invalidArguments)

            let good = try Record(jsonData: Data(#"""
                {"recordName":"n1","recordType":"Note","zoneID":{"zoneName":"Topics"},
                 "fields":{"title":{"value":"Milk","type":"STRING"},"count":{"value":2,"type":"INT64"},
                           "owner":{"value":{"recordName":"t1","action":"DELETE_SELF"},"type":"REFERENCE"}}}
                """#.utf8))
            try db.save(makeRecord("t1"))  // the deleteSelf reference's target exists
            let saved = try db.save(good)
            #expect(saved["title"] == "Milk")
            #expect(saved["count"] == 2)
            #expect(saved["owner"] == deleteSelf("t1"))
            #expect(saved.recordID == recordID("n1"))

            // Well-formed JSON that breaks a rule of the data model is refused by the save.
            let badKey = try Record(jsonData: Data(#"""
                {"recordName":"n2","recordType":"Note","zoneID":{"zoneName":"Topics"},
                 "fields":{"has space":{"value":"Milk","type":"STRING"}}}
                """#.utf8))
            let result = try expectNothingChanges(in: db) { try db.modifyRecords(saving: [badKey]) }
            #expect(failure(result.saveResults[badKey.recordID])?.rule == .fieldKeySyntax)
        }
    }
}

@Suite("References into zones of another owner")
struct ForeignOwnerReferenceTests {
    /// The zone named like the test zone in someone else's database: another zone.
    static let foreignTopics = RecordZone.ID(zoneName: topics.zoneName, ownerName: "_someoneElse")

    @Test(
        "a reference into a same-named zone of another owner is a reference into another zone",
        arguments: Storage.allCases)
    func referenceIntoForeignZone(storage: Storage) throws {
        try withDatabase(storage) { db in
            try db.saveZone(RecordZone(zoneID: topics))
            let record = makeRecord(
                "n1", ["link": .reference(Record.Reference(recordID: recordID("x", in: Self.foreignTopics), action: .deleteSelf))])
            let result = try expectNothingChanges(in: db) { try db.modifyRecords(saving: [record]) }
            let error = failure(result.saveResults[record.recordID])
            #expect(error?.code == .invalidArguments)
            #expect(error?.rule == .referenceSameZone)
        }
    }

    @Test(
        "a parent in a same-named zone of another owner is a parent in another zone",
        arguments: Storage.allCases)
    func parentInForeignZone(storage: Storage) throws {
        try withDatabase(storage) { db in
            try db.saveZone(RecordZone(zoneID: topics))
            var record = makeRecord("n1")
            record.setParent(recordID("x", in: Self.foreignTopics))
            let result = try expectNothingChanges(in: db) { try db.modifyRecords(saving: [record]) }
            let error = failure(result.saveResults[record.recordID])
            #expect(error?.code == .invalidArguments)
            #expect(error?.rule == .parentSameZone)
        }
    }
}
