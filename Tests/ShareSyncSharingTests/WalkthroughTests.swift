import Foundation
import ShareSyncCore
import Testing

@testable import ShareSyncStore

@Suite("The sample's Topic/Note walkthrough, in process")
struct WalkthroughTests {
    @Test("owner shares a topic; participant accepts, reads, writes, is made read-only, leaves; owner re-shares and stops")
    func walkthrough() throws {
        let w = try World()
        try w.save(w.record("Topic", "topic", title: "Groceries"))
        let share = try w.share(root: "topic", invite: [("_b", .readWrite)])
        let url = try #require(share.url)
        var b = Replica("_b")

        // Before accepting, B sees nothing.
        try b.sync(w.db)
        #expect(b.records.isEmpty)

        let metadata = try w.db.acceptShare(url: url, as: b.user)
        #expect(metadata.participantStatus == .accepted)
        #expect(metadata.participantPermission == .readWrite)
        #expect(metadata.hierarchicalRootRecordID?.recordName == "topic")
        try b.sync(w.db)
        #expect(b.names() == ["topic", share.recordID.recordName])

        // The owner adds a note; B sees it.
        try w.save(w.record("Note", "note-a", parent: "topic", title: "Milk"))
        try b.sync(w.db)
        #expect(b.names().contains("note-a"))

        // B (read-write) adds a note; the owner sees it.
        let bView = w.db.sharedDatabase(for: b.user)
        var noteB = Record(recordType: "Note", recordID: Record.ID(recordName: "note-b", zoneID: RecordZone.ID(zoneName: "Topics", ownerName: "_owner")))
        noteB["title"] = "Eggs"
        noteB.setParent(Record.ID(recordName: "topic", zoneID: noteB.recordID.zoneID))
        _ = try bView.modifyRecords(saving: [noteB]).get()
        #expect(try w.db.fetchRecord(w.id("note-b"))["title"] == "Eggs")
        #expect(try w.db.fetchRecord(w.id("note-b")).lastModifiedUserRecordID?.recordName == "_b")

        // The owner makes B read-only; B's next write is refused.
        var current = Share(try w.db.fetchRecord(share.recordID))!
        let pb = try #require(current.participants.first { $0.userIdentity.userRecordName == "_b" })
        try current.setPermission(.readOnly, forParticipantID: pb.participantID)
        _ = try w.db.modifyRecords(saving: [current.record]).get()
        var noteC = noteB
        noteC["title"] = "Bread"
        let refused = try bView.modifyRecords(saving: [noteC], savePolicy: .changedKeys)
        #expect(refused.errors["note-b"]?.code == .permissionFailure)
        #expect(try w.db.fetchRecord(w.id("note-b"))["title"] == "Eggs")

        // B leaves and loses the zone.
        try bView.leaveShare(Record.ID(recordName: share.recordID.recordName, zoneID: noteB.recordID.zoneID))
        try b.sync(w.db)
        #expect(b.records["Topics"] == nil)
        #expect(try bView.fetchAllZones().isEmpty)
        let afterLeave = Share(try w.db.fetchRecord(share.recordID))!
        #expect(afterLeave.participants.first { $0.userIdentity.userRecordName == "_b" }?.acceptanceStatus == .removed)

        // The owner stops sharing, shares again (same URL), B accepts, the owner stops.
        _ = try w.db.modifyRecords(deleting: [share.recordID]).get()
        #expect(try w.db.fetchRecord(w.id("topic")).share == nil)
        let again = try w.share(root: "topic", invite: [("_b", .readWrite)])
        #expect(again.url == url)
        try w.db.acceptShare(url: url, as: b.user)
        try b.sync(w.db)
        #expect(b.names() == ["topic", "note-a", "note-b", again.recordID.recordName])
        _ = try w.db.modifyRecords(deleting: [again.recordID]).get()
        try b.sync(w.db)
        #expect(b.records["Topics"] == nil)
    }
}

@Suite("References written by participants")
struct ParticipantReferenceTests {
    @Test("a participant's record may reference a record of the share, naming the zone as they see it or as the current user")
    func participantReferenceIntoSharedZone() throws {
        let w = try World()
        try w.save(w.record("Topic", "topic", title: "Groceries"))
        let share = try w.share(root: "topic", invite: [("_b", .readWrite)])
        try w.db.acceptShare(url: try #require(share.url), as: Caller(userRecordName: "_b"))
        let sharedZone = RecordZone.ID(zoneName: "Topics", ownerName: "_owner")
        let view = w.db.sharedDatabase(for: Caller(userRecordName: "_b"))
        for (name, refZone) in [("n1", sharedZone), ("n2", RecordZone.ID(zoneName: "Topics"))] {
            var note = Record(recordType: "Note", recordID: Record.ID(recordName: name, zoneID: sharedZone))
            note.setParent(Record.ID(recordName: "topic", zoneID: sharedZone))
            note["topic"] = .reference(Record.Reference(recordID: Record.ID(recordName: "topic", zoneID: refZone)))
            _ = try view.modifyRecords(saving: [note]).get()
        }
        #expect(try w.db.fetchRecord(w.id("n1"))["topic"]?.referenceValue?.recordID.recordName == "topic")
        // A zone of another owner is another zone.
        var foreign = Record(recordType: "Note", recordID: Record.ID(recordName: "n3", zoneID: sharedZone))
        foreign.setParent(Record.ID(recordName: "topic", zoneID: sharedZone))
        foreign["topic"] = .reference(Record.Reference(recordID: Record.ID(recordName: "topic", zoneID: RecordZone.ID(zoneName: "Topics", ownerName: "_mallory"))))
        #expect(try view.modifyRecords(saving: [foreign]).errors["n3"]?.rule == .referenceSameZone)
    }
}

@Suite("Share metadata's record count")
struct ShareMetadataCountTests {
    @Test("an invited participant learns how many records the share holds; a requester does not")
    func recordCount() throws {
        let w = try World()
        try w.save(w.record("Topic", "topic"), w.record("Note", "n1", parent: "topic"), w.record("Note", "n2", parent: "topic"),
                   w.record("Note", "elsewhere"))
        var share = try w.share(root: "topic", invite: [("_b", .readOnly)])
        let url = try #require(share.url)
        #expect(try w.db.fetchShareMetadata(url: url, for: Caller(userRecordName: "_b")).recordCount == 4)
        share.allowsAccessRequests = true
        _ = try w.db.modifyRecords(saving: [share.record]).get()
        #expect(try w.db.fetchShareMetadata(url: url, for: Caller(userRecordName: "_stranger")).recordCount == nil)
    }
}
