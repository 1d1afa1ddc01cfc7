import Foundation
import GRDB
import ShareSyncCore

extension PrivateDatabase {
    /// Saves and deletes records in one request, like `CKDatabase.modifyRecords`.
    ///
    /// - An atomic request is one transaction: if any item fails, nothing changes, the failing items
    ///   carry their own errors and the others ``ShareSyncError/Code/batchRequestFailed``.
    /// - A non-atomic request applies each item on its own.
    /// - Deleting a record also deletes the records whose `deleteSelf` references point at it,
    ///   transitively. Deleting a record that does not exist fails with ``ShareSyncError/Code/unknownItem``
    ///   (as in CloudKit), unless this request deleted it already (a cascade).
    /// - More than ``Limits/maximumItemsPerRequest`` items fail the whole request with
    ///   ``ShareSyncError/Code/limitExceeded`` and change nothing.
    public func modifyRecords(
        saving recordsToSave: [ShareSyncCore.Record] = [], deleting recordIDsToDelete: [ShareSyncCore.Record.ID] = [],
        savePolicy: SavePolicy = .ifServerRecordUnchanged, atomically: Bool = true
    ) throws(ShareSyncError) -> ModifyRecordsResult {
        try modifyRecords(
            saving: recordsToSave, deleting: recordIDsToDelete, savePolicy: savePolicy, atomically: atomically,
            as: ownerName, authorize: { _ in })
    }

    /// Saves a batch of records in one transaction, replacing any stored record of the same name
    /// (`allKeys`): all of them or none, whatever their number. This is the record import; the caller
    /// bounds the batch's size in bytes. A `deleteSelf` reference is taken as it is, even to a record
    /// that does not exist (an import's batch may name records of a later batch). Fails like an atomic ``modifyRecords(saving:deleting:savePolicy:atomically:)``:
    /// the failing items carry their own errors and the others ``ShareSyncError/Code/batchRequestFailed``.
    ///
    /// `savePolicy` (default `allKeys`: each record replaces any of that name) applies to every record.
    public func importRecords(
        _ records: [ShareSyncCore.Record], savePolicy: SavePolicy = .allKeys
    ) throws(ShareSyncError) -> ModifyRecordsResult {
        try modifyRecords(
            saving: records, deleting: [], savePolicy: savePolicy, atomically: true, as: ownerName, authorize: { _ in },
            itemLimit: .max, checkingReferenceTargets: false)
    }

    /// Fetches records by ID; each missing one fails with ``ShareSyncError/Code/unknownItem``, or
    /// ``ShareSyncError/Code/zoneNotFound`` when its zone does not exist (as in CloudKit).
    public func fetchRecords(_ recordIDs: [ShareSyncCore.Record.ID]) throws(ShareSyncError) -> [ShareSyncCore.Record.ID: Result<ShareSyncCore.Record, ShareSyncError>] {
        try read { db in
            var results: [Record.ID: Result<Record, ShareSyncError>] = [:]
            for id in recordIDs {
                do {
                    try checkOwner(id.zoneID)
                    let json = try Data.fetchOne(
                        db.cachedStatement(sql: "SELECT json FROM record WHERE zone = ? AND name = ?"),
                        arguments: [id.zoneID.zoneName, id.recordName])
                    guard let json else {
                        if try Bool.fetchOne(db.cachedStatement(sql: "SELECT 1 FROM zone WHERE name = ?"), arguments: [id.zoneID.zoneName]) == nil {
                            throw ShareSyncError(.zoneNotFound, "zone \(id.zoneID.zoneName) does not exist", recordID: id)
                        }
                        throw ShareSyncError(.unknownItem, "record \(id.recordName) does not exist", recordID: id)
                    }
                    results[id] = .success(present(try Record(jsonData: json), zoneID: id.zoneID, in: db))
                } catch let error as ShareSyncError {
                    results[id] = .failure(error)
                }
            }
            return results
        }
    }

    /// A zone's records in the byte order of their names, those after `after` (nil: from the first),
    /// at most `limit` and no more than `byteBudget` bytes of their stored JSON (the first always
    /// comes): one page of a listing (`sharesync record list`). An empty page ends the listing.
    /// `zoneNotFound` if the zone does not exist.
    public func records(inZone zoneName: String, after: String?, limit: Int, byteBudget: Int) throws(ShareSyncError) -> (records: [ShareSyncCore.Record], bytes: Int) {
        try read { db in
            guard try Bool.fetchOne(db.cachedStatement(sql: "SELECT 1 FROM zone WHERE name = ?"), arguments: [zoneName]) ?? false else {
                throw ShareSyncError(.zoneNotFound, "zone \(zoneName) does not exist", zoneID: zoneID(zoneName))
            }
            let owned = zoneID(zoneName)
            return try listingPage(
                db.cachedStatement(sql: "SELECT json FROM record WHERE zone = ? AND name > ? ORDER BY name LIMIT ?"),
                arguments: [zoneName, after ?? "", max(1, limit)], byteBudget: byteBudget
            ) { json in present(try Record(jsonData: json), zoneID: owned, in: db) }
        }
    }

    /// Fetches one record; throws ``ShareSyncError/Code/unknownItem`` if it does not exist.
    public func fetchRecord(_ recordID: ShareSyncCore.Record.ID) throws(ShareSyncError) -> ShareSyncCore.Record {
        try fetchRecords([recordID])[recordID]!.get()
    }

    /// The shared implementation of modifyRecords, for the owner and for participants.
    /// `authorize` runs inside the transaction for each item before it is applied. At most `itemLimit`
    /// items (``Limits/maximumItemsPerRequest`` when nil). `checkingReferenceTargets` false takes a
    /// `deleteSelf` reference to a record that does not exist (the import).
    func modifyRecords(
        saving recordsToSave: [Record], deleting recordIDsToDelete: [Record.ID], savePolicy: SavePolicy,
        atomically: Bool, as actor: String, authorize: (inout WriteContext) throws -> Void, itemLimit: Int? = nil,
        checkingReferenceTargets: Bool = true
    ) throws(ShareSyncError) -> ModifyRecordsResult {
        try checkItemCount(recordsToSave.count + recordIDsToDelete.count, itemLimit: itemLimit)
        return try write { db in
            try modifyRecords(
                in: db, saving: recordsToSave, deleting: recordIDsToDelete, savePolicy: savePolicy, atomically: atomically, as: actor,
                authorize: authorize, checkingReferenceTargets: checkingReferenceTargets)
        }
    }

    /// Refuses a request of more than `itemLimit` items (``Limits/maximumItemsPerRequest`` when nil).
    func checkItemCount(_ count: Int, itemLimit: Int? = nil) throws(ShareSyncError) {
        let itemLimit = itemLimit ?? limits.maximumItemsPerRequest
        guard count <= itemLimit else {
            throw ShareSyncError(
                .limitExceeded,
                "a request may save and delete at most \(itemLimit) items; this one has \(count)",
                rule: .itemsPerRequest)
        }
    }

    /// The body of ``modifyRecords(saving:deleting:savePolicy:atomically:as:authorize:itemLimit:)``, in
    /// the caller's write transaction (the item count already checked: ``checkItemCount(_:itemLimit:)``).
    func modifyRecords(
        in db: Database, saving recordsToSave: [Record], deleting recordIDsToDelete: [Record.ID], savePolicy: SavePolicy,
        atomically: Bool, as actor: String, authorize: (inout WriteContext) throws -> Void, checkingReferenceTargets: Bool = true
    ) throws -> ModifyRecordsResult {
        var ctx = try WriteContext(db: db, database: self, actor: actor)
        if !checkingReferenceTargets {
            ctx.requestSaves = nil
        } else if recordsToSave.contains(where: \.hasDeleteSelfReferences) {
            ctx.requestSaves = Dictionary(grouping: recordsToSave, by: \.recordID.zoneID.zoneName).mapValues { Set($0.map(\.recordID.recordName)) }
        }
        var batch = ItemBatch(ctx: ctx, saving: recordsToSave, deleting: recordIDsToDelete, savePolicy: savePolicy)
        let strategy: any BatchStrategy.Type = atomically ? AtomicBatch.self : IndependentBatch.self
        guard try strategy.apply(&batch, in: db, authorize: authorize) else {
            return ModifyRecordsResult(saveResults: batch.saveOutcomes, deleteResults: batch.deleteOutcomes)
        }
        try batch.ctx.finish()
        return try batch.presentedOutcomes()
    }
}

extension WriteContext {
    /// The zone must exist; a participant asking about a zone that does not exist gets the answer
    /// for a record outside their view.
    func requireVisibleZone(_ id: Record.ID) throws {
        if !isOwner {
            try database.checkOwner(id.zoneID)
            guard try zoneExists(id.zoneID.zoneName) else { throw AccessPolicy.outsideView(id) }
        }
        try requireZone(id.zoneID)
    }

    /// For a participant, an existing record must be in a share they accepted before anything else
    /// about it (its change tag, its type) is looked at, so nothing leaks from outside the view.
    func requireVisibleRecord(_ id: Record.ID) throws {
        guard !isOwner else { return }
        let zone = id.zoneID.zoneName
        guard try rowState(zone: zone, name: id.recordName) != nil else { return }
        guard let shareName = try storedShareName(zone: zone, name: id.recordName),
            let share = try share(zone: zone, name: shareName), AccessPolicy.acceptedParticipant(actor, in: share) != nil
        else { throw AccessPolicy.outsideView(id) }
    }

    /// Whether a record was ever in the writer's view (their feed has a row for it; for a viewer of the
    /// whole zone, the zone's feed has its deletion since they entered).
    func hasSeen(zone: String, name: String) throws -> Bool {
        try Bool.fetchOne(
            db.cachedStatement(sql: """
                SELECT 1 FROM viewLog WHERE viewer = ?1 AND zone = ?2 AND name = ?3
                UNION ALL SELECT 1 FROM viewZone v JOIN recordTombstone t ON t.zone = v.zone AND t.name = ?3 AND t.seq > v.enteredSeq
                WHERE v.viewer = ?1 AND v.zone = ?2 AND v.present = 1 AND v.direct = 1
                """), arguments: [actor, zone, name]) ?? false
    }

    /// For a participant, decides what a save may reveal before anything about the record is looked
    /// at (its tag, type or content), so that a record outside their view and one that does not exist
    /// get the same answer:
    /// - in a zone where they have accepted no share, every save is ``AccessPolicy/outsideView(_:)``,
    ///   whether the zone and the record exist or not;
    /// - a share record they cannot see is refused as a share creation (`shareCreateOwnerOnly`),
    ///   whether it exists or not;
    /// - any other record they cannot see must first be one they could create (its parent's share,
    ///   writable): a read-only participant gets `readOnlyParticipant` whether it exists or not;
    /// - only then does one that exists outside their view get `outsideView`, and one that does not
    ///   exist, saved with a change tag (`ifServerRecordUnchanged`), `unknownItem` later only if it was
    ///   once in their view (`outsideView` otherwise).
    ///
    /// (A participant who may create a record under a parent still learns whether its name is taken
    /// outside their view, by creating it: names are the zone's, as in CloudKit.) Before, a missing
    /// record got `unknownItem`, `shareCreateOwnerOnly`, `readOnlyParticipant` or a content error
    /// (`parentCycle`, `referenceSameZone`) where a record outside the view got `outsideView`: any key
    /// could tell which zones and record names exist.
    func gateParticipantSave(_ record: Record, policy: SavePolicy) throws {
        let id = record.recordID
        let zone = id.zoneID.zoneName
        let member = try Bool.fetchOne(
            db.cachedStatement(sql: "SELECT 1 FROM member WHERE user = ? AND zone = ? LIMIT 1"), arguments: [actor, zone]) ?? false
        guard member else { throw AccessPolicy.outsideView(id) }
        let exists = try rowState(zone: zone, name: id.recordName) != nil
        // Only "outside the view" makes it invisible: a failing read is that error, not a permission refusal.
        var visible = exists
        if exists {
            do {
                try requireVisibleRecord(id)
            } catch let error as ShareSyncError where error.rule == .outsideView {
                visible = false
            }
        }
        if record.recordType == Record.shareRecordType {
            if visible { return }  // a share they see: an administrator's edit
            throw ShareSyncError(.permissionFailure, "only the owner can share records", recordID: id, rule: .shareCreateOwnerOnly)
        }
        if visible { return }
        let into = try membership(zone: zone, parent: record.parent?.recordID.recordName)
        try AccessPolicy.checkRecordWrite(.create(into: try into.flatMap { try share(zone: zone, name: $0) }), by: actor, recordID: id)
        if exists { throw AccessPolicy.outsideView(id) }
        if policy == .ifServerRecordUnchanged, record.recordChangeTag != nil, try !hasSeen(zone: zone, name: id.recordName) {
            throw AccessPolicy.outsideView(id)
        }
    }

    /// Saves one record under a save policy.
    mutating func save(_ record: Record, policy: SavePolicy) throws -> Record {
        let id = record.recordID
        try requireVisibleZone(id)
        if isOwner { try requireVisibleRecord(id) } else { try gateParticipantSave(record, policy: policy) }
        if record.recordType == Record.shareRecordType { return try saveShare(record, policy: policy) }
        // The zone-wide share's name: a record of another type under it would stand in the way of
        // sharing the zone (before, the owner's `share create --zone` then failed, as recordTypeImmutable).
        guard id.recordName != Share.zoneShareRecordName else {
            throw ShareSyncError(
                .invalidArguments, "the record name \(Share.zoneShareRecordName) is kept for the zone's zone-wide share",
                recordID: id, rule: .zoneShareName)
        }
        try record.checkContent(limits: database.limits)
        let zone = id.zoneID.zoneName
        // References and the parent must point into this database's own zone.
        for reference in record.fields.values.flatMap(\.references) + (record.parent.map { [$0] } ?? []) {
            do {
                try database.checkOwner(reference.recordID.zoneID)
            } catch {
                throw ShareSyncError(
                    .invalidArguments, "a reference must point into the record's own zone, not \(reference.recordID.zoneID)",
                    recordID: id, rule: reference == record.parent ? .parentSameZone : .referenceSameZone)
            }
        }
        let existing = try loadExisting(zone: zone, name: id.recordName)
        if !isOwner, existing != nil {
            // A participant who may not write this record at all (read-only) hears that, not that it
            // changed since their copy: before, a read-only participant's stale save was a conflict,
            // and keeping theirs only then told them it could never be saved. (The whole write,
            // moves included, is decided below, once the record to store is known.)
            let share = try storedShareName(zone: zone, name: id.recordName).flatMap { try self.share(zone: zone, name: $0) }
            try AccessPolicy.checkRecordWrite(.modify(in: share, newShare: share, isRoot: false, parentChanged: false), by: actor, recordID: id)
        }
        var toStore: Record
        switch policy {
        case .ifServerRecordUnchanged:
            if let existing {
                guard record.recordChangeTag == existing.recordChangeTag else {
                    // A save without a tag is a creation: "since it was fetched" told someone who
                    // never fetched it (two participants creating one name offline) nothing true.
                    let what =
                        record.recordChangeTag == nil
                        ? "record \(id.recordName) already exists on the server (tag \(existing.recordChangeTag ?? "-")); this save, without a change tag, would have created it"
                        : "record \(id.recordName) changed on the server since it was fetched (tag \(existing.recordChangeTag ?? "-"), yours \(record.recordChangeTag!))"
                    throw ShareSyncError(.serverRecordChanged, what, recordID: id, serverRecord: present(existing, zoneID: id.zoneID))
                }
            } else if record.recordChangeTag != nil {
                throw ShareSyncError(
                    .unknownItem, "record \(id.recordName) no longer exists on the server", recordID: id)
            }
            toStore = record
        case .changedKeys:
            if let existing {
                toStore = existing
                for key in record.changedKeys { toStore[key] = record.fields[key] }
                if record.parentChanged { toStore.parent = record.parent }
            } else {
                toStore = record
            }
        case .allKeys:
            toStore = record
        }
        if let existing {
            guard existing.recordType == record.recordType else {
                throw ShareSyncError.init(
                    .invalidArguments,
                    "record \(id.recordName) is a \(existing.recordType); a record's type cannot change to \(record.recordType)",
                    recordID: id, rule: .recordTypeImmutable)
            }
        }
        let stored = Record(
            recordType: record.recordType, recordID: Record.ID(recordName: id.recordName, zoneID: RecordZone.ID(zoneName: zone)),
            fields: toStore.fields, parent: toStore.parent.map { Record.Reference(recordID: Record.ID(recordName: $0.recordID.recordName, zoneID: RecordZone.ID(zoneName: zone))) },
            share: existing?.share, creationDate: existing?.creationDate ?? now, modificationDate: now,
            creatorUserRecordID: existing?.creatorUserRecordID ?? Record.ID(recordName: actor),
            lastModifiedUserRecordID: Record.ID(recordName: actor), recordChangeTag: nil)
        // (The stored record's size is checked when it is encoded, in `store`.)
        // For a participant the access policy comes first: no later check may tell them anything
        // about records outside their view.
        try authorizeSave(stored, existing: existing)
        try checkDeleteSelfTargets(stored, existing: existing)
        if let parent = stored.parent?.recordID.recordName, try wouldCycle(zone: zone, name: id.recordName, parent: parent) {
            throw ShareSyncError(
                .invalidArguments, "making \(parent) the parent of \(id.recordName) would close a cycle", recordID: id,
                rule: .parentCycle)
        }
        try willSave(stored, existing: existing)
        return try store(stored, replacing: .known(existing))
    }

    /// Refuses a `deleteSelf` reference to a record that does not exist and is not saved in the same
    /// request, as CloudKit does (`referenceViolation`): deleting that record is what deletes this one,
    /// so the reference could only fire if a record of that name were made later, by anyone. A
    /// reference with action none may name any record. A target saved in the same request is saved
    /// first (``ItemBatch``), so it must then exist: one whose own save failed does not count (except
    /// a share record, saved after every other record of the request, and a loop of references,
    /// where the record met first is saved before its target and counts it as coming). For a
    /// participant a record outside their view does not exist (the answer must not tell them
    /// otherwise). References the stored version already has are not checked again (a record saved
    /// before this check, or imported), so such a record can still be edited.
    func checkDeleteSelfTargets(_ record: Record, existing: Record?) throws {
        guard let requestSaves, record.hasDeleteSelfReferences else { return }
        let zone = record.recordID.zoneID.zoneName
        let had = existing?.deleteSelfTargetNames ?? []
        for (key, value) in record.fields.sorted(by: { $0.key < $1.key }) {
            for reference in value.references where reference.action == .deleteSelf {
                let target = reference.recordID.recordName
                if requestSaves[zone]?.contains(target) == true || had.contains(target) { continue }
                let id = Record.ID(recordName: target, zoneID: record.recordID.zoneID)
                var found = try rowState(zone: zone, name: target) != nil
                // Saved earlier in this request (its share membership is settled at the end): seen.
                if found, !isOwner, !delta[zone].touched.contains(target) {
                    do {
                        try requireVisibleRecord(id)
                    } catch let error as ShareSyncError where error.rule == .outsideView {
                        found = false
                    }
                }
                guard found else {
                    throw ShareSyncError(
                        .referenceViolation,
                        "field \(key) of record \(record.recordID.recordName) is a deleteSelf reference to \(target), which does not exist; "
                            + "save \(target) in the same request, or make the reference's action none",
                        recordID: record.recordID, rule: .deleteSelfTargetMissing)
                }
            }
        }
    }

    /// Deletes one record (and what cascades from it).
    mutating func deleteRecord(_ id: Record.ID) throws {
        try requireVisibleZone(id)
        let zone = id.zoneID.zoneName
        guard let existing = try loadRecord(zone: zone, name: id.recordName) else {
            // Deleted earlier in this request (a deleteSelf cascade): done.
            if delta[zone].touched.contains(id.recordName) { return }
            // Not there: unknownItem, as CloudKit answers, to the owner and to a participant who saw it;
            // anyone else learns nothing (the answer for a record outside their view).
            if !isOwner, try !hasSeen(zone: zone, name: id.recordName) { throw AccessPolicy.outsideView(id) }
            throw ShareSyncError(.unknownItem, "record \(id.recordName) does not exist", recordID: id)
        }
        try requireVisibleRecord(id)
        if existing.recordType == Record.shareRecordType {
            // Deleting a share record stops sharing (the owner) or leaves the share (a participant).
            return try deleteShare(zone: zone, name: id.recordName)
        }
        try willDelete(existing)
        let deleted = try delete(zone: zone, name: id.recordName)
        try didDelete(deleted)
    }
}

/// One page of a record listing (the private database's and the replica's): the records of a
/// statement's JSON rows, stopping before the row that would take them past `byteBudget` bytes (the
/// first always comes), and the bytes they hold.
func listingPage(
    _ statement: Statement, arguments: StatementArguments, byteBudget: Int, _ record: (Data) throws -> ShareSyncCore.Record
) throws -> (records: [ShareSyncCore.Record], bytes: Int) {
    let rows = try Data.fetchCursor(statement, arguments: arguments)
    var records: [ShareSyncCore.Record] = []
    var bytes = 0
    while let json = try rows.next() {
        if !records.isEmpty, bytes + json.count > byteBudget { break }
        bytes += json.count
        records.append(try record(json))
    }
    return (records, bytes)
}
