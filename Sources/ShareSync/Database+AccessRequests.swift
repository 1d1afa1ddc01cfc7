import Foundation
import ShareSyncNode

/// Access requests, as CloudKit has them for a share that allows them (`CKShare.allowsAccessRequests`,
/// `requesters`, `blockedIdentities`): someone with the share's URL asks to join
/// (``Container/requestAccess(to:)``); the owner, or an administrator through the shared database,
/// approves or denies them; the owner may block an identity, which can then neither ask nor accept.
extension Database {
    /// Lets in a user who asked for access (one of `share.requesters`): they become a participant with
    /// `permission`, accepted at once, and the share is returned as saved. A user who did not ask is
    /// `unknownItem`. An administrator calls it on the shared database; the owner checks that they may.
    @discardableResult
    public func approveAccessRequest(
        fromUserRecordName userRecordName: String, permission: Participant.Permission = .readOnly, for share: Share
    ) async throws(ShareSyncError) -> Share {
        try await edit(
            share,
            private: .shareApprove(
                zone: share.recordID.zoneID.zoneName, share: share.recordID.recordName, userRecordName: userRecordName,
                permission: permission),
            shared: .approve(userRecordName: userRecordName, permission: permission)
        ).share
    }

    /// Turns down a user who asked for access: they leave `share.requesters` and may ask again. A user who
    /// did not ask is `unknownItem`. An administrator calls it on the shared database.
    @discardableResult
    public func denyAccessRequest(fromUserRecordName userRecordName: String, for share: Share) async throws(ShareSyncError) -> Share {
        try await edit(
            share,
            private: .shareDeny(zone: share.recordID.zoneID.zoneName, share: share.recordID.recordName, userRecordName: userRecordName),
            shared: .deny(userRecordName: userRecordName)
        ).share
    }

    /// Blocks an identity (`blockedIdentities`): it may neither ask for access nor accept the share, and
    /// a participant with that identity is removed. Private database only.
    @discardableResult
    public func blockIdentity(withUserRecordName userRecordName: String, for share: Share) async throws(ShareSyncError) -> Share {
        try ownerOnly("block an identity")
        let _: Done = try await container.transport.call(
            .shareBlock(zone: share.recordID.zoneID.zoneName, share: share.recordID.recordName, userRecordName: userRecordName))
        return try await self.share(withID: share.recordID)
    }

    /// Lifts a block: the identity may ask for access and be invited again. An identity that is not
    /// blocked is `unknownItem`. Private database only.
    @discardableResult
    public func unblockIdentity(withUserRecordName userRecordName: String, for share: Share) async throws(ShareSyncError) -> Share {
        try ownerOnly("unblock an identity")
        let _: Done = try await container.transport.call(
            .shareUnblock(zone: share.recordID.zoneID.zoneName, share: share.recordID.recordName, userRecordName: userRecordName))
        return try await self.share(withID: share.recordID)
    }
}
