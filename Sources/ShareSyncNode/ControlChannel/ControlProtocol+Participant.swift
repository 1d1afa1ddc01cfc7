import Foundation
import ShareSyncCore
import ShareSyncStore

/// A shared zone in the replica: whose it is and how many records it holds.
public struct SharedZoneInfo: Codable, Sendable, Hashable {
    /// The owner's user record name.
    public var ownerName: String
    public var zoneName: String
    public var records: Int
    /// The owner's name, as its shares give it (when known).
    public var ownerDisplayName: String?
    /// The owner's email, as its shares give it (when known).
    public var ownerEmail: String?

    public init(ownerName: String, zoneName: String, records: Int, ownerDisplayName: String? = nil, ownerEmail: String? = nil) {
        self.ownerName = ownerName
        self.zoneName = zoneName
        self.records = records
        self.ownerDisplayName = ownerDisplayName
        self.ownerEmail = ownerEmail
    }

    /// The owner for people: `Alice <alice@example.org> (_a1b2…)`, or the user record name alone.
    public var owner: String { PersonName.describe(userRecordName: ownerName, displayName: ownerDisplayName, email: ownerEmail) }
}

/// How people are named in the CLI: name and email next to the user record name.
public enum PersonName {
    /// `Alice <alice@example.org> (_a1b2…)`; parts that are not known are left out.
    public static func describe(userRecordName: String?, displayName: String?, email: String?) -> String {
        var parts: [String] = []
        if let displayName { parts.append(displayName) }
        if let email { parts.append(displayName == nil ? email : "<\(email)>") }
        if let userRecordName { parts.append(parts.isEmpty ? userRecordName : "(\(userRecordName))") }
        return parts.isEmpty ? "(unknown)" : parts.joined(separator: " ")
    }
}

/// What `accept` returns once the share's records are in the replica.
public struct AcceptedShare: Codable, Sendable, Hashable {
    /// The owner's user record name.
    public var ownerName: String
    /// The owner's name and email, as the share gives them (when known).
    public var ownerDisplayName: String? = nil
    /// The owner's email, as the share gives it (when known).
    public var ownerEmail: String? = nil
    public var title: String?
    /// The share's record name.
    public var shareName: String
    public var permission: Participant.Permission
    /// The zone of the share accepted, now in the replica, with its record count.
    public var zones: [SharedZoneInfo]

    public init(
        ownerName: String, title: String?, shareName: String, permission: Participant.Permission, zones: [SharedZoneInfo]
    ) {
        self.ownerName = ownerName
        self.title = title
        self.shareName = shareName
        self.permission = permission
        self.zones = zones
    }
}

/// What became of a write to a shared zone.
public struct SharedWriteResult: Codable, Sendable, Hashable {
    public enum Outcome: String, Codable, Sendable {
        /// The owner accepted it.
        case sent
        /// The owner was not reachable: the write waits in the outbox and goes out on reconnect.
        case queued
    }

    public var outcome: Outcome
    /// The saved record as the owner returned it (`sent` saves only).
    public var record: Record?
    /// The deletion was of a share record: for a participant, leaving that share (`true`; absent otherwise).
    public var leavesShare: Bool?

    public init(outcome: Outcome, record: Record? = nil, leavesShare: Bool? = nil) {
        self.outcome = outcome
        self.record = record
        self.leavesShare = leavesShare
    }
}

/// What `recordImport` saved.
public struct ImportResult: Codable, Sendable, Hashable {
    /// How many records were saved.
    public var saved: Int
    /// How many batches (transactions) saved them; set by the CLI for the whole import.
    public var batches: Int?
    public init(saved: Int, batches: Int? = nil) {
        self.saved = saved
        self.batches = batches
    }
}

/// One change in a change feed.
public struct ChangeInfo: Codable, Sendable, Hashable {
    public enum Kind: String, Codable, Sendable {
        case recordChanged, recordDeleted, zoneDeleted
    }

    public var kind: Kind
    /// The owner's user record name (shared database only).
    public var ownerName: String?
    /// The owner's name, as its shares give it (shared database only, when known).
    public var ownerDisplayName: String? = nil
    public var zoneName: String
    public var recordName: String?
    public var recordType: String?
    /// The record in its latest state (`recordChanged` only).
    public var record: Record?

    public init(
        kind: Kind, ownerName: String?, zoneName: String, recordName: String? = nil, recordType: String? = nil,
        record: Record? = nil
    ) {
        self.kind = kind
        self.ownerName = ownerName
        self.zoneName = zoneName
        self.recordName = recordName
        self.recordType = recordType
        self.record = record
    }

    static func changed(_ record: Record, owner: String?) -> ChangeInfo {
        ChangeInfo(
            kind: .recordChanged, ownerName: owner, zoneName: record.recordID.zoneID.zoneName,
            recordName: record.recordID.recordName, recordType: record.recordType, record: record)
    }
}

/// A page of a change feed and the token to continue from.
public struct ChangesPage: Codable, Sendable, Hashable {
    public var changes: [ChangeInfo]
    /// Pass as `since` next time to get only later changes.
    public var token: String
    /// The page stopped at the limit asked for: ask again from `token` for the rest.
    public var moreComing: Bool

    public init(changes: [ChangeInfo], token: String, moreComing: Bool = false) {
        self.changes = changes
        self.token = token
        self.moreComing = moreComing
    }
}

/// A zone in a database change feed: its owner (shared database only) and name.
public struct ZoneRef: Codable, Sendable, Hashable {
    /// The owner's user record name (shared database only).
    public var ownerName: String?
    /// The zone's name.
    public var zoneName: String
    /// The owner's name, as its shares give it (shared database only, when known).
    public var ownerDisplayName: String?

    public init(ownerName: String?, zoneName: String, ownerDisplayName: String? = nil) {
        self.ownerName = ownerName
        self.zoneName = zoneName
        self.ownerDisplayName = ownerDisplayName
    }
}

/// A page of a database's zone changes, like `CKFetchDatabaseChangesOperation`: the zones whose
/// records changed (or that appeared) and the zones deleted since the token.
public struct DatabaseChangesPage: Codable, Sendable, Hashable {
    /// The zones whose records changed, or that appeared.
    public var changedZones: [ZoneRef]
    /// The zones deleted (or no longer shared with this node).
    public var deletedZones: [ZoneRef]
    /// The page stopped at the limit asked for: ask again from `token` for the rest.
    public var moreComing: Bool
    /// Pass as `since` next time.
    public var token: String

    public init(changedZones: [ZoneRef], deletedZones: [ZoneRef], moreComing: Bool, token: String) {
        self.changedZones = changedZones
        self.deletedZones = deletedZones
        self.moreComing = moreComing
        self.token = token
    }
}

/// A record of a shared zone as this node sees it: the replica's record, or this node's own write not
/// yet accepted by the owner (read your own writes). Its JSON is the record's JSON form with, for a
/// local write, `"pending": true` (waiting for the owner) or `"conflict": true` (the owner's record
/// changed; see `sharesync outbox`), `"outboxID"`, and `"deleted": true` for a deletion not yet sent.
public struct SharedRecord: Codable, Sendable, Hashable {
    public var record: Record
    /// The outbox write this version comes from; `nil` for the replica's record.
    public var outboxID: Int64?
    /// The state of that write: `pending` or `conflict`.
    public var outboxState: OutboxOperation.State?
    /// The local write deletes the record (the replica's version is shown).
    public var deleted: Bool

    public init(record: Record, outboxID: Int64? = nil, outboxState: OutboxOperation.State? = nil, deleted: Bool = false) {
        self.record = record
        self.outboxID = outboxID
        self.outboxState = outboxState
        self.deleted = deleted
    }

    private enum Keys: String, CodingKey {
        case pending, conflict, outboxID, deleted
    }

    public init(from decoder: any Decoder) throws {
        record = try Record(from: decoder)
        let c = try decoder.container(keyedBy: Keys.self)
        outboxID = try c.decodeIfPresent(Int64.self, forKey: .outboxID)
        if try c.decodeIfPresent(Bool.self, forKey: .pending) == true {
            outboxState = .pending
        } else if try c.decodeIfPresent(Bool.self, forKey: .conflict) == true {
            outboxState = .conflict
        }
        deleted = try c.decodeIfPresent(Bool.self, forKey: .deleted) ?? false
    }

    public func encode(to encoder: any Encoder) throws {
        try record.encode(to: encoder)
        guard let outboxState else { return }
        var c = encoder.container(keyedBy: Keys.self)
        try c.encode(outboxState == .pending, forKey: .pending)
        if outboxState == .conflict { try c.encode(true, forKey: .conflict) }
        try c.encodeIfPresent(outboxID, forKey: .outboxID)
        if deleted { try c.encode(true, forKey: .deleted) }
    }

    /// The marker people see after the record's header: `[pending]`, `[conflict]`, or nothing.
    public var marker: String? {
        guard let outboxState else { return nil }
        return "[\(outboxState.rawValue)\(deleted ? " deletion" : ""), outbox \(outboxID.map(String.init) ?? "?")]"
    }
}

/// A write in the outbox, as `outboxList` shows it.
public struct OutboxItem: Codable, Sendable, Hashable {
    public var id: Int64
    public var ownerName: String
    public var zoneName: String
    /// The names of the records it saves.
    public var records: [String]
    /// The names of the records it deletes.
    public var deleting: [String]
    public var state: OutboxOperation.State
    public var savePolicy: SavePolicy
    /// Why the owner did not accept it (conflict and refused).
    public var error: ControlError?
    /// The records as this node wrote them.
    public var saving: [Record]
    /// The owner's version of each record in conflict.
    public var serverRecords: [Record]
    /// The fields the write sets in each record it saves that notes them, by record name: on a
    /// conflict `--keep mine` (``OutboxConflictChoice/mine``) sends those (and the parent, for the
    /// records in ``parentChanged``) over the owner's record, whose other fields stay; a record's
    /// other fields in ``saving`` are as this node last saw them. A record with no entry here nor in
    /// ``parentChanged`` notes nothing (built whole, or queued by an older version) and is sent
    /// whole. (Absent from an answer of a node before it.)
    public var changedKeys: [String: [String]]?
    /// The records whose parent the write sets (see ``changedKeys``).
    public var parentChanged: [String]?

    public init(owner: String, operation: OutboxOperation) {
        id = operation.id
        ownerName = owner
        zoneName = operation.zoneName
        records = operation.saving.map(\.recordID.recordName)
        deleting = operation.deleting
        state = operation.state
        savePolicy = operation.savePolicy
        error = operation.error.map(ControlError.init)
        saving = operation.saving
        serverRecords = operation.serverRecords
        // As ``ParticipantSync/keepingMine(_:over:)`` reads them.
        let noting = operation.saving.filter { !$0.changedKeys.isEmpty || $0.parentChanged }
        changedKeys = Dictionary(noting.map { ($0.recordID.recordName, $0.changedKeys.sorted()) }, uniquingKeysWith: { first, _ in first })
        parentChanged = operation.saving.filter(\.parentChanged).map(\.recordID.recordName)
    }
}

/// What `outboxResolve` did.
public struct OutboxResolution: Codable, Sendable, Hashable {
    public enum Outcome: String, Codable, Sendable {
        /// Sent again and accepted by the owner.
        case sent
        /// Dropped: the owner's version stays.
        case dropped
        /// Waiting for the owner (not connected, or no answer yet).
        case pending
        /// Sent again and in conflict again (the owner's record changed once more).
        case conflict
        /// Sent again and refused.
        case refused
    }

    public var id: Int64
    public var outcome: Outcome
    /// The write as it stands, while it is still in the outbox.
    public var item: OutboxItem?

    public init(id: Int64, outcome: Outcome, item: OutboxItem? = nil) {
        self.id = id
        self.outcome = outcome
        self.item = item
    }
}
