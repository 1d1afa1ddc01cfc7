import Foundation
import Testing

import ShareSyncCore
@testable import ShareSyncStore

@Suite("Compacting history")
struct CompactionTests {
    @Test("after compaction an old token is expired, while nil and current tokens work and tombstones are gone", arguments: Storage.allCases)
    func compactionExpiresOldTokens(storage: Storage) throws {
        try withDatabase(storage) { db in
            try db.saveZones([RecordZone(zoneID: topics), RecordZone(zoneName: "Gone")])
            try db.save([makeRecord("a"), makeRecord("b"), makeRecord("c")])
            let old = try db.currentChangeToken()
            try db.delete([recordID("a"), recordID("b")])
            try db.deleteZone(RecordZone.ID(zoneName: "Gone"))
            #expect(try db.fetchZoneChanges(topics, since: old).deletedRecords.count == 2)
            #expect(try db.fetchDatabaseChanges(since: old).deletedZoneIDs == [RecordZone.ID(zoneName: "Gone")])

            try db.compactHistory()

            expectError(.changeTokenExpired) { try db.fetchZoneChanges(topics, since: old) }
            expectError(.changeTokenExpired) { try db.fetchDatabaseChanges(since: old) }

            let fromNil = try db.allZoneChanges(topics, since: nil)
            #expect(fromNil.changes.map(\.recordName) == ["c"])
            #expect(!fromNil.changes.contains { $0.isDeletion })
            #expect(try db.fetchDatabaseChanges(since: nil).deletedZoneIDs.isEmpty)

            let current = try db.currentChangeToken()
            #expect(try db.fetchZoneChanges(topics, since: current).changes.isEmpty)
            #expect(try db.fetchDatabaseChanges(since: current).deletedZoneIDs.isEmpty)

            // The token from the nil fetch keeps working after more changes.
            try db.delete([recordID("c")])
            let after = try db.fetchZoneChanges(topics, since: fromNil.changeToken)
            #expect(after.changes == [.deleted(DeletedRecord(recordID: recordID("c"), recordType: "Note"))])
        }
    }

    @Test("compacting up to a token keeps later deletions and the tokens from that point on", arguments: Storage.allCases)
    func compactionUpToToken(storage: Storage) throws {
        try withDatabase(storage) { db in
            try db.saveZone(RecordZone(zoneID: topics))
            try db.save([makeRecord("a"), makeRecord("b"), makeRecord("c")])
            let t0 = try db.currentChangeToken()
            try db.delete([recordID("a")])
            let t1 = try db.currentChangeToken()
            try db.delete([recordID("b")])

            try db.compactHistory(upTo: t1)

            expectError(.changeTokenExpired) { try db.fetchZoneChanges(topics, since: t0) }
            let sinceT1 = try db.fetchZoneChanges(topics, since: t1)
            #expect(sinceT1.changes == [.deleted(DeletedRecord(recordID: recordID("b"), recordType: "Note"))])
            #expect(try db.fetchZoneChanges(topics, since: nil).changes.map(\.recordName) == ["c"])
        }
    }

    @Test("compacting with a token from another database fails and changes nothing", arguments: Storage.allCases)
    func compactionWithForeignToken(storage: Storage) throws {
        try withDatabase(storage) { db in
            try db.saveZone(RecordZone(zoneID: topics))
            try db.save([makeRecord("a"), makeRecord("b")])
            let t0 = try db.currentChangeToken()
            try db.delete([recordID("a")])
            let other = try PrivateDatabase(inMemoryOwnerName: ownerName)
            try other.saveZone(RecordZone(zoneID: topics))
            let foreign = try other.currentChangeToken()
            try expectNothingChanges(in: db) {
                expectError(.changeTokenExpired) { try db.compactHistory(upTo: foreign) }
                expectError(.invalidArguments) { try db.compactHistory(upTo: ServerChangeToken(stringValue: "nonsense")) }
            }
            #expect(try db.fetchZoneChanges(topics, since: t0).deletedRecords.count == 1)
        }
    }
}
