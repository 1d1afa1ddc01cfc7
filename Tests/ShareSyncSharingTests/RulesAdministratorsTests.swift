import Foundation
import ShareSyncCore
import Testing

@testable import ShareSyncStore

@Suite("Rules: administrators, one-time URLs and share properties")
struct RulesAdministratorsTests {
    /// A share of `topic` with an accepted administrator `_a`, a second administrator `_a2`, and
    /// accepted privateUsers `_b` (readWrite) and `_c` (readOnly).
    func world() throws -> (World, Share) {
        let w = try World()
        try w.save(w.record("Topic", "topic"), w.record("Note", "note", parent: "topic"))
        var share = Share(rootRecord: try w.db.fetchRecord(w.id("topic")))
        share.allowsAccessRequests = true
        try share.addParticipant(Participant(lookupInfo: .init(userRecordName: "_a"), permission: .readWrite, role: .administrator))
        try share.addParticipant(Participant(lookupInfo: .init(userRecordName: "_a2"), permission: .readOnly, role: .administrator))
        try share.addParticipant(Participant(lookupInfo: .init(userRecordName: "_b"), permission: .readWrite))
        try share.addParticipant(Participant(lookupInfo: .init(userRecordName: "_c"), permission: .readOnly))
        let saved = try w.saveShare(share)
        for u in ["_a", "_a2", "_b", "_c"] { try w.accept(saved, u) }
        return (w, try w.currentShare(saved.recordID))
    }

    /// The share as `user` fetches it through their shared database.
    func fetched(_ w: World, _ share: Share, as user: String) throws -> Share {
        let id = w.sid(share.recordID.recordName)
        return try #require(Share(try w.view(user).fetchRecords([id])[id]!.get()))
    }

    /// Saves `user`'s edit of the share through their shared database; the error, if refused.
    func edit(_ w: World, _ share: Share, as user: String, _ body: (inout Share) throws -> Void) throws -> ShareSyncError? {
        var copy = try fetched(w, share, as: user)
        try body(&copy)
        return try w.view(user).modifyRecords(saving: [copy.record]).error(share.recordID.recordName)
    }

    func participant(_ share: Share, _ user: String) throws -> Participant {
        try #require(share.participants.first { $0.userIdentity.userRecordName == user })
    }

    /// `share` with its participants changed by `body` (names and flags the Share API does not set).
    func withParticipants(_ share: Share, _ body: (inout [Participant]) -> Void) throws -> Share {
        var record = share.record
        body(&record.shareState!.participants)
        return try #require(Share(record))
    }

    @Test("who a participant is called and whether they were an approved requester are the owner's to record, not a writer's")
    func namesAndApprovalAreRecordedNotTaken() throws {
        let (w, share) = try world()
        // A participant's name is the one they give when they accept.
        _ = try w.db.acceptShare(url: share.url!, as: Caller(userRecordName: "_c", displayName: "Carol"))
        #expect(try participant(w.currentShare(share.recordID), "_c").userIdentity.displayName == "Carol")
        try w.db.requestAccess(url: share.url!, as: Caller(userRecordName: "_x", displayName: "Xavier"))
        #expect(try edit(w, share, as: "_a") { s in
            // Before: _c then showed as "Owner" to everyone, and the new entries as approved requesters.
            s = try withParticipants(s) { participants in
                for i in participants.indices where participants[i].userIdentity.userRecordName == "_c" {
                    participants[i].userIdentity.displayName = "Owner"
                    participants[i].isApprovedRequester = true
                }
            }
            var stranger = Participant(lookupInfo: .init(userRecordName: "_d"), permission: .readOnly)
            stranger.userIdentity.displayName = "Owner"
            stranger.isApprovedRequester = true
            try s.addParticipant(stranger)
            try s.approveRequester(try #require(s.requesters.first { $0.userRecordName == "_x" }), permission: .readOnly)
        } == nil)
        let now = try w.currentShare(share.recordID)
        #expect(try participant(now, "_c").userIdentity.displayName == "Carol")
        #expect(try !participant(now, "_c").isApprovedRequester)
        #expect(try participant(now, "_d").userIdentity.displayName == nil)
        #expect(try !participant(now, "_d").isApprovedRequester)
        // An approved requester is one, under the name they asked with.
        #expect(try participant(now, "_x").isApprovedRequester)
        #expect(try participant(now, "_x").userIdentity.displayName == "Xavier")
        // The owner's own edits go the same way: the name is the participant's.
        var owners = try withParticipants(now) { participants in
            for i in participants.indices where participants[i].userIdentity.userRecordName == "_c" {
                participants[i].userIdentity.displayName = "Someone else"
            }
        }
        owners = try w.saveShare(owners)
        #expect(try participant(owners, "_c").userIdentity.displayName == "Carol")
    }

    @Test("an administrator adds and removes participants, changes their permissions and answers access requests")
    func administratorManagesParticipants() throws {
        let (w, share) = try world()
        try w.db.requestAccess(url: share.url!, as: Caller(userRecordName: "_x"))
        try w.db.requestAccess(url: share.url!, as: Caller(userRecordName: "_y"))
        #expect(try edit(w, share, as: "_a") { s in
            try s.addParticipant(Participant(lookupInfo: .init(userRecordName: "_d"), permission: .readOnly))
            try s.setPermission(.readWrite, forParticipantID: try participant(s, "_c").participantID)
            try s.removeParticipant(try participant(s, "_b"))
            try s.approveRequester(try #require(s.requesters.first { $0.userRecordName == "_x" }), permission: .readOnly)
            s.denyRequesters(s.requesters.filter { $0.userRecordName == "_y" })
            s.allowsAccessRequests = false  // the reference lets administrators switch access requests
        } == nil)
        let now = try w.currentShare(share.recordID)
        #expect(try participant(now, "_d").acceptanceStatus == .pending)
        #expect(try participant(now, "_c").permission == .readWrite)
        #expect(!now.participants.contains { $0.userIdentity.userRecordName == "_b" })
        #expect(try participant(now, "_x").isApprovedRequester)
        #expect(now.requesters.isEmpty)
        #expect(!now.allowsAccessRequests)
        #expect(try w.visible("_b", ["topic"]).isEmpty)
        try w.accept(now, "_d")
        #expect(try w.visible("_d", ["topic", "note"]) == ["topic", "note"])
    }

    @Test("an administrator cannot touch the owner, another administrator, their own role or the owner's settings")
    func administratorLimits() throws {
        let (w, share) = try world()
        let before = try w.currentShare(share.recordID)
        let cases: [(String, String, (inout Share) throws -> Void)] = [
            ("remove the owner", "adminManagesOthersOnly", { s in
                s.updateState { $0.participants.removeAll { $0.role == .owner } }
            }),
            ("remove another administrator", "adminManagesOthersOnly", { s in
                try s.removeParticipant(try participant(s, "_a2"))
            }),
            ("change another administrator's permission", "adminManagesOthersOnly", { s in
                try s.setPermission(.readWrite, forParticipantID: try participant(s, "_a2").participantID)
            }),
            ("demote another administrator", "adminManagesOthersOnly", { s in
                try s.setRole(.privateUser, forParticipantID: try participant(s, "_a2").participantID)
            }),
            ("block another administrator", "adminManagesOthersOnly", { s in
                s.blockIdentities([UserIdentity(userRecordName: "_a2")])
            }),
            ("re-address another administrator to someone else", "adminManagesOthersOnly", { s in
                s.updateState { state in
                    let i = state.participants.firstIndex { $0.userIdentity.userRecordName == "_a2" }!
                    state.participants[i].userIdentity.lookupInfo = .init(userRecordName: "_evil")
                }
            }),
            ("block the owner", "adminManagesOthersOnly", { s in
                s.updateState { $0.blockedIdentities.append(BlockedIdentity(userIdentity: UserIdentity(userRecordName: "_owner"))) }
            }),
            ("make a participant an administrator", "administratorRoleOwnerOnly", { s in
                try s.setRole(.administrator, forParticipantID: try participant(s, "_b").participantID)
            }),
            ("invite an administrator", "administratorRoleOwnerOnly", { s in
                try s.addParticipant(Participant(lookupInfo: .init(userRecordName: "_e"), permission: .readOnly, role: .administrator))
            }),
            ("change their own role", "adminSelfEdit", { s in
                try s.setRole(.privateUser, forParticipantID: try participant(s, "_a").participantID)
            }),
            ("change their own permission", "adminSelfEdit", { s in
                try s.setPermission(.readOnly, forParticipantID: try participant(s, "_a").participantID)
            }),
            ("remove themselves", "adminSelfEdit", { s in try s.removeParticipant(try participant(s, "_a")) }),
            ("change the public permission", "shareSettingsOwnerOnly", { s in
                s.updateState { $0.publicPermission = .readOnly }
            }),
            ("change the title", "sharePropertiesOwnerOnly", { s in s.title = "Mine" }),
            ("set a thumbnail", "sharePropertiesOwnerOnly", { s in s.thumbnailImageData = Data([1, 2, 3]) }),
            ("change the type", "sharePropertiesOwnerOnly", { s in s.shareType = "public.image" }),
        ]
        for (what, rule, body) in cases {
            let error = try edit(w, share, as: "_a", body)
            #expect(error?.code == .permissionFailure, "\(what): \(String(describing: error))")
            #expect(error?.rule?.rawValue == rule, "\(what): \(String(describing: error))")
        }
        let after = try w.currentShare(share.recordID)
        #expect(after.participants == before.participants)
        #expect(after.recordChangeTag == before.recordChangeTag)
    }

    @Test("an administrator cannot turn a pending administrator's invitation into one for someone else")
    func administratorCannotHijackAPendingAdministrator() throws {
        let (w, share) = try world()
        var s = try w.currentShare(share.recordID)
        try s.addParticipant(Participant(lookupInfo: .init(emailAddress: "x@example.org"), permission: .readWrite, role: .administrator))
        s = try w.saveShare(s)
        let error = try edit(w, s, as: "_a") { s in
            s.updateState { state in
                let i = state.participants.firstIndex { $0.userIdentity.lookupInfo?.emailAddress == "x@example.org" }!
                state.participants[i].userIdentity.lookupInfo = .init(userRecordName: "_evil")
            }
        }
        #expect(error?.code == .permissionFailure && error?.rule == .adminManagesOthersOnly, "\(String(describing: error))")
        #expect(failure { try w.db.acceptShare(url: s.url!, as: Caller(userRecordName: "_evil")) }?.code == .participantMayNeedVerification)
    }

    @Test("an administrator does not get a pending administrator's invitation, nor takes it by listing it twice")
    func administratorCannotTakeAPendingAdministratorsInvitation() throws {
        let (w, share) = try world()
        var s = try w.currentShare(share.recordID)
        try s.addParticipant(Participant(lookupInfo: .init(emailAddress: "x@example.org"), permission: .readWrite, role: .administrator))
        try s.addParticipant(Participant(lookupInfo: .init(emailAddress: "y@example.org"), permission: .readOnly))
        s = try w.saveShare(s)
        let pendingAdmin = try #require(s.participants.first { $0.userIdentity.lookupInfo?.emailAddress == "x@example.org" })
        let pendingUser = try #require(s.participants.first { $0.userIdentity.lookupInfo?.emailAddress == "y@example.org" })
        // The owner has both invitations; administrator _a only the private user's, which it manages.
        #expect(s.oneTimeURL(for: pendingAdmin.participantID) != nil)
        let seen = try fetched(w, s, as: "_a")
        #expect(seen.oneTimeURL(for: pendingAdmin.participantID) == nil)
        #expect(seen.oneTimeURL(for: pendingUser.participantID) != nil)
        // A second entry with the pending administrator's ID, naming another identity.
        let error = try edit(w, s, as: "_a") { s in
            s.updateState { state in
                var copy = state.participants.first { $0.participantID == pendingAdmin.participantID }!
                copy.userIdentity.lookupInfo = .init(userRecordName: "_evil")
                copy.userIdentity.userRecordName = "_evil"
                state.participants.append(copy)
            }
        }
        #expect(error?.code == .invalidArguments && error?.rule == .shareRecord, "\(String(describing: error))")
        #expect(failure { try w.db.acceptShare(url: s.url!, as: Caller(userRecordName: "_evil")) }?.code == .participantMayNeedVerification)
        #expect(try w.currentShare(share.recordID).participants.filter { $0.participantID == pendingAdmin.participantID }.count == 1)
    }

    @Test("nobody is listed twice: a read-only administrator cannot add itself again with readWrite, nor anyone add a second entry for a participant")
    func nobodyIsListedTwice() throws {
        let (w, share) = try world()
        let before = try w.currentShare(share.recordID)
        // `_a2` (a read-only administrator) lists itself again, with readWrite, ahead of its own entry,
        // and accepts: before, that entry was taken, and `_a2` wrote with it.
        let error = try edit(w, share, as: "_a2") { s in
            s.updateState { state in
                state.participants.insert(
                    Participant(lookupInfo: .init(userRecordName: "_a2"), permission: .readWrite), at: 1)
            }
        }
        #expect(error?.code == .invalidArguments && error?.rule == .alreadyParticipant, "\(String(describing: error))")
        _ = try w.db.acceptShare(url: share.url!, as: Caller(userRecordName: "_a2"))
        var note = try w.view("_a2").fetchRecords([w.sid("note")])[w.sid("note")]!.get()
        note["title"] = "mine"
        #expect(try w.view("_a2").modifyRecords(saving: [note]).error("note")?.code == .permissionFailure)
        // An administrator adding a second entry for a participant, by user record name or by the
        // email an invitation named; the owner too.
        let byName = try edit(w, share, as: "_a") { s in
            s.updateState { $0.participants.append(Participant(lookupInfo: .init(userRecordName: "_c"), permission: .readWrite)) }
        }
        #expect(byName?.rule == .alreadyParticipant, "\(String(describing: byName))")
        var owners = try w.currentShare(share.recordID)
        try owners.addParticipant(Participant(lookupInfo: .init(emailAddress: "e@example.org"), permission: .readOnly))
        owners = try w.saveShare(owners)
        owners.updateState { $0.participants.append(Participant(lookupInfo: .init(emailAddress: "E@example.org"), permission: .readWrite)) }
        let shareName = share.recordID.recordName
        #expect(try w.db.modifyRecords(saving: [owners.record]).error(shareName)?.rule == .alreadyParticipant)
        let after = try w.currentShare(share.recordID)
        #expect(after.participants.count == before.participants.count + 1, "only the owner's invitation of e@example.org was added")
        #expect(try participant(after, "_a2").permission == .readOnly)
        // Someone removed can be invited again as a new entry.
        var again = after
        try again.removeParticipant(try participant(again, "_c"))
        again = try w.saveShare(again)
        again.updateState { $0.participants.append(Participant(lookupInfo: .init(userRecordName: "_c"), permission: .readOnly)) }
        #expect(try w.db.modifyRecords(saving: [again.record]).error(shareName) == nil)
    }

    @Test("whom an entry is for stays as invited: a one-time URL participant cannot be turned into a second entry for its adder")
    func anEntrysIdentityCannotBeEdited() throws {
        let (w, share) = try world()
        // `_a2` (read-only administrator) adds a readWrite one-time URL participant, then edits that
        // entry to name itself and moves it ahead of its own, and accepts: before, it then wrote
        // with readWrite.
        #expect(try edit(w, share, as: "_a2") { try $0.addParticipant(.oneTimeURLParticipant(permission: .readWrite)) } == nil)
        let oneTime = try #require(try w.currentShare(share.recordID).participants.first { $0.isOneTimeURLParticipant })
        _ = try edit(w, share, as: "_a2") { s in
            s.updateState { state in
                guard let i = state.participants.firstIndex(where: { $0.participantID == oneTime.participantID }) else { return }
                var entry = state.participants.remove(at: i)
                entry.userIdentity.lookupInfo = .init(userRecordName: "_a2")
                entry.isOneTimeURLParticipant = false
                state.participants.insert(entry, at: 1)
            }
        }
        let stored = try #require(try w.currentShare(share.recordID).participants.first { $0.participantID == oneTime.participantID })
        #expect(stored.isOneTimeURLParticipant && stored.userIdentity.lookupInfo?.userRecordName == nil, "\(stored)")
        _ = try w.db.acceptShare(url: share.url!, as: Caller(userRecordName: "_a2"))
        var note = try w.view("_a2").fetchRecords([w.sid("note")])[w.sid("note")]!.get()
        note["title"] = "mine"
        #expect(try w.view("_a2").modifyRecords(saving: [note]).error("note")?.code == .permissionFailure)

        // An entry invited again after leaving counts as new: not while someone else's entry names them.
        let old = try participant(try w.currentShare(share.recordID), "_c")
        try w.view("_c").leaveShare(w.sid(share.recordID.recordName))
        var owners = try w.currentShare(share.recordID)
        #expect(owners.participants.first { $0.participantID == old.participantID }?.acceptanceStatus == .removed)
        owners.updateState { $0.participants.append(Participant(lookupInfo: .init(userRecordName: "_c"), permission: .readOnly)) }
        owners = try w.saveShare(owners)
        owners.updateState { state in
            if let i = state.participants.firstIndex(where: { $0.participantID == old.participantID }) {
                state.participants[i].acceptanceStatus = .pending
            }
        }
        let again = try w.db.modifyRecords(saving: [owners.record]).error(share.recordID.recordName)
        #expect(again?.rule == .alreadyParticipant, "\(String(describing: again))")
    }

    @Test("a pending invitation made an administrator's gets a new link: the one administrators saw no longer works")
    func promotionReplacesTheLink() throws {
        let (w, share) = try world()
        var s = try w.currentShare(share.recordID)
        try s.addParticipant(Participant(lookupInfo: .init(emailAddress: "x@example.org"), permission: .readOnly))
        s = try w.saveShare(s)
        let invitee = try #require(s.participants.first { $0.userIdentity.lookupInfo?.emailAddress == "x@example.org" })
        let seen = try #require(try fetched(w, s, as: "_a").oneTimeURL(for: invitee.participantID), "administrators see a private user's link")
        try s.setRole(.administrator, forParticipantID: invitee.participantID)
        s = try w.saveShare(s)
        let fresh = try #require(s.oneTimeURL(for: invitee.participantID))
        #expect(fresh != seen)
        #expect(try fetched(w, s, as: "_a").oneTimeURL(for: invitee.participantID) == nil)
        // The administrator's saved link, used with another key it holds, takes nothing.
        #expect(failure { try w.db.acceptShare(url: seen, as: Caller(userRecordName: "_evil")) } != nil)
        _ = try w.db.acceptShare(url: fresh, as: Caller(userRecordName: "_x"))
        #expect(try w.currentShare(share.recordID).participants.first { $0.participantID == invitee.participantID }?.userIdentity.userRecordName == "_x")
    }

    @Test("a participant who is not an administrator cannot change the share in any way")
    func plainParticipantCannotManage() throws {
        let (w, share) = try world()
        let edits: [(inout Share) throws -> Void] = [
            { s in try s.addParticipant(Participant(lookupInfo: .init(userRecordName: "_d"), permission: .readWrite)) },
            { s in s.updateState { $0.participants.removeAll { $0.role == .owner } } },
            { s in try s.setPermission(.readWrite, forParticipantID: try participant(s, "_b").participantID) },
            { s in s.title = "Mine" },
        ]
        for (i, body) in edits.enumerated() {
            // `_b` sees only the owner and themselves: edits start from that view, as their node's would.
            let error = try edit(w, share, as: "_b", body)
            #expect(error?.code == .permissionFailure, "edit \(i): \(String(describing: error))")
            #expect(error?.rule == .shareEditOwnerOrAdministrator, "edit \(i): \(String(describing: error))")
        }
        #expect(try w.currentShare(share.recordID).participants.count == 5)
    }

    @Test("a participant who may not change the share is told so first: not a conflict for a stale copy, not a thumbnail's size")
    func plainParticipantIsRefusedBeforeTheTagIsChecked() throws {
        let (w, share) = try world()
        var stale = try fetched(w, share, as: "_c")
        var owners = try w.currentShare(share.recordID)
        owners.title = "Changed by the owner"
        try w.saveShare(owners)
        stale.title = "Mine"
        let error = try w.view("_c").modifyRecords(saving: [stale.record]).error(share.recordID.recordName)
        #expect(error?.code == .permissionFailure && error?.rule == .shareEditOwnerOrAdministrator, "\(String(describing: error))")
        var large = try fetched(w, share, as: "_c")
        large.thumbnailImageData = Data(repeating: 1, count: 300_000)
        let tooLarge = try w.view("_c").modifyRecords(saving: [large.record]).error(share.recordID.recordName)
        #expect(tooLarge?.rule == .shareEditOwnerOrAdministrator, "\(String(describing: tooLarge))")
        // An administrator's stale copy is still a conflict (they may save the share).
        var adminStale = try fetched(w, share, as: "_a")
        owners = try w.currentShare(share.recordID)
        owners.title = "Changed again"
        try w.saveShare(owners)
        adminStale.allowsAccessRequests = false
        #expect(try w.view("_a").modifyRecords(saving: [adminStale.record]).error(share.recordID.recordName)?.code == .serverRecordChanged)
    }

    @Test("the owner makes a participant an administrator and back; the owner's and public users' roles do not change")
    func ownerSetsRoles() throws {
        let (w, share) = try world()
        var s = try w.currentShare(share.recordID)
        try s.setRole(.administrator, forParticipantID: try participant(s, "_b").participantID)
        s = try w.saveShare(s)
        #expect(try participant(s, "_b").role == .administrator)
        // Now `_b` manages participants.
        #expect(try edit(w, s, as: "_b") { try $0.removeParticipant(try participant($0, "_c")) } == nil)
        s = try w.currentShare(share.recordID)
        try s.setRole(.privateUser, forParticipantID: try participant(s, "_b").participantID)
        s = try w.saveShare(s)
        #expect(try edit(w, s, as: "_b") { $0.allowsAccessRequests = false }?.rule == .shareEditOwnerOrAdministrator)
        let owner = try participant(s, "_owner")
        #expect(failure { try s.setRole(.privateUser, forParticipantID: owner.participantID) }?.rule == .oneOwner)
        #expect(failure { try s.setRole(.publicUser, forParticipantID: try participant(s, "_b").participantID) }?.rule == .participantRole)
    }

    @Test("a one-time URL admits exactly one identity, which becomes the participant; anyone else is refused")
    func oneTimeURL() throws {
        let w = try World()
        try w.save(w.record("Topic", "topic"))
        var share = Share(rootRecord: try w.db.fetchRecord(w.id("topic")))
        let oneTime = Participant.oneTimeURLParticipant(permission: .readWrite)
        try share.addParticipant(oneTime)
        let saved = try w.saveShare(share)
        let link = try #require(saved.oneTimeURL(for: oneTime.participantID))
        let pending = try #require(saved.participants.first { $0.participantID == oneTime.participantID })
        #expect(pending.isOneTimeURLParticipant && pending.userIdentity.lookupInfo?.isEmpty != false)

        let meta = try w.db.fetchShareMetadata(url: link, for: Caller(userRecordName: "_b"))
        #expect(meta.participantRole == .privateUser && meta.participantStatus == .pending)
        #expect(meta.participantPermission == .readWrite)
        try w.db.acceptShare(url: link, as: Caller(userRecordName: "_b"))
        let now = try w.currentShare(saved.recordID)
        let bound = try #require(now.participants.first { $0.participantID == oneTime.participantID })
        #expect(bound.userIdentity.userRecordName == "_b" && bound.acceptanceStatus == .accepted)
        #expect(now.oneTimeURL(for: oneTime.participantID) == nil)
        #expect(try w.visible("_b", ["topic"]) == ["topic"])

        for attempt in [
            failure { try w.db.acceptShare(url: link, as: Caller(userRecordName: "_c")) },
            failure { _ = try w.db.fetchShareMetadata(url: link, for: Caller(userRecordName: "_c")) },
        ] {
            #expect(attempt?.code == .participantMayNeedVerification)
            #expect(attempt?.rule == .invitationSpent, "\(String(describing: attempt))")
        }
        #expect(try w.visible("_c", ["topic"]).isEmpty)
        #expect(try w.currentShare(saved.recordID).participants.count == 2)
        // The one who used it may use it again.
        try w.db.acceptShare(url: link, as: Caller(userRecordName: "_b"))
    }

    @Test("share properties: title, thumbnail and type reach participants; a thumbnail over the limit or a bad type changes nothing")
    func shareProperties() throws {
        let (w, share) = try world()
        var s = try w.currentShare(share.recordID)
        s.title = "Groceries"
        s.thumbnailImageData = Data(repeating: 7, count: 1000)
        s.shareType = "com.example.list"
        s = try w.saveShare(s)
        let seen = try fetched(w, s, as: "_c")
        #expect(seen.record[Share.SystemFieldKey.title] == .string("Groceries"))
        #expect(seen.record[Share.SystemFieldKey.thumbnailImageData] == .bytes(Data(repeating: 7, count: 1000)))
        #expect(seen.record[Share.SystemFieldKey.shareType] == .string("com.example.list"))

        var big = s
        big.thumbnailImageData = Data(repeating: 1, count: Share.maximumThumbnailSize + 1)
        let tooBig = try w.db.modifyRecords(saving: [big.record]).error(s.recordID.recordName)
        #expect(tooBig?.code == .limitExceeded && tooBig?.rule == .thumbnailSize, "\(String(describing: tooBig))")
        var badType = s
        badType.shareType = "not a uti!"
        let bad = try w.db.modifyRecords(saving: [badType.record]).error(s.recordID.recordName)
        #expect(bad?.code == .invalidArguments && bad?.rule == .shareTypeSyntax, "\(String(describing: bad))")
        var wrongKind = s.record
        wrongKind[Share.SystemFieldKey.title] = .int64(3)
        #expect(try w.db.modifyRecords(saving: [wrongKind]).error(s.recordID.recordName)?.rule == .shareFields)
        let after = try w.currentShare(s.recordID)
        #expect(after.thumbnailImageData?.count == 1000 && after.shareType == "com.example.list")
        #expect(after.recordChangeTag == s.recordChangeTag)
    }

    @Test("metadata tells the owner's name and the participant count to whoever may read the share, not to requesters")
    func metadataCounts() throws {
        let (w, share) = try world()
        w.db.setOwnerIdentity(displayName: "Alice", emailAddress: nil)
        let meta = try w.db.fetchShareMetadata(url: share.url!, for: Caller(userRecordName: "_c"))
        #expect(meta.ownerIdentity.displayName == "Alice")
        #expect(meta.participantCount == 5)
        #expect(meta.recordCount == 3)
        #expect(meta.share.participants.count == 2)  // the owner and `_c`: the list shows only what they may see
        let requester = try w.db.fetchShareMetadata(url: share.url!, for: Caller(userRecordName: "_stranger"))
        #expect(requester.participantCount == nil && requester.recordCount == nil)
    }

    @Test("an administrator who left sees the share as anyone outside it does: no requesters, blocks or other participants")
    func leftAdministratorSeesNoMore() throws {
        let (w, share) = try world()
        try w.db.requestAccess(url: share.url!, as: Caller(userRecordName: "_x"))
        try w.view("_a").leaveShare(w.sid(share.recordID.recordName))
        let asLeft = try w.db.fetchShareMetadata(url: share.url!, for: Caller(userRecordName: "_a")).share
        #expect(asLeft.requesters.isEmpty)
        #expect(asLeft.blockedIdentities.isEmpty)
        #expect(Set(asLeft.participants.compactMap(\.userIdentity.userRecordName)).isSubset(of: ["_owner", "_a"]))
        // Made public afterwards, the share is open to them as to anyone: still not its administration.
        var open = try w.currentShare(share.recordID)
        open.publicPermission = .readOnly
        let opened = try w.saveShare(open)
        let asPublic = try w.db.fetchShareMetadata(url: opened.url!, for: Caller(userRecordName: "_a")).share
        #expect(asPublic.requesters.isEmpty)
        #expect(!asPublic.participants.contains { $0.userIdentity.userRecordName == "_b" })
        // An administrator still in the share sees the requester.
        #expect(try w.db.fetchShareMetadata(url: opened.url!, for: Caller(userRecordName: "_a2")).share.requesters
            .contains { $0.userIdentity.userRecordName == "_x" })
    }

    @Test("who changed the share last (a requester, a participant accepting) is shown only to those who see them all")
    func lastModifierHiddenFromParticipants() throws {
        let (w, share) = try world()
        try w.db.requestAccess(url: share.url!, as: Caller(userRecordName: "_x"))
        #expect(try w.currentShare(share.recordID).record.lastModifiedUserRecordID?.recordName == "_x")
        #expect(try fetched(w, share, as: "_b").record.lastModifiedUserRecordID?.recordName == "_owner")
        #expect(try fetched(w, share, as: "_a").record.lastModifiedUserRecordID?.recordName == "_x")
        // Their own change they see as theirs.
        try w.view("_c").leaveShare(w.sid(share.recordID.recordName))
        let asC = try w.db.fetchShareMetadata(url: share.url!, for: Caller(userRecordName: "_c")).share
        #expect(asC.record.lastModifiedUserRecordID?.recordName == "_c")
        #expect(try fetched(w, share, as: "_b").record.lastModifiedUserRecordID?.recordName == "_owner")
    }
}
