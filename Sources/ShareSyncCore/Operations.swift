import Foundation

/// How a save treats the record already on the server, like `CKModifyRecordsOperation.RecordSavePolicy`.
public enum SavePolicy: String, Sendable, Hashable, Codable, CaseIterable {
    /// Save only if the record's ``Record/recordChangeTag`` matches the server's (the default);
    /// otherwise fail with ``ShareSyncError/Code/serverRecordChanged`` carrying the server's record.
    case ifServerRecordUnchanged
    /// Write only the keys in ``Record/changedKeys`` (and the parent, if it was set) over the server's
    /// record, whatever its change tag.
    case changedKeys
    /// Replace the server's record with this one, whatever its change tag.
    case allKeys
}

/// The outcome of `modifyRecords`: one result per record saved and per record ID deleted, like
/// the `(saveResults, deleteResults)` of `CKDatabase.modifyRecords`.
public struct ModifyRecordsResult: Sendable {
    /// Each saved record as the database now holds it, or the error that kept it from being saved.
    public var saveResults: [Record.ID: Result<Record, ShareSyncError>]
    /// For each record ID to delete, success or the error that kept it from being deleted.
    public var deleteResults: [Record.ID: Result<Void, ShareSyncError>]

    /// Results by record ID.
    public init(
        saveResults: [Record.ID: Result<Record, ShareSyncError>] = [:],
        deleteResults: [Record.ID: Result<Void, ShareSyncError>] = [:]
    ) {
        self.saveResults = saveResults
        self.deleteResults = deleteResults
    }

    /// The records that were saved.
    public var savedRecords: [Record] { saveResults.values.compactMap { try? $0.get() } }
    /// The errors by record name, for items that failed.
    public var errors: [String: ShareSyncError] {
        var errors: [String: ShareSyncError] = [:]
        for (id, result) in saveResults { if case .failure(let e) = result { errors[id.recordName] = e } }
        for (id, result) in deleteResults { if case .failure(let e) = result { errors[id.recordName] = e } }
        return errors
    }

    /// The errors by record ID, for items that failed.
    public var errorsByItemID: [Record.ID: ShareSyncError] {
        var errors: [Record.ID: ShareSyncError] = [:]
        for (id, result) in saveResults { if case .failure(let e) = result { errors[id] = e } }
        for (id, result) in deleteResults { if case .failure(let e) = result { errors[id] = e } }
        return errors
    }

    /// Throws ``ShareSyncError/Code/partialFailure`` with the per-item errors
    /// (``ShareSyncError/partialErrorsByItemID``, and ``ShareSyncError/partialErrors`` by name) if any
    /// item failed.
    public func get() throws(ShareSyncError) -> [Record] {
        let byID = errorsByItemID
        if !byID.isEmpty {
            throw ShareSyncError(
                .partialFailure, "\(byID.count) of \(saveResults.count + deleteResults.count) items failed",
                partialErrors: errors, partialErrorsByItemID: byID)
        }
        return savedRecords
    }
}

/// A record that was deleted, as a zone's change feed reports it.
public struct DeletedRecord: Sendable, Hashable, Codable {
    /// The deleted record's ID.
    public var recordID: Record.ID
    /// The deleted record's type.
    public var recordType: String

    /// A deletion of the record `recordID` of type `recordType`.
    public init(recordID: Record.ID, recordType: String) {
        self.recordID = recordID
        self.recordType = recordType
    }
}

/// One entry of a zone's change feed.
public enum RecordChange: Sendable, Hashable {
    /// The record was created or changed (or entered your view); this is its current state.
    case changed(Record)
    /// The record was deleted (or left your view).
    case deleted(DeletedRecord)
}

/// A page of a zone's changes, like the results of `CKFetchRecordZoneChangesOperation`.
public struct ZoneChanges: Sendable {
    /// The zone.
    public var zoneID: RecordZone.ID
    /// The changes in commit order; each record appears at most once, in its latest state.
    public var changes: [RecordChange]
    /// The token to pass next time to get only what comes after this page.
    public var changeToken: ServerChangeToken
    /// Whether more changes wait: fetch again with ``changeToken``.
    public var moreComing: Bool

    /// A page of `changes` in `zoneID`, up to `changeToken`.
    public init(zoneID: RecordZone.ID, changes: [RecordChange], changeToken: ServerChangeToken, moreComing: Bool) {
        self.zoneID = zoneID
        self.changes = changes
        self.changeToken = changeToken
        self.moreComing = moreComing
    }

    /// The changed records of this page.
    public var changedRecords: [Record] {
        changes.compactMap { if case .changed(let r) = $0 { r } else { nil } }
    }
    /// The deleted records of this page.
    public var deletedRecords: [DeletedRecord] {
        changes.compactMap { if case .deleted(let d) = $0 { d } else { nil } }
    }
}

/// A page of a database's zone changes, like the results of `CKFetchDatabaseChangesOperation`.
public struct DatabaseChanges: Sendable {
    /// Zones created or changed since the token.
    public var changedZoneIDs: [RecordZone.ID]
    /// Zones deleted (or, in a shared database, no longer shared with you) since the token.
    public var deletedZoneIDs: [RecordZone.ID]
    /// The token to pass next time.
    public var changeToken: ServerChangeToken
    /// Whether more changes wait: fetch again with ``changeToken``.
    public var moreComing: Bool

    /// A page of zone changes, up to `changeToken`.
    public init(
        changedZoneIDs: [RecordZone.ID], deletedZoneIDs: [RecordZone.ID], changeToken: ServerChangeToken,
        moreComing: Bool
    ) {
        self.changedZoneIDs = changedZoneIDs
        self.deletedZoneIDs = deletedZoneIDs
        self.changeToken = changeToken
        self.moreComing = moreComing
    }
}
