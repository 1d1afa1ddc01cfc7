import Foundation
import ShareSyncTestSupport
import Testing
@testable import ShareSync

/// A participant's new records under a new parent, in a share of a record hierarchy: a child is in the
/// participant's view only once its parent is, so a child sent in an earlier request than its new
/// parent was refused (`permissionFailure`, rule `outsideView`): by the sync engine's batches (reported
/// failed, for good), and by the node's cut of a write too large for one request.
@Suite struct SyncEngineParentOrderTests {
    static let zoneID = RecordZone.ID(zoneName: "Topics")

    /// Runs `body` with Alice's private database, Bob's node, and the IDs of records in Alice's zone
    /// as Bob names them: Alice's topic is shared with Bob, read-write, and Bob has accepted.
    static func withBobWritingToAlicesTopic(
        _ mode: Container.Mode, _ body: (Database, TestNode, (String) -> Record.ID) async throws -> Void
    ) async throws {
        try await withNode(mode, name: "Alice") { alice in
            try await withNode(mode, name: "Bob") { bob in
                let db = alice.container.privateDatabase
                let topic = try await saveTopic(in: db, zone: zoneID)
                try await bob.join(try await db.createShare(rootRecordID: topic.recordID), of: db, permission: .readWrite)
                let zone = RecordZone.ID(zoneName: zoneID.zoneName, ownerName: alice.userRecordName)
                try await body(db, bob) { Record.ID(recordName: $0, zoneID: zone) }
            }
        }
    }

    @Test(arguments: bothModes)
    func aParticipantsChildrenSentBeforeTheirNewParentArriveAfterIt(mode: Container.Mode) async throws {
        try await Self.withBobWritingToAlicesTopic(mode) { db, bob, id in
            let store = AppStore()
            let (engine, events) = store.startEngine(bob.container.sharedDatabase, automatic: false)
            // 450 notes in a new folder, a new subfolder of the folder (their parents), the
            // subfolder and the folder last: batches of 200 before their parents.
            for i in 0..<450 {
                var note = Record(recordType: "Note", recordID: id("n\(i)"))
                note["title"] = .string("note \(i)")
                note.parent = Record.Reference(recordID: id(i < 300 ? "folder" : "sub"), action: .none)
                store.edit(note)
            }
            var sub = Record(recordType: "Folder", recordID: id("sub"))
            sub.parent = Record.Reference(recordID: id("folder"), action: .none)
            store.edit(sub)
            var folder = Record(recordType: "Folder", recordID: id("folder"))
            folder.parent = Record.Reference(recordID: id("topic"), action: .none)
            store.edit(folder)
            // And one whose parent is no change and not in Bob's view: refused, and reported.
            var stray = Record(recordType: "Note", recordID: id("stray"))
            stray.parent = Record.Reference(recordID: id("elsewhere"), action: .none)
            store.edit(stray)
            let names = (0..<450).map { "n\($0)" } + ["sub", "folder", "stray"]
            engine.state.add(pendingRecordZoneChanges: names.map { .saveRecord(id($0)) })
            try await engine.sendChanges()
            #expect(engine.state.pendingRecordZoneChanges.isEmpty)
            await engine.stop()
            await events.value

            let sent = store.sentRecordZoneChanges
            let failed = sent.flatMap(\.failedRecordSaves)
            #expect(failed.map(\.record.recordID.recordName) == ["stray"], "\(failed.count) failed: \(failed.prefix(3).map(\.error))")
            #expect(failed.first?.error.code == .permissionFailure)
            let saved = sent.flatMap(\.savedRecords).map(\.recordID.recordName)
            #expect(saved.count == 452 && Set(saved) == Set(names.dropLast()), "each saved once: \(saved.count)")
            // The owner has them, in the hierarchy under the topic.
            let last = try await db.record(for: Record.ID(recordName: "n449", zoneID: Self.zoneID))
            #expect(last["title"] == "note 449")
            #expect(last.parent?.recordID.recordName == "sub")
            #expect(await shareSyncError { _ = try await db.record(for: Record.ID(recordName: "stray", zoneID: Self.zoneID)) }?.code == .unknownItem)
        }
    }
}

extension SyncEngineParentOrderTests {
    @Test("a participant's write too large for one request, its new parent given after its children, is saved whole: the parent goes first", arguments: bothModes)
    func aLargeWriteWithItsNewParentLastIsSavedWhole(mode: Container.Mode) async throws {
        try await Self.withBobWritingToAlicesTopic(mode) { db, bob, id in
            // 500 notes, then their folder: more than one request holds (400 items).
            var records = (0..<500).map { i in
                var note = Record(recordType: "Note", recordID: id("n\(i)"))
                note["title"] = .string("note \(i)")
                note.parent = Record.Reference(recordID: id("folder"), action: .none)
                return note
            }
            var folder = Record(recordType: "Folder", recordID: id("folder"))
            folder.parent = Record.Reference(recordID: id("topic"), action: .none)
            records.append(folder)
            let results = try await bob.container.sharedDatabase.modifyRecords(saving: records, deleting: [], atomically: false)
            let failed = results.saveResults.filter { if case .failure = $0.value { true } else { false } }
            #expect(failed.isEmpty, "\(failed.count) failed, e.g. \(String(describing: failed.first))")
            let last = try await db.record(for: Record.ID(recordName: "n0", zoneID: Self.zoneID))
            #expect(last["title"] == "note 0")
        }
    }
}
