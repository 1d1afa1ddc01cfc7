import Foundation

/// A record: typed fields plus system fields the database maintains, like `CKRecord`.
///
/// Records are values. Setting a field through the subscript also notes the key in
/// ``changedKeys``, which the ``SavePolicy/changedKeys`` save policy uses to write only those keys.
public struct Record: Sendable, Hashable {
    /// The record type name reserved for shares.
    public static let shareRecordType = "cloudkit.share"

    /// The identity of a record: its name and its zone.
    public struct ID: Sendable, Hashable, Codable, CustomStringConvertible {
        /// The record's name, unique within its zone.
        public var recordName: String
        /// The zone the record lives in.
        public var zoneID: RecordZone.ID

        /// Creates a record ID. Without a zone, the record lives in the default zone.
        public init(recordName: String, zoneID: RecordZone.ID = .default) {
            self.recordName = recordName
            self.zoneID = zoneID
        }

        /// Creates a record ID with a new unique name.
        public init(zoneID: RecordZone.ID = .default) {
            self.init(recordName: UUID().uuidString, zoneID: zoneID)
        }

        /// The record name and its zone, for messages.
        public var description: String { "\(recordName) in zone \(zoneID.zoneName)" }
    }

    /// A reference from one record to another, like `CKRecord.Reference`.
    public struct Reference: Sendable, Hashable, Codable {
        /// What happens to the referring record when the target is deleted.
        public enum Action: String, Sendable, Hashable, Codable {
            /// Nothing: the reference dangles.
            case none = "NONE"
            /// The referring record is deleted too (and, transitively, whatever refers to it that way).
            case deleteSelf = "DELETE_SELF"
        }

        /// The target record.
        public var recordID: Record.ID
        /// What deleting the target does to the referring record.
        public var action: Action

        /// Creates a reference to a record.
        public init(recordID: Record.ID, action: Action = .none) {
            self.recordID = recordID
            self.action = action
        }
    }

    /// The record's identity.
    public let recordID: Record.ID
    /// The record's type, such as `Topic` or `Note`.
    public let recordType: String

    /// The record's fields by key. Prefer the subscript, which also tracks ``changedKeys``.
    public private(set) var fields: [String: FieldValue]
    /// The keys set or removed through the subscript since the record was created or fetched.
    public private(set) var changedKeys: Set<String>

    /// The parent record, which places this record in a hierarchy (and so in its parent's share).
    /// Its action is always ``Reference/Action/none``.
    public var parent: Reference? {
        didSet { parentChanged = true }
    }
    /// Whether ``parent`` was set since the record was created or fetched.
    public private(set) var parentChanged: Bool = false

    // MARK: System fields, set by the database

    /// The share this record is the root of, if any. Only the database sets it.
    public package(set) var share: Reference?
    /// When the record was first saved.
    public package(set) var creationDate: Date?
    /// When the record was last saved.
    public package(set) var modificationDate: Date?
    /// The user record ID of the user who first saved the record.
    public package(set) var creatorUserRecordID: Record.ID?
    /// The user record ID of the user who last saved the record.
    public package(set) var lastModifiedUserRecordID: Record.ID?
    /// The server's version tag for the record; `nil` until the record is first saved.
    /// A save under ``SavePolicy/ifServerRecordUnchanged`` succeeds only if this matches the server's.
    public package(set) var recordChangeTag: String?

    /// The share state, present only on records of type ``shareRecordType``.
    package var shareState: ShareState?

    /// Creates a new record that has never been saved.
    public init(recordType: String, recordID: Record.ID = Record.ID()) {
        self.recordType = recordType
        self.recordID = recordID
        self.fields = [:]
        self.changedKeys = []
    }

    /// Creates a record with every system field given, as the database or a decoder does.
    package init(
        recordType: String, recordID: Record.ID, fields: [String: FieldValue],
        parent: Reference?, share: Reference?, creationDate: Date?, modificationDate: Date?,
        creatorUserRecordID: Record.ID?, lastModifiedUserRecordID: Record.ID?, recordChangeTag: String?
    ) {
        self.recordType = recordType
        self.recordID = recordID
        self.fields = fields
        self.changedKeys = []
        self.parent = parent
        self.share = share
        self.creationDate = creationDate
        self.modificationDate = modificationDate
        self.creatorUserRecordID = creatorUserRecordID
        self.lastModifiedUserRecordID = lastModifiedUserRecordID
        self.recordChangeTag = recordChangeTag
    }

    /// A field's value; setting `nil` removes the field. Both note the key in ``changedKeys``.
    public subscript(key: String) -> FieldValue? {
        get { fields[key] }
        set {
            fields[key] = newValue
            changedKeys.insert(key)
        }
    }

    /// All field keys, sorted.
    public var allKeys: [String] { fields.keys.sorted() }

    /// Sets the parent to a record in the same zone (an `action: .none` reference).
    public mutating func setParent(_ parentID: Record.ID?) {
        parent = parentID.map { Reference(recordID: $0, action: .none) }
    }

    /// Forgets which keys changed, as after a fetch.
    package mutating func clearChangeTracking() {
        changedKeys = []
        parentChanged = false
    }

    /// Marks keys as changed (used when decoding a save request that names its changed keys).
    package mutating func markChanged(_ keys: some Sequence<String>, parent: Bool) {
        changedKeys.formUnion(keys)
        if parent { parentChanged = true }
    }

    /// Replaces all fields at once (used by the database).
    package mutating func replaceFields(_ newFields: [String: FieldValue]) {
        fields = newFields
    }
}

extension Record {
    /// The same record placed in a zone ID with another owner name (as a shared database shows it).
    package func relocated(to zoneID: RecordZone.ID) -> Record {
        func move(_ r: Reference?) -> Reference? {
            r.map { Reference(recordID: Record.ID(recordName: $0.recordID.recordName, zoneID: zoneID), action: $0.action) }
        }
        var fields = self.fields
        for (key, value) in fields {
            switch value {
            case .reference(let r): fields[key] = .reference(move(r)!)
            case .list(.reference(let rs)): fields[key] = .list(.reference(rs.map { move($0)! }))
            default: break
            }
        }
        var copy = Record(
            recordType: recordType, recordID: Record.ID(recordName: recordID.recordName, zoneID: zoneID), fields: fields,
            parent: move(parent), share: move(share), creationDate: creationDate, modificationDate: modificationDate,
            creatorUserRecordID: creatorUserRecordID, lastModifiedUserRecordID: lastModifiedUserRecordID,
            recordChangeTag: recordChangeTag)
        copy.shareState = shareState
        if let root = shareState?.rootRecordID {
            copy.shareState?.rootRecordID = Record.ID(recordName: root.recordName, zoneID: zoneID)
        }
        return copy
    }
}

extension Record {
    /// Whether `other` holds what this record holds: the same type, fields and parent (its change tag,
    /// dates and share aside). A save answered `serverRecordChanged` whose server record holds what
    /// the save sent landed on an earlier try whose answer was lost (a cut connection, a process
    /// killed before it settled the answer): it counts as saved, not as a conflict.
    ///
    /// Never for a share record: most of what a share holds (participants, permissions, requesters)
    /// is not in its fields, and the server decides part of it, so equal fields say nothing.
    public func holdsSameContent(as other: Record) -> Bool {
        recordType != Record.shareRecordType && recordType == other.recordType && fields == other.fields
            && parent?.recordID.recordName == other.parent?.recordID.recordName
    }
}
