import Foundation
import ShareSyncNode

/// A container's private or shared database, like `CKDatabase`.
///
/// - The **private** database holds the node owner's zones and records (and the shares of them). Every
///   call is carried out by the node at once.
/// - The **shared** database holds what other owners share with this node, as its replica has it: reads
///   are local (they work while an owner is unreachable, and show this node's own writes not yet
///   accepted), and writes go to the record's owner, which checks the participant's permission. While
///   the owner cannot be reached a write waits in the node's outbox and goes out on reconnect (see
///   ``ModifyRecordsResults/queued``).
///
/// Errors are `ShareSyncError` with CloudKit's codes: `unknownItem`, `serverRecordChanged` (its
/// `ShareSyncError.serverRecord` is the stored record, to merge with), `zoneNotFound`,
/// `permissionFailure`, `invalidArguments` (with a `Rule` naming what was wrong)...
public struct Database: Sendable {
    /// Which database.
    public enum Scope: String, Sendable, Hashable {
        /// The node owner's own zones and records.
        case `private`
        /// The zones others share with this node.
        case shared
    }

    let container: Container
    /// Which database this is.
    public let scope: Scope

    private var transport: Transport { container.transport }
    private var shared: Bool { scope == .shared }

    // MARK: Backups

    /// Copies this database, as it is now, to a new file at `path` (absolute, mode 0600) while the node
    /// runs: reads go on meanwhile, writes wait until the copy is made (what `sharesync backup` does,
    /// with `--shared` for the shared database). To restore, stop the node and put the copy in place
    /// of the home's `private.sqlite` (or `replica.sqlite`), removing its `-wal` and `-shm`.
    /// - A private database restored from the copy refuses every change token and change tag of what
    ///   happened after the copy, so its participants fetch again and miss nothing; a copy of the
    ///   home's files taken while the node runs cannot ensure that.
    /// - A shared database restored from the copy catches up from the change tokens it holds (or
    ///   fetches again where an owner no longer has their history); this node's writes queued after
    ///   the copy are not in it, and those of its outbox that went out after the copy are sent again
    ///   (an owner applies none of at least a participant's newest 64 writes twice; an older one may
    ///   run again: a save then meets `serverRecordChanged`, or with `allKeys` or `changedKeys`
    ///   overwrites, a deletion deletes again).
    ///
    /// A file at `path` is not replaced, and a name SQLite takes for a side file (ending in `-journal`,
    /// `-wal`, `-shm`) is refused (`invalidArguments`).
    public func backup(to path: String) async throws(ShareSyncError) -> BackupResult {
        try await transport.call(.backup(path: path, shared: shared ? true : nil))
    }

    // MARK: Records

    /// Saves a record (`CKDatabase.save(_:)`): a new record, or a change to one fetched before (its
    /// `Record.recordChangeTag` must still be the stored one, else `serverRecordChanged`). Returns the
    /// record as stored, with its new change tag. In the shared database, a write queued for an
    /// unreachable owner returns the record as given.
    @discardableResult
    public func save(_ record: Record) async throws(ShareSyncError) -> Record {
        let results = try await modifyRecords(saving: [record], deleting: [])
        if results.queued[record.recordID] != nil { return record }
        guard let result = results.saveResults[record.recordID] else {
            throw ShareSyncError(.internalError, "the node did not answer for record \(record.recordID.recordName)")
        }
        return try result.get()
    }

    /// Fetches a record by ID (`CKDatabase.record(for:)`); `unknownItem` if there is none. In the shared
    /// database the ID's zone names the owner (`RecordZone.ID.ownerName`), and this node's own write
    /// not yet accepted by the owner is returned in place of the replica's record.
    public func record(for recordID: Record.ID) async throws(ShareSyncError) -> Record {
        let zoneID = recordID.zoneID
        if shared {
            let found: SharedRecord = try await transport.call(
                .sharedRecordGet(owner: Self.owner(zoneID), zone: zoneID.zoneName, name: recordID.recordName))
            return found.record
        }
        return try await transport.call(.recordGet(zone: zoneID.zoneName, name: recordID.recordName))
    }

    /// Fetches several records (`CKDatabase.records(for:)`): each ID's record or its own error.
    public func records(for recordIDs: [Record.ID]) async throws(ShareSyncError) -> [Record.ID: Result<Record, ShareSyncError>] {
        var results: [Record.ID: Result<Record, ShareSyncError>] = [:]
        for id in recordIDs {
            do {
                results[id] = .success(try await record(for: id))
            } catch where error.code == .unknownItem || error.code == .zoneNotFound {
                results[id] = .failure(error)
            }
        }
        return results
    }

    /// Deletes a record (and the records whose `deleteSelf` references point at it); `unknownItem` if
    /// there is none. Returns its ID.
    @discardableResult
    public func deleteRecord(withID recordID: Record.ID) async throws(ShareSyncError) -> Record.ID {
        let results = try await modifyRecords(saving: [], deleting: [recordID])
        if results.queued[recordID] != nil { return recordID }
        guard let result = results.deleteResults[recordID] else {
            throw ShareSyncError(.internalError, "the node did not answer for record \(recordID.recordName)")
        }
        try result.get()
        return recordID
    }

    /// Saves and deletes records in one request (`CKDatabase.modifyRecords(saving:deleting:savePolicy:atomically:)`),
    /// with one result per item.
    ///
    /// - `savePolicy`: `ifServerRecordUnchanged` (the default) saves a record only if its change tag is
    ///   the stored one (a new record: only if none of that name exists), else that item fails with
    ///   `serverRecordChanged`; `changedKeys` writes the record's `Record.changedKeys` over the stored
    ///   record; `allKeys` replaces it.
    /// - `atomically`: all items or none (the private database: the whole request; the shared database:
    ///   each zone's items, as CloudKit does, up to the owner's `maximumItemsPerRequest` (400 by default)
    ///   and response size: more go to the owner as several requests, each all or none on its own).
    ///   When an atomic request fails, the items that did not fail themselves carry `batchRequestFailed`.
    ///
    /// A request refused as a whole (too many items, a zone that is not shared with this node) throws.
    /// In the shared database, items of several zones go to their owners zone by zone, in the order the
    /// zones first appear; once one zone's items went through, a later zone refused as a whole does not
    /// throw (the earlier results would be lost): each of its items fails with that refusal.
    public func modifyRecords(
        saving recordsToSave: [Record], deleting recordIDsToDelete: [Record.ID], savePolicy: SavePolicy = .ifServerRecordUnchanged,
        atomically: Bool = true
    ) async throws(ShareSyncError) -> ModifyRecordsResults {
        try await modifyRecords(
            saving: recordsToSave, deleting: recordIDsToDelete, savePolicy: savePolicy, atomically: atomically, queue: true)
    }

    /// `queue` false: in the shared database, items whose owner cannot take them now fail with
    /// `networkUnavailable` instead of waiting in the node's outbox (the sync engine keeps its own).
    func modifyRecords(
        saving recordsToSave: [Record], deleting recordIDsToDelete: [Record.ID], savePolicy: SavePolicy, atomically: Bool,
        queue: Bool
    ) async throws(ShareSyncError) -> ModifyRecordsResults {
        let deleting = recordIDsToDelete.map(RecordRef.init)
        let result: ModifyResult =
            if shared {
                try await transport.call(
                    .sharedRecordModify(
                        saving: recordsToSave, deleting: deleting, policy: savePolicy, atomically: atomically, queue: queue))
            } else {
                try await transport.call(
                    .recordModify(saving: recordsToSave, deleting: deleting, policy: savePolicy, atomically: atomically))
            }
        return ModifyRecordsResults(result, saving: recordsToSave, deleting: recordIDsToDelete, byNameToo: !shared)
    }

    // MARK: Queries

    /// The records of a zone that match a query, in its order (`CKQueryOperation`), at most
    /// `resultsLimit` (capped to 1,000) per call; pass the returned cursor to get the next page.
    /// The query runs in the node's store. In the shared database it reads the replica (this node's own
    /// writes not yet accepted are not applied).
    public func records(
        matching query: Query, inZoneWith zoneID: RecordZone.ID = .default, resultsLimit: Int = QueryResults.maximumResultsLimit,
        cursor: QueryResults.Cursor? = nil
    ) async throws(ShareSyncError) -> QueryResults {
        let page: QueryPage = try await transport.call(
            .recordQuery(
                shared: shared, owner: shared ? Self.owner(zoneID) : nil, zone: zoneID.zoneName, query: query,
                limit: resultsLimit, cursor: cursor?.offset))
        return QueryResults(records: page.records, cursor: page.cursor.map(QueryResults.Cursor.init(offset:)))
    }

    // MARK: Zones

    /// Creates a zone in the private database (`CKDatabase.save(_:)` of a `CKRecordZone`); one that exists
    /// already is returned as it is. The shared database's zones are its owners': saving one is
    /// `invalidArguments`.
    @discardableResult
    public func save(_ zone: RecordZone) async throws(ShareSyncError) -> RecordZone {
        guard !shared else {
            throw ShareSyncError(
                .invalidArguments, "zones of the shared database belong to their owners: create \(zone.zoneID.zoneName) in the owner's private database",
                zoneID: zone.zoneID)
        }
        let info: ZoneInfo = try await transport.call(.zoneCreate(name: zone.zoneID.zoneName))
        return RecordZone(zoneID: RecordZone.ID(zoneName: info.zoneName))
    }

    /// Every zone of the database (`CKDatabase.allRecordZones()`); shared zones carry their owner's name.
    public func allRecordZones() async throws(ShareSyncError) -> [RecordZone] {
        if shared {
            let zones: [SharedZoneInfo] = try await transport.call(.sharedZoneList)
            return zones.map { RecordZone(zoneID: RecordZone.ID(zoneName: $0.zoneName, ownerName: $0.ownerName)) }
        }
        let zones: [ZoneInfo] = try await transport.call(.zoneList)
        return zones.map { RecordZone(zoneID: RecordZone.ID(zoneName: $0.zoneName)) }
    }

    /// Deletes a zone and everything in it. In the shared database this leaves the zone's share (the
    /// zone must hold one share; see ``Container/leave(_:locally:)``).
    public func deleteRecordZone(withID zoneID: RecordZone.ID) async throws(ShareSyncError) {
        let _: Done =
            if shared {
                try await transport.call(.leave(owner: Self.owner(zoneID), zone: zoneID.zoneName, share: nil, local: nil))
            } else {
                try await transport.call(.zoneDelete(name: zoneID.zoneName))
            }
    }

    // MARK: Changes

    /// The zones changed and deleted since a token (`CKFetchDatabaseChangesOperation`); `nil` gives every
    /// zone. Pass the returned token next time; fetch again while ``DatabaseChangesResult/moreComing``.
    public func databaseChanges(
        since token: ServerChangeToken?, resultsLimit: Int? = nil
    ) async throws(ShareSyncError) -> DatabaseChangesResult {
        let page: DatabaseChangesPage = try await transport.call(
            .databaseChanges(shared: shared, since: token?.stringValue, limit: resultsLimit))
        func id(_ ref: ZoneRef) -> RecordZone.ID {
            RecordZone.ID(zoneName: ref.zoneName, ownerName: ref.ownerName ?? RecordZone.ID.currentUserDefaultName)
        }
        return DatabaseChangesResult(
            modifiedZoneIDs: page.changedZones.map(id), deletedZoneIDs: page.deletedZones.map(id),
            changeToken: ServerChangeToken(stringValue: page.token), moreComing: page.moreComing)
    }

    /// A zone's records changed and deleted since a token (`CKFetchRecordZoneChangesOperation`); `nil`
    /// gives every record. With `resultsLimit`, a page at a time: fetch again from the returned token
    /// while ``RecordZoneChangesResult/moreComing``.
    public func recordZoneChanges(
        inZoneWith zoneID: RecordZone.ID, since token: ServerChangeToken?, resultsLimit: Int? = nil
    ) async throws(ShareSyncError) -> RecordZoneChangesResult {
        let page: ChangesPage = try await transport.call(
            .changes(
                shared: shared, since: token?.stringValue, waitSeconds: nil, zone: zoneID.zoneName,
                owner: shared ? Self.owner(zoneID) : nil, limit: resultsLimit))
        var result = RecordZoneChangesResult(
            zoneID: zoneID, changeToken: ServerChangeToken(stringValue: page.token), moreComing: page.moreComing)
        for change in page.changes {
            let changeZone = RecordZone.ID(zoneName: change.zoneName, ownerName: change.ownerName ?? zoneID.ownerName)
            switch change.kind {
            case .recordChanged:
                if let record = change.record { result.modifications.append(record) }
            case .recordDeleted:
                if let name = change.recordName {
                    result.deletions.append(
                        DeletedRecord(recordID: Record.ID(recordName: name, zoneID: changeZone), recordType: change.recordType ?? ""))
                }
            case .zoneDeleted:
                result.zoneDeleted = true
            }
        }
        return result
    }

    /// A token for "now": changes since it are only those made from now on.
    public func currentChangeToken() async throws(ShareSyncError) -> ServerChangeToken {
        let page: ChangesPage = try await transport.call(.currentChangeToken(shared: shared))
        return ServerChangeToken(stringValue: page.token)
    }

    /// The owner a shared zone ID names, or `nil` for "the only owner sharing a zone of that name".
    static func owner(_ zoneID: RecordZone.ID) -> String? {
        zoneID.explicitOwnerName
    }
}

/// What ``Database/modifyRecords(saving:deleting:savePolicy:atomically:)`` did, item by item, like the
/// `(saveResults, deleteResults)` of `CKDatabase.modifyRecords`.
public struct ModifyRecordsResults: Sendable {
    /// Each record saved (as now stored) or the error that kept it from being saved.
    public var saveResults: [Record.ID: Result<Record, ShareSyncError>] = [:]
    /// Each record deleted, or the error that kept it from being deleted.
    public var deleteResults: [Record.ID: Result<Void, ShareSyncError>] = [:]
    /// Shared database only: the items waiting in the node's outbox because their owner was not
    /// reachable, with the outbox operation that holds them. They go out when the owner is reached; a
    /// conflict or refusal then stays in the outbox (`sharesync outbox list`). They have no entry in
    /// ``saveResults`` or ``deleteResults``.
    public var queued: [Record.ID: Int64] = [:]

    /// `byNameToo`: the private database, where zone and name alone name a record (the shared one's
    /// results could go to another owner's ID of the same zone and name).
    init(_ result: ModifyResult, saving: [Record], deleting: [Record.ID], byNameToo: Bool = false) {
        // The node names records by zone and name; map them back to the IDs the caller gave.
        var given: [String: Record.ID] = [:]
        // By zone and name alone too: the private database answers under the default owner a record
        // the caller named with its own user record name (which the store accepts). Before, such a
        // delete succeeded and then threw "the node did not answer".
        var byName: [String: Record.ID] = [:]
        for id in saving.map(\.recordID) + deleting {
            given[Self.key(RecordRef(id))] = id
            if byNameToo { byName[Self.key(RecordRef(ownerName: nil, zoneName: id.zoneID.zoneName, recordName: id.recordName))] = id }
        }
        func id(_ ref: RecordRef) -> Record.ID {
            given[Self.key(ref)] ?? given[Self.key(RecordRef(ownerName: nil, zoneName: ref.zoneName, recordName: ref.recordName))]
                ?? byName[Self.key(RecordRef(ownerName: nil, zoneName: ref.zoneName, recordName: ref.recordName))]
                ?? Record.ID(
                    recordName: ref.recordName,
                    zoneID: RecordZone.ID(zoneName: ref.zoneName, ownerName: ref.ownerName ?? RecordZone.ID.currentUserDefaultName))
        }
        for record in result.saved { saveResults[id(RecordRef(record.recordID))] = .success(record) }
        for ref in result.deleted { deleteResults[id(ref)] = .success(()) }
        let deletedNames = Set(deleting.map { Self.key(RecordRef($0)) })
        for failure in result.failed {
            let recordID = id(failure.record)
            let error = failure.error.shareSyncError
            if deletedNames.contains(Self.key(RecordRef(recordID))) {
                deleteResults[recordID] = .failure(error)
            } else {
                saveResults[recordID] = .failure(error)
            }
        }
        for operation in result.queued {
            for ref in operation.records { queued[id(ref)] = operation.outboxID }
        }
    }

    private static func key(_ ref: RecordRef) -> String {
        "\(ref.ownerName ?? "")\u{0}\(ref.zoneName)\u{0}\(ref.recordName)"
    }

    /// The records saved.
    public var savedRecords: [Record] { answered.savedRecords }

    /// Throws `ShareSyncError.Code.partialFailure` if any item failed: its `partialErrorsByItemID` holds
    /// each failed item's error by record ID (as `CKError.partialErrorsByItemID`), `partialErrors` the
    /// same by record name. Items in ``queued`` are not failures.
    public func get() throws(ShareSyncError) { _ = try answered.get() }

    /// The saves and deletes answered, as the core's `ModifyRecordsResult` (whose `get()` this shares).
    private var answered: ModifyRecordsResult { ModifyRecordsResult(saveResults: saveResults, deleteResults: deleteResults) }
}

/// The zones changed since a token, like the results of `CKFetchDatabaseChangesOperation`.
public struct DatabaseChangesResult: Sendable, Hashable {
    /// Zones whose records changed, or that appeared.
    public var modifiedZoneIDs: [RecordZone.ID]
    /// Zones deleted (or, in the shared database, no longer shared with this node).
    public var deletedZoneIDs: [RecordZone.ID]
    /// Pass it next time to get only later changes.
    public var changeToken: ServerChangeToken
    /// More changes wait: fetch again from ``changeToken``.
    public var moreComing: Bool
}

/// A zone's changes since a token, like the results of `CKFetchRecordZoneChangesOperation`.
public struct RecordZoneChangesResult: Sendable, Hashable {
    /// The zone.
    public var zoneID: RecordZone.ID
    /// Records created or changed, each in its latest state.
    public var modifications: [Record] = []
    /// Records deleted (or no longer shared with this node), with their types.
    public var deletions: [DeletedRecord] = []
    /// The zone itself was deleted (or is no longer shared with this node).
    public var zoneDeleted = false
    /// Pass it next time to get only later changes.
    public var changeToken: ServerChangeToken
    /// More changes wait: fetch again from ``changeToken``.
    public var moreComing: Bool

    init(zoneID: RecordZone.ID, changeToken: ServerChangeToken, moreComing: Bool) {
        self.zoneID = zoneID
        self.changeToken = changeToken
        self.moreComing = moreComing
    }
}
