/// The rule a refused request broke: a short, stable identifier that an error carries next to its
/// code (``ShareSyncError/rule``), such as ``recordSize`` or ``readOnlyParticipant``.
///
/// The owner sends it on the wire (`"rule"` in an error, `protocol.md`, "Rules"), the CLI prints it
/// after `; rule`, and `--json` errors carry it. A client treats a rule it does not know as it treats
/// the error's code: ``init(rawValue:)`` keeps any rule a peer sends.
///
/// ```swift
/// catch let error as ShareSyncError where error.rule == .readOnlyParticipant { ... }
/// ```
public struct Rule: RawRepresentable, Hashable, Sendable, Codable, CustomStringConvertible {
    /// The wire spelling, such as `recordSize`.
    public let rawValue: String

    /// A rule by its wire spelling (a rule received from a peer may be one this node does not know).
    public init(rawValue: String) { self.rawValue = rawValue }

    /// The rule's name.
    public var description: String { rawValue }

    /// Decodes the wire spelling, a JSON string.
    public init(from decoder: any Decoder) throws {
        rawValue = try decoder.singleValueContainer().decode(String.self)
    }

    /// Encodes the wire spelling, a JSON string.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }
}

// The constants, one per rule. protocol.md's "Rules" lists each of them (a test checks both ways).
extension Rule {
    // MARK: Rules an owner sends

    // Authentication and transport
    /// The first frame of a connection was not `hello`.
    public static let helloExpected = Rule(rawValue: "helloExpected")
    /// The `hello` frame is malformed.
    public static let malformedHello = Rule(rawValue: "malformedHello")
    /// The frame after `challenge` was not `authenticate`.
    public static let authenticateExpected = Rule(rawValue: "authenticateExpected")
    /// The challenge signature does not verify with the key of `hello`.
    public static let badSignature = Rule(rawValue: "badSignature")
    /// The peer was not welcomed within the handshake timeout.
    public static let authenticationTimeout = Rule(rawValue: "authenticationTimeout")
    /// The key in `hello` is not the key of the peer's TLS certificate.
    public static let tlsKeyMismatch = Rule(rawValue: "tlsKeyMismatch")
    /// The TLS handshake failed.
    public static let tlsHandshakeFailed = Rule(rawValue: "tlsHandshakeFailed")
    /// A certificate is not a ShareSync node certificate (self-signed Ed25519, as protocol.md says).
    public static let tlsCertificate = Rule(rawValue: "tlsCertificate")
    /// The owner is at its cap of connections (or of unauthenticated ones).
    public static let maximumConnections = Rule(rawValue: "maximumConnections")
    /// This identity already holds the most connections allowed.
    public static let maximumConnectionsPerIdentity = Rule(rawValue: "maximumConnectionsPerIdentity")
    /// This connection has the most requests in flight allowed.
    public static let maximumRequestsInFlight = Rule(rawValue: "maximumRequestsInFlight")
    /// Nothing was received for longer than the idle timeout.
    public static let idleTimeout = Rule(rawValue: "idleTimeout")
    /// The framing handshake did not complete in time.
    public static let handshakeTimeout = Rule(rawValue: "handshakeTimeout")
    /// A line is longer than the configured maximum.
    public static let lineTooLong = Rule(rawValue: "lineTooLong")
    /// A frame's payload is, or inflates to, more than the configured maximum.
    public static let frameTooLarge = Rule(rawValue: "frameTooLarge")
    /// A line is not valid in the negotiated frame encoding.
    public static let invalidEncoding = Rule(rawValue: "invalidEncoding")
    /// The deflate data of a frame is corrupt.
    public static let inflateFailed = Rule(rawValue: "inflateFailed")
    /// The connection ended in the middle of a line.
    public static let truncatedFrame = Rule(rawValue: "truncatedFrame")
    /// A handshake line does not follow the grammar.
    public static let malformedHandshake = Rule(rawValue: "malformedHandshake")
    /// The peers have no protocol version in common.
    public static let unsupportedVersion = Rule(rawValue: "unsupportedVersion")
    /// The peers have no frame encoding in common.
    public static let unsupportedEncoding = Rule(rawValue: "unsupportedEncoding")
    /// A cleartext connection reached a server that speaks only TLS.
    public static let tlsRequired = Rule(rawValue: "tlsRequired")
    /// The TLS handshake did not agree on the ALPN protocol `sharesync/1`.
    public static let alpnMismatch = Rule(rawValue: "alpnMismatch")

    // Requests
    /// A request frame is not a request this protocol defines.
    public static let malformedRequest = Rule(rawValue: "malformedRequest")
    /// A message is not valid JSON of its type.
    public static let messageJSON = Rule(rawValue: "messageJSON")
    /// An item's zone is not the request's zone.
    public static let zoneMismatch = Rule(rawValue: "zoneMismatch")
    /// A request carries more items than allowed.
    public static let maximumItemsPerRequest = Rule(rawValue: "maximumItemsPerRequest")
    /// A batch given to the database carries more items than allowed.
    public static let itemsPerRequest = Rule(rawValue: "itemsPerRequest")
    /// The answer would not fit in one frame and cannot be cut into pages.
    public static let maximumResponseSize = Rule(rawValue: "maximumResponseSize")
    /// A change token is not a token this node issued.
    public static let changeTokenFormat = Rule(rawValue: "changeTokenFormat")
    /// A change token is of an unsupported version.
    public static let changeTokenVersion = Rule(rawValue: "changeTokenVersion")
    /// A `subscribe` token is from the middle of a fetch from no token (a page of it answered with
    /// `moreComing`): a subscription starts from a completed fetch.
    public static let subscribeTokenMidFetch = Rule(rawValue: "subscribeTokenMidFetch")
    /// A change token belongs to another database or feed.
    public static let changeTokenDatabase = Rule(rawValue: "changeTokenDatabase")
    /// A change token is older than the retained history, or ahead of it.
    public static let changeTokenExpired = Rule(rawValue: "changeTokenExpired")
    /// The node's disk is full; the path is in the message.
    public static let diskFull = Rule(rawValue: "diskFull")
    /// The node's database failed in a way that passes (an I/O error, a lock held too long, a read-only
    /// or missing file, no memory): nothing of the request was saved, and the same request may succeed
    /// once the cause is gone.
    public static let storeFailure = Rule(rawValue: "storeFailure")

    // Records and zones
    /// A record name breaks the naming rules.
    public static let recordNameSyntax = Rule(rawValue: "recordNameSyntax")
    /// A record type breaks the naming rules.
    public static let recordTypeSyntax = Rule(rawValue: "recordTypeSyntax")
    /// A field key breaks the naming rules.
    public static let fieldKeySyntax = Rule(rawValue: "fieldKeySyntax")
    /// A zone name breaks the naming rules.
    public static let zoneNameSyntax = Rule(rawValue: "zoneNameSyntax")
    /// A record's JSON is malformed.
    public static let recordJSON = Rule(rawValue: "recordJSON")
    /// A record is larger than the record size limit.
    public static let recordSize = Rule(rawValue: "recordSize")
    /// A request names the same record twice.
    public static let duplicateItem = Rule(rawValue: "duplicateItem")
    /// A save changes an existing record's type.
    public static let recordTypeImmutable = Rule(rawValue: "recordTypeImmutable")
    /// A `parent` chain loops back to the record.
    public static let parentCycle = Rule(rawValue: "parentCycle")
    /// A record's parent is in another zone.
    public static let parentSameZone = Rule(rawValue: "parentSameZone")
    /// A reference points into another zone.
    public static let referenceSameZone = Rule(rawValue: "referenceSameZone")
    /// A `deleteSelf` reference names a record that does not exist and is not saved in the same
    /// request (`referenceViolation`; for a participant, a record outside their view does not exist).
    public static let deleteSelfTargetMissing = Rule(rawValue: "deleteSelfTargetMissing")
    /// A double field is NaN or infinite.
    public static let finiteDouble = Rule(rawValue: "finiteDouble")
    /// A date field is out of range.
    public static let validDate = Rule(rawValue: "validDate")
    /// A location's coordinates are out of range.
    public static let locationRange = Rule(rawValue: "locationRange")
    /// The default zone cannot be created, deleted or shared.
    public static let defaultZone = Rule(rawValue: "defaultZone")
    /// The record is outside the caller's share.
    public static let outsideView = Rule(rawValue: "outsideView")
    /// The caller has read-only permission in this share.
    public static let readOnlyParticipant = Rule(rawValue: "readOnlyParticipant")
    /// A participant's save would move a record out of its share.
    public static let moveOutsideShare = Rule(rawValue: "moveOutsideShare")

    // Sharing
    /// A share URL does not follow the syntax of protocol.md.
    public static let shareURLSyntax = Rule(rawValue: "shareURLSyntax")
    /// This identity is not invited to the share.
    public static let notInvited = Rule(rawValue: "notInvited")
    /// The caller left this share.
    public static let leftShare = Rule(rawValue: "leftShare")
    /// The record or zone is already part of another share.
    public static let oneSharePerRecord = Rule(rawValue: "oneSharePerRecord")
    /// A public share cannot have invitations, and the other way round.
    public static let publicAndPrivateDoNotMix = Rule(rawValue: "publicAndPrivateDoNotMix")
    /// A public user is added only by accepting the share's URL.
    public static let publicUserJoinsByURL = Rule(rawValue: "publicUserJoinsByURL")
    /// A public user's permission follows `publicPermission`; it cannot be set.
    public static let publicUserPermission = Rule(rawValue: "publicUserPermission")
    /// The share has the most participants allowed.
    public static let maximumParticipants = Rule(rawValue: "maximumParticipants")
    /// An invitation names someone already in the share with another permission or role: change those
    /// instead (the control channel's `shareInvite`, `sharesync share invite`); or a share save adds a
    /// second entry for someone the share already lists (the owner's database refuses it).
    public static let alreadyParticipant = Rule(rawValue: "alreadyParticipant")
    /// The share holds the most access requests allowed (``Share/maximumRequesters``), waiting for the
    /// owner or an administrator to approve, deny or block some.
    public static let maximumRequesters = Rule(rawValue: "maximumRequesters")
    /// A participant's lookup info (user record name, email or phone) is malformed.
    public static let participantLookupInfo = Rule(rawValue: "participantLookupInfo")
    /// A participant's role cannot be set this way.
    public static let participantRole = Rule(rawValue: "participantRole")
    /// The identity is blocked from this share.
    public static let identityBlocked = Rule(rawValue: "identityBlocked")
    /// A one-time invitation was already used by another identity.
    public static let invitationSpent = Rule(rawValue: "invitationSpent")
    /// A share has exactly one owner.
    public static let oneOwner = Rule(rawValue: "oneOwner")
    /// A share record is malformed.
    public static let shareRecord = Rule(rawValue: "shareRecord")
    /// A share record carries fields a share cannot have.
    public static let shareFields = Rule(rawValue: "shareFields")
    /// A share's type breaks the naming rules.
    public static let shareTypeSyntax = Rule(rawValue: "shareTypeSyntax")
    /// A share's root record cannot change.
    public static let shareRootImmutable = Rule(rawValue: "shareRootImmutable")
    /// A share's root record must exist.
    public static let shareRootExists = Rule(rawValue: "shareRootExists")
    /// A share's root record must be in the share's zone.
    public static let shareRootZone = Rule(rawValue: "shareRootZone")
    /// A zone-wide share's record name must be `cloudkit.zoneshare`, and that name is kept for it: no
    /// record of another type may have it.
    public static let zoneShareName = Rule(rawValue: "zoneShareName")
    /// Only the owner creates shares.
    public static let shareCreateOwnerOnly = Rule(rawValue: "shareCreateOwnerOnly")
    /// Only the owner or an administrator edits a share.
    public static let shareEditOwnerOrAdministrator = Rule(rawValue: "shareEditOwnerOrAdministrator")
    /// Only the owner changes a share's `publicPermission`.
    public static let shareSettingsOwnerOnly = Rule(rawValue: "shareSettingsOwnerOnly")
    /// Only the owner changes a share's title, thumbnail or type.
    public static let sharePropertiesOwnerOnly = Rule(rawValue: "sharePropertiesOwnerOnly")
    /// Only the owner deletes a share's root record.
    public static let rootDeleteOwnerOnly = Rule(rawValue: "rootDeleteOwnerOnly")
    /// Only the owner changes a share root's parent.
    public static let rootParentOwnerOnly = Rule(rawValue: "rootParentOwnerOnly")
    /// The default zone cannot be shared as a whole.
    public static let defaultZoneNotShareable = Rule(rawValue: "defaultZoneNotShareable")
    /// An administrator cannot change their own role or permission, or remove themselves.
    public static let adminSelfEdit = Rule(rawValue: "adminSelfEdit")
    /// An administrator cannot change the owner or another administrator.
    public static let adminManagesOthersOnly = Rule(rawValue: "adminManagesOthersOnly")
    /// Only the owner appoints administrators.
    public static let administratorRoleOwnerOnly = Rule(rawValue: "administratorRoleOwnerOnly")
    /// A share's thumbnail is larger than allowed.
    public static let thumbnailSize = Rule(rawValue: "thumbnailSize")

    // MARK: Rules a node reports to its own user (never sent by an owner)

    // A participant's checks of its owner
    /// The owner did not answer `hello` with `challenge`.
    public static let challengeExpected = Rule(rawValue: "challengeExpected")
    /// The owner did not answer `authenticate` with `welcome`.
    public static let welcomeExpected = Rule(rawValue: "welcomeExpected")
    /// The peer's certificate could not be read.
    public static let badCertificate = Rule(rawValue: "badCertificate")
    /// The owner's key is not the one the share URL names.
    public static let ownerFingerprintMismatch = Rule(rawValue: "ownerFingerprintMismatch")
    /// The share URL does not name the owner's key (`owner=`).
    public static let ownerFingerprintMissing = Rule(rawValue: "ownerFingerprintMissing")
    /// The node that answered is not the owner this replica follows.
    public static let ownerMismatch = Rule(rawValue: "ownerMismatch")
    /// No owner of that name is known to this node.
    public static let ownerUnknown = Rule(rawValue: "ownerUnknown")
    /// An owner's address is malformed.
    public static let ownerAddress = Rule(rawValue: "ownerAddress")
    /// Cleartext is allowed on loopback addresses only.
    public static let cleartextNotLoopback = Rule(rawValue: "cleartextNotLoopback")
    /// The TLS configuration could not be built.
    public static let tlsConfiguration = Rule(rawValue: "tlsConfiguration")
    /// A node identity key is malformed.
    public static let identityKey = Rule(rawValue: "identityKey")

    // The node's own CLI and control socket
    /// A control request is malformed.
    public static let controlSyntax = Rule(rawValue: "controlSyntax")
    /// A `key=value` field argument is malformed.
    public static let fieldSyntax = Rule(rawValue: "fieldSyntax")
    /// No daemon answers on the node home's control socket (a connected container, the CLI).
    public static let nodeNotRunning = Rule(rawValue: "nodeNotRunning")
    /// A query is malformed: a bad record type or key, or a comparator that does not fit its value.
    public static let querySyntax = Rule(rawValue: "querySyntax")
    /// A new record needs a record type.
    public static let typeNeeded = Rule(rawValue: "typeNeeded")
    /// An `--if-tag` value is malformed.
    public static let ifTagSyntax = Rule(rawValue: "ifTagSyntax")
    /// `--if-tag` needs the `ifServerRecordUnchanged` policy.
    public static let ifTagPolicy = Rule(rawValue: "ifTagPolicy")
    /// A change token argument is malformed.
    public static let changeTokenSyntax = Rule(rawValue: "changeTokenSyntax")
    /// A `--limit` is out of range.
    public static let limitRange = Rule(rawValue: "limitRange")
    /// `--limit` needs one database or zone to page through.
    public static let limitNeedsView = Rule(rawValue: "limitNeedsView")
    /// A listing asked for whole is too large for one answer: ask for it in pages.
    public static let listTooLarge = Rule(rawValue: "listTooLarge")
    /// The name matches more than one owner.
    public static let ambiguousOwner = Rule(rawValue: "ambiguousOwner")
    /// The name matches more than one share.
    public static let ambiguousShare = Rule(rawValue: "ambiguousShare")
    /// The zone is in the owner's own database, not the shared one.
    public static let ownerWithSharedZone = Rule(rawValue: "ownerWithSharedZone")
    /// A node accepting a share it owns itself: its records are in its private database.
    public static let ownShare = Rule(rawValue: "ownShare")
    /// `record save --parent` names a record that does not exist in the zone.
    public static let parentNotFound = Rule(rawValue: "parentNotFound")
    /// The record is not a share.
    public static let notAShare = Rule(rawValue: "notAShare")
    /// The record has no conflict to resolve.
    public static let notAConflict = Rule(rawValue: "notAConflict")
    /// A share property argument is malformed.
    public static let shareProperty = Rule(rawValue: "shareProperty")
    /// A one-time URL participant is named by its link, not by an identity.
    public static let oneTimeURLParticipant = Rule(rawValue: "oneTimeURLParticipant")
    /// An advertised address is malformed.
    public static let advertisedAddress = Rule(rawValue: "advertisedAddress")
    /// The node home already exists.
    public static let homeExists = Rule(rawValue: "homeExists")
    /// There is no node home at the path.
    public static let noHome = Rule(rawValue: "noHome")
    /// The node's settings file is malformed.
    public static let settings = Rule(rawValue: "settings")
    /// A daemon is already running on this home.
    public static let oneDaemonPerHome = Rule(rawValue: "oneDaemonPerHome")

    // The participant's replica
    /// The replica has no owner of that name.
    public static let replicaUnknownOwner = Rule(rawValue: "replicaUnknownOwner")
    /// An owner name in the replica is malformed.
    public static let replicaOwnerName = Rule(rawValue: "replicaOwnerName")
    /// Changes name another owner than the replica's.
    public static let replicaOwnerMismatch = Rule(rawValue: "replicaOwnerMismatch")
    /// Changes name another zone than the one being applied.
    public static let replicaZoneMismatch = Rule(rawValue: "replicaZoneMismatch")
    /// A zone replacement step came before its start.
    public static let replicaReplacementNotBegun = Rule(rawValue: "replicaReplacementNotBegun")
    /// A zone replacement ended before all of its pages.
    public static let replicaIncompleteReplacement = Rule(rawValue: "replicaIncompleteReplacement")
}
