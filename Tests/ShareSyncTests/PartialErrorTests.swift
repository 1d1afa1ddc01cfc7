import Foundation
import ShareSync
import Testing

/// A request in which some items fail: `partialFailure`, with each failed item's error by record ID.
@Suite struct PartialErrorTests {
    static let topics = RecordZone.ID(zoneName: "Topics")
    static let lists = RecordZone.ID(zoneName: "Lists")

    static func note(_ name: String, in zoneID: RecordZone.ID, _ title: String) -> Record {
        var record = Record(recordType: "Note", recordID: Record.ID(recordName: name, zoneID: zoneID))
        record["title"] = .string(title)
        return record
    }

    /// The error `results.get()` throws.
    static func partialFailure(_ results: ModifyRecordsResults) -> ShareSyncError? {
        do {
            try results.get()
            return nil
        } catch {
            return error
        }
    }

    @Test(arguments: bothModes)
    func aStaleItemIsTheOnlyErrorByItemID(mode: Container.Mode) async throws {
        try await withNode(mode) { node in
            let db = node.container.privateDatabase
            _ = try await db.modifyRecordZones(saving: [RecordZone(zoneID: Self.topics), RecordZone(zoneID: Self.lists)], deleting: [])
            let stored = try await db.save(Self.note("a", in: Self.topics, "A"))
            var stale = stored
            stale["title"] = "A1"
            try await db.save(stale)  // now `stale`'s change tag is old
            stale["title"] = "A2"

            // "a" in Topics is stale; "a" in Lists (same name, another zone) and "b" are new.
            let results = try await db.modifyRecords(
                saving: [stale, Self.note("a", in: Self.lists, "Other A"), Self.note("b", in: Self.topics, "B")], deleting: [],
                savePolicy: .ifServerRecordUnchanged, atomically: false)
            let error = try #require(Self.partialFailure(results))
            #expect(error.code == .partialFailure)
            let byID = try #require(error.partialErrorsByItemID)
            #expect(byID.count == 1)
            #expect(byID[stale.recordID]?.code == .serverRecordChanged)
            #expect(byID[stale.recordID]?.serverRecord?["title"] == "A1")
            #expect(byID[Record.ID(recordName: "a", zoneID: Self.lists)] == nil)
            #expect(error.partialErrors?["a"]?.code == .serverRecordChanged)
            // The others were saved, as they were not atomic with the stale one.
            #expect(try await db.record(for: Record.ID(recordName: "a", zoneID: Self.lists))["title"] == "Other A")
            #expect(try await db.record(for: Record.ID(recordName: "b", zoneID: Self.topics))["title"] == "B")
            #expect(try await db.record(for: stale.recordID)["title"] == "A1")

            // Atomic: the stale item is the cause, the others batchRequestFailed, all by ID.
            let atomic = try await db.modifyRecords(
                saving: [stale, Self.note("c", in: Self.lists, "C")], deleting: [], savePolicy: .ifServerRecordUnchanged, atomically: true)
            let atomicByID = try #require(Self.partialFailure(atomic)?.partialErrorsByItemID)
            #expect(atomicByID[stale.recordID]?.code == .serverRecordChanged)
            #expect(atomicByID[Record.ID(recordName: "c", zoneID: Self.lists)]?.code == .batchRequestFailed)
            // All well: no error.
            let fine = try await db.modifyRecords(saving: [Self.note("d", in: Self.lists, "D")], deleting: [])
            #expect(Self.partialFailure(fine) == nil)
        }
    }

    @Test(arguments: bothModes)
    func aReadOnlyParticipantsWritesFailItemByItem(mode: Container.Mode) async throws {
        try await withNode(mode, name: "Alice") { alice in
            try await withNode(mode, name: "Bob") { bob in
                let db = alice.container.privateDatabase
                try await db.save(RecordZone(zoneID: Self.topics))
                try await db.save(Self.note("a", in: Self.topics, "A"))
                let share = try await db.createShare(forZone: Self.topics)
                try await bob.join(share, of: db, permission: .readOnly)

                let sharedZone = RecordZone.ID(zoneName: "Topics", ownerName: alice.userRecordName)
                var copy = try await bob.container.sharedDatabase.record(for: Record.ID(recordName: "a", zoneID: sharedZone))
                copy["title"] = "Bob's"
                let results = try await bob.container.sharedDatabase.modifyRecords(
                    saving: [copy], deleting: [], savePolicy: .ifServerRecordUnchanged, atomically: false)
                #expect(results.queued.isEmpty)
                let error = try #require(Self.partialFailure(results))
                #expect(error.code == .partialFailure)
                #expect(error.partialErrorsByItemID?[copy.recordID]?.code == .permissionFailure)
                #expect(error.partialErrorsByItemID?[copy.recordID]?.rule == .readOnlyParticipant)
                #expect(try await db.record(for: Record.ID(recordName: "a", zoneID: Self.topics))["title"] == "A")
            }
        }
    }
}
