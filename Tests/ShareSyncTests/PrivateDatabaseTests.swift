import Foundation
import ShareSync
import Testing

/// The private database through the public API, embedded and connected alike.
@Suite struct PrivateDatabaseTests {
    @Test(arguments: bothModes)
    func saveFetchConflictAndDelete(mode: Container.Mode) async throws {
        try await withNode(mode) { node in
            let db = node.container.privateDatabase
            let zoneID = RecordZone.ID(zoneName: "Topics")
            try await db.save(RecordZone(zoneID: zoneID))
            #expect(try await db.allRecordZones().map(\.zoneID.zoneName) == ["_defaultZone", "Topics"])

            var note = Record(recordType: "Note", recordID: Record.ID(recordName: "n1", zoneID: zoneID))
            note["title"] = "Milk"
            note["count"] = 2
            let saved = try await db.save(note)
            #expect(saved["title"] == "Milk")
            #expect(saved.recordChangeTag != nil)

            var fetched = try await db.record(for: note.recordID)
            #expect(fetched["count"] == 2)
            #expect(fetched.recordChangeTag == saved.recordChangeTag)

            // A change over the fetched copy saves; a second change over the same (now stale) copy is a
            // conflict carrying the stored record, and changes nothing.
            fetched["title"] = "Oat milk"
            let second = try await db.save(fetched)
            var stale = fetched
            stale["title"] = "Soy milk"
            let conflict = await shareSyncError { _ = try await db.save(stale) }
            #expect(conflict?.code == .serverRecordChanged)
            #expect(conflict?.serverRecord?["title"] == "Oat milk")
            #expect(conflict?.serverRecord?.recordChangeTag == second.recordChangeTag)
            #expect(try await db.record(for: note.recordID)["title"] == "Oat milk")

            // A new record of a name that exists is a conflict too (ifServerRecordUnchanged).
            var duplicate = Record(recordType: "Note", recordID: note.recordID)
            duplicate["title"] = "Duplicate"
            #expect(await shareSyncError { _ = try await db.save(duplicate) }?.code == .serverRecordChanged)

            // Named with this node's own user record name as the zone's owner (which the store takes):
            // saved and deleted, each answered under the ID given. The delete used to succeed, then
            // throw "the node did not answer".
            let explicitID = Record.ID(recordName: "explicit", zoneID: RecordZone.ID(zoneName: "Topics", ownerName: node.userRecordName))
            var explicit = Record(recordType: "Note", recordID: explicitID)
            explicit["title"] = "mine"
            _ = try await db.save(explicit)
            try await db.deleteRecord(withID: explicitID)
            #expect(await shareSyncError { _ = try await db.record(for: Record.ID(recordName: "explicit", zoneID: zoneID)) }?.code == .unknownItem)

            try await db.deleteRecord(withID: note.recordID)
            #expect(await shareSyncError { _ = try await db.record(for: note.recordID) }?.code == .unknownItem)
            #expect(await shareSyncError { try await db.deleteRecord(withID: note.recordID) }?.code == .unknownItem)
            let missing = try await db.records(for: [note.recordID])
            #expect(throws: ShareSyncError.self) { try missing[note.recordID]?.get() }
        }
    }

    @Test(arguments: bothModes)
    func modifyRecordsHasPerItemResults(mode: Container.Mode) async throws {
        try await withNode(mode) { node in
            let db = node.container.privateDatabase
            let zoneID = RecordZone.ID(zoneName: "Topics")
            try await db.save(RecordZone(zoneID: zoneID))
            func note(_ name: String, _ title: String) -> Record {
                var record = Record(recordType: "Note", recordID: Record.ID(recordName: name, zoneID: zoneID))
                record["title"] = .string(title)
                return record
            }
            let first = try await db.modifyRecords(saving: [note("a", "A"), note("b", "B")], deleting: [])
            try first.get()
            #expect(first.savedRecords.count == 2)

            // Atomic: a stale item fails the request; the other items carry batchRequestFailed and nothing changes.
            let atomic = try await db.modifyRecords(
                saving: [note("a", "A2"), note("c", "C")], deleting: [Record.ID(recordName: "b", zoneID: zoneID)])
            #expect(throws: ShareSyncError.self) { try atomic.get() }
            #expect(atomic.saveResults[Record.ID(recordName: "a", zoneID: zoneID)].map(Self.code) == .serverRecordChanged)
            #expect(atomic.saveResults[Record.ID(recordName: "c", zoneID: zoneID)].map(Self.code) == .batchRequestFailed)
            #expect(atomic.deleteResults[Record.ID(recordName: "b", zoneID: zoneID)].map(Self.code) == .batchRequestFailed)
            #expect(await shareSyncError { _ = try await db.record(for: Record.ID(recordName: "c", zoneID: zoneID)) }?.code == .unknownItem)

            // Not atomic: each item on its own.
            let loose = try await db.modifyRecords(
                saving: [note("a", "A2"), note("c", "C")], deleting: [Record.ID(recordName: "b", zoneID: zoneID)], atomically: false)
            #expect(loose.saveResults[Record.ID(recordName: "a", zoneID: zoneID)].map(Self.code) == .serverRecordChanged)
            #expect((try? loose.saveResults[Record.ID(recordName: "c", zoneID: zoneID)]?.get())?["title"] == "C")
            #expect((try? loose.deleteResults[Record.ID(recordName: "b", zoneID: zoneID)]?.get()) != nil)

            // changedKeys: only the keys set on this copy are written over the stored record.
            var partial = Record(recordType: "Note", recordID: Record.ID(recordName: "a", zoneID: zoneID))
            partial["done"] = true
            let merged = try await db.modifyRecords(saving: [partial], deleting: [], savePolicy: .changedKeys)
            let stored = try merged.saveResults[partial.recordID]!.get()
            #expect(stored["title"] == "A")
            #expect(stored["done"] == true)

            // allKeys: replaced.
            var replacement = Record(recordType: "Note", recordID: partial.recordID)
            replacement["title"] = "Z"
            let replaced = try await db.modifyRecords(saving: [replacement], deleting: [], savePolicy: .allKeys)
            #expect(try replaced.saveResults[partial.recordID]!.get().allKeys == ["title"])
        }
    }

    static func code(_ result: Result<Record, ShareSyncError>) -> ShareSyncError.Code? {
        if case .failure(let error) = result { error.code } else { nil }
    }

    static func code(_ result: Result<Void, ShareSyncError>) -> ShareSyncError.Code? {
        if case .failure(let error) = result { error.code } else { nil }
    }

    @Test(arguments: bothModes)
    func changeFeedsWithTokens(mode: Container.Mode) async throws {
        try await withNode(mode) { node in
            let db = node.container.privateDatabase
            let zoneID = RecordZone.ID(zoneName: "Topics")
            try await db.save(RecordZone(zoneID: zoneID))
            let start = try await db.databaseChanges(since: nil)
            #expect(start.modifiedZoneIDs.map(\.zoneName).contains("Topics"))
            var records: [Record] = []
            for i in 0..<5 {
                var r = Record(recordType: "Note", recordID: Record.ID(recordName: "n\(i)", zoneID: zoneID))
                r["i"] = .int64(Int64(i))
                records.append(r)
            }
            try await db.modifyRecords(saving: records, deleting: []).get()
            // Pages of two, then nothing new from the last token.
            var token: ServerChangeToken?
            var seen: [String] = []
            var pages = 0
            repeat {
                let page = try await db.recordZoneChanges(inZoneWith: zoneID, since: token, resultsLimit: 2)
                seen += page.modifications.map(\.recordID.recordName)
                token = page.changeToken
                pages += 1
                if !page.moreComing { break }
            } while pages < 10
            #expect(Set(seen) == Set((0..<5).map { "n\($0)" }))
            #expect(pages == 3)
            let nothing = try await db.recordZoneChanges(inZoneWith: zoneID, since: token)
            #expect(nothing.modifications.isEmpty && nothing.deletions.isEmpty)

            try await db.deleteRecord(withID: records[0].recordID)
            let after = try await db.recordZoneChanges(inZoneWith: zoneID, since: token)
            #expect(after.deletions.map(\.recordID.recordName) == ["n0"])
            #expect(after.deletions.first?.recordType == "Note")
            let zones = try await db.databaseChanges(since: start.changeToken)
            #expect(zones.modifiedZoneIDs.map(\.zoneName) == ["Topics"])

            let garbage = await shareSyncError {
                _ = try await db.recordZoneChanges(inZoneWith: zoneID, since: ServerChangeToken(stringValue: "nonsense"))
            }
            #expect(garbage?.code == .invalidArguments)
        }
    }

    /// `databaseChanges` a page at a time: `moreComing` until every zone was given, then nothing new.
    @Test(arguments: bothModes)
    func databaseChangesInPages(mode: Container.Mode) async throws {
        try await withNode(mode) { node in
            let db = node.container.privateDatabase
            let names = (0..<5).map { "Zone\($0)" }
            for name in names { try await db.save(RecordZone(zoneID: RecordZone.ID(zoneName: name))) }
            var token: ServerChangeToken?
            var seen: [String] = []
            var pageSizes: [Int] = []
            repeat {
                let page = try await db.databaseChanges(since: token, resultsLimit: 2)
                seen += page.modifiedZoneIDs.map(\.zoneName)
                pageSizes.append(page.modifiedZoneIDs.count + page.deletedZoneIDs.count)
                token = page.changeToken
                if !page.moreComing { break }
            } while pageSizes.count < 10
            #expect(Set(names).isSubset(of: Set(seen)))
            #expect(pageSizes.count >= 3 && pageSizes.allSatisfy { $0 <= 2 })
            let nothing = try await db.databaseChanges(since: token)
            #expect(nothing.modifiedZoneIDs.isEmpty && nothing.deletedZoneIDs.isEmpty && !nothing.moreComing)

            try await db.deleteRecordZone(withID: RecordZone.ID(zoneName: "Zone3"))
            let after = try await db.databaseChanges(since: token, resultsLimit: 2)
            #expect(after.deletedZoneIDs.map(\.zoneName) == ["Zone3"] && !after.moreComing)
        }
    }

    @Test(arguments: bothModes)
    func sharedDatabaseRefusesOwnerOnlyCalls(mode: Container.Mode) async throws {
        try await withNode(mode) { node in
            let shared = node.container.sharedDatabase
            let zones = try await shared.allRecordZones()
            #expect(zones.isEmpty)
            #expect(await shareSyncError { try await shared.save(RecordZone(zoneID: RecordZone.ID(zoneName: "Mine"))) }?.code == .invalidArguments)
            let notShared = await shareSyncError {
                _ = try await shared.record(for: Record.ID(recordName: "x", zoneID: RecordZone.ID(zoneName: "Topics", ownerName: "_nobody")))
            }
            #expect(notShared?.code == .zoneNotFound)
            #expect(await shareSyncError { _ = try await shared.createShare(forZone: RecordZone.ID(zoneName: "Topics")) }?.code == .permissionFailure)
        }
    }
}
