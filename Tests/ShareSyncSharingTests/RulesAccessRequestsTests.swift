import Foundation
import ShareSyncCore
import Testing

@testable import ShareSyncStore

@Suite("Rules: access requests")
struct RulesAccessRequestsTests {
    func world(allowsRequests: Bool, invite: [(String, Participant.Permission, Participant.Role)] = []) throws -> (World, Share) {
        let w = try World()
        try w.save(w.record("Topic", "topic"), w.record("Note", "note", parent: "topic"))
        var share = Share(rootRecord: try w.db.fetchRecord(w.id("topic")))
        share.allowsAccessRequests = allowsRequests
        for (u, p, r) in invite { try share.addParticipant(Participant(lookupInfo: .init(userRecordName: u), permission: p, role: r)) }
        let saved = try w.saveShare(share)
        for (u, _, _) in invite { try w.accept(saved, u) }
        return (w, saved)
    }

    func caller(_ u: String) -> Caller { Caller(userRecordName: u) }

    @Test("allowsAccessRequests false: an uninvited user's fetchShareMetadata fails exactly as for a forged URL token")
    func noRequestsLooksLikeForgedURL() throws {
        let (w, saved) = try world(allowsRequests: false)
        let url = try #require(saved.url)
        var forged = try #require(ShareURL(string: url))
        forged.token = String(repeating: "A", count: forged.token.count)
        let real = failure { _ = try w.db.fetchShareMetadata(url: url, for: caller("_x")) }
        let fake = failure { _ = try w.db.fetchShareMetadata(url: forged.absoluteString, for: caller("_x")) }
        #expect(real?.code == .participantMayNeedVerification)
        #expect(real?.code == fake?.code)
        #expect(real?.message == fake?.message)
        #expect(real == fake)
        // Same through acceptShare.
        let acceptReal = failure { try w.db.acceptShare(url: url, as: caller("_x")) }
        let acceptFake = failure { try w.db.acceptShare(url: forged.absoluteString, as: caller("_x")) }
        #expect(acceptReal == acceptFake)
    }

    @Test("allowsAccessRequests false: requestAccess is refused, exactly as for a forged URL")
    func noRequestsRefused() throws {
        let (w, saved) = try world(allowsRequests: false)
        var forged = try #require(ShareURL(string: saved.url!))
        forged.token = String(repeating: "B", count: forged.token.count)
        let real = failure { try w.db.requestAccess(url: saved.url!, as: caller("_x")) }
        let fake = failure { try w.db.requestAccess(url: forged.absoluteString, as: caller("_x")) }
        #expect(real?.code == .participantMayNeedVerification)
        #expect(real?.message.contains("takes access requests") == true)
        #expect(real == fake)
        #expect(try w.currentShare(saved.recordID).requesters.isEmpty)
    }

    @Test("allowsAccessRequests true: requestAccess adds the user to requesters; metadata shows no access")
    func requestAddsRequester() throws {
        let (w, saved) = try world(allowsRequests: true)
        let meta = try w.db.fetchShareMetadata(url: saved.url!, for: caller("_x"), shouldFetchRootRecord: true)
        #expect(meta.participantPermission == .none)
        #expect(meta.rootRecord == nil)
        #expect(meta.share.participants.allSatisfy { $0.role == .owner })
        try w.db.requestAccess(url: saved.url!, as: caller("_x"))
        try w.db.requestAccess(url: saved.url!, as: caller("_x"))
        let share = try w.currentShare(saved.recordID)
        #expect(share.requesters.map(\.userRecordName) == ["_x"])
        #expect(try w.visible("_x", ["topic"]).isEmpty)
        #expect(failure { try w.db.acceptShare(url: saved.url!, as: caller("_x")) }?.code == .participantMayNeedVerification)
    }

    @Test("the owner approves a requester: they become a participant and can accept")
    func approve() throws {
        let (w, saved) = try world(allowsRequests: true)
        try w.db.requestAccess(url: saved.url!, as: caller("_x"))
        var share = try w.currentShare(saved.recordID)
        try share.approveRequester(try #require(share.requesters.first), permission: .readWrite)
        let after = try w.saveShare(share)
        #expect(after.requesters.isEmpty)
        let p = try #require(after.participants.first { $0.userIdentity.userRecordName == "_x" })
        #expect(p.isApprovedRequester)
        #expect(p.permission == .readWrite)
        #expect(p.acceptanceStatus == .pending)
        let meta = try w.accept(after, "_x")
        #expect(meta.participantStatus == .accepted)
        #expect(try w.visible("_x", ["topic", "note"]) == ["topic", "note"])
    }

    @Test("the owner denies a requester: removed from requesters, and may ask again")
    func deny() throws {
        let (w, saved) = try world(allowsRequests: true)
        try w.db.requestAccess(url: saved.url!, as: caller("_x"))
        var share = try w.currentShare(saved.recordID)
        share.denyRequesters(share.requesters)
        let after = try w.saveShare(share)
        #expect(after.requesters.isEmpty)
        #expect(!after.participants.contains { $0.userIdentity.userRecordName == "_x" })
        try w.db.requestAccess(url: saved.url!, as: caller("_x"))
        #expect(try w.currentShare(saved.recordID).requesters.map(\.userRecordName) == ["_x"])
    }

    @Test("the owner blocks a requester: they cannot ask again; unblocking lets them ask again")
    func blockAndUnblock() throws {
        let (w, saved) = try world(allowsRequests: true)
        try w.db.requestAccess(url: saved.url!, as: caller("_x"))
        var share = try w.currentShare(saved.recordID)
        share.blockRequesters(share.requesters)
        let after = try w.saveShare(share)
        #expect(after.requesters.isEmpty)
        #expect(after.blockedIdentities.map(\.userRecordName) == ["_x"])
        #expect(failure { try w.db.requestAccess(url: saved.url!, as: caller("_x")) }?.code == .participantMayNeedVerification)
        #expect(failure { _ = try w.db.fetchShareMetadata(url: saved.url!, for: caller("_x")) }?.code == .participantMayNeedVerification)
        #expect(try w.currentShare(saved.recordID).requesters.isEmpty)
        var again = try w.currentShare(saved.recordID)
        again.unblockIdentities(again.blockedIdentities)
        let unblocked = try w.saveShare(again)
        #expect(unblocked.blockedIdentities.isEmpty)
        try w.db.requestAccess(url: saved.url!, as: caller("_x"))
        #expect(try w.currentShare(saved.recordID).requesters.map(\.userRecordName) == ["_x"])
    }

    @Test("blocking an existing participant removes them and they lose the zone")
    func blockParticipant() throws {
        let (w, saved) = try world(allowsRequests: true, invite: [("_b", .readWrite, .privateUser), ("_c", .readOnly, .privateUser)])
        var b = Replica("_b")
        try b.sync(w.db)
        #expect(!b.names().isEmpty)
        var share = try w.currentShare(saved.recordID)
        share.blockIdentities([UserIdentity(userRecordName: "_b")])
        let after = try w.saveShare(share)
        #expect(!after.participants.contains { $0.userIdentity.userRecordName == "_b" && $0.acceptanceStatus != .removed })
        try b.sync(w.db)
        #expect(b.records["Topics"] == nil)
        #expect(try w.view("_b").fetchAllZones().isEmpty)
        #expect(try w.visible("_b", ["topic"]).isEmpty)
        #expect(try w.view("_b").modifyRecords(saving: [w.sharedRecord("Note", "n2", parent: "topic")]).error("n2")?.code == .permissionFailure)
        #expect(failure { try w.db.acceptShare(url: saved.url!, as: caller("_b")) }?.code == .participantMayNeedVerification)
        #expect(failure { try w.db.requestAccess(url: saved.url!, as: caller("_b")) }?.code == .participantMayNeedVerification)
        #expect(try w.visible("_c", ["topic"]) == ["topic"])
    }

    @Test("a non-admin participant saving the share to approve, deny or block gets permissionFailure")
    func nonAdminCannotManageRequests() throws {
        let (w, saved) = try world(allowsRequests: true, invite: [("_b", .readWrite, .privateUser)])
        try w.db.requestAccess(url: saved.url!, as: caller("_x"))
        try w.db.requestAccess(url: saved.url!, as: caller("_y"))
        let view = w.view("_b")
        let id = w.sid(saved.recordID.recordName)
        // A participant's own view hides requesters; build the edits from the owner's copy, as a forged client would.
        for edit in 0..<3 {
            var share = try w.currentShare(saved.recordID)
            let rx = try #require(share.requesters.first { $0.userRecordName == "_x" })
            switch edit {
            case 0: try share.approveRequester(rx, permission: .readWrite)
            case 1: share.denyRequesters([rx])
            default: share.blockRequesters([rx])
            }
            var record = share.record
            record = Record(recordType: record.recordType, recordID: id, fields: record.fields, parent: nil, share: nil,
                            creationDate: record.creationDate, modificationDate: record.modificationDate,
                            creatorUserRecordID: record.creatorUserRecordID, lastModifiedUserRecordID: record.lastModifiedUserRecordID,
                            recordChangeTag: record.recordChangeTag)
            record.shareState = share.shareState
            let result = try view.modifyRecords(saving: [record], savePolicy: .allKeys)
            #expect(result.error(saved.recordID.recordName)?.code == .permissionFailure, "edit \(edit)")
        }
        let now = try w.currentShare(saved.recordID)
        #expect(Set(now.requesters.map(\.userRecordName)) == ["_x", "_y"])
        #expect(now.blockedIdentities.isEmpty)
        #expect(!now.participants.contains { $0.userIdentity.userRecordName == "_x" })
    }

    @Test("an administrator can approve, deny and block requesters")
    func adminManagesRequests() throws {
        let (w, saved) = try world(allowsRequests: true, invite: [("_a", .readWrite, .administrator)])
        for u in ["_x", "_y", "_z"] { try w.db.requestAccess(url: saved.url!, as: caller(u)) }
        let view = w.view("_a")
        let id = w.sid(saved.recordID.recordName)
        var share = try #require(Share(try view.fetchRecords([id])[id]!.get()))
        #expect(Set(share.requesters.map(\.userRecordName)) == ["_x", "_y", "_z"])
        try share.approveRequester(try #require(share.requesters.first { $0.userRecordName == "_x" }), permission: .readOnly)
        share.denyRequesters(share.requesters.filter { $0.userRecordName == "_y" })
        share.blockRequesters(share.requesters.filter { $0.userRecordName == "_z" })
        _ = try view.modifyRecords(saving: [share.record]).get()
        let now = try w.currentShare(saved.recordID)
        #expect(now.requesters.isEmpty)
        #expect(now.blockedIdentities.map(\.userRecordName) == ["_z"])
        #expect(now.participants.first { $0.userIdentity.userRecordName == "_x" }?.permission == .readOnly)
        try w.accept(now, "_x")
        #expect(try w.visible("_x", ["topic"]) == ["topic"])
        try w.db.requestAccess(url: saved.url!, as: caller("_y"))
        #expect(failure { try w.db.requestAccess(url: saved.url!, as: caller("_z")) }?.code == .participantMayNeedVerification)
    }

    @Test("a share holds at most 100 access requests: the 101st key is refused, the owner can still save the share, and an answer makes room")
    func requestersAreBounded() throws {
        let (w, saved) = try world(allowsRequests: true)
        let url = try #require(saved.url)
        for i in 0..<Share.maximumRequesters { try w.db.requestAccess(url: url, as: caller("_k\(i)")) }
        #expect(try w.currentShare(saved.recordID).requesters.count == Share.maximumRequesters)
        let refused = failure { try w.db.requestAccess(url: url, as: caller("_late")) }
        #expect(refused?.code == .limitExceeded)
        #expect(refused?.rule == .maximumRequesters)
        #expect(try !w.currentShare(saved.recordID).requesters.contains { $0.userRecordName == "_late" })
        // Asking again while one's request waits is not a new request.
        try w.db.requestAccess(url: url, as: caller("_k0"))
        // The owner still saves the share, and denying one request makes room for another.
        var share = try w.currentShare(saved.recordID)
        share.denyRequesters([share.requesters[0]])
        try w.saveShare(share)
        try w.db.requestAccess(url: url, as: caller("_late"))
        #expect(try w.currentShare(saved.recordID).requesters.contains { $0.userRecordName == "_late" })
    }
}
