import Foundation
import ShareSync
import Testing

/// Zones by ID and in batches: `recordZone(for:)`, `recordZones(for:)`, `modifyRecordZones(saving:deleting:)`.
@Suite struct ZoneTests {
    static let topics = RecordZone.ID(zoneName: "Topics")
    static let lists = RecordZone.ID(zoneName: "Lists")
    static let missing = RecordZone.ID(zoneName: "Missing")

    @Test(arguments: bothModes)
    func privateZonesByIDAndInBatches(mode: Container.Mode) async throws {
        let node = try await TestNode.open(mode)
        let db = node.container.privateDatabase
        try await db.save(RecordZone(zoneID: Self.topics))
        var note = Record(recordType: "Note", recordID: Record.ID(recordName: "n", zoneID: Self.topics))
        note["title"] = "Milk"
        try await db.save(note)

        // By ID: the zone, or zoneNotFound naming the zone asked for.
        #expect(try await db.recordZone(for: Self.topics).zoneID.zoneName == "Topics")
        #expect(try await db.recordZone(for: .default).zoneID.isDefaultZone)
        let notFound = await shareSyncError { _ = try await db.recordZone(for: Self.missing) }
        #expect(notFound?.code == .zoneNotFound)
        #expect(notFound?.zoneID?.zoneName == "Missing")
        let several = try await db.recordZones(for: [Self.topics, Self.missing])
        #expect((try? several[Self.topics]?.get())?.zoneID.zoneName == "Topics")
        #expect(Self.code(several[Self.missing]) == .zoneNotFound)

        // A mixed batch: each item its own result; the failures change nothing else.
        let results = try await db.modifyRecordZones(
            saving: [RecordZone(zoneID: Self.lists), RecordZone(zoneID: .default)], deleting: [Self.topics, Self.missing])
        #expect((try? results.saveResults[Self.lists]?.get())?.zoneID.zoneName == "Lists")
        #expect(Self.code(results.saveResults[.default]) == .invalidArguments)
        #expect((try? results.deleteResults[Self.topics]?.get()) != nil)
        #expect(Self.code(results.deleteResults[Self.missing]) == .zoneNotFound)
        #expect(results.saveResults.count == 2 && results.deleteResults.count == 2)
        #expect(Set(try await db.allRecordZones().map(\.zoneID.zoneName)) == ["_defaultZone", "Lists"])

        // The deleted zone's records went with it: gone even once a zone of that name is created again.
        #expect(await shareSyncError { _ = try await db.recordZone(for: Self.topics) }?.code == .zoneNotFound)
        #expect(await shareSyncError { _ = try await db.record(for: note.recordID) }?.code == .zoneNotFound)
        let again = try await db.modifyRecordZones(saving: [RecordZone(zoneID: Self.topics)], deleting: [])
        #expect((try? again.saveResults[Self.topics]?.get()) != nil)
        #expect(await shareSyncError { _ = try await db.record(for: note.recordID) }?.code == .unknownItem)
        #expect(try await db.records(matching: Query(recordType: "Note"), inZoneWith: Self.topics).records.isEmpty)

        // Saving a zone that exists succeeds and keeps its records.
        try await db.save(note)
        let existing = try await db.modifyRecordZones(saving: [RecordZone(zoneID: Self.topics)], deleting: [])
        #expect((try? existing.saveResults[Self.topics]?.get()) != nil)
        #expect(try await db.record(for: note.recordID)["title"] == "Milk")

        // A request that cannot reach the node throws as a whole.
        await node.container.close()
        let closed = await shareSyncError { _ = try await db.modifyRecordZones(saving: [], deleting: [Self.lists]) }
        #expect(closed?.code == .serviceUnavailable)
        await node.close()
    }

    @Test(arguments: bothModes)
    func aParticipantFetchesASharedZoneButCannotCreateOne(mode: Container.Mode) async throws {
        try await withNode(mode, name: "Alice") { alice in
            try await withNode(mode, name: "Bob") { bob in
                let db = alice.container.privateDatabase
                let topic = try await saveTopic(in: db, zone: Self.topics)
                try await bob.join(try await db.createShare(rootRecordID: topic.recordID), of: db, permission: .readWrite)

                // Bob finds Alice's zone by its ID in his shared database, with or without her name in it.
                let shared = bob.container.sharedDatabase
                let sharedZone = RecordZone.ID(zoneName: "Topics", ownerName: alice.userRecordName)
                #expect(try await shared.recordZone(for: sharedZone).zoneID == sharedZone)
                #expect(try await shared.recordZone(for: RecordZone.ID(zoneName: "Topics")).zoneID == sharedZone)
                let otherOwner = RecordZone.ID(zoneName: "Topics", ownerName: bob.userRecordName)
                #expect(await shareSyncError { _ = try await shared.recordZone(for: otherOwner) }?.code == .zoneNotFound)
                #expect(await shareSyncError { _ = try await shared.recordZone(for: Self.missing) }?.code == .zoneNotFound)
                // It is not in his private database.
                #expect(await shareSyncError { _ = try await bob.container.privateDatabase.recordZone(for: Self.topics) }?.code == .zoneNotFound)

                // He cannot create a zone in the shared database: the item fails, nothing is created anywhere.
                let mine = RecordZone.ID(zoneName: "Mine", ownerName: bob.userRecordName)
                let created = try await shared.modifyRecordZones(saving: [RecordZone(zoneID: mine)], deleting: [])
                let refusal = created.saveResults[mine].flatMap { result -> ShareSyncError? in
                    if case .failure(let error) = result { error } else { nil }
                }
                #expect(refusal?.code == .invalidArguments)
                #expect(refusal?.message.contains("belong to their owners") == true)
                #expect(try await shared.allRecordZones().map(\.zoneID) == [sharedZone])
                #expect(!(try await bob.container.privateDatabase.allRecordZones().map(\.zoneID.zoneName).contains("Mine")))
                #expect(try await db.allRecordZones().map(\.zoneID.zoneName).contains("Mine") == false)

                // Deleting the shared zone leaves its share: it leaves Bob's shared database.
                let left = try await shared.modifyRecordZones(saving: [], deleting: [sharedZone])
                #expect((try? left.deleteResults[sharedZone]?.get()) != nil)
                #expect(await shareSyncError { _ = try await shared.recordZone(for: sharedZone) }?.code == .zoneNotFound)
                #expect(try await shared.allRecordZones().isEmpty)
            }
        }
    }

    static func code<T>(_ result: Result<T, ShareSyncError>?) -> ShareSyncError.Code? {
        if case .failure(let error)? = result { error.code } else { nil }
    }
}
