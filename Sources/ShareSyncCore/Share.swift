import Foundation

/// The share-specific state of a record of type ``Record/shareRecordType``.
package struct ShareState: Sendable, Hashable, Codable {
    package var rootRecordID: Record.ID?
    package var publicPermission: Participant.Permission = .none
    package var participants: [Participant] = []
    package var allowsAccessRequests = false
    package var requesters: [AccessRequester] = []
    package var blockedIdentities: [BlockedIdentity] = []
    package var url: String?
    /// The participant who is reading this share (set per reader by the database).
    package var currentUserParticipantID: String?

    package init(rootRecordID: Record.ID?) { self.rootRecordID = rootRecordID }
}

/// A share of a record hierarchy or of a whole zone, like `CKShare`.
///
/// A share is a record of type `cloudkit.share`: you save it with
/// `modifyRecords(saving: [root, share.record])`. The rules it obeys are written down in
/// `Sources/ShareSyncCore/SharingRules.md`.
public struct Share: Sendable, Hashable {
    /// The largest ``thumbnailImageData`` a share may carry, in bytes (256 KiB).
    public static let maximumThumbnailSize = 256 * 1024

    /// The record name of a zone-wide share.
    public static let zoneShareRecordName = "cloudkit.zoneshare"

    /// The most access requests a share holds at once (``requesters``); a request past it is refused
    /// with `limitExceeded`, rule `maximumRequesters`, until the owner or an administrator answers some.
    /// 100 requesters take at most about 80 KB of the share record (each identity's display name, email
    /// and phone are at most 256 bytes), well under the record size limit.
    public static let maximumRequesters = 100

    /// Keys of the share's system fields, like `CKShare.SystemFieldKey`.
    public enum SystemFieldKey {
        /// The share's title, shown to people offered it.
        public static let title = "cloudkit.title"
        /// An image shown with the share (bytes).
        public static let thumbnailImageData = "cloudkit.thumbnailImageData"
        /// A uniform type identifier for what is shared.
        public static let shareType = "cloudkit.type"
    }

    /// The record that stores the share; save it to save the share.
    public private(set) var record: Record

    /// Creates a share of the hierarchy rooted at `rootRecord`, with a new record ID in its zone.
    public init(rootRecord: Record) {
        self.init(rootRecord: rootRecord, shareID: Record.ID(zoneID: rootRecord.recordID.zoneID))
    }

    /// Creates a share of the hierarchy rooted at `rootRecord`, with the given record ID.
    public init(rootRecord: Record, shareID: Record.ID) {
        record = Record(recordType: Record.shareRecordType, recordID: shareID)
        record.shareState = ShareState(rootRecordID: rootRecord.recordID)
    }

    /// Creates a share of a whole zone; its record name is ``zoneShareRecordName``.
    public init(recordZoneID: RecordZone.ID) {
        record = Record(
            recordType: Record.shareRecordType,
            recordID: Record.ID(recordName: Self.zoneShareRecordName, zoneID: recordZoneID))
        record.shareState = ShareState(rootRecordID: nil)
    }

    /// Reads a share out of a record of type ``Record/shareRecordType``; `nil` for any other record.
    public init?(_ record: Record) {
        guard record.recordType == Record.shareRecordType, record.shareState != nil else { return nil }
        self.record = record
    }

    private var state: ShareState {
        get { record.shareState! }
        set { record.shareState = newValue }
    }

    /// The share's record ID.
    public var recordID: Record.ID { record.recordID }
    /// The root of a hierarchy share; `nil` for a zone-wide share.
    public var rootRecordID: Record.ID? { state.rootRecordID }
    /// Whether this share covers a whole zone.
    public var isZoneWide: Bool { state.rootRecordID == nil }

    /// The title shown to people the share is offered to.
    public var title: String? {
        get { record[SystemFieldKey.title]?.stringValue }
        set { record[SystemFieldKey.title] = newValue.map(FieldValue.string) }
    }
    /// A thumbnail shown to people the share is offered to (image bytes, at most
    /// ``maximumThumbnailSize``; a larger one fails the save with `limitExceeded`, rule `thumbnailSize`).
    public var thumbnailImageData: Data? {
        get { record[SystemFieldKey.thumbnailImageData]?.bytesValue }
        set { record[SystemFieldKey.thumbnailImageData] = newValue.map(FieldValue.bytes) }
    }
    /// A uniform type identifier for what is shared.
    public var shareType: String? {
        get { record[SystemFieldKey.shareType]?.stringValue }
        set { record[SystemFieldKey.shareType] = newValue.map(FieldValue.string) }
    }

    /// What anyone with the URL may do: ``Participant/Permission/none`` (the default) keeps the share
    /// private to invited participants. Public users (those who joined through the URL) always have
    /// this permission, also after it changes. When a saved change of it reaches the server, pending
    /// participants are removed; a change to none also removes the public users. Private
    /// participants and administrators who had accepted stay.
    public var publicPermission: Participant.Permission {
        get { state.publicPermission }
        set { state.publicPermission = newValue }
    }

    /// The share's URL, set when the share is first saved. Unguessable and stable: sharing the same
    /// root record (or zone) again gives the same URL.
    public var url: String? { state.url }

    /// The participants, including the owner.
    public var participants: [Participant] { state.participants }
    /// The owner's participant.
    public var owner: Participant? { state.participants.first { $0.role == .owner } }
    /// The participant of the user who fetched this share, if they are one.
    public var currentUserParticipant: Participant? {
        state.currentUserParticipantID.flatMap { id in state.participants.first { $0.participantID == id } }
    }

    /// Whether uninvited users with the URL may ask to join. Default false: an uninvited user learns
    /// nothing, not even that the share exists.
    public var allowsAccessRequests: Bool {
        get { state.allowsAccessRequests }
        set { state.allowsAccessRequests = newValue }
    }
    /// Users who asked to join and wait for an answer.
    public var requesters: [AccessRequester] { state.requesters }
    /// Users who may not ask to join.
    public var blockedIdentities: [BlockedIdentity] { state.blockedIdentities }

    /// System fields of the share record.
    public var recordChangeTag: String? { record.recordChangeTag }
    /// When the share was created (set by the owner's database).
    public var creationDate: Date? { record.creationDate }
    /// When the share last changed (set by the owner's database).
    public var modificationDate: Date? { record.modificationDate }

    /// Adds a participant, or updates the one with the same identity (permission and role): the same
    /// user record name, or, where either has none, the same email address (or, where either has no
    /// email address, phone number), so a participant invited by email and bound to the identity that
    /// accepted is still found by that email. One who accepted and then left or was removed is found
    /// again only by user record name. The change takes effect when the share is saved. Fails on a
    /// share whose ``publicPermission`` is not none. Returns the participant as the share now holds
    /// it: the one updated (with its own ``Participant/participantID``), or the one added.
    @discardableResult
    public mutating func addParticipant(_ participant: Participant) throws(ShareSyncError) -> Participant {
        guard publicPermission == .none else {
            throw .invalid(
                "participants can be added only to a private share (publicPermission none)",
                recordID: recordID, rule: .publicAndPrivateDoNotMix)
        }
        guard participant.role != .owner else {
            throw .invalid("a share has exactly one owner", recordID: recordID, rule: .oneOwner)
        }
        if let name = participant.addressedUserRecordName, isBlocked(name) {
            throw Self.blocked(name, recordID: recordID)
        }
        if participant.identityKey != nil,
            let index = state.participants.firstIndex(where: { existing in
                // Someone who left or was removed after accepting is found again only by their user
                // record name: invited again by email, they may come back from another node, and their
                // old entry would take only the old one (and give back its spent link).
                if existing.acceptanceStatus == .removed, existing.userIdentity.userRecordName != nil {
                    return existing.addressedUserRecordName == participant.addressedUserRecordName
                }
                return existing.isSameInvitee(as: participant)
            })
        {
            guard state.participants[index].role != .owner else {
                throw .invalid("the owner is always a participant", recordID: recordID, rule: .oneOwner)
            }
            state.participants[index].permission = participant.permission
            state.participants[index].role = participant.role
            if state.participants[index].acceptanceStatus == .removed {
                state.participants[index].acceptanceStatus = .pending
            }
            return state.participants[index]
        } else if let index = state.participants.firstIndex(where: { $0.participantID == participant.participantID }) {
            state.participants[index].permission = participant.permission
            state.participants[index].role = participant.role
            return state.participants[index]
        } else {
            state.participants.append(participant)
            return participant
        }
    }

    /// Removes a participant. The change takes effect when the share is saved.
    public mutating func removeParticipant(_ participant: Participant) throws(ShareSyncError) {
        guard publicPermission == .none else {
            throw .invalid(
                "participants can be removed only from a private share (publicPermission none)",
                recordID: recordID, rule: .publicAndPrivateDoNotMix)
        }
        guard participant.role != .owner else {
            throw .invalid("the owner cannot be removed from a share", recordID: recordID, rule: .oneOwner)
        }
        state.participants.removeAll { $0.participantID == participant.participantID }
    }

    /// Changes a participant's permission in place (takes effect when saved).
    public mutating func setPermission(_ permission: Participant.Permission, forParticipantID id: String)
        throws(ShareSyncError)
    {
        guard let index = state.participants.firstIndex(where: { $0.participantID == id }) else {
            throw ShareSyncError(.unknownItem, "no participant \(id) in this share", recordID: recordID)
        }
        guard state.participants[index].role != .owner else {
            throw .invalid("the owner's permission cannot change", recordID: recordID, rule: .oneOwner)
        }
        guard state.participants[index].role != .publicUser else {
            throw .invalid(
                "a public user's permission is the share's publicPermission; change that instead", recordID: recordID,
                rule: .publicUserPermission)
        }
        state.participants[index].permission = permission
    }

    /// Changes a participant's role between ``Participant/Role/privateUser`` and
    /// ``Participant/Role/administrator`` (takes effect when saved). Only the owner may save such a
    /// change; the owner's role and public users' roles do not change.
    public mutating func setRole(_ role: Participant.Role, forParticipantID id: String) throws(ShareSyncError) {
        guard let index = state.participants.firstIndex(where: { $0.participantID == id }) else {
            throw ShareSyncError(.unknownItem, "no participant \(id) in this share", recordID: recordID)
        }
        guard role == .administrator || role == .privateUser else {
            throw .invalid("a participant's role can be set to administrator or privateUser, not \(role.rawValue)",
                           recordID: recordID, rule: .participantRole)
        }
        switch state.participants[index].role {
        case .owner:
            throw .invalid("the owner's role cannot change", recordID: recordID, rule: .oneOwner)
        case .publicUser, .unknown:
            throw .invalid(
                "participant \(id) joined through the public link; only invited participants can be administrators",
                recordID: recordID, rule: .participantRole)
        case .administrator, .privateUser:
            state.participants[index].role = role
        }
    }

    /// Turns requesters away; they may ask again. Takes effect when saved.
    public mutating func denyRequesters(_ requesters: [AccessRequester]) {
        let names = Set(requesters.map(\.userRecordName))
        state.requesters.removeAll { names.contains($0.userRecordName) }
    }

    /// Turns requesters away for good: they cannot ask again, and an existing participant with their
    /// identity is removed. Takes effect when saved.
    public mutating func blockRequesters(_ requesters: [AccessRequester]) {
        blockIdentities(requesters.map(\.userIdentity))
    }

    /// Blocks identities (requesters or participants), as ``blockRequesters(_:)`` does.
    public mutating func blockIdentities(_ identities: [UserIdentity]) {
        let names = Set(identities.compactMap(\.userRecordName))
        state.requesters.removeAll { names.contains($0.userRecordName) }
        for identity in identities where identity.userRecordName != nil {
            if !state.blockedIdentities.contains(where: { $0.userRecordName == identity.userRecordName }) {
                state.blockedIdentities.append(BlockedIdentity(userIdentity: identity))
            }
        }
        state.participants.removeAll {
            $0.role != .owner && $0.userIdentity.userRecordName.map(names.contains) == true
        }
    }

    /// Lifts blocks, so these users may request access again and be invited. Takes effect when saved.
    public mutating func unblockIdentities(_ identities: [BlockedIdentity]) {
        let names = Set(identities.map(\.userRecordName))
        state.blockedIdentities.removeAll { names.contains($0.userRecordName) }
    }

    /// Whether the user with this record name is blocked from this share.
    public func isBlocked(_ userRecordName: String) -> Bool {
        state.blockedIdentities.contains { $0.userRecordName == userRecordName }
    }

    /// The error for inviting (or approving) a blocked user: they must be unblocked first.
    package static func blocked(_ userRecordName: String, recordID: Record.ID) -> ShareSyncError {
        .invalid(
            "user \(userRecordName) is blocked from this share; unblock them first (unblockIdentities, or `sharesync share unblock`)",
            recordID: recordID, rule: .identityBlocked)
    }

    /// Approves a requester: they become a participant with the given permission. Takes effect when saved.
    public mutating func approveRequester(_ requester: AccessRequester, permission: Participant.Permission)
        throws(ShareSyncError)
    {
        var participant = Participant(
            lookupInfo: .init(userRecordName: requester.userRecordName), permission: permission)
        participant.userIdentity = requester.userIdentity
        participant.isApprovedRequester = true
        try addParticipant(participant)
        state.requesters.removeAll { $0.userRecordName == requester.userRecordName }
    }

    /// The invitation link of a participant: whoever uses it first becomes that participant.
    /// Available to the owner and administrators once the share is saved.
    public func oneTimeURL(for participantID: String) -> String? {
        guard let url = state.url,
            let p = state.participants.first(where: { $0.participantID == participantID }),
            p.acceptanceStatus == .pending, let token = p.invitationToken
        else { return nil }
        return ShareURL(string: url)?.with(invitation: token).absoluteString
    }

    package var shareState: ShareState { state }
    package mutating func updateState(_ body: (inout ShareState) -> Void) { body(&state) }
}
