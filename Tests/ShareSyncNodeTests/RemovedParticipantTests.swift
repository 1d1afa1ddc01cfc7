import Foundation
import ShareSyncCore
import ShareSyncNode
import ShareSyncStore
import ShareSyncWire
import Testing

@Suite("A removed participant over the network")
struct RemovedParticipantTests {
    @Test("a participant the owner removed can no longer read or write the share, while another participant keeps working")
    func removedParticipantIsRefused() async throws {
        let owner = try await TestOwner.start()
        let b = NodeIdentity.generate()
        let c = NodeIdentity.generate()
        let (url, shareName) = try owner.shareTopic(invite: [(b, .readWrite), (c, .readWrite)])
        let bLink = try await OwnerConnection.connect(url: url, identity: b)
        let cLink = try await OwnerConnection.connect(url: url, identity: c)
        _ = try await bLink.acceptShare(url: url)
        _ = try await cLink.acceptShare(url: url)
        #expect(try await bLink.fetchDatabaseChanges(since: nil).changedZoneIDs.map(\.zoneName) == ["Topics"])

        // The owner removes B.
        var share = Share(try owner.db.fetchRecord(owner.id(shareName)))!
        let participantB = try #require(share.participants.first { $0.userIdentity.userRecordName == b.userRecordName })
        try share.removeParticipant(participantB)
        _ = try owner.db.modifyRecords(saving: [share.record]).get()

        // B, still connected and authenticated, is refused everywhere, and learns nothing.
        let zoneChanges = await expectShareSyncError { _ = try await bLink.fetchZoneChanges(zoneName: "Topics", since: nil) }
        #expect(zoneChanges?.code == .zoneNotFound)
        let fetched = try await bLink.fetchRecords(zoneName: "Topics", recordNames: ["topic"])
        let topicID = Record.ID(recordName: "topic", zoneID: RecordZone.ID(zoneName: "Topics", ownerName: owner.identity.userRecordName))
        let topicError: ShareSyncError.Code? = fetched[topicID].flatMap { if case .failure(let e) = $0 { e.code } else { nil } }
        #expect(topicError == .unknownItem)
        var note = Record(
            recordType: "Note", recordID: Record.ID(recordName: "from-b", zoneID: RecordZone.ID(zoneName: "Topics", ownerName: owner.identity.userRecordName)))
        note.setParent(Record.ID(recordName: "topic", zoneID: note.recordID.zoneID))
        let write = try await bLink.modifyRecords(zoneName: "Topics", saving: [note])
        #expect(write.errors["from-b"]?.code == .permissionFailure)
        #expect(try await bLink.fetchDatabaseChanges(since: nil).changedZoneIDs.isEmpty)
        let again = await expectShareSyncError { _ = try await bLink.acceptShare(url: url) }
        #expect(again?.code == .participantMayNeedVerification)
        #expect(throws: ShareSyncError.self) { try owner.db.fetchRecord(owner.id("from-b")) }

        // C keeps reading and writing.
        var noteC = note
        noteC = Record(recordType: "Note", recordID: Record.ID(recordName: "from-c", zoneID: note.recordID.zoneID))
        noteC.setParent(Record.ID(recordName: "topic", zoneID: note.recordID.zoneID))
        _ = try await cLink.modifyRecords(zoneName: "Topics", saving: [noteC]).get()
        #expect(try owner.db.fetchRecord(owner.id("from-c")).lastModifiedUserRecordID?.recordName == c.userRecordName)
        await bLink.close()
        await cLink.close()
        try await owner.stop()
    }
}
