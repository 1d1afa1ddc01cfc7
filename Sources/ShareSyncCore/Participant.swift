import Foundation

/// A user's place in a share, like `CKShare.Participant`.
public struct Participant: Sendable, Hashable, Codable {
    /// What a participant may do, like `CKShare.ParticipantPermission`.
    public enum Permission: String, Sendable, Hashable, Codable, CaseIterable {
        /// Not known (not set).
        case unknown
        /// No access: for a share's public permission, only invited participants may join.
        case none
        /// May read the shared records, not write them.
        case readOnly
        /// May read, create, change and delete the shared records.
        case readWrite
    }

    /// A participant's role, like `CKShare.ParticipantRole`.
    public enum Role: String, Sendable, Hashable, Codable, CaseIterable {
        /// The user who owns the shared data. Exactly one per share.
        case owner
        /// Manages participants like the owner does, but does not own the data.
        case administrator
        /// Invited by identity to a private share.
        case privateUser
        /// Joined a public share through its URL.
        case publicUser
        /// Not known (not set).
        case unknown
    }

    /// Where a participant stands with a share, like `CKShare.ParticipantAcceptanceStatus`.
    public enum AcceptanceStatus: String, Sendable, Hashable, Codable, CaseIterable {
        /// Not known (not set).
        case unknown
        /// Invited (or added), not yet accepted.
        case pending
        /// Accepted: the participant's node syncs the share.
        case accepted
        /// Removed by the owner or an administrator, or left: the share is no longer visible to them.
        case removed
    }

    /// A stable identifier for this participant within the share.
    public var participantID: String
    /// Who the participant is: what the inviter knew of them and, once bound, their user record name.
    public var userIdentity: UserIdentity
    /// The participant's role.
    public var role: Role
    /// The participant's permission.
    public var permission: Permission
    /// Pending until accepted; removed when removed, blocked, or when they leave.
    public package(set) var acceptanceStatus: AcceptanceStatus
    /// When the participant was first saved to the share.
    public package(set) var dateAddedToShare: Date?
    /// Whether the participant joined as an approved access requester.
    public package(set) var isApprovedRequester: Bool
    /// Whether this participant was added through ``oneTimeURLParticipant(permission:)``.
    public package(set) var isOneTimeURLParticipant: Bool
    /// The secret of this participant's invitation link; only the owner and administrators see it.
    package var invitationToken: String?

    /// Creates a participant to invite by lookup info (email, phone or user record name).
    public init(
        lookupInfo: UserIdentity.LookupInfo, permission: Permission = .readOnly, role: Role = .privateUser
    ) {
        self.participantID = UUID().uuidString
        self.userIdentity = UserIdentity(userRecordName: lookupInfo.userRecordName, lookupInfo: lookupInfo)
        self.role = role
        self.permission = permission
        self.acceptanceStatus = .pending
        self.isApprovedRequester = false
        self.isOneTimeURLParticipant = false
    }

    /// A participant whose identity is not known yet: whoever first uses its one-time URL
    /// (``Share/oneTimeURL(for:)``) becomes this participant.
    public static func oneTimeURLParticipant(permission: Permission = .readOnly) -> Participant {
        var p = Participant(lookupInfo: .init(emailAddress: nil, phoneNumber: nil, userRecordName: nil),
                            permission: permission)
        p.isOneTimeURLParticipant = true
        return p
    }

    /// Creates a participant with every field given (used by the database and decoders).
    package init(
        participantID: String, userIdentity: UserIdentity, role: Role, permission: Permission,
        acceptanceStatus: AcceptanceStatus, dateAddedToShare: Date?, isApprovedRequester: Bool,
        isOneTimeURLParticipant: Bool, invitationToken: String?
    ) {
        self.participantID = participantID
        self.userIdentity = userIdentity
        self.role = role
        self.permission = permission
        self.acceptanceStatus = acceptanceStatus
        self.dateAddedToShare = dateAddedToShare
        self.isApprovedRequester = isApprovedRequester
        self.isOneTimeURLParticipant = isOneTimeURLParticipant
        self.invitationToken = invitationToken
    }

    /// The user this participant is for, if the inviter named one: the bound user record name, else the
    /// lookup info's. Such a participant is that user and nobody else, whatever link is used.
    public var addressedUserRecordName: String? {
        userIdentity.userRecordName ?? userIdentity.lookupInfo?.userRecordName
    }

    /// Whether this participant is the given user: by the bound user record name, or, before it is
    /// bound, by the lookup info the inviter gave (a user record name; email and phone only when the
    /// caller's are verified).
    public func isIdentity(of caller: Caller) -> Bool {
        if let addressed = addressedUserRecordName { return addressed == caller.userRecordName }
        guard let info = userIdentity.lookupInfo else { return false }
        if let email = info.emailAddress, let verified = caller.verifiedEmailAddress,
            email.lowercased() == verified.lowercased()
        {
            return true
        }
        if let phone = info.phoneNumber, let verified = caller.verifiedPhoneNumber,
            Self.digits(phone) == Self.digits(verified)
        {
            return true
        }
        return false
    }

    /// Whether `other` names the same person: the same user record name when both have one (an
    /// accepted participant is bound to the identity that accepted), else the same email address
    /// when both have one, else the same phone number. So an invitation by email of someone who
    /// accepted an earlier one is them, not a second participant (before, it was: whoever used the
    /// new link was listed under that email). Two different email addresses are two people, whatever
    /// their phone numbers say.
    package func isSameInvitee(as other: Participant) -> Bool {
        if let mine = addressedUserRecordName, let theirs = other.addressedUserRecordName { return mine == theirs }
        let (a, b) = (userIdentity.lookupInfo, other.userIdentity.lookupInfo)
        if let x = a?.emailAddress, let y = b?.emailAddress { return x.lowercased() == y.lowercased() }
        if let x = a?.phoneNumber, let y = b?.phoneNumber { return Self.digits(x) == Self.digits(y) }
        return false
    }

    /// The key that identifies "the same identity" when a participant is added twice.
    package var identityKey: String? {
        if let name = userIdentity.userRecordName { return "user:\(name)" }
        if let email = userIdentity.lookupInfo?.emailAddress { return "email:\(email.lowercased())" }
        if let phone = userIdentity.lookupInfo?.phoneNumber { return "phone:\(Self.digits(phone))" }
        return nil
    }

    static func digits(_ s: String) -> String { String(s.filter { $0.isNumber || $0 == "+" }) }
}

/// A user who asked to join a share, like `CKShare.AccessRequester`.
public struct AccessRequester: Sendable, Hashable, Codable {
    /// The requester's identity.
    public var userIdentity: UserIdentity
    /// When they asked.
    public var requestDate: Date

    /// A request from `userIdentity`, made at `requestDate`.
    public init(userIdentity: UserIdentity, requestDate: Date) {
        self.userIdentity = userIdentity
        self.requestDate = requestDate
    }

    /// The requester's user record name.
    public var userRecordName: String { userIdentity.userRecordName ?? "" }
}

/// A user blocked from requesting access, like `CKShare.BlockedIdentity`.
public struct BlockedIdentity: Sendable, Hashable, Codable {
    /// The blocked user's identity.
    public var userIdentity: UserIdentity

    /// A blocked `userIdentity`.
    public init(userIdentity: UserIdentity) { self.userIdentity = userIdentity }

    /// The blocked user's record name.
    public var userRecordName: String { userIdentity.userRecordName ?? "" }
}
