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
            rule: "outsideView")
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
                    rule: "readOnlyParticipant")
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
                    rule: "rootParentOwnerOnly")
            }
            guard newShare?.recordID == share?.recordID else {
                throw ShareSyncError(
                    .permissionFailure, "a participant cannot move a record outside their share", recordID: recordID,
                    rule: "moveOutsideShare")
            }
        case .delete(let share, let isRoot):
            _ = try writable(share)
            if isRoot {
                throw ShareSyncError(
                    .permissionFailure, "only the owner deletes the root of a shared hierarchy", recordID: recordID,
                    rule: "rootDeleteOwnerOnly")
            }
        }
    }

    /// Decides a participant's save of a share record: only administrators may change a share, and
    /// even they cannot change the owner, the public permission or access-request setting.
    public static func checkShareEdit(old: Share, new: Share, by user: String) throws(ShareSyncError) {
        guard let p = acceptedParticipant(user, in: old) else { throw outsideView(old.recordID) }
        guard p.role == .administrator else {
            throw ShareSyncError(
                .permissionFailure, "only the owner or an administrator can change a share", recordID: old.recordID,
                rule: "shareEditOwnerOrAdministrator")
        }
        guard old.publicPermission == new.publicPermission, old.allowsAccessRequests == new.allowsAccessRequests else {
            throw ShareSyncError(
                .permissionFailure, "only the owner can change the public permission or access requests",
                recordID: old.recordID, rule: "shareSettingsOwnerOnly")
        }
        if let oldAdmin = old.participants.first(where: { $0.participantID == p.participantID }),
            let newAdmin = new.participants.first(where: { $0.participantID == p.participantID }),
            oldAdmin.role != newAdmin.role || oldAdmin.permission != newAdmin.permission
        {
            throw ShareSyncError(
                .permissionFailure, "an administrator cannot change their own role or permission",
                recordID: old.recordID, rule: "adminSelfEdit")
        }
    }

    /// The share as `user` may see it: the owner and administrators see everything; other
    /// participants see the owner and themselves, and no invitation secrets.
    public static func visibleShare(_ share: Share, to user: String, isOwner: Bool) -> Share {
        var share = share
        let me = share.participants.first { $0.userIdentity.userRecordName == user }
        share.updateState { state in
            state.currentUserParticipantID = me?.participantID
            for i in state.participants.indices where state.participants[i].role == .publicUser {
                state.participants[i].permission = state.publicPermission
            }
            guard !isOwner, me?.role != .administrator else { return }
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
