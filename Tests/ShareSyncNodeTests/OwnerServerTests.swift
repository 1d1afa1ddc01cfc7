import Foundation
import ShareSyncCore
import ShareSyncNode
import ShareSyncStore
import ShareSyncWire
import Testing

@Suite("Owner server and connection over TCP on 127.0.0.1")
struct OwnerServerTests {
    @Test("an invited participant fetches metadata, accepts, and reads its shared database")
    func metadataAcceptAndFetch() async throws {
        let owner = try await TestOwner.start()
        let b = NodeIdentity.generate()
        let (url, shareName) = try owner.shareTopic(invite: [(b, .readWrite)])
        let connection = try await OwnerConnection.connect(url: url, identity: b, displayName: "B")
        #expect(connection.userRecordName == b.userRecordName)
        #expect(connection.ownerName == owner.identity.userRecordName)

        let metadata = try await connection.fetchShareMetadata(url: url, shouldFetchRootRecord: true)
        #expect(metadata.participantStatus == .pending)
        #expect(metadata.participantPermission == .readWrite)
        #expect(metadata.hierarchicalRootRecordID?.recordName == "topic")
        #expect(metadata.rootRecord?["title"] == "Groceries")
        #expect(metadata.ownerIdentity.userRecordName == owner.identity.userRecordName)

        // Nothing is shared before accepting.
        #expect(try await connection.fetchDatabaseChanges(since: nil).changedZoneIDs.isEmpty)

        let accepted = try await connection.acceptShare(url: url)
        #expect(accepted.participantStatus == .accepted)

        let databaseChanges = try await connection.fetchDatabaseChanges(since: nil)
        #expect(databaseChanges.changedZoneIDs == [RecordZone.ID(zoneName: "Topics", ownerName: owner.identity.userRecordName)])
        let zoneChanges = try await connection.fetchZoneChanges(zoneName: "Topics", since: nil)
        #expect(Set(zoneChanges.changedRecords.map(\.recordID.recordName)) == ["topic", shareName])
        #expect(zoneChanges.changedRecords.allSatisfy { $0.recordID.zoneID.ownerName == owner.identity.userRecordName })

        // Nothing new since the token; a note by the owner shows up.
        #expect(try await connection.fetchZoneChanges(zoneName: "Topics", since: zoneChanges.changeToken).changes.isEmpty)
        try owner.saveNote("note-a", title: "Milk")
        let next = try await connection.fetchZoneChanges(zoneName: "Topics", since: zoneChanges.changeToken)
        #expect(next.changedRecords.map(\.recordID.recordName) == ["note-a"])

        let fetched = try await connection.fetchRecords(zoneName: "Topics", recordNames: ["topic", "missing"])
        #expect(try fetched[Record.ID(recordName: "topic", zoneID: databaseChanges.changedZoneIDs[0])]?.get()["title"] == "Groceries")
        let missing = fetched[Record.ID(recordName: "missing", zoneID: databaseChanges.changedZoneIDs[0])]
        #expect(missing.map { if case .failure(let e) = $0 { e.code == .unknownItem } else { false } } == true)

        // An expired (foreign) token and an unknown zone come back as ShareSyncErrors.
        let expired = await expectShareSyncError {
            _ = try await connection.fetchDatabaseChanges(since: ServerChangeToken(stringValue: "2.deadbeef.AAAAAAAAAAAAAAAAAAAAAA"))
        }
        #expect(expired?.code == .changeTokenExpired)
        let noZone = await expectShareSyncError { _ = try await connection.fetchZoneChanges(zoneName: "Other", since: nil) }
        #expect(noZone?.code == .zoneNotFound)

        await connection.close()
        try await owner.stop()
    }

    @Test("a read-write participant's saves land in the owner's database, in batches over 400 too")
    func readWriteModify() async throws {
        let owner = try await TestOwner.start()
        let (b, _, connection) = try await owner.acceptedParticipant()
        let zone = RecordZone.ID(zoneName: "Topics", ownerName: connection.ownerName)
        let topicID = Record.ID(recordName: "topic", zoneID: zone)

        var note = Record(recordType: "Note", recordID: Record.ID(recordName: "note-b", zoneID: zone))
        note["title"] = "Eggs"
        note.setParent(topicID)
        let result = try await connection.modifyRecords(zoneName: "Topics", saving: [note])
        #expect(result.errors.isEmpty)
        let saved = try #require(try result.saveResults[note.recordID]?.get())
        #expect(saved.recordChangeTag != nil)
        let inOwner = try owner.db.fetchRecord(owner.id("note-b"))
        #expect(inOwner["title"] == "Eggs")
        #expect(inOwner.lastModifiedUserRecordID?.recordName == b.userRecordName)

        // A conflicting save comes back with the server's record.
        var stale = note
        stale["title"] = "Bread"
        let conflict = try await connection.modifyRecords(zoneName: "Topics", saving: [stale])
        let conflictError = conflict.errors["note-b"]
        #expect(conflictError?.code == .serverRecordChanged)
        #expect(conflictError?.serverRecord?["title"] == "Eggs")

        // 450 records: two requests, one merged result.
        let many = (0..<450).map { i -> Record in
            var r = Record(recordType: "Note", recordID: Record.ID(recordName: "bulk-\(i)", zoneID: zone))
            r["title"] = .string("n\(i)")
            r.setParent(topicID)
            return r
        }
        let bulk = try await connection.modifyRecords(zoneName: "Topics", saving: many)
        #expect(bulk.errors.isEmpty)
        #expect(bulk.savedRecords.count == 450)
        let check = try owner.db.fetchRecords((0..<450).map { owner.id("bulk-\($0)") })
        #expect(check.values.filter { (try? $0.get()) != nil }.count == 450)

        let deleted = try await connection.modifyRecords(zoneName: "Topics", deleting: (0..<420).map { "bulk-\($0)" })
        #expect(deleted.deleteResults.count == 420 && deleted.errors.isEmpty)

        await connection.close()
        try await owner.stop()
    }

    @Test("a read-only participant's write is refused with permissionFailure")
    func readOnlyRefused() async throws {
        let owner = try await TestOwner.start()
        let c = NodeIdentity.generate()
        let (url, shareName) = try owner.shareTopic(invite: [(c, .readOnly)])
        let connection = try await OwnerConnection.connect(url: url, identity: c)
        try await connection.acceptShare(url: url)
        let zone = RecordZone.ID(zoneName: "Topics", ownerName: connection.ownerName)
        var note = Record(recordType: "Note", recordID: Record.ID(recordName: "note-c", zoneID: zone))
        note["title"] = "Nope"
        note.setParent(Record.ID(recordName: "topic", zoneID: zone))
        let result = try await connection.modifyRecords(zoneName: "Topics", saving: [note])
        #expect(result.errors["note-c"]?.code == .permissionFailure)
        #expect((try? owner.db.fetchRecord(owner.id("note-c"))) == nil)

        // Leaving removes the zone from the view.
        try await connection.leaveShare(zoneName: "Topics", shareRecordName: shareName)
        let after = try await connection.fetchDatabaseChanges(since: nil)
        #expect(after.changedZoneIDs.isEmpty)
        await connection.close()
        try await owner.stop()
    }

    @Test("an owner that had no address announces its first one, so the client follows its next one")
    func firstAddressIsAnnounced() async throws {
        let owner = try await TestOwner.start()
        let b = NodeIdentity.generate()
        let (url, _) = try owner.shareTopic(invite: [(b, .readWrite)])
        let connection = try await OwnerConnection.connect(url: url, identity: b, displayName: "B")
        #expect(connection.announcedAddress == nil)  // no address in the welcome
        let first = WireAddress(host: "owner.example", port: 7420)
        #expect(owner.server.setAdvertisedAddress(first) == 1)
        try await eventually { connection.announcedAddress == first }
        // The same address again is no news; a different one is.
        #expect(owner.server.setAdvertisedAddress(first) == 0)
        let moved = WireAddress(host: "owner.example", port: 7421)
        #expect(owner.server.setAdvertisedAddress(moved) == 1)
        try await eventually { connection.announcedAddress == moved }
        await connection.close()
        try await owner.stop()
    }

    @Test("a push arrives after an owner write")
    func pushAfterOwnerWrite() async throws {
        let owner = try await TestOwner.start()
        let (_, _, connection) = try await owner.acceptedParticipant()
        let stream = try await connection.subscribe()
        var latencies: [Duration] = []
        for i in 0..<5 {
            let start = ContinuousClock.now
            try owner.saveNote("pushed-\(i)", title: "Push \(i)")
            let push = try await withTimeout(10) {
                for await push in stream
                where push.zoneChanges.contains(where: { $0.changedRecords.contains { $0.recordID.recordName == "pushed-\(i)" } }) {
                    return push
                }
                throw TimeoutError()
            }
            latencies.append(ContinuousClock.now - start)
            #expect(push.databaseChanges.changedZoneIDs.map(\.zoneName) == ["Topics"])
            #expect(push.zoneChanges.allSatisfy { !$0.moreComing })
        }
        print("push latency after an owner write: \(latencies.map { "\(Int(Double($0.components.seconds) * 1e6 + Double($0.components.attoseconds) / 1e12))µs" }.joined(separator: ", ")) (\(latencies.count) writes)")

        // The push token is a valid cursor: nothing after it.
        let token = try await connection.fetchDatabaseChanges(since: nil).changeToken
        #expect(try await connection.fetchDatabaseChanges(since: token).changedZoneIDs.isEmpty)
        await connection.close()
        try await owner.stop()
    }

    @Test("subscribing with an old token pushes what happened since at once")
    func subscribeWithToken() async throws {
        let owner = try await TestOwner.start()
        let (_, _, connection) = try await owner.acceptedParticipant()
        let token = try await connection.fetchDatabaseChanges(since: nil).changeToken
        try owner.saveNote("while-away", title: "x")
        let stream = try await connection.subscribe(since: token)
        let push = try await withTimeout(10) {
            for await push in stream { return push }
            throw TimeoutError()
        }
        #expect(push.zoneChanges.first?.changedRecords.map(\.recordID.recordName) == ["while-away"])
        await connection.close()
        try await owner.stop()
    }

    @Test("requests in flight fail with networkFailure when the owner goes away")
    func connectionLoss() async throws {
        let owner = try await TestOwner.start()
        let b = NodeIdentity.generate()
        let (url, _) = try owner.shareTopic(publicPermission: .readOnly)
        let connection = try await OwnerConnection.connect(url: url, identity: b)
        try await connection.acceptShare(url: url)
        try await owner.stop()
        let error = await expectShareSyncError { _ = try await connection.fetchDatabaseChanges(since: nil) }
        #expect(error?.code == .networkFailure)
        await connection.close()
        let refused = await expectShareSyncError { _ = try await OwnerConnection.connect(url: url, identity: b) }
        #expect(refused?.code == .networkUnavailable)
    }
}
