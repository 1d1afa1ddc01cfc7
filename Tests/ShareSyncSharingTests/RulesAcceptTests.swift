import Foundation
import ShareSyncCore
import Testing

@testable import ShareSyncStore

@Suite("Rules: accepting and the shared database")
struct RulesAcceptTests {
    func topicWorld() throws -> World {
        let w = try World()
        try w.save(w.record("Topic", "topic", title: "Groceries"), w.record("Note", "note", parent: "topic"))
        return w
    }

    @Test("fetchShareMetadata returns share, container, owner, root ID, root record when asked, and the asker's role/permission/status")
    func metadataFields() throws {
        let w = try topicWorld()
        let saved = try w.share(root: "topic", invite: [("_b", .readWrite)])
        let url = try #require(saved.url)
        let b = Caller(userRecordName: "_b")
        let meta = try w.db.fetchShareMetadata(url: url, for: b)
        #expect(meta.share.recordID.recordName == saved.recordID.recordName)
        #expect(meta.share.url == url)
        #expect(meta.containerIdentifier == w.db.containerIdentifier)
        #expect(meta.ownerIdentity.userRecordName == "_owner")
        #expect(meta.hierarchicalRootRecordID?.recordName == "topic")
        #expect(meta.hierarchicalRootRecordID?.zoneID == w.sharedZone)
        #expect(meta.rootRecord == nil)
        #expect(meta.participantRole == .privateUser)
        #expect(meta.participantPermission == .readWrite)
        #expect(meta.participantStatus == .pending)
        let withRoot = try w.db.fetchShareMetadata(url: url, for: b, shouldFetchRootRecord: true)
        #expect(withRoot.rootRecord?.recordID.recordName == "topic")
        #expect(withRoot.rootRecord?["title"] == .string("Groceries"))
        try w.accept(saved, "_b")
        let accepted = try w.db.fetchShareMetadata(url: url, for: b)
        #expect(accepted.participantStatus == .accepted)
        #expect(accepted.share.currentUserParticipant?.userIdentity.userRecordName == "_b")
    }

    @Test("fetchShareMetadata of a zone share has no hierarchical root")
    func metadataZoneShare() throws {
        let w = try topicWorld()
        let saved = try w.shareZone(invite: [("_b", .readOnly)])
        let meta = try w.db.fetchShareMetadata(url: try #require(saved.url), for: Caller(userRecordName: "_b"), shouldFetchRootRecord: true)
        #expect(meta.hierarchicalRootRecordID == nil)
        #expect(meta.rootRecord == nil)
        #expect(meta.share.isZoneWide)
        #expect(meta.participantPermission == .readOnly)
    }

    @Test("a private share is accepted only by invited identities; others get participantMayNeedVerification")
    func privateAcceptInvitedOnly() throws {
        let w = try topicWorld()
        let saved = try w.share(root: "topic", invite: [("_b", .readOnly)])
        let e = failure { try w.db.acceptShare(url: saved.url!, as: Caller(userRecordName: "_x")) }
        #expect(e?.code == .participantMayNeedVerification)
        #expect(try w.view("_x").fetchAllZones().isEmpty)
        #expect(try w.currentShare(saved.recordID).participants.allSatisfy { $0.userIdentity.userRecordName != "_x" })
        #expect(try w.accept(saved, "_b").participantStatus == .accepted)
    }

    @Test("accepting a public share adds a publicUser with the share's publicPermission")
    func publicAccept() throws {
        let w = try topicWorld()
        let saved = try w.share(root: "topic", publicPermission: .readWrite)
        let meta = try w.accept(saved, "_p")
        #expect(meta.participantRole == .publicUser)
        #expect(meta.participantPermission == .readWrite)
        #expect(meta.participantStatus == .accepted)
        let p = try #require(try w.currentShare(saved.recordID).participants.first { $0.userIdentity.userRecordName == "_p" })
        #expect(p.role == .publicUser)
        #expect(p.permission == .readWrite)
        #expect(p.acceptanceStatus == .accepted)
        #expect(try w.visible("_p", ["topic", "note"]) == ["topic", "note"])
    }

    @Test("accepting again (another device, a retry) writes nothing: no change for the other participants, the same share")
    func acceptAgainWritesNothing() throws {
        let w = try topicWorld()
        let saved = try w.share(root: "topic", invite: [("_b", .readWrite)], publicPermission: .readOnly)
        try w.accept(saved, "_b")
        try w.accept(saved, "_p")
        let before = try w.currentShare(saved.recordID)
        let token = try w.view("_p").fetchZoneChanges(w.sharedZone, since: nil).changeToken
        let again = (b: try w.accept(saved, "_b"), p: try w.accept(saved, "_p"))
        #expect(again.b.participantStatus == .accepted && again.b.participantPermission == .readWrite)
        #expect(again.p.participantStatus == .accepted && again.p.participantRole == .publicUser)
        let after = try w.currentShare(saved.recordID)
        #expect(after.record.recordChangeTag == before.record.recordChangeTag)
        #expect(after.participants == before.participants)
        #expect(try w.view("_p").fetchZoneChanges(w.sharedZone, since: token).changes.isEmpty)
        // A first accept still writes, and reaches the others.
        try w.accept(saved, "_q")
        #expect(try w.view("_p").fetchZoneChanges(w.sharedZone, since: token).changedRecords.map(\.recordID.recordName)
            == [saved.recordID.recordName])
    }

    @Test("the zone appears in the shared database with the same zoneName and the owner's name, holding only the share's records and the share")
    func sharedZoneContents() throws {
        let w = try topicWorld()
        try w.save(w.record("Topic", "other"), w.record("Note", "other-note", parent: "other"))
        let saved = try w.share(root: "topic", invite: [("_b", .readOnly)])
        try w.accept(saved, "_b")
        let zones = try w.view("_b").fetchAllZones()
        #expect(zones.map(\.zoneID) == [RecordZone.ID(zoneName: "Topics", ownerName: "_owner")])
        let changes = try w.view("_b").fetchDatabaseChanges(since: nil)
        #expect(changes.changedZoneIDs.map(\.zoneName) == ["Topics"])
        #expect(changes.changedZoneIDs.first?.ownerName == "_owner")
        let page = try w.view("_b").fetchZoneChanges(w.sharedZone, since: nil)
        #expect(Set(page.changedRecords.map(\.recordID.recordName)) == ["topic", "note", saved.recordID.recordName])
        #expect(page.changedRecords.allSatisfy { $0.recordID.zoneID == w.sharedZone })
    }

    @Test("two hierarchy shares from the same zone appear in that one zone")
    func twoSharesOneZone() throws {
        let w = try topicWorld()
        try w.save(w.record("Topic", "other"), w.record("Note", "other-note", parent: "other"))
        let s1 = try w.share(root: "topic", invite: [("_b", .readOnly)])
        let s2 = try w.share(root: "other", invite: [("_b", .readOnly)])
        try w.accept(s1, "_b")
        try w.accept(s2, "_b")
        #expect(try w.view("_b").fetchAllZones().map(\.zoneID.zoneName) == ["Topics"])
        var b = Replica("_b")
        try b.sync(w.db)
        #expect(b.records.keys.sorted() == ["Topics"])
        #expect(b.names() == ["topic", "note", "other", "other-note", s1.recordID.recordName, s2.recordID.recordName])
    }

    @Test("a non-admin participant's view of the share lists the owner and themselves only, with no invitation tokens")
    func participantVisibility() throws {
        let w = try topicWorld()
        var share = Share(rootRecord: try w.db.fetchRecord(w.id("topic")))
        try share.addParticipant(Participant(lookupInfo: .init(userRecordName: "_b")))
        try share.addParticipant(Participant(lookupInfo: .init(userRecordName: "_c")))
        try share.addParticipant(Participant(lookupInfo: .init(userRecordName: "_a"), permission: .readWrite, role: .administrator))
        let pending = Participant(lookupInfo: .init(emailAddress: "p@example.com"))
        try share.addParticipant(pending)
        let saved = try w.saveShare(share)
        for u in ["_b", "_c", "_a"] { try w.accept(saved, u) }

        // Non-admin, through every read path.
        let fetched = try #require(Share(try w.view("_b").fetchRecords([w.sid(saved.recordID.recordName)]).values.first!.get()))
        let metaShare = try w.db.fetchShareMetadata(url: saved.url!, for: Caller(userRecordName: "_b")).share
        var b = Replica("_b")
        try b.sync(w.db)
        let fed = try #require(b.records["Topics"]?[saved.recordID.recordName].flatMap(Share.init))
        for s in [fetched, metaShare, fed] {
            #expect(Set(s.participants.compactMap(\.userIdentity.userRecordName)) == ["_owner", "_b"])
            #expect(s.participants.count == 2)
            #expect(s.participants.allSatisfy { s.oneTimeURL(for: $0.participantID) == nil })
            #expect(s.currentUserParticipant?.userIdentity.userRecordName == "_b")
        }
        // Administrator and owner see everyone, including the pending invitation and its link.
        let adminView = try #require(Share(try w.view("_a").fetchRecords([w.sid(saved.recordID.recordName)]).values.first!.get()))
        #expect(adminView.participants.count == 5)
        #expect(adminView.oneTimeURL(for: pending.participantID) != nil)
        let ownerView = try w.currentShare(saved.recordID)
        #expect(ownerView.participants.count == 5)
        #expect(ownerView.oneTimeURL(for: pending.participantID) != nil)
    }

    @Test("the shared view's feeds page with moreComing")
    func paging() throws {
        let w = try World()
        try w.save(w.record("Topic", "topic"))
        var notes: [Record] = []
        for i in 0..<20 { notes.append(w.record("Note", "n\(i)", parent: "topic")) }
        _ = try w.db.modifyRecords(saving: notes).get()
        let saved = try w.share(root: "topic", invite: [("_b", .readOnly)])
        try w.accept(saved, "_b")
        let view = w.view("_b")
        var token: ServerChangeToken?
        var seen: [String] = []
        var pages = 0
        var more = true
        while more {
            let page = try view.fetchZoneChanges(w.sharedZone, since: token, resultsLimit: 6)
            #expect(page.changes.count <= 6)
            seen += page.changedRecords.map(\.recordID.recordName)
            token = page.changeToken
            more = page.moreComing
            pages += 1
            if pages > 10 { break }
        }
        #expect(pages == 4)
        #expect(seen.count == 22)
        #expect(Set(seen).count == 22)
        // Nothing new after the last token.
        let empty = try view.fetchZoneChanges(w.sharedZone, since: token, resultsLimit: 6)
        #expect(empty.changes.isEmpty && !empty.moreComing)
        // The database feed pages too.
        try w.save(w.record("Topic", "t2"))
        let s2 = try w.share(root: "t2", invite: [("_b", .readOnly)])
        try w.accept(s2, "_b")
        let first = try view.fetchDatabaseChanges(since: nil, resultsLimit: 1)
        #expect(first.changedZoneIDs.count == 1)
    }

    func watched(_ w: World, _ users: [String]) throws -> (Share, [String: ServerChangeToken]) {
        let saved = try w.share(root: "topic", invite: users.map { ($0, .readOnly) })
        var tokens: [String: ServerChangeToken] = [:]
        for u in users {
            try w.accept(saved, u)
            tokens[u] = try w.view(u).fetchDatabaseChanges(since: nil).changeToken
        }
        return (saved, tokens)
    }

    func zoneLeft(_ w: World, _ user: String, since token: ServerChangeToken?) throws -> Bool {
        let changes = try w.view(user).fetchDatabaseChanges(since: token)
        let noZones = try w.view(user).fetchAllZones().isEmpty
        return changes.deletedZoneIDs.map(\.zoneName) == ["Topics"] && changes.changedZoneIDs.isEmpty && noZones
    }

    @Test("the zone leaves the feed (deleted zone) when the share is stopped")
    func zoneLeavesOnStop() throws {
        let w = try topicWorld()
        let (saved, tokens) = try watched(w, ["_b"])
        _ = try w.db.modifyRecords(deleting: [saved.recordID]).get()
        #expect(try zoneLeft(w, "_b", since: tokens["_b"]))
    }

    @Test("the zone leaves the feed (deleted zone) when the participant is removed")
    func zoneLeavesOnRemove() throws {
        let w = try topicWorld()
        let (saved, tokens) = try watched(w, ["_b", "_c"])
        var share = try w.currentShare(saved.recordID)
        try share.removeParticipant(try #require(share.participants.first { $0.userIdentity.userRecordName == "_b" }))
        try w.saveShare(share)
        #expect(try zoneLeft(w, "_b", since: tokens["_b"]))
        #expect(!(try zoneLeft(w, "_c", since: tokens["_c"])))
    }

    @Test("the zone leaves the feed (deleted zone) when the participant leaves")
    func zoneLeavesOnLeave() throws {
        let w = try topicWorld()
        let (saved, tokens) = try watched(w, ["_b"])
        try w.view("_b").leaveShare(w.sid(saved.recordID.recordName))
        #expect(try zoneLeft(w, "_b", since: tokens["_b"]))
    }

    @Test("the zone leaves the feed (deleted zone) when the participant is blocked")
    func zoneLeavesOnBlock() throws {
        let w = try topicWorld()
        let (saved, tokens) = try watched(w, ["_b"])
        var share = try w.currentShare(saved.recordID)
        share.blockIdentities([UserIdentity(userRecordName: "_b")])
        try w.saveShare(share)
        #expect(try zoneLeft(w, "_b", since: tokens["_b"]))
    }
}
