import Foundation

/// What a user learns about a share from its URL before accepting, like `CKShare.Metadata`.
public struct ShareMetadata: Sendable, Hashable {
    /// The share, as the asker may see it.
    public var share: Share
    /// The container (owner database) the share belongs to.
    public var containerIdentifier: String
    /// The owner.
    public var ownerIdentity: UserIdentity
    /// The root record of a hierarchy share; `nil` for a zone-wide share.
    public var hierarchicalRootRecordID: Record.ID?
    /// The root record, when asked for and the asker may see it.
    public var rootRecord: Record?
    /// The asker's role in the share (``Participant/Role/unknown`` if they are not a participant yet).
    public var participantRole: Participant.Role
    /// The asker's permission (``Participant/Permission/none`` if they may only request access).
    public var participantPermission: Participant.Permission
    /// The asker's acceptance status.
    public var participantStatus: Participant.AcceptanceStatus
    /// How many records the share holds (the share record included), when the asker may read them:
    /// what an initial sync will bring. (An addition to `CKShare.Metadata`, for progress display.)
    public var recordCount: Int?
    /// How many participants the share has (the owner included; not those who left), when the asker
    /// may read the share: the share's own participant list shows only what the asker may see.
    /// (An addition to `CKShare.Metadata`.)
    public var participantCount: Int?

    /// Metadata with every property given.
    public init(
        share: Share, containerIdentifier: String, ownerIdentity: UserIdentity, hierarchicalRootRecordID: Record.ID?,
        rootRecord: Record?, participantRole: Participant.Role, participantPermission: Participant.Permission,
        participantStatus: Participant.AcceptanceStatus, recordCount: Int? = nil,
        participantCount: Int? = nil
    ) {
        self.share = share
        self.containerIdentifier = containerIdentifier
        self.ownerIdentity = ownerIdentity
        self.hierarchicalRootRecordID = hierarchicalRootRecordID
        self.rootRecord = rootRecord
        self.participantRole = participantRole
        self.participantPermission = participantPermission
        self.participantStatus = participantStatus
        self.recordCount = recordCount
        self.participantCount = participantCount
    }
}
