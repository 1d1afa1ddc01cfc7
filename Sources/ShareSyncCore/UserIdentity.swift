import Foundation

/// Who a user is, like `CKUserIdentity`: a user record ID and the lookup info others know them by.
public struct UserIdentity: Sendable, Hashable, Codable {
    /// How to find a user, like `CKUserIdentity.LookupInfo`: an email address, a phone number or a
    /// user record ID. Exactly what the inviter knew.
    public struct LookupInfo: Sendable, Hashable, Codable {
        /// The email address the inviter knew, if any.
        public var emailAddress: String?
        /// The phone number the inviter knew, if any.
        public var phoneNumber: String?
        /// The user record name (a node's key-derived name), if the inviter knew it.
        public var userRecordName: String?

        /// Lookup info for a user known by email address.
        public init(emailAddress: String) { self.emailAddress = emailAddress }
        /// Lookup info for a user known by phone number.
        public init(phoneNumber: String) { self.phoneNumber = phoneNumber }
        /// Lookup info for a user known by user record name (`sharesync id` prints a node's).
        public init(userRecordName: String) { self.userRecordName = userRecordName }
        /// Lookup info with any of the three set.
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

    /// An identity with whatever is known of the user.
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
    /// The caller's user record name, authenticated.
    public var userRecordName: String
    /// An email address something vouches for (matches invitations by email), if any.
    public var verifiedEmailAddress: String?
    /// A phone number something vouches for (matches invitations by phone), if any.
    public var verifiedPhoneNumber: String?
    /// A name to show for the caller, if known.
    public var displayName: String?

    /// A caller with an authenticated user record name and whatever else is vouched for.
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
