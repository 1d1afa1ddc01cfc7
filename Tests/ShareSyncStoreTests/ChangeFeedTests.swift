import Foundation
import Testing

import ShareSyncCore
@testable import ShareSyncStore

@Suite("Change feeds")
struct ChangeFeedTests {
    @Test("fetchDatabaseChanges with a nil token lists the zones that exist", arguments: Storage.allCases)
    func databaseChangesFromNil(storage: Storage) throws {
        try withDatabase(storage) { db in
            try db.saveZones([RecordZone(zoneName: "A"), RecordZone(zoneName: "B"), RecordZone(zoneName: "C")])
            try db.deleteZone(RecordZone.ID(zoneName: "B"))
            let changes = try db.fetchDatabaseChanges(since: nil)
            #expect(Set(changes.changedZoneIDs) == [RecordZone.ID(zoneName: "A"), RecordZone.ID(zoneName: "C")])
            #expect(changes.deletedZoneIDs.isEmpty)
            #expect(!changes.moreComing)
            #expect(changes.changeToken == (try db.currentChangeToken()))

            // The default zone is listed once it holds changes.
            try db.save(makeRecord("n1", in: .default))
            #expect(try db.fetchDatabaseChanges(since: nil).changedZoneIDs.contains(.default))
        }
    }

    @Test("fetchDatabaseChanges with a token lists the zones created, changed and deleted since", arguments: Storage.allCases)
    func databaseChangesSinceToken(storage: Storage) throws {
        try withDatabase(storage) { db in
            try db.saveZones([RecordZone(zoneName: "A"), RecordZone(zoneName: "B"), RecordZone(zoneName: "Quiet")])
            let token = try db.fetchDatabaseChanges(since: nil).changeToken
            #expect(try db.fetchDatabaseChanges(since: token).changedZoneIDs.isEmpty)

            try db.saveZone(RecordZone(zoneName: "C"))
            try db.save(makeRecord("n1", in: RecordZone.ID(zoneName: "A")))
            try db.deleteZone(RecordZone.ID(zoneName: "B"))

            let changes = try db.fetchDatabaseChanges(since: token)
            #expect(changes.changedZoneIDs == [RecordZone.ID(zoneName: "C"), RecordZone.ID(zoneName: "A")])
            #expect(changes.deletedZoneIDs == [RecordZone.ID(zoneName: "B")])
            #expect(!changes.moreComing)

            let next = try db.fetchDatabaseChanges(since: changes.changeToken)
            #expect(next.changedZoneIDs.isEmpty)
            #expect(next.deletedZoneIDs.isEmpty)
        }
    }

    @Test("fetchDatabaseChanges pages through zones with resultsLimit", arguments: Storage.allCases)
    func databaseChangesPaging(storage: Storage) throws {
        try withDatabase(storage) { db in
            let names = (1...5).map { "Z\($0)" }
            for name in names { try db.saveZone(RecordZone(zoneName: name)) }
            var token: ServerChangeToken?
            var seen: [String] = []
            var pages = 0
            while true {
                let page = try db.fetchDatabaseChanges(since: token, resultsLimit: 2)
                #expect(page.changedZoneIDs.count <= 2)
                seen += page.changedZoneIDs.map(\.zoneName)
                token = page.changeToken
                pages += 1
                if !page.moreComing { break }
                #expect(pages < 10)
            }
            #expect(seen == names)
            #expect(pages == 3)
        }
    }

    @Test("fetchZoneChanges with a nil token returns every record once, in its latest state", arguments: Storage.allCases)
    func zoneChangesFromNil(storage: Storage) throws {
        try withDatabase(storage) { db in
            try db.saveZone(RecordZone(zoneID: topics))
            var saved = try db.save([makeRecord("a", ["n": 1]), makeRecord("b", ["n": 2]), makeRecord("c", ["n": 3])])
            var a = try #require(saved["a"])
            a["n"] = 10
            saved["a"] = try db.save(a)
            try db.delete([recordID("b")])

            let changes = try db.fetchZoneChanges(topics, since: nil)
            #expect(changes.zoneID == topics)
            #expect(!changes.moreComing)
            #expect(changes.deletedRecords.isEmpty)
            #expect(changes.changedRecords == [saved["c"]!, saved["a"]!])
            #expect(changes.changeToken == (try db.currentChangeToken()))
        }
    }

    @Test("fetchZoneChanges with a token returns only later changes, in commit order", arguments: Storage.allCases)
    func zoneChangesSinceToken(storage: Storage) throws {
        try withDatabase(storage) { db in
            try db.saveZones([RecordZone(zoneID: topics), RecordZone(zoneName: "Other")])
            try db.save([makeRecord("early1"), makeRecord("early2")])
            let token = try db.fetchZoneChanges(topics, since: nil).changeToken

            try db.save(makeRecord("z"))
            try db.save(makeRecord("elsewhere", in: RecordZone.ID(zoneName: "Other")))
            try db.save([makeRecord("x"), makeRecord("y")])
            try db.save(makeRecord("m"))

            let changes = try db.fetchZoneChanges(topics, since: token)
            #expect(changes.changes.map(\.recordName) == ["z", "x", "y", "m"])
            #expect(!changes.moreComing)
            #expect(try db.fetchZoneChanges(topics, since: changes.changeToken).changes.isEmpty)
        }
    }

    @Test("a record changed twice since the token appears once, in its latest state, at its latest position", arguments: Storage.allCases)
    func recordChangedTwiceAppearsOnce(storage: Storage) throws {
        try withDatabase(storage) { db in
            try db.saveZone(RecordZone(zoneID: topics))
            var a = try db.save(makeRecord("a", ["n": 0]))
            let token = try db.currentChangeToken()
            a["n"] = 1
            a = try db.save(a)
            try db.save(makeRecord("b"))
            a["n"] = 2
            a = try db.save(a)

            let changes = try db.fetchZoneChanges(topics, since: token)
            #expect(changes.changes.map(\.recordName) == ["b", "a"])
            #expect(changes.changedRecords.last == a)
            #expect(changes.changedRecords.last?["n"] == 2)
        }
    }

    @Test("deletions appear as deleted records with their record type", arguments: Storage.allCases)
    func deletionsAreTombstones(storage: Storage) throws {
        try withDatabase(storage) { db in
            try db.saveZone(RecordZone(zoneID: topics))
            try db.save([makeRecord("t", type: "Topic"), makeRecord("n", type: "Note"), makeRecord("keep")])
            let token = try db.currentChangeToken()
            try db.delete([recordID("n")])
            try db.delete([recordID("t")])
            try db.save(makeRecord("new"))

            let changes = try db.fetchZoneChanges(topics, since: token)
            #expect(changes.changes == [
                .deleted(DeletedRecord(recordID: recordID("n"), recordType: "Note")),
                .deleted(DeletedRecord(recordID: recordID("t"), recordType: "Topic")),
                .changed(try db.fetchRecord(recordID("new"))),
            ])
        }
    }

    @Test("a record deleted and saved again since the token appears as changed, not deleted", arguments: Storage.allCases)
    func deletedThenRecreated(storage: Storage) throws {
        try withDatabase(storage) { db in
            try db.saveZone(RecordZone(zoneID: topics))
            try db.save(makeRecord("a", ["n": 1]))
            let token = try db.currentChangeToken()
            try db.delete([recordID("a")])
            let again = try db.save(makeRecord("a", ["n": 2]))
            let changes = try db.fetchZoneChanges(topics, since: token)
            #expect(changes.changes == [.changed(again)])
        }
    }

    @Test("fetching the changes of a missing zone fails with zoneNotFound", arguments: Storage.allCases)
    func zoneChangesOfMissingZone(storage: Storage) throws {
        try withDatabase(storage) { db in
            expectError(.zoneNotFound) { try db.fetchZoneChanges(RecordZone.ID(zoneName: "Nowhere"), since: nil) }
        }
    }

    @Test("a token from another database is expired; a malformed token is invalid", arguments: Storage.allCases)
    func foreignAndMalformedTokens(storage: Storage) throws {
        try withDatabase(storage) { db in
            try db.saveZone(RecordZone(zoneID: topics))
            try db.save(makeRecord("a"))
            let other = try PrivateDatabase(inMemoryOwnerName: ownerName)
            try other.saveZone(RecordZone(zoneID: topics))
            try other.save(makeRecord("b"))
            let foreign = try other.currentChangeToken()
            #expect(foreign != (try db.currentChangeToken()))

            try expectNothingChanges(in: db) {
                expectError(.changeTokenExpired) { try db.fetchZoneChanges(topics, since: foreign) }
                expectError(.changeTokenExpired) { try db.fetchDatabaseChanges(since: foreign) }
                // A position sealed with another key (another database's, under this database's ID), and
                // ones altered or made up: refused as malformed.
                let otherKey = "2.\(db.databaseID)." + foreign.stringValue.split(separator: ".")[2]
                let current = try db.currentChangeToken().stringValue
                let first = current.index(current.startIndex, offsetBy: "2.\(db.databaseID).".count)
                let altered = current.replacingCharacters(in: first...first, with: current[first] == "A" ? "B" : "A")
                for garbage in ["garbage", "", "2.x", "2.\(db.databaseID).-4", "2.\(db.databaseID).abc", otherKey, altered,
                                "2.\(db.databaseID).AAAAAAAAAAAAAAAAAAAAAA"] {
                    let token = ServerChangeToken(stringValue: garbage)
                    expectError(.invalidArguments) { try db.fetchZoneChanges(topics, since: token) }
                    expectError(.invalidArguments) { try db.fetchDatabaseChanges(since: token) }
                }
            }
        }
    }

    @Test("a token ahead of the database is refused", arguments: Storage.allCases)
    func tokenFromTheFuture(storage: Storage) throws {
        try withDatabase(storage) { db in
            try db.saveZone(RecordZone(zoneID: topics))
            let future = try db.changeToken(at: 999_999)
            expectError(.changeTokenExpired) { try db.fetchZoneChanges(topics, since: future) }
            // It says what is wrong: ahead of the history, not older than it.
            do {
                _ = try db.fetchDatabaseChanges(since: future)
                Issue.record("a token from the future was accepted")
            } catch let error as ShareSyncError {
                #expect(error.message.contains("ahead of this database's history"), "\(error.message)")
                #expect(!error.message.contains("older"), "\(error.message)")
            }
        }
    }
}
