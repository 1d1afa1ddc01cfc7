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

        // Used by its user, the link still was never anyone else's: a stranger gets the answer of the
        // uninvited (notInvited), not "already used by someone else" (invitationSpent), and stays out.
        let afterUse = failure { try w.db.acceptShare(url: link, as: stranger) }
        #expect(afterUse?.rule == .notInvited, "\(String(describing: afterUse))")
        #expect(afterUse?.message == uninvited?.message)
        #expect(try w.visible("_x", ["topic", "note"]).isEmpty)
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

    @Test("someone who takes part already is their own participant whatever link they use: another's link is ignored and stays unspent")
    func aParticipantUsingAnotherOnesLinkStaysThemselves() throws {
        let w = try topicWorld()
        let b = Participant(lookupInfo: .init(userRecordName: "_b"), permission: .readOnly)
        let c = Participant(lookupInfo: .init(emailAddress: "cee@example.com"), permission: .readWrite)
        var share = Share(rootRecord: try w.db.fetchRecord(w.id("topic")))
        try share.addParticipant(b)
        try share.addParticipant(c)
        let saved = try w.saveShare(share)
        let bLink = try #require(try w.currentShare(saved.recordID).oneTimeURL(for: b.participantID))
        let cLink = try #require(try w.currentShare(saved.recordID).oneTimeURL(for: c.participantID))
        #expect(try w.db.acceptShare(url: bLink, as: Caller(userRecordName: "_b")).participantPermission == .readOnly)
        let before = try w.currentShare(saved.recordID)

        // B with C's unspent link: B, read-only as invited, and C's invitation as it was.
        let meta = try w.db.acceptShare(url: cLink, as: Caller(userRecordName: "_b"))
        #expect(meta.participantStatus == .accepted && meta.participantPermission == .readOnly)
        let after = try w.currentShare(saved.recordID)
        #expect(after == before)
        #expect(after.participants.count { $0.userIdentity.userRecordName == "_b" } == 1)
        let stillPending = try #require(after.participants.first { $0.participantID == c.participantID })
        #expect(stillPending.acceptanceStatus == .pending && stillPending.userIdentity.userRecordName == nil)

        // C's link still binds C; once spent, B using it is still just B (no invitationSpent for them).
        #expect(try w.db.acceptShare(url: cLink, as: Caller(userRecordName: "_c")).participantPermission == .readWrite)
        let spent = try w.db.acceptShare(url: cLink, as: Caller(userRecordName: "_b"))
        #expect(spent.participantPermission == .readOnly)
        #expect(failure { try w.db.acceptShare(url: cLink, as: Caller(userRecordName: "_x")) }?.rule == .invitationSpent)
    }

    /// `url` with an `invite=` secret nobody was given.
    static func withMadeUpInvite(_ url: String) -> String { url + (url.contains("?") ? "&" : "?") + "invite=madeUpSecret123" }

    @Test("an invite= that admits nobody is ignored on a public share (the holder joins as publicUser) and refused on a private one")
    func anInviteThatAdmitsNobody() throws {
        let w = try topicWorld()
        var share = Share(rootRecord: try w.db.fetchRecord(w.id("topic")))
        share.publicPermission = .readOnly
        let saved = try w.saveShare(share)
        let made = Self.withMadeUpInvite(try #require(saved.url))

        let meta = try w.db.acceptShare(url: made, as: Caller(userRecordName: "_p"))
        #expect(meta.participantRole == .publicUser && meta.participantPermission == .readOnly)
        #expect(try w.visible("_p", ["topic", "note"]) == ["topic", "note"])

        // On a private share: the answer of the uninvited, and the invitation stays pending.
        let p = try topicWorld()
        let (privateShare, _) = try shareTopic(p, with: Participant(lookupInfo: .init(emailAddress: "bee@example.com")))
        let refused = failure { try p.db.acceptShare(url: Self.withMadeUpInvite(try #require(privateShare.url)), as: Caller(userRecordName: "_p")) }
        #expect(refused?.rule == .notInvited)
        #expect(try p.visible("_p", ["topic", "note"]).isEmpty)
        #expect(try p.currentShare(privateShare.recordID).participants.allSatisfy { $0.role == .owner || $0.acceptanceStatus == .pending })
    }
}
