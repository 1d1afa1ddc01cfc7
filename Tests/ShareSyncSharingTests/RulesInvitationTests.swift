import Foundation
import ShareSyncCore
import Testing

@testable import ShareSyncStore

@Suite("Rules: whom an invitation link admits")
struct RulesInvitationTests {
    func topicWorld() throws -> World {
        let w = try World()
        try w.save(w.record("Topic", "topic"), w.record("Note", "note", parent: "topic"))
        return w
    }

    /// Shares the topic with one participant and returns the saved share and that participant's link.
    func shareTopic(_ w: World, with participant: Participant) throws -> (share: Share, link: String) {
        var share = Share(rootRecord: try w.db.fetchRecord(w.id("topic")))
        try share.addParticipant(participant)
        let saved = try w.saveShare(share)
        let link = try #require(try w.currentShare(saved.recordID).oneTimeURL(for: participant.participantID))
        return (saved, link)
    }

    @Test func anInvitationAddressedToAUserRecordNameAdmitsOnlyThatUser() throws {
        let w = try topicWorld()
        let b = Participant(lookupInfo: .init(userRecordName: "_b"), permission: .readWrite)
        let (saved, link) = try shareTopic(w, with: b)
        let stranger = Caller(userRecordName: "_x")

        // Someone else with B's link gets exactly what someone with no invitation at all gets.
        let uninvited = failure { try w.db.acceptShare(url: saved.url!, as: stranger) }
        let withLink = failure { try w.db.acceptShare(url: link, as: stranger) }
        #expect(withLink?.code == .participantMayNeedVerification)
        #expect(withLink?.rule == .notInvited)
        #expect(withLink?.message == uninvited?.message)
        let metadata = failure { _ = try w.db.fetchShareMetadata(url: link, for: stranger) }
        #expect(metadata?.code == .participantMayNeedVerification)
        #expect(metadata?.message == uninvited?.message)
        #expect(try w.visible("_x", ["topic", "note"]).isEmpty)

        // B's invitation is untouched: still pending, still unspent, and B accepts with it.
        let after = try w.currentShare(saved.recordID)
        let pending = try #require(after.participants.first { $0.participantID == b.participantID })
        #expect(pending.acceptanceStatus == .pending)
        #expect(pending.userIdentity.userRecordName == "_b")
        #expect(after.oneTimeURL(for: b.participantID) == link)
        #expect(after.participants.allSatisfy { $0.userIdentity.userRecordName != "_x" })
        let accepted = try w.db.acceptShare(url: link, as: Caller(userRecordName: "_b"))
        #expect(accepted.participantStatus == .accepted)
        #expect(accepted.participantPermission == .readWrite)
        #expect(try w.visible("_b", ["topic", "note"]) == ["topic", "note"])
    }

    @Test func anInvitationWhoseLookupInfoNamesAUserAdmitsOnlyThatUserEvenBeforeBinding() throws {
        let w = try topicWorld()
        // Lookup info with a user record name and an email, as a client may send it: no binding yet.
        var b = Participant(lookupInfo: .init(emailAddress: "bee@example.com", phoneNumber: nil, userRecordName: "_b"))
        b.userIdentity.userRecordName = nil
        let (_, link) = try shareTopic(w, with: b)
        let other = Caller(userRecordName: "_x", verifiedEmailAddress: "bee@example.com")
        #expect(failure { try w.db.acceptShare(url: link, as: other) }?.code == .participantMayNeedVerification)
        #expect(try w.db.acceptShare(url: link, as: Caller(userRecordName: "_b")).participantStatus == .accepted)
    }

    @Test func anEmailOrPhoneInvitationStillBindsWhoeverUsesItsLinkFirst() throws {
        for lookup in [UserIdentity.LookupInfo(emailAddress: "bee@example.com"), .init(phoneNumber: "+1 555 0100")] {
            let w = try topicWorld()
            let p = Participant(lookupInfo: lookup, permission: .readOnly)
            let (saved, link) = try shareTopic(w, with: p)
            let meta = try w.db.acceptShare(url: link, as: Caller(userRecordName: "_b"))
            #expect(meta.participantStatus == .accepted)
            let bound = try #require(try w.currentShare(saved.recordID).participants.first { $0.participantID == p.participantID })
            #expect(bound.userIdentity.userRecordName == "_b")
            // The link is spent: nobody else gets in with it.
            #expect(failure { try w.db.acceptShare(url: link, as: Caller(userRecordName: "_y")) }?.code == .participantMayNeedVerification)
        }
    }
}
