import Foundation
import ShareSyncCore

/// The result of `fetchShareMetadata` and `acceptShare`.
public struct ShareMetadataResult: Codable, Sendable {
    public var share: Record
    public var containerIdentifier: String
    public var ownerIdentity: UserIdentity
    public var hierarchicalRootRecordName: String?
    public var rootRecord: Record?
    public var participantRole: Participant.Role
    public var participantPermission: Participant.Permission
    public var participantStatus: Participant.AcceptanceStatus
    public var recordCount: Int?
    public var participantCount: Int?

    public init(_ metadata: ShareMetadata) {
        share = metadata.share.record
        containerIdentifier = metadata.containerIdentifier
        ownerIdentity = metadata.ownerIdentity
        hierarchicalRootRecordName = metadata.hierarchicalRootRecordID?.recordName
        rootRecord = metadata.rootRecord
        participantRole = metadata.participantRole
        participantPermission = metadata.participantPermission
        participantStatus = metadata.participantStatus
        recordCount = metadata.recordCount
        participantCount = metadata.participantCount
    }

    /// The metadata, with the root record ID in the share's zone.
    public func metadata() throws(ShareSyncError) -> ShareMetadata {
        guard let share = Share(share) else {
            throw ShareSyncError(.invalidArguments, "the share in the metadata is not a share record", rule: .malformedRequest)
        }
        return ShareMetadata(
            share: share, containerIdentifier: containerIdentifier, ownerIdentity: ownerIdentity,
            hierarchicalRootRecordID: hierarchicalRootRecordName.map { Record.ID(recordName: $0, zoneID: share.recordID.zoneID) },
            rootRecord: rootRecord, participantRole: participantRole, participantPermission: participantPermission,
            participantStatus: participantStatus, recordCount: recordCount, participantCount: participantCount)
    }
}

/// An empty result, `{}`.
public struct EmptyResult: Codable, Sendable, Hashable {
    public init() {}
}

/// The result of `subscribe`: the token pushes start from.
public struct SubscribeResult: Codable, Sendable, Hashable {
    public var token: ServerChangeToken
    public init(token: ServerChangeToken) { self.token = token }
}

/// The result of `fetchDatabaseChanges`.
public struct DatabaseChangesResult: Codable, Sendable, Hashable {
    public var changedZones: [String]
    public var deletedZones: [String]
    public var token: ServerChangeToken
    public var moreComing: Bool

    public init(_ changes: DatabaseChanges) {
        changedZones = changes.changedZoneIDs.map(\.zoneName)
        deletedZones = changes.deletedZoneIDs.map(\.zoneName)
        token = changes.changeToken
        moreComing = changes.moreComing
    }

    public func databaseChanges(ownerName: String) -> DatabaseChanges {
        DatabaseChanges(
            changedZoneIDs: changedZones.map { RecordZone.ID(zoneName: $0, ownerName: ownerName) },
            deletedZoneIDs: deletedZones.map { RecordZone.ID(zoneName: $0, ownerName: ownerName) },
            changeToken: token, moreComing: moreComing)
    }
}

/// The result of `fetchZoneChanges`: changes split into `changed` and `deleted`, with `order`
/// (one `c` or `d` per item) giving the commit order.
public struct ZoneChangesResult: Codable, Sendable, Hashable {
    public struct Deleted: Codable, Sendable, Hashable {
        public var recordName: String
        public var recordType: String
    }

    public var zoneName: String
    public var changed: [Record]
    public var deleted: [Deleted]
    public var order: String
    public var token: ServerChangeToken
    public var moreComing: Bool
    public init(_ changes: ZoneChanges) {
        zoneName = changes.zoneID.zoneName
        changed = []
        deleted = []
        order = ""
        for change in changes.changes {
            switch change {
            case .changed(let record):
                changed.append(record)
                order.append("c")
            case .deleted(let d):
                deleted.append(Deleted(recordName: d.recordID.recordName, recordType: d.recordType))
                order.append("d")
            }
        }
        token = changes.changeToken
        moreComing = changes.moreComing
    }

    /// The changes in commit order; a malformed `order` is `invalidArguments`.
    public func zoneChanges(ownerName: String) throws(ShareSyncError) -> ZoneChanges {
        let zoneID = RecordZone.ID(zoneName: zoneName, ownerName: ownerName)
        let changes = try Self.merge(order: order, changed: changed, deleted: deleted, in: zoneID, RecordChange.changed, RecordChange.deleted)
        return ZoneChanges(zoneID: zoneID, changes: changes, changeToken: token, moreComing: moreComing)
    }

    /// The changes in commit order: `changed` and `deleted` (deletions in `zoneID`) interleaved as
    /// `order` says ("c" and "d"), after checking that it accounts for each exactly once.
    package static func merge<Changed, Change>(
        order: String, changed: [Changed], deleted: [Deleted], in zoneID: RecordZone.ID,
        _ makeChanged: (Changed) -> Change, _ makeDeleted: (DeletedRecord) -> Change
    ) throws(ShareSyncError) -> [Change] {
        guard order.utf8.count == changed.count + deleted.count,
            order.utf8.allSatisfy({ $0 == UInt8(ascii: "c") || $0 == UInt8(ascii: "d") }),
            order.utf8.count(where: { $0 == UInt8(ascii: "c") }) == changed.count
        else {
            throw ShareSyncError(.invalidArguments, "order does not match changed and deleted", rule: .malformedRequest)
        }
        var c = changed.makeIterator()
        var d = deleted.makeIterator()
        return order.utf8.map { letter in
            if letter == UInt8(ascii: "c") { return makeChanged(c.next()!) }
            let item = d.next()!
            return makeDeleted(DeletedRecord(recordID: Record.ID(recordName: item.recordName, zoneID: zoneID), recordType: item.recordType))
        }
    }
}

/// The result of `fetchRecords`.
public struct FetchRecordsResult: Codable, Sendable {
    public var records: [Record]
    public var errors: [String: WireError]

    public init(records: [Record], errors: [String: WireError]) {
        self.records = records
        self.errors = errors
    }
}

/// The result of `modifyRecords`.
public struct ModifyRecordsWireResult: Codable, Sendable {
    public var saved: [Record]
    public var deleted: [String]
    public var errors: [String: WireError]

    public init(saved: [Record], deleted: [String], errors: [String: WireError]) {
        self.saved = saved
        self.deleted = deleted
        self.errors = errors
    }

    public init(_ result: ModifyRecordsResult) {
        saved = result.savedRecords.sorted { $0.recordID.recordName < $1.recordID.recordName }
        deleted = result.deleteResults.compactMap { id, r in (try? r.get()) == nil ? nil : id.recordName }.sorted()
        errors = result.errors.mapValues { WireError($0) }
    }
}

/// A push, sent without a request after `subscribe`: every change in the caller's view since the
/// subscription's token, and the token after them.
///
/// A push that would pass the owner's response size is cut: `moreComing` is true, the zone where it
/// stopped has `moreComing` and the token of the last change included, and zones listed in
/// `databaseChanges` after it have no entry in `zoneChanges`. The client applies it, then fetches
/// every zone of the owner from its stored token before it applies another push (protocol.md, "Pushes").
public struct ChangesPush: Codable, Sendable {
    public var push = "changes"
    public var databaseChanges: DatabaseChangesResult
    public var zoneChanges: [ZoneChangesResult]
    public var token: ServerChangeToken
    /// True on a push cut by the response size; absent otherwise.
    public var moreComing: Bool?

    public init(
        databaseChanges: DatabaseChangesResult, zoneChanges: [ZoneChangesResult], token: ServerChangeToken, moreComing: Bool = false
    ) {
        self.databaseChanges = databaseChanges
        self.zoneChanges = zoneChanges
        self.token = token
        self.moreComing = moreComing ? true : nil
    }
}
