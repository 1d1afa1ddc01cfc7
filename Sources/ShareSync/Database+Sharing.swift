import Foundation
import ShareSyncNode

/// An invitation made by ``Database/invite(_:permission:role:to:)``: the participant and the URL to
/// send them.
public struct Invitation: Sendable, Hashable {
    /// The share as saved with the new participant.
    public var share: Share
    /// The participant invited (pending until they accept).
    public var participant: Participant
    /// The URL to give them: theirs alone for a one-time invitation, the share's URL otherwise.
    public var url: String
}

/// Shares, like `CKShare` saved with `CKDatabase.modifyRecords`: the owner creates and changes them in
/// its private database; an administrator (a participant with the `administrator` role) changes them
/// through the shared database, and the owner checks that they may.
extension Database {
    /// Shares a whole zone (`CKShare(recordZoneID:)`): participants see every record in it.
    /// `alreadyShared` if the zone or a record in it is shared already. Private database only.
    ///
    /// - Parameters:
    ///   - zoneID: the zone to share, in the private database.
    ///   - title: what people see when offered the share (`cloudkit.title`).
    ///   - publicPermission: what anyone with the URL may do (`none`: invited participants only).
    ///   - allowsAccessRequests: whether uninvited users with the URL may ask to join.
    ///   - thumbnailImageData: an image shown with the share (at most `Share.maximumThumbnailSize` bytes).
    ///   - shareType: a uniform type identifier for what is shared (`cloudkit.type`).
    public func createShare(
        forZone zoneID: RecordZone.ID, title: String? = nil, publicPermission: Participant.Permission = .none,
        allowsAccessRequests: Bool = false, thumbnailImageData: Data? = nil, shareType: String? = nil
    ) async throws(ShareSyncError) -> Share {
        try await createShare(
            zone: zoneID.zoneName, root: nil, title: title, publicPermission, allowsAccessRequests, thumbnailImageData, shareType)
    }

    /// Shares a record and its hierarchy (`CKShare(rootRecord:)`): the record and every record whose
    /// `Record.parent` chain leads to it. Private database only. The parameters are those of
    /// ``createShare(forZone:title:publicPermission:allowsAccessRequests:thumbnailImageData:shareType:)``.
    public func createShare(
        rootRecordID: Record.ID, title: String? = nil, publicPermission: Participant.Permission = .none,
        allowsAccessRequests: Bool = false, thumbnailImageData: Data? = nil, shareType: String? = nil
    ) async throws(ShareSyncError) -> Share {
        try await createShare(
            zone: rootRecordID.zoneID.zoneName, root: rootRecordID.recordName, title: title, publicPermission,
            allowsAccessRequests, thumbnailImageData, shareType)
    }

    private func createShare(
        zone: String, root: String?, title: String?, _ publicPermission: Participant.Permission, _ allowsAccessRequests: Bool,
        _ thumbnail: Data?, _ shareType: String?
    ) async throws(ShareSyncError) -> Share {
        try ownerOnly("create a share")
        let info: ShareInfo = try await container.transport.call(
            .shareCreate(
                zone: zone, root: root, title: title, publicPermission: publicPermission,
                allowsAccessRequests: allowsAccessRequests, thumbnail: thumbnail, shareType: shareType))
        return try await share(withID: Record.ID(recordName: info.shareName, zoneID: RecordZone.ID(zoneName: info.zoneName)))
    }

    /// Fetches a share by its record ID (or the record ID of its root record).
    public func share(withID shareID: Record.ID) async throws(ShareSyncError) -> Share {
        var record = try await record(for: shareID)
        if record.recordType != Record.shareRecordType, let shareRef = record.share {
            record = try await self.record(for: Record.ID(recordName: shareRef.recordID.recordName, zoneID: shareID.zoneID))
        }
        guard let share = Share(record) else {
            throw ShareSyncError(
                .invalidArguments, "record \(shareID.recordName) is neither a share nor a shared root record", recordID: shareID,
                rule: .notAShare)
        }
        return share
    }

    /// Invites someone by email, phone or user record name, with a permission and a role. Returns the
    /// invitation: the share, the new participant and the URL to send them.
    public func invite(
        _ lookupInfo: UserIdentity.LookupInfo, permission: Participant.Permission, role: Participant.Role = .privateUser,
        to share: Share
    ) async throws(ShareSyncError) -> Invitation {
        try await invite(lookupInfo, permission: permission, role: role, oneTime: false, to: share)
    }

    /// Invites whoever first opens the returned URL (a one-time participant, CloudKit's "anyone with the
    /// link" for one person): the URL is theirs alone.
    public func inviteOneTime(
        permission: Participant.Permission, role: Participant.Role = .privateUser, to share: Share
    ) async throws(ShareSyncError) -> Invitation {
        try await invite(
            UserIdentity.LookupInfo(emailAddress: nil, phoneNumber: nil, userRecordName: nil), permission: permission, role: role,
            oneTime: true, to: share)
    }

    private func invite(
        _ lookup: UserIdentity.LookupInfo, permission: Participant.Permission, role: Participant.Role, oneTime: Bool,
        to share: Share
    ) async throws(ShareSyncError) -> Invitation {
        let (saved, info) = try await edit(
            share, private: .shareInvite(
                zone: share.recordID.zoneID.zoneName, share: share.recordID.recordName, lookup: lookup, permission: permission,
                role: role, oneTime: oneTime),
            shared: .invite(lookup: lookup, permission: permission, role: role, oneTime: oneTime))
        guard let info, let participant = saved.participants.first(where: { $0.participantID == info.participantID }) else {
            throw ShareSyncError(.internalError, "the share saved has no new participant")
        }
        let url = info.invitationURL ?? saved.url ?? ""
        return Invitation(share: saved, participant: participant, url: url)
    }

    /// Changes a participant's permission (`readOnly` or `readWrite`).
    @discardableResult
    public func setPermission(
        _ permission: Participant.Permission, forParticipantID participantID: String, in share: Share
    ) async throws(ShareSyncError) -> Share {
        try await edit(
            share, private: .shareSetPermission(
                zone: share.recordID.zoneID.zoneName, share: share.recordID.recordName, participantID: participantID,
                permission: permission),
            shared: .setPermission(participantID: participantID, permission: permission)
        ).share
    }

    /// Makes a participant an administrator, or a private user again. A pending
    /// invitation made an administrator's gets a new link: the one handed out before stops working
    /// (administrators could see it while it was a private user's); hand out the new one, from the
    /// returned share's `oneTimeURL(for:)`.
    @discardableResult
    public func setRole(
        _ role: Participant.Role, forParticipantID participantID: String, in share: Share
    ) async throws(ShareSyncError) -> Share {
        try await edit(
            share, private: .shareSetRole(
                zone: share.recordID.zoneID.zoneName, share: share.recordID.recordName, participantID: participantID, role: role),
            shared: .setRole(participantID: participantID, role: role)
        ).share
    }

    /// Removes a participant: they lose the share's records at their next sync.
    @discardableResult
    public func removeParticipant(withID participantID: String, from share: Share) async throws(ShareSyncError) -> Share {
        try await edit(
            share, private: .shareRemoveParticipant(
                zone: share.recordID.zoneID.zoneName, share: share.recordID.recordName, participantID: participantID),
            shared: .remove(participantID: participantID)
        ).share
    }

    /// Changes the public permission: `none` makes the share private (invited participants only).
    /// Private database only.
    @discardableResult
    public func setPublicPermission(_ permission: Participant.Permission, for share: Share) async throws(ShareSyncError) -> Share {
        try ownerOnly("change the public permission")
        let _: ShareInfo = try await container.transport.call(
            .shareSetPublicPermission(zone: share.recordID.zoneID.zoneName, share: share.recordID.recordName, permission: permission))
        return try await self.share(withID: share.recordID)
    }

    /// Saves a share's title, thumbnail and type as set on `share` (`share.title = "Groceries"`; `nil`
    /// removes one), what ``Container/shareMetadata(for:)`` shows before someone accepts, and whether
    /// it takes access requests (`share.allowsAccessRequests`). Participants
    /// change through ``invite(_:permission:role:to:)`` and the calls beside it. Private database only;
    /// a thumbnail over `Share.maximumThumbnailSize` is `limitExceeded` (rule `thumbnailSize`), a
    /// malformed type `invalidArguments`, and either changes nothing.
    @discardableResult
    public func saveProperties(of share: Share) async throws(ShareSyncError) -> Share {
        try ownerOnly("change a share's title, thumbnail, type or access requests")
        var clear: [String] = []
        if share.title == nil { clear.append("title") }
        if share.thumbnailImageData == nil { clear.append("thumbnail") }
        if share.shareType == nil { clear.append("type") }
        let _: ShareInfo = try await container.transport.call(
            .shareSetProperties(
                zone: share.recordID.zoneID.zoneName, share: share.recordID.recordName, title: share.title,
                thumbnail: share.thumbnailImageData, shareType: share.shareType, clear: clear,
                allowsAccessRequests: share.allowsAccessRequests))
        return try await self.share(withID: share.recordID)
    }

    /// Stops sharing: deletes the share; its participants lose its records. Private database only.
    public func stopSharing(_ share: Share) async throws(ShareSyncError) {
        try ownerOnly("stop sharing")
        let _: Done = try await container.transport.call(
            .shareStop(zone: share.recordID.zoneID.zoneName, share: share.recordID.recordName))
    }

    /// One change to a share: through the owner's control request (private database) or, for an
    /// administrator, through the share's owner (shared database). Returns the share as saved and the
    /// participant the change was about.
    func edit(
        _ share: Share, private ownerRequest: ControlRequest, shared edit: ShareEdit
    ) async throws(ShareSyncError) -> (share: Share, participant: ParticipantInfo?) {
        let zoneID = share.recordID.zoneID
        if scope == .shared {
            let result: ShareEditResult = try await container.transport.call(
                .sharedShareEdit(owner: Self.owner(zoneID), zone: zoneID.zoneName, share: share.recordID.recordName, edit: edit))
            guard let record = result.shareRecord, let saved = Share(record) else {
                throw ShareSyncError(.internalError, "the node did not return the share's record")
            }
            return (saved, result.participant)
        }
        let participant: ParticipantInfo?
        switch ownerRequest {
        case .shareInvite, .shareSetPermission, .shareSetRole, .shareApprove:
            participant = try await container.transport.call(ownerRequest) as ParticipantInfo
        default:
            let _: Done = try await container.transport.call(ownerRequest)
            participant = nil
        }
        return (try await self.share(withID: share.recordID), participant)
    }

    func ownerOnly(_ what: String) throws(ShareSyncError) {
        guard scope == .private else {
            throw ShareSyncError(
                .permissionFailure, "only the owner can \(what): use the private database of the share's owner",
                rule: .shareEditOwnerOrAdministrator)
        }
    }
}
