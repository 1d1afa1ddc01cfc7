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

extension Record {
    /// Whether a field holds a reference with the `deleteSelf` action.
    package var hasDeleteSelfReferences: Bool {
        fields.values.contains(where: \.hasDeleteSelfReference)
    }

    /// The names of the records this record's `deleteSelf` references name (in its own zone).
    package var deleteSelfTargetNames: Set<String> {
        var names: Set<String> = []
        for value in fields.values where value.hasDeleteSelfReference {
            for reference in value.references where reference.action == .deleteSelf { names.insert(reference.recordID.recordName) }
        }
        return names
    }

    /// `records` in an order where the record a `deleteSelf` reference names, when it is among them
    /// (same zone), comes before the record that refers to it, and so does a record's parent when it
    /// is among them. A write in this order, cut into several requests, never has a reference's
    /// target in a later request than the reference (the owner checks that the target exists,
    /// `referenceViolation`), and the owner saves a target before its referrers (and a new parent
    /// before its new children, which a participant's save needs to be in a share). A record moves
    /// only to come before a record that needs it: records are taken in the order given, each placed
    /// after what it needs (depth first). In a loop of references the record met first is placed
    /// last. Records without `deleteSelf` references come back as given, at the cost of one pass
    /// (their cut does not change: a write queued before this order existed is cut as it was).
    package static func orderedForDeleteSelfTargets(_ records: [Record]) -> [Record] {
        guard records.contains(where: \.hasDeleteSelfReferences) else { return records }
        return orderedForTargets(records)
    }

    /// `records` in an order where each record's parent, and each record its `deleteSelf` references
    /// name, comes before it when it is among them (``orderedForDeleteSelfTargets(_:)``'s order, for
    /// records without `deleteSelf` references too). Records already in such an order come back as
    /// given, without a copy (a loop of references has no such order: it may come back in another).
    /// A participant's write is put in this order when it is made, before it is sent or queued: cut
    /// into several requests, a new child in an earlier request than its new parent was refused as
    /// outside the participant's view. The owner saves a request's records in this order too. (Not in
    /// ``orderedForDeleteSelfTargets(_:)``: a write queued by an older version keeps the order it was
    /// cut in.)
    package static func orderedForTargets(_ records: [Record]) -> [Record] {
        guard records.count > 1 else { return records }
        var index: [String: Int] = [:]
        for (i, record) in records.enumerated() {
            let key = record.recordID.zoneID.zoneName + "\u{0}" + record.recordID.recordName
            if index[key] == nil { index[key] = i }
        }
        func needs(_ i: Int) -> [Int] {
            let record = records[i]
            let zone = record.recordID.zoneID.zoneName + "\u{0}"
            var found: [Int] = []
            if let parent = record.parent, let j = index[zone + parent.recordID.recordName], j != i { found.append(j) }
            for target in record.deleteSelfTargetNames {
                if let j = index[zone + target], j != i { found.append(j) }
            }
            return found.sorted()
        }
        // Already in order (the common case: nothing needs a record given after it): as given.
        guard records.indices.contains(where: { i in needs(i).last.map { $0 > i } ?? false }) else { return records }
        // Depth first, without recursion (a chain of references may be as long as the write).
        var state = [UInt8](repeating: 0, count: records.count)  // 0 new, 1 on the path, 2 placed
        var ordered: [Record] = []
        ordered.reserveCapacity(records.count)
        for root in records.indices where state[root] == 0 {
            var stack: [(node: Int, next: [Int], cursor: Int)] = [(root, needs(root), 0)]
            state[root] = 1
            while !stack.isEmpty {
                let top = stack.count - 1
                if stack[top].cursor < stack[top].next.count {
                    let j = stack[top].next[stack[top].cursor]
                    stack[top].cursor += 1
                    if state[j] == 0 {
                        state[j] = 1
                        stack.append((j, needs(j), 0))
                    }
                } else {
                    let node = stack.removeLast().node
                    state[node] = 2
                    ordered.append(records[node])
                }
            }
        }
        return ordered
    }
}
