import Foundation

/// A zone of records in a database, like `CKRecordZone`.
///
/// Records live in zones. Every database has the default zone (``RecordZone/ID/defaultZoneName``),
/// which cannot be deleted or shared; custom zones are created with
/// `Database.save(_:)` in the private database and are the unit that sharing works on.
public struct RecordZone: Sendable, Hashable, Codable {
    /// The identity of a zone: its name and the name of the user who owns it.
    public struct ID: Sendable, Hashable, Codable, CustomStringConvertible {
        /// The name of the default zone, `_defaultZone`.
        public static let defaultZoneName = "_defaultZone"
        /// The owner name that stands for "the current user" in a private database, `__defaultOwner__`.
        public static let currentUserDefaultName = "__defaultOwner__"
        /// The default zone of the current user's private database.
        public static let `default` = ID(zoneName: defaultZoneName)

        /// The zone's name, unique within its owner's database.
        public var zoneName: String
        /// The user record name of the zone's owner, or ``currentUserDefaultName`` in a private database.
        public var ownerName: String

        /// Creates a zone ID. In a private database the owner is the current user.
        public init(zoneName: String, ownerName: String = ID.currentUserDefaultName) {
            self.zoneName = zoneName
            self.ownerName = ownerName
        }

        /// The owner's name when the ID names one, `nil` when it says "the current user"
        /// (``currentUserDefaultName``): in the shared database, "whichever owner shares a zone of this name".
        public var explicitOwnerName: String? { ownerName == Self.currentUserDefaultName ? nil : ownerName }

        /// Whether this is the default zone, which cannot be deleted or shared.
        public var isDefaultZone: Bool { zoneName == Self.defaultZoneName }

        /// The zone name and its owner, for messages.
        public var description: String { "\(zoneName) (owner \(ownerName))" }

        /// Whether two IDs can name the same zone: the same zone name, and the same owner unless one
        /// of them says "the current user" (whose real name only the database knows and checks).
        public func isSameZone(as other: ID) -> Bool {
            zoneName == other.zoneName
                && (ownerName == other.ownerName || ownerName == Self.currentUserDefaultName
                    || other.ownerName == Self.currentUserDefaultName)
        }
    }

    /// The zone's identity.
    public var zoneID: ID

    /// Creates a zone value to save.
    public init(zoneID: ID) {
        self.zoneID = zoneID
    }

    /// Creates a zone value in the current user's private database.
    public init(zoneName: String) {
        self.zoneID = ID(zoneName: zoneName)
    }
}
