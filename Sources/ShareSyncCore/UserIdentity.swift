import Foundation

/// Who a user is, like `CKUserIdentity`: a user record ID and the lookup info others know them by.
public struct UserIdentity: Sendable, Hashable, Codable {
    /// How to find a user, like `CKUserIdentity.LookupInfo`: an email address, a phone number or a
    /// user record ID. Exactly what the inviter knew.
    public struct LookupInfo: Sendable, Hashable, Codable {
        public var emailAddress: String?
        public var phoneNumber: String?
        public var userRecordName: String?

        public init(emailAddress: String) { self.emailAddress = emailAddress }
        public init(phoneNumber: String) { self.phoneNumber = phoneNumber }
        public init(userRecordName: String) { self.userRecordName = userRecordName }
        public init(emailAddress: String?, phoneNumber: String?, userRecordName: String?) {
            self.emailAddress = emailAddress
            self.phoneNumber = phoneNumber
            self.userRecordName = userRecordName
        }

        /// Whether any of the three is set.
        public var isEmpty: Bool { emailAddress == nil && phoneNumber == nil && userRecordName == nil }
    }

    /// The user's record name (on a ShareSync node, derived from the node's public key).
    public var userRecordName: String?
    /// What the user is known by.
    public var lookupInfo: LookupInfo?
    /// A name to show.
    public var displayName: String?

    public init(userRecordName: String? = nil, lookupInfo: LookupInfo? = nil, displayName: String? = nil) {
        self.userRecordName = userRecordName
        self.lookupInfo = lookupInfo
        self.displayName = displayName
    }
}

/// The user performing an operation, as the access-control policy sees them.
///
/// `userRecordName` is authenticated (in-process it is trusted; over the network it is the node's key).
/// `verifiedEmailAddress` and `verifiedPhoneNumber` are set only where something vouches for them; a
/// network peer has none, so people invited by email or phone accept through their invitation link.
public struct Caller: Sendable, Hashable {
    public var userRecordName: String
    public var verifiedEmailAddress: String?
    public var verifiedPhoneNumber: String?
    public var displayName: String?

    public init(
        userRecordName: String, verifiedEmailAddress: String? = nil, verifiedPhoneNumber: String? = nil,
        displayName: String? = nil
    ) {
        self.userRecordName = userRecordName
        self.verifiedEmailAddress = verifiedEmailAddress
        self.verifiedPhoneNumber = verifiedPhoneNumber
        self.displayName = displayName
    }

    /// The caller as a user identity.
    public var identity: UserIdentity {
        UserIdentity(
            userRecordName: userRecordName,
            lookupInfo: .init(
                emailAddress: verifiedEmailAddress, phoneNumber: verifiedPhoneNumber, userRecordName: userRecordName),
            displayName: displayName)
    }
}
