import Foundation
import ShareSyncCore
import Testing

@testable import ShareSyncStore

// Issue 11, "Wrong today" 1–4: public users' permission follows publicPermission; a change of
// publicPermission removes pending participants (none: the public users too); inviting a blocked
// user is refused until unblocked; deleting a record that does not exist is unknownItem.
@Suite("Rules: publicPermission changes, blocking and unblocking, deleting missing records")
struct RulesPublicPermissionTests {
    func topicWorld() throws -> World {
        let w = try World()
        try w.save(w.record("Topic", "topic"), w.record("Note", "note", parent: "topic"))
        return w
    }

    /// A participant's write: a new note under the topic.
    func write(_ w: World, _ user: String, _ name: String) throws -> ShareSyncError? {
        try w.view(user).modifyRecords(saving: [w.sharedRecord("Note", name, parent: "topic")], savePolicy: .allKeys)
            .error(name)
    }

    func setPublic(_ w: World, _ id: Record.ID, _ permission: Participant.Permission) throws -> Share {
        var share = try w.currentShare(id)
        share.publicPermission = permission
        return try w.saveShare(share)
    }

    @Test("a public user who joined with readWrite can no longer write once publicPermission is readOnly")
    func publicUsersLoseWrite() throws {
        let w = try topicWorld()
        let saved = try w.share(root: "topic", publicPermission: .readWrite)
        #expect(try w.accept(saved, "_p").participantPermission == .readWrite)
        #expect(try write(w, "_p", "n1") == nil)
        let after = try setPublic(w, saved.recordID, .readOnly)
        // The stored participant, the policy, the metadata and the participant's own copy all agree.
        #expect(after.participants.first { $0.userIdentity.userRecordName == "_p" }?.permission == .readOnly)
        let refused = try write(w, "_p", "n2")
        #expect(refused?.code == .permissionFailure)
        #expect(refused?.rule == .readOnlyParticipant)
        #expect(try w.db.fetchShareMetadata(url: saved.url!, for: Caller(userRecordName: "_p")).participantPermission == .readOnly)
        var replica = Replica("_p")
        try replica.sync(w.db)
        let copy = try #require(replica.records["Topics"]?[saved.recordID.recordName].flatMap(Share.init))
        #expect(copy.currentUserParticipant?.permission == .readOnly)
        #expect(replica.names().contains("n1") && !replica.names().contains("n2"))
    }

    @Test("a public user who joined while readOnly can write once publicPermission is readWrite")
    func publicUsersGainWrite() throws {
        let w = try topicWorld()
        let saved = try w.share(root: "topic", publicPermission: .readOnly)
        #expect(try w.accept(saved, "_p").participantPermission == .readOnly)
        #expect(try write(w, "_p", "n1")?.rule == .readOnlyParticipant)
        _ = try setPublic(w, saved.recordID, .readWrite)
        #expect(try write(w, "_p", "n1") == nil)
        #expect(try w.db.fetchRecord(w.id("n1")).lastModifiedUserRecordID?.recordName == "_p")
    }

    @Test("a public user's permission cannot be set on its own: it is the share's publicPermission")
    func publicUserPermissionIsTheShares() throws {
        let w = try topicWorld()
        let saved = try w.share(root: "topic", publicPermission: .readOnly)
        try w.accept(saved, "_p")
        var share = try w.currentShare(saved.recordID)
        let p = try #require(share.participants.first { $0.role == .publicUser })
        let error = failure { try share.setPermission(.readWrite, forParticipantID: p.participantID) }
        #expect(error?.code == .invalidArguments)
        #expect(error?.rule == .publicUserPermission)
        // A client that edits the stored state directly gets the share's permission anyway.
        share.updateState { state in
            for i in state.participants.indices where state.participants[i].role == .publicUser {
                state.participants[i].permission = .readWrite
            }
        }
        let stored = try w.saveShare(share)
        #expect(stored.participants.first { $0.role == .publicUser }?.permission == .readOnly)
        #expect(try write(w, "_p", "n1")?.rule == .readOnlyParticipant)
    }

    @Test("a participant's role is privateUser, administrator or publicUser, and a public user stays one")
    func rolesOutsideTheRulesAreRefused() throws {
        let w = try topicWorld()
        let saved = try w.share(root: "topic", publicPermission: .readOnly)
        try w.accept(saved, "_p")
        // The owner's own edits, straight to the stored state: neither the client's checks nor the
        // owner's rights let a role escape the rules that look at roles.
        for role in [Participant.Role.unknown, .privateUser, .administrator] {
            var share = try w.currentShare(saved.recordID)
            share.updateState { state in
                for i in state.participants.indices where state.participants[i].role == .publicUser {
                    state.participants[i].role = role
                    state.participants[i].permission = .readWrite
                }
            }
            let error = try w.db.modifyRecords(saving: [share.record]).error(share.recordID.recordName)
            #expect(error?.code == .invalidArguments && error?.rule == .participantRole, "\(role): \(String(describing: error))")
        }
        var added = try w.currentShare(saved.recordID)
        added.updateState { state in
            var p = Participant(lookupInfo: .init(userRecordName: "_u"), permission: .readWrite)
            p.role = .unknown
            state.participants.append(p)
        }
        #expect(try w.db.modifyRecords(saving: [added.record]).error(added.recordID.recordName)?.rule == .participantRole)
        #expect(try w.currentShare(saved.recordID).participants.first { $0.role == .publicUser }?.permission == .readOnly)
        #expect(try write(w, "_p", "n1")?.rule == .readOnlyParticipant)
    }

    @Test("making a share public removes its pending invitees; accepted ones stay; a former invitee joins as a public user")
    func goingPublicRemovesPending() throws {
        let w = try topicWorld()
        var share = try w.share(root: "topic", invite: [("_b", .readWrite), ("_c", .readWrite)])
        try share.addParticipant(Participant(lookupInfo: .init(emailAddress: "d@example.org"), permission: .readWrite))
        share = try w.saveShare(share)
        try w.accept(share, "_b")
        let c = try #require(share.participants.first { $0.userIdentity.userRecordName == "_c" })
        let cLink = try #require(share.oneTimeURL(for: c.participantID))
        let after = try setPublic(w, share.recordID, .readOnly)
        let others = after.participants.filter { $0.role != .owner }
        #expect(others.map(\.userIdentity.userRecordName) == ["_b"])
        #expect(others.first?.acceptanceStatus == .accepted && others.first?.role == .privateUser)
        // _c's invitation is gone: the link is the public URL now, and _c joins as a public user.
        let meta = try w.db.acceptShare(url: cLink, as: Caller(userRecordName: "_c"))
        #expect(meta.participantRole == .publicUser)
        #expect(meta.participantPermission == .readOnly)
        let now = try w.currentShare(share.recordID)
        #expect(now.participants.filter { $0.role == .privateUser }.map(\.userIdentity.userRecordName) == ["_b"])
        #expect(now.participants.first { $0.userIdentity.userRecordName == "_c" }?.role == .publicUser)
        // The accepted private participant keeps their own permission.
        #expect(try write(w, "_b", "n1") == nil)
        #expect(try write(w, "_c", "n2")?.rule == .readOnlyParticipant)
    }

    @Test("changing between readOnly and readWrite also removes pending invitees, keeps accepted ones")
    func publicToPublicRemovesPending() throws {
        let w = try topicWorld()
        let saved = try w.share(root: "topic", publicPermission: .readOnly)
        try w.accept(saved, "_p")
        let after = try setPublic(w, saved.recordID, .readWrite)
        #expect(after.participants.filter { $0.role != .owner }.map(\.userIdentity.userRecordName) == ["_p"])
        #expect(after.participants.first { $0.role == .publicUser }?.permission == .readWrite)
    }

    @Test("setting publicPermission to none removes the public users and pending invitees; the private participants who had accepted keep the share")
    func noneRemovesPublicUsers() throws {
        let w = try topicWorld()
        let share = try w.share(root: "topic", invite: [("_b", .readWrite), ("_c", .readOnly), ("_a", .readOnly)])
        try w.accept(share, "_b")
        try w.accept(share, "_a")
        var promoted = try w.currentShare(share.recordID)
        try promoted.setRole(.administrator, forParticipantID: #require(promoted.participants.first { $0.userIdentity.userRecordName == "_a" }).participantID)
        _ = try w.saveShare(promoted)
        _ = try setPublic(w, share.recordID, .readOnly)
        try w.accept(share, "_p")
        #expect(try w.visible("_b", ["topic"]) == ["topic"])
        #expect(try w.visible("_p", ["topic"]) == ["topic"])
        let after = try setPublic(w, share.recordID, .none)
        #expect(after.participants.map(\.role) == [.owner, .privateUser, .administrator])
        #expect(after.participants.compactMap(\.userIdentity.userRecordName) == ["_owner", "_b", "_a"])
        #expect(after.participants.first { $0.userIdentity.userRecordName == "_b" }?.permission == .readWrite)
        for user in ["_b", "_a"] {
            #expect(try w.visible(user, ["topic"]) == ["topic"], "\(user)")
        }
        #expect(try w.visible("_p", ["topic"]).isEmpty)
        #expect(try w.view("_p").fetchAllZones().isEmpty)
        for user in ["_c", "_p"] {
            let error = failure { try w.accept(share, user) }
            #expect(error?.code == .participantMayNeedVerification, "\(user)")
        }
        // Participants added in the same save as the change to none are new invitations: they stay.
        _ = try setPublic(w, share.recordID, .readOnly)
        try w.accept(share, "_q")
        var again = try w.currentShare(share.recordID)
        again.publicPermission = .none
        try again.addParticipant(Participant(lookupInfo: .init(userRecordName: "_d"), permission: .readOnly))
        let invited = try w.saveShare(again)
        #expect(invited.participants.filter { $0.role != .owner }.map(\.userIdentity.userRecordName) == ["_b", "_a", "_d"])
        #expect(try w.accept(invited, "_d").participantStatus == .accepted)
    }

    @Test("a record whose parent does not exist yet is saved, in no hierarchy share, and joins the share once its parent is saved under the root")
    func parentSavedLater() throws {
        let w = try topicWorld()
        let share = try w.share(root: "topic", invite: [("_b", .readOnly)])
        try w.accept(share, "_b")
        try w.save(w.record("Note", "child", parent: "later"))
        #expect(try w.visible("_b", ["topic", "child"]) == ["topic"])
        try w.save(w.record("Note", "later", parent: "topic"))
        #expect(try w.visible("_b", ["topic", "child", "later"]) == ["topic", "child", "later"])
    }

    @Test("saving a share without changing publicPermission keeps its pending invitees")
    func unchangedPublicPermissionKeepsPending() throws {
        let w = try topicWorld()
        let share = try w.share(root: "topic", invite: [("_c", .readOnly)])
        var same = try w.currentShare(share.recordID)
        same.title = "Renamed"
        let saved = try w.saveShare(same)
        #expect(saved.participants.contains { $0.userIdentity.userRecordName == "_c" && $0.acceptanceStatus == .pending })
    }

    @Test("inviting a blocked user is refused (identityBlocked), client and server side, until they are unblocked")
    func inviteBlocked() throws {
        let w = try topicWorld()
        var share = try w.share(root: "topic", invite: [("_b", .readWrite)])
        try w.accept(share, "_b")
        share = try w.currentShare(share.recordID)
        share.blockIdentities([UserIdentity(userRecordName: "_b")])
        share = try w.saveShare(share)
        #expect(share.blockedIdentities.map(\.userRecordName) == ["_b"])
        #expect(share.isBlocked("_b"))
        #expect(try w.visible("_b", ["topic"]).isEmpty)
        // Client side.
        let clientSide = failure { try share.addParticipant(Participant(lookupInfo: .init(userRecordName: "_b"))) }
        #expect(clientSide?.code == .invalidArguments)
        #expect(clientSide?.rule == .identityBlocked)
        #expect(clientSide?.message.contains("_b") == true)
        #expect(clientSide?.message.contains("unblock") == true)
        // Server side: a client that puts the participant in anyway.
        var forced = share
        forced.updateState { $0.participants.append(Participant(lookupInfo: .init(userRecordName: "_b"), permission: .readWrite)) }
        let serverSide = try w.db.modifyRecords(saving: [forced.record]).error(share.recordID.recordName)
        #expect(serverSide?.code == .invalidArguments)
        #expect(serverSide?.rule == .identityBlocked)
        let unchanged = try w.currentShare(share.recordID)
        #expect(unchanged.participants.map(\.role) == [.owner])
        #expect(unchanged.recordChangeTag == share.recordChangeTag)
        // A blocked user cannot accept either.
        #expect(failure { try w.accept(share, "_b") }?.code == .participantMayNeedVerification)
        // Unblocked: invited again, they accept and see the records.
        var unblocked = try w.currentShare(share.recordID)
        unblocked.unblockIdentities(unblocked.blockedIdentities)
        try unblocked.addParticipant(Participant(lookupInfo: .init(userRecordName: "_b"), permission: .readOnly))
        let saved = try w.saveShare(unblocked)
        #expect(saved.blockedIdentities.isEmpty)
        #expect(try w.accept(saved, "_b").participantStatus == .accepted)
        #expect(try w.visible("_b", ["topic", "note"]) == ["topic", "note"])
    }

    @Test("blocking works on a public share too, for public users and for private participants kept from before")
    func blockOnPublicShare() throws {
        let w = try topicWorld()
        let share = try w.share(root: "topic", invite: [("_b", .readWrite)])
        try w.accept(share, "_b")
        _ = try setPublic(w, share.recordID, .readOnly)
        try w.accept(share, "_p")
        var current = try w.currentShare(share.recordID)
        current.blockIdentities([UserIdentity(userRecordName: "_b"), UserIdentity(userRecordName: "_p")])
        let saved = try w.saveShare(current)
        #expect(saved.participants.map(\.role) == [.owner])
        #expect(Set(saved.blockedIdentities.map(\.userRecordName)) == ["_b", "_p"])
        for user in ["_b", "_p"] {
            #expect(failure { try w.accept(share, user) }?.code == .participantMayNeedVerification, "\(user)")
            #expect(try w.visible(user, ["topic"]).isEmpty)
        }
    }

    @Test("deleting a record that does not exist: unknownItem for the owner and for a participant who saw it; permissionFailure for anyone else")
    func deletingMissingRecords() throws {
        let w = try topicWorld()
        let share = try w.share(root: "topic", invite: [("_b", .readWrite)])
        try w.accept(share, "_b")
        #expect(try w.db.modifyRecords(deleting: [w.id("ghost")]).error("ghost")?.code == .unknownItem)
        // _b saw the note; the owner deletes it; _b's deletion then is unknownItem.
        #expect(try w.visible("_b", ["note"]) == ["note"])
        #expect(try w.db.modifyRecords(deleting: [w.id("note")]).errors.isEmpty)
        #expect(try w.view("_b").modifyRecords(deleting: [w.sid("note")]).error("note")?.code == .unknownItem)
        // A record _b never saw: the answer for a record outside the view, exists or not.
        #expect(try w.view("_b").modifyRecords(deleting: [w.sid("ghost")]).error("ghost")?.code == .permissionFailure)
    }

    @Test("the same in a zone shared as a whole, whose participants read the zone's own feed")
    func deletingMissingRecordsInASharedZone() throws {
        let w = try topicWorld()
        try w.save(w.record("Note", "early"))
        #expect(try w.db.modifyRecords(deleting: [w.id("early")]).errors.isEmpty)
        let share = try w.shareZone(invite: [("_b", .readWrite)])
        try w.accept(share, "_b")
        // _b saw the note; the owner deletes it; _b's deletion then is unknownItem.
        #expect(try w.visible("_b", ["note"]) == ["note"])
        #expect(try w.db.modifyRecords(deleting: [w.id("note")]).errors.isEmpty)
        #expect(try w.view("_b").modifyRecords(deleting: [w.sid("note")]).error("note")?.code == .unknownItem)
        // Deleted before _b accepted, or never there: the answer for a record outside the view.
        #expect(try w.view("_b").modifyRecords(deleting: [w.sid("early")]).error("early")?.code == .permissionFailure)
        #expect(try w.view("_b").modifyRecords(deleting: [w.sid("ghost")]).error("ghost")?.code == .permissionFailure)
    }
}
