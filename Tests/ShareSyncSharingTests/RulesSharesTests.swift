import Foundation
import ShareSyncCore
import Testing

@testable import ShareSyncStore

@Suite("Rules: shares")
struct RulesSharesTests {
    @Test("a share is a record of type cloudkit.share")
    func shareIsRecord() throws {
        let w = try World()
        try w.save(w.record("Topic", "topic"))
        let share = try w.share(root: "topic")
        #expect(share.record.recordType == Record.shareRecordType)
        #expect(Record.shareRecordType == "cloudkit.share")
        let fetched = try w.db.fetchRecord(share.recordID)
        #expect(fetched.recordType == "cloudkit.share")
        #expect(Share(fetched)?.rootRecordID?.recordName == "topic")
    }

    @Test("a zone's shares are found without reading its records; a deleted share leaves the list")
    func sharesOfAZone() throws {
        let w = try World()
        try w.save(w.record("Topic", "a"))
        try w.save(w.record("Topic", "b"))
        for i in 0..<50 { try w.save(w.record("Note", "n\(i)", parent: "a")) }
        #expect(try w.db.fetchShares(in: w.zone).isEmpty)
        let first = try w.share(root: "a")
        let second = try w.share(root: "b")
        let found = try w.db.fetchShares(in: w.zone)
        #expect(Set(found.map(\.recordID.recordName)) == [first.recordID.recordName, second.recordID.recordName])
        #expect(Set(found.compactMap(\.rootRecordID?.recordName)) == ["a", "b"])
        _ = try w.db.modifyRecords(deleting: [first.recordID]).get()
        #expect(try w.db.fetchShares(in: w.zone).map(\.recordID) == [second.recordID])
        #expect(failure { _ = try w.db.fetchShares(in: RecordZone.ID(zoneName: "Nowhere")) }?.code == .zoneNotFound)
    }

    @Test("a zone share's recordName is cloudkit.zoneshare")
    func zoneShareName() throws {
        let w = try World()
        #expect(Share(recordZoneID: w.zone).recordID.recordName == "cloudkit.zoneshare")
        let share = try w.shareZone()
        #expect(share.recordID.recordName == Share.zoneShareRecordName)
        #expect(share.isZoneWide)
        #expect(share.rootRecordID == nil)
        #expect(try w.db.fetchRecord(w.id("cloudkit.zoneshare")).recordType == Record.shareRecordType)
    }

    @Test("a zone-wide share under another record name is refused (invalidArguments)")
    func zoneShareOtherName() throws {
        let w = try World()
        var record = Share(recordZoneID: w.zone).record
        // Re-home the share state under a different name.
        var other = Record(recordType: Record.shareRecordType, recordID: w.id("not-the-zone-share"))
        other.shareState = record.shareState
        record = other
        let result = try w.db.modifyRecords(saving: [record])
        #expect(result.error("not-the-zone-share")?.code == .invalidArguments)
    }

    @Test("no record but the zone-wide share may be named cloudkit.zoneshare, the owner's or a participant's")
    func zoneShareNameIsKept() throws {
        let w = try World()
        try w.save(w.record("Topic", "topic"))
        let taken = try w.db.modifyRecords(saving: [w.record("Note", "cloudkit.zoneshare", parent: "topic")]).errors["cloudkit.zoneshare"]
        #expect(taken?.code == .invalidArguments && taken?.rule == .zoneShareName, "\(String(describing: taken))")
        // A participant of a read-write hierarchy share, in a record they could otherwise add.
        let share = try w.share(root: "topic", invite: [("_b", .readWrite)])
        try w.accept(share, "_b")
        let squat = try w.view("_b").modifyRecords(saving: [w.sharedRecord("Note", "cloudkit.zoneshare", parent: "topic")])
        #expect(squat.errors["cloudkit.zoneshare"]?.rule == .zoneShareName, "\(squat.errors)")
        // So the zone can still be shared whole once that share stops.
        _ = try w.db.modifyRecords(deleting: [share.recordID]).get()
        #expect(try w.shareZone().recordID.recordName == Share.zoneShareRecordName)
    }

    @Test("title, thumbnail and shareType round-trip through save and fetch")
    func systemFieldsRoundTrip() throws {
        let w = try World()
        try w.save(w.record("Topic", "topic"))
        var share = Share(rootRecord: try w.db.fetchRecord(w.id("topic")))
        share.title = "Groceries"
        share.thumbnailImageData = Data([1, 2, 3, 255])
        share.shareType = "com.example.topic"
        let saved = try w.saveShare(share)
        #expect(saved.title == "Groceries")
        let fetched = try w.currentShare(share.recordID)
        #expect(fetched.title == "Groceries")
        #expect(fetched.thumbnailImageData == Data([1, 2, 3, 255]))
        #expect(fetched.shareType == "com.example.topic")
    }

    @Test("publicPermission defaults to none")
    func publicPermissionDefault() throws {
        let w = try World()
        try w.save(w.record("Topic", "topic"))
        #expect(Share(rootRecord: try w.db.fetchRecord(w.id("topic"))).publicPermission == .none)
        #expect(Share(recordZoneID: w.zone).publicPermission == .none)
        let saved = try w.share(root: "topic")
        #expect(saved.publicPermission == .none)
        #expect(try w.currentShare(saved.recordID).publicPermission == .none)
    }

    @Test("the URL is set when the share is saved, and differs between roots")
    func urlSetAndUnguessable() throws {
        let w = try World()
        try w.save(w.record("Topic", "a"), w.record("Topic", "b"))
        #expect(Share(rootRecord: try w.db.fetchRecord(w.id("a"))).url == nil)
        let a = try w.share(root: "a")
        let b = try w.share(root: "b")
        let ua = try #require(a.url)
        let ub = try #require(b.url)
        #expect(ua != ub)
        let pa = try #require(ShareURL(string: ua))
        let pb = try #require(ShareURL(string: ub))
        #expect(pa.token != pb.token)
        #expect(pa.token.count >= 16)
        #expect(!pa.token.contains("a") || pa.token != "a")
        #expect(try w.currentShare(a.recordID).url == ua)
    }

    @Test("the URL is stable: stopping and sharing the same root again gives the same URL")
    func urlStableHierarchy() throws {
        let w = try World()
        try w.save(w.record("Topic", "topic"))
        let first = try w.share(root: "topic")
        _ = try w.db.modifyRecords(deleting: [first.recordID]).get()
        let second = try w.share(root: "topic")
        #expect(second.recordID != first.recordID)
        #expect(second.url != nil)
        #expect(second.url == first.url)
    }

    @Test("the URL is stable for a zone share too")
    func urlStableZone() throws {
        let w = try World()
        let first = try w.shareZone()
        _ = try w.db.modifyRecords(deleting: [first.recordID]).get()
        let second = try w.shareZone()
        #expect(second.url != nil)
        #expect(second.url == first.url)
    }

    @Test("only custom zones can be shared: the default zone gives invalidArguments")
    func defaultZoneNotShareable() throws {
        let w = try World()
        let root = Record(recordType: "Topic", recordID: Record.ID(recordName: "d"))
        _ = try w.db.modifyRecords(saving: [root]).get()
        let share = Share(rootRecord: try w.db.fetchRecord(root.recordID))
        let result = try w.db.modifyRecords(saving: [share.record])
        #expect(result.error(share.recordID.recordName)?.code == .invalidArguments)
        let zoneShare = Share(recordZoneID: .default)
        let result2 = try w.db.modifyRecords(saving: [zoneShare.record])
        #expect(result2.error(zoneShare.recordID.recordName)?.code == .invalidArguments)
        #expect(try w.db.fetchRecord(root.recordID).share == nil)
    }

    @Test("a new hierarchy share saved in the same batch as its new root works")
    func shareWithNewRootInBatch() throws {
        let w = try World()
        let root = w.record("Topic", "topic")
        var share = Share(rootRecord: root)
        try share.addParticipant(Participant(lookupInfo: .init(userRecordName: "_b"), permission: .readOnly))
        let saved = try w.db.modifyRecords(saving: [share.record, root]).get()
        #expect(saved.count == 2)
        #expect(try w.db.fetchRecord(w.id("topic")).share?.recordID.recordName == share.recordID.recordName)
        let stored = try w.currentShare(share.recordID)
        try w.accept(stored, "_b")
        #expect(try w.visible("_b", ["topic"]) == ["topic"])
    }

    @Test("a share whose root does not exist (and is not in the batch) gives invalidArguments")
    func shareRootMissing() throws {
        let w = try World()
        let ghost = w.record("Topic", "ghost")
        let share = Share(rootRecord: ghost)
        let result = try w.db.modifyRecords(saving: [share.record])
        #expect(result.error(share.recordID.recordName)?.code == .invalidArguments)
        #expect(failure { _ = try w.db.fetchRecord(share.recordID) }?.code == .unknownItem)
    }

    @Test("membership comes from parent alone, transitively: a grandchild is shared")
    func membershipTransitive() throws {
        let w = try World()
        try w.save(
            w.record("Topic", "topic"), w.record("Note", "child", parent: "topic"),
            w.record("Note", "grandchild", parent: "child"))
        let share = try w.share(root: "topic", invite: [("_b", .readOnly)])
        try w.accept(share, "_b")
        #expect(try w.visible("_b", ["topic", "child", "grandchild"]) == ["topic", "child", "grandchild"])
        var b = Replica("_b")
        try b.sync(w.db)
        #expect(b.names() == ["topic", "child", "grandchild", share.recordID.recordName])
    }

    @Test("custom reference fields do not bring a record into a share")
    func referenceFieldsDoNotShare() throws {
        let w = try World()
        var linked = w.record("Note", "linked")
        linked["topic"] = .reference(Record.Reference(recordID: w.id("topic"), action: .none))
        var cascading = w.record("Note", "cascading")
        cascading["topic"] = .reference(Record.Reference(recordID: w.id("topic"), action: .deleteSelf))
        try w.save(w.record("Topic", "topic"), linked, cascading)
        let share = try w.share(root: "topic", invite: [("_b", .readOnly)])
        try w.accept(share, "_b")
        #expect(try w.visible("_b", ["topic", "linked", "cascading"]) == ["topic"])
        var b = Replica("_b")
        try b.sync(w.db)
        #expect(b.names() == ["topic", share.recordID.recordName])
    }

    @Test("a root's own parent is ignored: the unshared parent of a root is not shared")
    func rootParentIgnored() throws {
        let w = try World()
        try w.save(w.record("Folder", "folder"), w.record("Topic", "topic", parent: "folder"))
        let share = try w.share(root: "topic", invite: [("_b", .readOnly)])
        try w.accept(share, "_b")
        #expect(try w.visible("_b", ["folder", "topic"]) == ["topic"])
        var b = Replica("_b")
        try b.sync(w.db)
        #expect(!b.names().contains("folder"))
    }

    @Test("alreadyShared: a zone-wide share in a zone with a hierarchy share")
    func alreadySharedZoneOverHierarchy() throws {
        let w = try World()
        try w.save(w.record("Topic", "topic"))
        _ = try w.share(root: "topic")
        let zoneShare = Share(recordZoneID: w.zone)
        let result = try w.db.modifyRecords(saving: [zoneShare.record])
        #expect(result.error(Share.zoneShareRecordName)?.code == .alreadyShared)
    }

    @Test("alreadyShared: a hierarchy share in a zone shared zone-wide")
    func alreadySharedHierarchyInZoneShare() throws {
        let w = try World()
        try w.save(w.record("Topic", "topic"))
        _ = try w.shareZone()
        let share = Share(rootRecord: try w.db.fetchRecord(w.id("topic")))
        let result = try w.db.modifyRecords(saving: [share.record])
        #expect(result.error(share.recordID.recordName)?.code == .alreadyShared)
        #expect(try w.db.fetchRecord(w.id("topic")).share == nil)
    }

    @Test("alreadyShared: a root inside another shared hierarchy")
    func alreadySharedNestedRoot() throws {
        let w = try World()
        try w.save(w.record("Topic", "topic"), w.record("Note", "note", parent: "topic"))
        _ = try w.share(root: "topic")
        let share = Share(rootRecord: try w.db.fetchRecord(w.id("note")))
        let result = try w.db.modifyRecords(saving: [share.record])
        #expect(result.error(share.recordID.recordName)?.code == .alreadyShared)
    }

    @Test("alreadyShared: a hierarchy whose subtree holds another share's root")
    func alreadySharedAncestorOfRoot() throws {
        let w = try World()
        try w.save(w.record("Folder", "folder"), w.record("Topic", "topic", parent: "folder"))
        _ = try w.share(root: "topic")
        let share = Share(rootRecord: try w.db.fetchRecord(w.id("folder")))
        let result = try w.db.modifyRecords(saving: [share.record])
        #expect(result.error(share.recordID.recordName)?.code == .alreadyShared)
    }

    @Test("alreadyShared: re-parenting a share root under another shared hierarchy")
    func alreadySharedReparentRoot() throws {
        let w = try World()
        try w.save(w.record("Topic", "a"), w.record("Topic", "b"))
        _ = try w.share(root: "a")
        _ = try w.share(root: "b")
        var b = try w.db.fetchRecord(w.id("b"))
        b.setParent(w.id("a"))
        let result = try w.db.modifyRecords(saving: [b], savePolicy: .allKeys)
        #expect(result.error("b")?.code == .alreadyShared)
        #expect(try w.db.fetchRecord(w.id("b")).parent == nil)
    }

    @Test("a record saved with its parent inside a shared hierarchy joins at once")
    func newChildJoins() throws {
        let w = try World()
        try w.save(w.record("Topic", "topic"))
        let share = try w.share(root: "topic", invite: [("_b", .readOnly)])
        try w.accept(share, "_b")
        var b = Replica("_b")
        try b.sync(w.db)
        try w.save(w.record("Note", "note", parent: "topic"), w.record("Note", "sub", parent: "note"))
        #expect(try w.visible("_b", ["note", "sub"]) == ["note", "sub"])
        try b.sync(w.db)
        #expect(b.names().isSuperset(of: ["note", "sub"]))
    }

    @Test("re-parenting out removes a record and its descendants from the view, as deletions in the feed")
    func reparentOut() throws {
        let w = try World()
        try w.save(
            w.record("Topic", "topic"), w.record("Folder", "elsewhere"), w.record("Note", "note", parent: "topic"),
            w.record("Note", "sub", parent: "note"))
        let share = try w.share(root: "topic", invite: [("_b", .readOnly)])
        try w.accept(share, "_b")
        var b = Replica("_b")
        try b.sync(w.db)
        #expect(b.names().isSuperset(of: ["note", "sub"]))
        let token = try #require(b.zoneTokens["Topics"])
        try w.reparent("note", to: "elsewhere")
        #expect(try w.visible("_b", ["topic", "note", "sub"]) == ["topic"])
        let page = try w.view("_b").fetchZoneChanges(w.sharedZone, since: token)
        #expect(Set(page.deletedRecords.map(\.recordID.recordName)) == ["note", "sub"])
        #expect(page.changedRecords.allSatisfy { !["note", "sub"].contains($0.recordID.recordName) })
        try b.sync(w.db)
        #expect(b.names() == ["topic", share.recordID.recordName])
    }

    @Test("re-parenting in brings records in, as changes, even when the participant holds a token")
    func reparentIn() throws {
        let w = try World()
        try w.save(
            w.record("Topic", "topic"), w.record("Folder", "elsewhere"), w.record("Note", "note", parent: "elsewhere", title: "old"),
            w.record("Note", "sub", parent: "note"))
        let share = try w.share(root: "topic", invite: [("_b", .readOnly)])
        try w.accept(share, "_b")
        var b = Replica("_b")
        try b.sync(w.db)
        let token = try #require(b.zoneTokens["Topics"])
        #expect(b.names() == ["topic", share.recordID.recordName])
        try w.reparent("note", to: "topic")
        let page = try w.view("_b").fetchZoneChanges(w.sharedZone, since: token)
        #expect(Set(page.changedRecords.map(\.recordID.recordName)).isSuperset(of: ["note", "sub"]))
        #expect(page.changedRecords.first { $0.recordID.recordName == "note" }?["title"] == .string("old"))
        try b.sync(w.db)
        #expect(b.names() == ["topic", "note", "sub", share.recordID.recordName])
    }

    @Test("the root's share field is set when shared and cleared when the share is deleted")
    func rootShareField() throws {
        let w = try World()
        try w.save(w.record("Topic", "topic"))
        #expect(try w.db.fetchRecord(w.id("topic")).share == nil)
        let share = try w.share(root: "topic")
        #expect(try w.db.fetchRecord(w.id("topic")).share?.recordID.recordName == share.recordID.recordName)
        _ = try w.db.modifyRecords(deleting: [share.recordID]).get()
        #expect(try w.db.fetchRecord(w.id("topic")).share == nil)
        #expect(failure { _ = try w.db.fetchRecord(share.recordID) }?.code == .unknownItem)
    }

    @Test("deleting the root deletes the share; the participant loses the zone")
    func deletingRootDeletesShare() throws {
        let w = try World()
        try w.save(w.record("Topic", "topic"), w.record("Note", "note", parent: "topic"))
        let share = try w.share(root: "topic", invite: [("_b", .readOnly)])
        try w.accept(share, "_b")
        var b = Replica("_b")
        try b.sync(w.db)
        let dbToken = b.databaseToken
        _ = try w.db.modifyRecords(deleting: [w.id("topic")]).get()
        #expect(failure { _ = try w.db.fetchRecord(share.recordID) }?.code == .unknownItem)
        #expect(try w.view("_b").fetchAllZones().isEmpty)
        let changes = try w.view("_b").fetchDatabaseChanges(since: dbToken)
        #expect(changes.deletedZoneIDs.map(\.zoneName) == ["Topics"])
        try b.sync(w.db)
        #expect(b.records["Topics"] == nil)
        #expect(failure { _ = try w.db.acceptShare(url: share.url!, as: Caller(userRecordName: "_b")) }?.code == .participantMayNeedVerification)
    }
}
