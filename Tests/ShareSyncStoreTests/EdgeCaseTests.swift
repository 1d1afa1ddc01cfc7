import Foundation
import Testing

import ShareSyncCore
@testable import ShareSyncStore

@Suite("Edge cases of requests and feeds")
struct EdgeCaseTests {
    @Test(
        "a zone created after a token is fetched from that token with all its records",
        arguments: Storage.allCases)
    func zoneCreatedAfterToken(storage: Storage) throws {
        try withDatabase(storage) { db in
            try db.saveZone(RecordZone(zoneName: "Early"))
            let token = try db.currentChangeToken()
            try db.saveZone(RecordZone(zoneID: topics))
            try db.save([makeRecord("a"), makeRecord("b")])

            let database = try db.fetchDatabaseChanges(since: token)
            #expect(database.changedZoneIDs == [topics])
            let changes = try db.fetchZoneChanges(topics, since: token)
            #expect(changes.changes.map(\.recordName) == ["a", "b"])
        }
    }

    @Test("in an atomic batch a conflicting record keeps its serverRecordChanged error and the server's record", arguments: Storage.allCases)
    func atomicConflictCarriesServerRecord(storage: Storage) throws {
        try withDatabase(storage) { db in
            try db.saveZone(RecordZone(zoneID: topics))
            let stale = try db.save(makeRecord("a", ["n": 1]))
            var newer = stale
            newer["n"] = 2
            let server = try db.save(newer)
            let result = try expectNothingChanges(in: db) {
                try db.modifyRecords(saving: [makeRecord("b"), stale, makeRecord("c")])
            }
            let error = failure(result.saveResults[stale.recordID])
            #expect(error?.code == .serverRecordChanged)
            #expect(error?.serverRecord == server)
            #expect(failure(result.saveResults[recordID("b")])?.code == .batchRequestFailed)
            #expect(failure(result.saveResults[recordID("c")])?.code == .batchRequestFailed)
        }
    }

    @Test("a save without a change tag of a name that exists is a conflict that says so, not 'changed since it was fetched'", arguments: Storage.allCases)
    func creatingANameThatExistsSaysItExists(storage: Storage) throws {
        try withDatabase(storage) { db in
            try db.saveZone(RecordZone(zoneID: topics))
            let first = try db.save(makeRecord("a", ["n": 1]))
            let result = try expectNothingChanges(in: db) { try db.modifyRecords(saving: [makeRecord("a", ["n": 2])]) }
            let error = failure(result.saveResults[recordID("a")])
            #expect(error?.code == .serverRecordChanged && error?.serverRecord == first)
            #expect(error?.message.contains("already exists on the server (tag \(first.recordChangeTag!))") == true, "\(String(describing: error))")
            // With a stale tag, it is still "changed since it was fetched".
            var stale = first
            stale["n"] = 3
            _ = try db.save(stale)
            let again = failure(try db.modifyRecords(saving: [stale]).saveResults[recordID("a")])
            #expect(again?.message.contains("changed on the server since it was fetched") == true, "\(String(describing: again))")
        }
    }

    @Test("saving and deleting the same record in one request is refused", arguments: Storage.allCases)
    func saveAndDeleteSameRecord(storage: Storage) throws {
        try withDatabase(storage) { db in
            try db.saveZone(RecordZone(zoneID: topics))
            let a = try db.save(makeRecord("a", ["n": 1]))
            var changed = a
            changed["n"] = 2
            let result = try expectNothingChanges(in: db) { try db.modifyRecords(saving: [changed], deleting: [a.recordID]) }
            #expect(failure(result.deleteResults[a.recordID])?.rule == .duplicateItem)
        }
    }

    @Test("compacting to an older point never brings expired tokens back", arguments: Storage.allCases)
    func compactionHorizonOnlyMovesForward(storage: Storage) throws {
        try withDatabase(storage) { db in
            try db.saveZone(RecordZone(zoneID: topics))
            try db.save(makeRecord("a"))
            let t1 = try db.currentChangeToken()
            try db.save(makeRecord("b"))
            let t2 = try db.currentChangeToken()
            try db.compactHistory(upTo: t2)
            try db.compactHistory(upTo: t1)
            expectError(.changeTokenExpired) { try db.fetchZoneChanges(topics, since: t1) }
            #expect(try db.fetchZoneChanges(topics, since: t2).changes.isEmpty)
        }
    }

    @Test("names may be as long as maximumNameLength and no longer", arguments: Storage.allCases)
    func nameLengthLimit(storage: Storage) throws {
        var limits = Limits()
        limits.maximumNameLength = 10
        try withDatabase(storage, limits: limits) { db in
            try db.saveZone(RecordZone(zoneName: "Zone567890"))
            let zone = RecordZone.ID(zoneName: "Zone567890")
            try expectNothingChanges(in: db) {
                expectError(.invalidArguments, rule: .zoneNameSyntax) { try db.saveZone(RecordZone(zoneName: "Zone5678901")) }
            }
            try db.save(makeRecord("name567890", type: "Type567890", in: zone, ["key4567890": 1]))
            let bad = [
                ("recordNameSyntax", makeRecord("name5678901", in: zone)),
                ("recordTypeSyntax", makeRecord("n1", type: "Type5678901", in: zone)),
                ("fieldKeySyntax", makeRecord("n2", in: zone, ["key45678901": 1])),
            ]
            for (rule, record) in bad {
                let result = try expectNothingChanges(in: db) { try db.modifyRecords(saving: [record]) }
                #expect(failure(result.saveResults[record.recordID])?.rule?.rawValue == rule)
            }
        }
    }

    @Test("a resultsLimit of zero or less means as many as the database allows", arguments: Storage.allCases, [0, -1])
    func nonPositiveResultsLimit(storage: Storage, limit: Int) throws {
        var limits = Limits()
        limits.maximumResultsPerFetch = 5
        try withDatabase(storage, limits: limits) { db in
            try db.saveZone(RecordZone(zoneID: topics))
            try db.save((0..<7).map { makeRecord("r\($0)") })
            let page = try db.fetchZoneChanges(topics, since: nil, resultsLimit: limit)
            #expect(page.changes.count == 5)
            #expect(page.moreComing)
            let rest = try db.fetchZoneChanges(topics, since: page.changeToken, resultsLimit: limit)
            #expect(rest.changes.map(\.recordName) == ["r5", "r6"])
            #expect(!rest.moreComing)
        }
    }

    @Test("a zone ID naming the owner explicitly is the owner's zone", arguments: Storage.allCases)
    func explicitOwnerName(storage: Storage) throws {
        try withDatabase(storage) { db in
            let explicit = RecordZone.ID(zoneName: "Topics", ownerName: ownerName)
            try db.saveZone(RecordZone(zoneID: explicit))
            #expect(try db.fetchZone(topics).zoneID == topics)
            try db.save(makeRecord("a", in: explicit, ["n": 1]))
            #expect(try db.fetchRecord(recordID("a"))["n"] == 1)
            #expect(try db.fetchZoneChanges(explicit, since: nil).changes.map(\.recordName) == ["a"])
        }
    }
}
