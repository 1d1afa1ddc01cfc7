import Foundation
import ShareSyncCore
import Testing

@testable import ShareSyncStore

@Suite("Rules: participants")
struct RulesParticipantsTests {
    func topicWorld() throws -> World {
        let w = try World()
        try w.save(w.record("Topic", "topic"), w.record("Note", "note", parent: "topic"))
        return w
    }

    func rootShare(_ w: World) throws -> Share {
        Share(rootRecord: try w.db.fetchRecord(w.id("topic")))
    }

    @Test("participants are added by email, phone or user record name, with readOnly/readWrite and privateUser/administrator")
    func addByLookupInfo() throws {
        let w = try topicWorld()
        var share = try rootShare(w)
        try share.addParticipant(Participant(lookupInfo: .init(emailAddress: "e@example.com"), permission: .readOnly))
        try share.addParticipant(Participant(lookupInfo: .init(phoneNumber: "+1 555 0100"), permission: .readWrite))
        try share.addParticipant(
            Participant(lookupInfo: .init(userRecordName: "_c"), permission: .readWrite, role: .administrator))
        let saved = try w.saveShare(share)
        let others = saved.participants.filter { $0.role != .owner }
        #expect(others.count == 3)
        let e = try #require(others.first { $0.userIdentity.lookupInfo?.emailAddress == "e@example.com" })
        #expect(e.permission == .readOnly && e.role == .privateUser)
        let p = try #require(others.first { $0.userIdentity.lookupInfo?.phoneNumber == "+1 555 0100" })
        #expect(p.permission == .readWrite && p.role == .privateUser)
        let c = try #require(others.first { $0.userIdentity.userRecordName == "_c" })
        #expect(c.permission == .readWrite && c.role == .administrator)
    }

    @Test("the owner is always a participant, with role owner")
    func ownerIsParticipant() throws {
        let w = try topicWorld()
        let saved = try w.share(root: "topic", invite: [("_b", .readOnly)])
        let owners = saved.participants.filter { $0.role == .owner }
        #expect(owners.count == 1)
        #expect(owners.first?.userIdentity.userRecordName == "_owner")
        #expect(saved.owner?.acceptanceStatus == .accepted)
        let zoneShare = try World().shareZone()
        #expect(zoneShare.owner?.userIdentity.userRecordName == "_owner")
        // The owner cannot be added as another participant nor removed.
        var s = try w.currentShare(saved.recordID)
        #expect(failure { try s.removeParticipant(try #require(s.owner)) }?.code == .invalidArguments)
        #expect(
            failure { try s.addParticipant(Participant(lookupInfo: .init(userRecordName: "_x"), role: .owner)) }?.code
                == .invalidArguments)
    }

    @Test("adding the same identity again updates it")
    func addSameIdentityUpdates() throws {
        let w = try topicWorld()
        var share = try rootShare(w)
        try share.addParticipant(Participant(lookupInfo: .init(userRecordName: "_b"), permission: .readOnly))
        try share.addParticipant(Participant(lookupInfo: .init(userRecordName: "_b"), permission: .readWrite))
        #expect(share.participants.filter { $0.userIdentity.userRecordName == "_b" }.count == 1)
        var saved = try w.saveShare(share)
        #expect(saved.participants.filter { $0.userIdentity.userRecordName == "_b" }.first?.permission == .readWrite)
        // Again on the saved share, by email too.
        try saved.addParticipant(
            Participant(lookupInfo: .init(userRecordName: "_b"), permission: .readOnly, role: .administrator))
        try saved.addParticipant(Participant(lookupInfo: .init(emailAddress: "E@x.org"), permission: .readOnly))
        try saved.addParticipant(Participant(lookupInfo: .init(emailAddress: "e@x.org"), permission: .readWrite))
        let again = try w.saveShare(saved)
        let bs = again.participants.filter { $0.userIdentity.userRecordName == "_b" }
        #expect(bs.count == 1)
        #expect(bs.first?.permission == .readOnly && bs.first?.role == .administrator)
        let es = again.participants.filter { $0.userIdentity.lookupInfo?.emailAddress?.lowercased() == "e@x.org" }
        #expect(es.count == 1)
        #expect(es.first?.permission == .readWrite)
    }

    @Test("adding or removing participants requires publicPermission none (client side)")
    func publicShareRefusesParticipantsClientSide() throws {
        let w = try topicWorld()
        let saved = try w.share(root: "topic", invite: [("_b", .readOnly)])
        var share = try w.currentShare(saved.recordID)
        share.publicPermission = .readOnly
        #expect(
            failure { try share.addParticipant(Participant(lookupInfo: .init(userRecordName: "_c"))) }?.code
                == .invalidArguments)
        let b = try #require(share.participants.first { $0.userIdentity.userRecordName == "_b" })
        #expect(failure { try share.removeParticipant(b) }?.code == .invalidArguments)
    }

    @Test("saving a public share with a changed private participant list gives invalidArguments (server side)")
    func publicShareRefusesParticipantsServerSide() throws {
        let w = try topicWorld()
        let saved = try w.share(root: "topic", invite: [("_b", .readOnly)])
        // Remove while private, then go public in the same save.
        var share = try w.currentShare(saved.recordID)
        try share.removeParticipant(try #require(share.participants.first { $0.userIdentity.userRecordName == "_b" }))
        share.publicPermission = .readOnly
        #expect(try w.db.modifyRecords(saving: [share.record]).error(share.recordID.recordName)?.code == .invalidArguments)
        // Add while private, then go public in the same save.
        var share2 = try w.currentShare(saved.recordID)
        try share2.addParticipant(Participant(lookupInfo: .init(userRecordName: "_c")))
        share2.publicPermission = .readWrite
        #expect(try w.db.modifyRecords(saving: [share2.record]).error(share2.recordID.recordName)?.code == .invalidArguments)
        // Nothing changed.
        let now = try w.currentShare(saved.recordID)
        #expect(now.publicPermission == .none)
        #expect(Set(now.participants.compactMap(\.userIdentity.userRecordName)) == ["_owner", "_b"])
    }

    @Test("setting publicPermission back to none removes public participants")
    func publicBackToNone() throws {
        let w = try topicWorld()
        let saved = try w.share(root: "topic", publicPermission: .readOnly)
        let meta = try w.accept(saved, "_p")
        #expect(meta.participantRole == .publicUser)
        #expect(try w.visible("_p", ["topic"]) == ["topic"])
        var share = try w.currentShare(saved.recordID)
        #expect(share.participants.contains { $0.userIdentity.userRecordName == "_p" && $0.role == .publicUser })
        share.publicPermission = .none
        let after = try w.saveShare(share)
        #expect(!after.participants.contains { $0.role == .publicUser })
        #expect(try w.visible("_p", ["topic"]).isEmpty)
        #expect(try w.view("_p").fetchAllZones().isEmpty)
        #expect(
            failure { _ = try w.db.fetchShareMetadata(url: saved.url!, for: Caller(userRecordName: "_p")) }?.code
                == .participantMayNeedVerification)
    }

    @Test("a share may have at most maximumParticipants participants (tooManyParticipants)")
    func maximumParticipants() throws {
        var limits = Limits()
        limits.maximumParticipants = 3
        let db = try PrivateDatabase(inMemoryOwnerName: "_owner", limits: limits)
        let zone = RecordZone.ID(zoneName: "Topics")
        try db.saveZone(RecordZone(zoneID: zone))
        let root = Record(recordType: "Topic", recordID: Record.ID(recordName: "topic", zoneID: zone))
        var share = Share(rootRecord: root)
        try share.addParticipant(Participant(lookupInfo: .init(userRecordName: "_b")))
        try share.addParticipant(Participant(lookupInfo: .init(userRecordName: "_c")))
        let saved = try db.modifyRecords(saving: [root, share.record]).get()
        var stored = try #require(saved.compactMap(Share.init).first)
        #expect(stored.participants.count == 3)
        try stored.addParticipant(Participant(lookupInfo: .init(userRecordName: "_d")))
        let result = try db.modifyRecords(saving: [stored.record])
        #expect(result.error(stored.recordID.recordName)?.code == .tooManyParticipants)
        // A new share with too many from the start.
        let root2 = Record(recordType: "Topic", recordID: Record.ID(recordName: "topic2", zoneID: zone))
        var share2 = Share(rootRecord: root2)
        for u in ["_b", "_c", "_d"] { try share2.addParticipant(Participant(lookupInfo: .init(userRecordName: u))) }
        let r2 = try db.modifyRecords(saving: [root2, share2.record])
        #expect(r2.error(share2.recordID.recordName)?.code == .tooManyParticipants)
    }

    @Test("public users beyond maximumParticipants are refused (tooManyParticipants)")
    func maximumParticipantsPublic() throws {
        var limits = Limits()
        limits.maximumParticipants = 3
        let db = try PrivateDatabase(inMemoryOwnerName: "_owner", limits: limits)
        let zone = RecordZone.ID(zoneName: "Topics")
        try db.saveZone(RecordZone(zoneID: zone))
        let root = Record(recordType: "Topic", recordID: Record.ID(recordName: "topic", zoneID: zone))
        var share = Share(rootRecord: root)
        share.publicPermission = .readOnly
        let saved = try db.modifyRecords(saving: [root, share.record]).get()
        let url = try #require(saved.compactMap(Share.init).first?.url)
        try db.acceptShare(url: url, as: Caller(userRecordName: "_b"))
        try db.acceptShare(url: url, as: Caller(userRecordName: "_c"))
        #expect(failure { try db.acceptShare(url: url, as: Caller(userRecordName: "_d")) }?.code == .tooManyParticipants)
    }

    @Test("acceptance status is pending, then accepted; dateAddedToShare is set when saved")
    func pendingThenAccepted() throws {
        let w = try topicWorld()
        var share = try rootShare(w)
        try share.addParticipant(Participant(lookupInfo: .init(userRecordName: "_b")))
        #expect(share.participants.first?.dateAddedToShare == nil)
        let before = Date().addingTimeInterval(-5)
        let saved = try w.saveShare(share)
        let p = try #require(saved.participants.first { $0.userIdentity.userRecordName == "_b" })
        #expect(p.acceptanceStatus == .pending)
        let added = try #require(p.dateAddedToShare)
        #expect(added >= before && added <= Date().addingTimeInterval(5))
        try w.accept(saved, "_b")
        let after = try w.currentShare(saved.recordID)
        let q = try #require(after.participants.first { $0.userIdentity.userRecordName == "_b" })
        #expect(q.acceptanceStatus == .accepted)
        #expect(q.dateAddedToShare == added)
    }

    @Test("a participant removed by the owner loses the zone")
    func removedByOwner() throws {
        let w = try topicWorld()
        let saved = try w.share(root: "topic", invite: [("_b", .readOnly)])
        try w.accept(saved, "_b")
        var b = Replica("_b")
        try b.sync(w.db)
        #expect(!b.names().isEmpty)
        var share = try w.currentShare(saved.recordID)
        try share.removeParticipant(try #require(share.participants.first { $0.userIdentity.userRecordName == "_b" }))
        let after = try w.saveShare(share)
        let p = after.participants.first { $0.userIdentity.userRecordName == "_b" }
        #expect(p == nil || p?.acceptanceStatus == .removed)
        try b.sync(w.db)
        #expect(b.records["Topics"] == nil)
        #expect(try w.view("_b").fetchAllZones().isEmpty)
        #expect(try w.visible("_b", ["topic", "note"]).isEmpty)
    }

    @Test("a participant who leaves gets status removed and loses the zone; the share stays for others")
    func leaving() throws {
        let w = try topicWorld()
        let saved = try w.share(root: "topic", invite: [("_b", .readOnly), ("_c", .readOnly)])
        try w.accept(saved, "_b")
        try w.accept(saved, "_c")
        try w.view("_b").leaveShare(w.sid(saved.recordID.recordName))
        let after = try w.currentShare(saved.recordID)
        #expect(after.participants.first { $0.userIdentity.userRecordName == "_b" }?.acceptanceStatus == .removed)
        #expect(after.participants.first { $0.userIdentity.userRecordName == "_c" }?.acceptanceStatus == .accepted)
        #expect(try w.view("_b").fetchAllZones().isEmpty)
        #expect(try w.visible("_b", ["topic"]).isEmpty)
        #expect(try w.visible("_c", ["topic", "note"]) == ["topic", "note"])
        #expect(try w.db.fetchRecord(w.id("topic")).share != nil)
    }

    @Test("one-time URL participant: any user accepts once and is bound; a second user with the link fails")
    func oneTimeURL() throws {
        let w = try topicWorld()
        var share = try rootShare(w)
        let p = Participant.oneTimeURLParticipant(permission: .readWrite)
        try share.addParticipant(p)
        _ = try w.saveShare(share)
        let fetched = try w.currentShare(share.recordID)
        let link = try #require(fetched.oneTimeURL(for: p.participantID))
        #expect(link != fetched.url)
        let meta = try w.db.acceptShare(url: link, as: Caller(userRecordName: "_x"))
        #expect(meta.participantStatus == .accepted)
        #expect(meta.participantPermission == .readWrite)
        let after = try w.currentShare(share.recordID)
        let bound = try #require(after.participants.first { $0.participantID == p.participantID })
        #expect(bound.userIdentity.userRecordName == "_x")
        #expect(bound.acceptanceStatus == .accepted)
        #expect(after.oneTimeURL(for: p.participantID) == nil)
        #expect(try w.visible("_x", ["topic"]) == ["topic"])
        #expect(failure { try w.db.acceptShare(url: link, as: Caller(userRecordName: "_y")) }?.code == .participantMayNeedVerification)
        #expect(try w.visible("_y", ["topic"]).isEmpty)
        #expect(try w.currentShare(share.recordID).participants.allSatisfy { $0.userIdentity.userRecordName != "_y" })
    }

    @Test("an email-invited participant accepts with a matching verified email")
    func emailInviteVerified() throws {
        let w = try topicWorld()
        var share = try rootShare(w)
        try share.addParticipant(Participant(lookupInfo: .init(emailAddress: "bee@example.com"), permission: .readOnly))
        let saved = try w.saveShare(share)
        let caller = Caller(userRecordName: "_b", verifiedEmailAddress: "Bee@Example.com")
        let meta = try w.db.acceptShare(url: try #require(saved.url), as: caller)
        #expect(meta.participantStatus == .accepted)
        #expect(try w.visible("_b", ["topic"]) == ["topic"])
        let p = try w.currentShare(saved.recordID).participants.first { $0.userIdentity.lookupInfo?.emailAddress == "bee@example.com" }
        #expect(p?.userIdentity.userRecordName == "_b")
        // A caller with a different verified email is not invited.
        let other = Caller(userRecordName: "_z", verifiedEmailAddress: "zed@example.com")
        #expect(failure { try w.db.acceptShare(url: saved.url!, as: other) }?.code == .participantMayNeedVerification)
    }

    @Test("a caller with no verified email accepts an email invitation only through the invitation link")
    func emailInviteByLink() throws {
        let w = try topicWorld()
        var share = try rootShare(w)
        let p = Participant(lookupInfo: .init(emailAddress: "bee@example.com"), permission: .readOnly)
        try share.addParticipant(p)
        let saved = try w.saveShare(share)
        let caller = Caller(userRecordName: "_b")
        #expect(failure { try w.db.acceptShare(url: saved.url!, as: caller) }?.code == .participantMayNeedVerification)
        let link = try #require(try w.currentShare(saved.recordID).oneTimeURL(for: p.participantID))
        let meta = try w.db.acceptShare(url: link, as: caller)
        #expect(meta.participantStatus == .accepted)
        #expect(try w.visible("_b", ["topic"]) == ["topic"])
    }
}
