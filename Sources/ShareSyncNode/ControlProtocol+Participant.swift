import Foundation
import ShareSyncCore

/// A shared zone in the replica: whose it is and how many records it holds.
public struct SharedZoneInfo: Codable, Sendable, Hashable {
    public var ownerName: String
    public var zoneName: String
    public var records: Int

    public init(ownerName: String, zoneName: String, records: Int) {
        self.ownerName = ownerName
        self.zoneName = zoneName
        self.records = records
    }
}

/// What `accept` returns once the share's records are in the replica.
public struct AcceptedShare: Codable, Sendable, Hashable {
    public var ownerName: String
    public var title: String?
    /// The share's record name.
    public var shareName: String
    public var permission: Participant.Permission
    /// The owner's zones now in the replica, with their record counts.
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

    public init(outcome: Outcome, record: Record? = nil) {
        self.outcome = outcome
        self.record = record
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

    public init(changes: [ChangeInfo], token: String) {
        self.changes = changes
        self.token = token
    }
}
