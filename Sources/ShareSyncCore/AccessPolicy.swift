import Foundation

/// The access-control policy: every read and every write of shared data is decided here.
///
/// The store asks these questions on every operation; nothing else grants access. The rules, in prose,
/// are in `SharingRules.md` next to this file.
public enum AccessPolicy {
    /// The accepted participant that `user` is in `share`, if any.
    public static func acceptedParticipant(_ user: String, in share: Share) -> Participant? {
        share.participants.first { $0.userIdentity.userRecordName == user && $0.acceptanceStatus == .accepted }
    }

    /// What a participant may do: a public user's permission is always the share's publicPermission
    /// (it follows changes of it); everyone else's is their own.
    public static func effectivePermission(of participant: Participant, in share: Share) -> Participant.Permission {
        participant.role == .publicUser ? share.publicPermission : participant.permission
    }

    /// The user record names that see a share's records: its accepted participants other than the owner.
    public static func viewers(of share: Share) -> Set<String> {
        Set(share.participants.compactMap { p in
            p.role != .owner && p.acceptanceStatus == .accepted ? p.userIdentity.userRecordName : nil
        })
    }

    /// The answer to a participant who reaches outside their view: the same whether or not the record
    /// (or its zone) exists, so it reveals nothing.
    public static func outsideView(_ recordID: Record.ID) -> ShareSyncError {
        ShareSyncError(
            .permissionFailure, "record \(recordID.recordName) is not in a share you can write", recordID: recordID,
            rule: .outsideView)
    }

    /// What a write by a participant does to a record.
    public enum RecordWrite: Sendable {
        /// Creating a record that will belong to `share` (nil: to no share).
        case create(into: Share?)
        /// Changing a record of `share`, moving it to `newShare` (the same share unless re-parented).
        case modify(in: Share?, newShare: Share?, isRoot: Bool, parentChanged: Bool)
        /// Deleting a record of `share`.
        case delete(in: Share?, isRoot: Bool)
    }

    /// Decides a participant's write of an ordinary record (the owner is not asked: they may write
    /// anything in their own database, within the data-model rules).
    ///
    /// A record outside the participant's view fails exactly like a record that does not exist would,
    /// with ``ShareSyncError/Code/permissionFailure``, so the answer reveals nothing.
    public static func checkRecordWrite(_ write: RecordWrite, by user: String, recordID: Record.ID) throws(ShareSyncError) {
        func writable(_ share: Share?) throws(ShareSyncError) -> Participant {
            guard let share, let p = acceptedParticipant(user, in: share) else { throw outsideView(recordID) }
            guard effectivePermission(of: p, in: share) == .readWrite else {
                throw ShareSyncError(
                    .permissionFailure, "you have read-only permission in this share", recordID: recordID,
                    rule: .readOnlyParticipant)
            }
            return p
        }
        switch write {
        case .create(let share):
            _ = try writable(share)
        case .modify(let share, let newShare, let isRoot, let parentChanged):
            _ = try writable(share)
            if isRoot && parentChanged {
                throw ShareSyncError(
                    .permissionFailure, "only the owner can move the root of a share", recordID: recordID,
                    rule: .rootParentOwnerOnly)
            }
            guard newShare?.recordID == share?.recordID else {
                throw ShareSyncError(
                    .permissionFailure, "a participant cannot move a record outside their share", recordID: recordID,
                    rule: .moveOutsideShare)
            }
        case .delete(let share, let isRoot):
            _ = try writable(share)
            if isRoot {
                throw ShareSyncError(
                    .permissionFailure, "only the owner deletes the root of a shared hierarchy", recordID: recordID,
                    rule: .rootDeleteOwnerOnly)
            }
        }
    }

    /// Whether `user` may save `share` at all: an accepted administrator of it (the owner is not asked).
    /// Checked before anything else about the save (its change tag, its properties), so that a
    /// participant who may not change the share is told so, not that their copy is stale (a conflict
    /// that keeping theirs could never resolve). Returns the administrator's entry.
    @discardableResult
    public static func checkMayEditShare(_ share: Share, by user: String) throws(ShareSyncError) -> Participant {
        guard let p = acceptedParticipant(user, in: share) else { throw outsideView(share.recordID) }
        guard p.role == .administrator else {
            throw ShareSyncError(
                .permissionFailure, "only the owner or an administrator can change a share", recordID: share.recordID,
                rule: .shareEditOwnerOrAdministrator)
        }
        return p
    }

    /// Decides a participant's save of a share record (SharingRules.md, "Administrators"): only
    /// administrators may change a share. They manage the participants who are neither the owner nor
    /// administrators (add, remove, change permission), requesters (approve, deny, block) and blocks,
    /// and may switch access requests; they cannot touch the owner or another administrator, make
    /// anyone an administrator, change their own role or permission, the public permission, or the
    /// share's title, thumbnail and type.
    public static func checkShareEdit(old: Share, new: Share, by user: String) throws(ShareSyncError) {
        let p = try checkMayEditShare(old, by: user)
        func refuse(_ message: String, _ rule: Rule) -> ShareSyncError {
            ShareSyncError(.permissionFailure, message, recordID: old.recordID, rule: rule)
        }
        guard old.publicPermission == new.publicPermission else {
            throw refuse("only the owner can change the public permission", .shareSettingsOwnerOnly)
        }
        for key in [Share.SystemFieldKey.title, Share.SystemFieldKey.thumbnailImageData, Share.SystemFieldKey.shareType]
        where old.record[key] != new.record[key] {
            throw refuse("only the owner can change the share's title, thumbnail and type (\(key))", .sharePropertiesOwnerOnly)
        }
        let newByID = Dictionary(new.participants.map { ($0.participantID, $0) }, uniquingKeysWith: { a, _ in a })
        guard let mine = newByID[p.participantID], mine.role == p.role, mine.permission == p.permission else {
            throw refuse("an administrator cannot change their own role or permission, or remove themselves (leave instead)", .adminSelfEdit)
        }
        let protectedNames = Set(old.participants.filter { $0.role == .owner || $0.role == .administrator }
            .compactMap(\.userIdentity.userRecordName))
        for q in old.participants where (q.role == .owner || q.role == .administrator) && q.participantID != p.participantID {
            guard let now = newByID[q.participantID], now.role == q.role, now.permission == q.permission,
                now.userIdentity == q.userIdentity, now.isOneTimeURLParticipant == q.isOneTimeURLParticipant,
                !new.blockedIdentities.contains(where: { q.userIdentity.userRecordName == $0.userRecordName })
            else {
                let who = q.role == .owner ? "the owner" : "another administrator"
                throw refuse(
                    "an administrator cannot remove, block or change (role, permission, identity) \(who) (participant \(q.participantID))",
                    .adminManagesOthersOnly)
            }
        }
        for b in new.blockedIdentities where protectedNames.contains(b.userRecordName) {
            throw refuse("an administrator cannot block the owner or an administrator", .adminManagesOthersOnly)
        }
        let oldByID = Dictionary(old.participants.map { ($0.participantID, $0) }, uniquingKeysWith: { a, _ in a })
        for q in new.participants where q.role == .administrator && oldByID[q.participantID]?.role != .administrator {
            throw refuse("only the owner can make someone an administrator (participant \(q.participantID))", .administratorRoleOwnerOnly)
        }
    }

    /// Whether `user` is an administrator of the share who accepted it (and has not left or been
    /// removed): who, besides the owner, sees the whole share.
    public static func isAcceptedAdministrator(_ user: String, of share: Share) -> Bool {
        share.participants.contains {
            $0.userIdentity.userRecordName == user && $0.role == .administrator && $0.acceptanceStatus == .accepted
        }
    }

    /// The share as `user` may see it: the owner and accepted administrators see everything; other
    /// participants (and an administrator who left, was removed or has not accepted yet) see the
    /// owner and themselves, and no invitation secrets.
    public static func visibleShare(_ share: Share, to user: String, isOwner: Bool) -> Share {
        var share = share
        let me = share.participants.first { $0.userIdentity.userRecordName == user }
        let administrator = isAcceptedAdministrator(user, of: share)
        share.updateState { state in
            state.currentUserParticipantID = me?.participantID
            for i in state.participants.indices where state.participants[i].role == .publicUser {
                state.participants[i].permission = state.publicPermission
            }
            guard !isOwner else { return }
            if administrator {
                // An administrator manages private users, not the owner or other administrators, and
                // does not get their invitations: a pending administrator's token let an
                // administrator accept that invitation under another identity.
                for i in state.participants.indices where state.participants[i].role != .privateUser {
                    state.participants[i].invitationToken = nil
                }
                return
            }
            state.participants = state.participants.filter {
                $0.role == .owner || $0.participantID == me?.participantID
            }
            for i in state.participants.indices { state.participants[i].invitationToken = nil }
            state.requesters = []
            state.blockedIdentities = []
        }
        return share
    }
}
