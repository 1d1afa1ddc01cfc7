import Foundation
import GRDB
import ShareSyncCore

/// A participant's shared database, as the owner's node serves it: the zones and records of the
/// shares they accepted, and nothing else.
///
/// Its feeds work like the private database's (tokens, paging, `moreComing`), filtered to the view:
/// records entering the view arrive as changes, records leaving it as deletions, and a zone that
/// leaves the view (share stopped, participant removed, left or blocked) as a deleted zone.
/// Every read and write goes through ``AccessPolicy``.
public struct SharedDatabaseView: Sendable {
    /// The owner's database.
    public let database: PrivateDatabase
    /// Whose view this is.
    public let caller: Caller

    var viewer: String { caller.userRecordName }

    /// The zones shared with the caller, changed or deleted since a token.
    public func fetchDatabaseChanges(since token: ServerChangeToken?, resultsLimit: Int? = nil) throws(ShareSyncError)
        -> DatabaseChanges
    {
        let limit = database.effectiveLimit(resultsLimit)
        return try database.read { db in
            let since = try database.position(of: token, db)
            let rows = try Row.fetchAll(
                db.cachedStatement(sql: """
                    SELECT zone, seq, present FROM viewZone
                    WHERE viewer = ?1 AND seq > ?2 AND (present = 1 OR seq > ?3) ORDER BY seq LIMIT ?4
                    """),
                arguments: [viewer, since.sequence, since.deletionsAfter, limit + 1])
            let page = rows.prefix(limit)
            let moreComing = rows.count > limit
            return DatabaseChanges(
                changedZoneIDs: page.filter { $0["present"] as Bool }.map { database.sharedZoneID($0["zone"]) },
                deletedZoneIDs: page.filter { !($0["present"] as Bool) }.map { database.sharedZoneID($0["zone"]) },
                changeToken: try database.token(after: page, moreComing: moreComing, from: since, db), moreComing: moreComing)
        }
    }

    /// Checks the token a subscription starts from: one this database can serve (as
    /// ``fetchDatabaseChanges(since:resultsLimit:)`` checks it), and not from the middle of a fetch
    /// from no token (a page of it answered with `moreComing`, `invalidArguments` rule
    /// `subscribeTokenMidFetch`): a client subscribes once its fetches are complete, with the token of
    /// the last page. (Pages of a fetch from a token are positions like any other.)
    public func checkSubscriptionToken(_ token: ServerChangeToken) throws(ShareSyncError) {
        let position = try database.read { db in try database.position(of: token, db) }
        guard position.scanSnapshot == nil else {
            throw ShareSyncError(
                .invalidArguments,
                "the change token is from the middle of a fetch (a page answered with moreComing): fetch until moreComing is false, then subscribe with that page's token",
                rule: .subscribeTokenMidFetch)
        }
    }

    /// The zones shared with the caller.
    public func fetchAllZones() throws(ShareSyncError) -> [RecordZone] {
        try database.read { db in
            try String.fetchAll(db.cachedStatement(sql: "SELECT zone FROM viewZone WHERE viewer = ? AND present = 1 ORDER BY zone"), arguments: [viewer])
        }.map { RecordZone(zoneID: database.sharedZoneID($0)) }
    }

    /// The records of a shared zone that changed in (or entered, or left) the caller's view since a token.
    ///
    /// At most `resultsLimit` changes come back (never more than ``Limits/maximumResultsPerFetch``), and
    /// no more than fit in ``Limits/maximumResponseSize`` bytes (one record always comes); `moreComing`
    /// says whether to fetch again.
    public func fetchZoneChanges(_ zoneID: RecordZone.ID, since token: ServerChangeToken?, resultsLimit: Int? = nil)
        throws(ShareSyncError) -> ZoneChanges
    {
        try fetchZoneChangesPage(zoneID, since: token, resultsLimit: resultsLimit, byteBudget: nil, allowEmpty: false)!.changes
    }

    /// How many changes of a shared zone the caller's feed holds after `token`: how many a fetch of the
    /// zone's changes from it would return (records changed in, entered or left the view; each record
    /// once, at its last change), counted on the feed's index without reading a record. From `nil`, every
    /// record of the zone in the view. Throws ``ShareSyncError/Code/changeTokenExpired`` for a token the
    /// database no longer answers, and ``ShareSyncError/Code/zoneNotFound`` for a zone not shared with the caller.
    ///
    /// The owner's `status` shows it per participant, from the last token their node was served.
    public func pendingChangeCount(inZone zoneName: String, since token: ServerChangeToken?) throws(ShareSyncError) -> Int {
        let viewer = self.viewer
        let database = self.database
        return try database.read { db in
            guard let (_, direct) = try viewedZone(zoneName, db) else {
                throw ShareSyncError(
                    .zoneNotFound, "zone \(zoneName) is not shared with \(viewer)", zoneID: database.sharedZoneID(zoneName))
            }
            let since = try database.position(of: token, db)
            return try Int.fetchOne(
                db.cachedStatement(
                    sql: direct
                        ? """
                        SELECT (SELECT count(*) FROM record WHERE zone = ?2 AND seq > ?3)
                            + (SELECT count(*) FROM recordTombstone WHERE zone = ?2 AND seq > ?4)
                        """
                        : """
                        SELECT count(*) FROM viewLog
                        WHERE viewer = ?1 AND zone = ?2 AND seq > ?3 AND (present = 1 OR seq > ?4)
                        """),
                arguments: [viewer, zoneName, since.sequence, since.deletionsAfter]) ?? 0
        }
    }

    /// A page of ``fetchZoneChanges(_:since:resultsLimit:)`` within `byteBudget` bytes (at most
    /// ``Limits/maximumResponseSize``), with the bytes it counted. With `allowEmpty`, nil when not
    /// even the first change fits (a push that already holds other changes stops there).
    package func fetchZoneChangesPage(
        _ zoneID: RecordZone.ID, since token: ServerChangeToken?, resultsLimit: Int? = nil, byteBudget: Int?, allowEmpty: Bool
    ) throws(ShareSyncError) -> (changes: ZoneChanges, bytes: Int)? {
        let viewer = self.viewer
        let database = self.database
        guard let page = try feedPage(
            zoneID, since: token, resultsLimit: resultsLimit, byteBudget: byteBudget, allowEmpty: allowEmpty,
            record: { json, name, type, zoneID, db in
                database.present(try database.decodeStored(json, type: type, zone: zoneID.zoneName, name: name), to: viewer, zoneID: zoneID, in: db)
            })
        else { return nil }
        let changes = page.changes(RecordChange.changed, RecordChange.deleted)
        return (ZoneChanges(zoneID: page.zoneID, changes: changes, changeToken: page.changeToken, moreComing: page.moreComing), page.bytes)
    }

    /// ``fetchZoneChangesPage(_:since:resultsLimit:byteBudget:allowEmpty:)`` with each record as the
    /// JSON of the record the caller sees (``PrivateDatabase/presentedJSON(_:name:type:to:splice:in:)``):
    /// the stored bytes with the zone ID changed, not decoded and encoded again. What the owner's
    /// server sends.
    package func fetchZoneChangesPageJSON(
        _ zoneID: RecordZone.ID, since token: ServerChangeToken?, resultsLimit: Int? = nil, byteBudget: Int?, allowEmpty: Bool
    ) throws(ShareSyncError) -> FeedPage<Data>? {
        let presented = presentedJSON(in: zoneID)
        return try feedPage(
            zoneID, since: token, resultsLimit: resultsLimit, byteBudget: byteBudget, allowEmpty: allowEmpty,
            record: { json, name, type, _, db in try presented(json, name, type, db) })
    }

    /// Makes a stored record of `zoneID` into the JSON the caller sees
    /// (``PrivateDatabase/presentedJSON(_:name:type:to:splice:in:)``).
    private func presentedJSON(in zoneID: RecordZone.ID) -> (_ stored: Data, _ name: String, _ type: String, Database) throws -> Data {
        let viewer = self.viewer
        let database = self.database
        let splice = PrivateDatabase.ZoneIDSplice(database.sharedZoneID(zoneID.zoneName))
        return { stored, name, type, db in try database.presentedJSON(stored, name: name, type: type, to: viewer, splice: splice, in: db) }
    }

    /// ``fetchZoneChanges(_:since:resultsLimit:)`` with each record as the JSON the caller sees
    /// (``fetchZoneChangesPageJSON(_:since:resultsLimit:byteBudget:allowEmpty:)``): what an in-process
    /// participant stores, with no record decoded or encoded on either side.
    package func fetchEncodedZoneChanges(_ zoneID: RecordZone.ID, since token: ServerChangeToken?, resultsLimit: Int? = nil)
        throws(ShareSyncError) -> EncodedZoneChanges
    {
        let presented = presentedJSON(in: zoneID)
        let page = try feedPage(
            zoneID, since: token, resultsLimit: resultsLimit, byteBudget: nil, allowEmpty: false,
            record: { json, name, type, zoneID, db in
                EncodedRecord(recordID: Record.ID(recordName: name, zoneID: zoneID), recordType: type, json: try presented(json, name, type, db))
            })!
        return EncodedZoneChanges(
            zoneID: page.zoneID, changes: page.changes(EncodedZoneChanges.Change.changed, EncodedZoneChanges.Change.deleted),
            changeToken: page.changeToken, moreComing: page.moreComing)
    }

    private func feedPage<Item>(
        _ zoneID: RecordZone.ID, since token: ServerChangeToken?, resultsLimit: Int?, byteBudget: Int?, allowEmpty: Bool,
        record: (_ json: Data, _ name: String, _ type: String, RecordZone.ID, Database) throws -> Item
    ) throws(ShareSyncError) -> FeedPage<Item>? {
        let limit = database.effectiveLimit(resultsLimit)
        let budget = min(byteBudget ?? .max, database.limits.maximumResponseSize)
        let shared = database.sharedZoneID(zoneID.zoneName)
        return try database.read { db in
            guard zoneID.ownerName == database.ownerName, let (entered, direct) = try viewedZone(zoneID.zoneName, db) else {
                throw ShareSyncError(.zoneNotFound, "zone \(zoneID.zoneName) is not shared with you", zoneID: zoneID)
            }
            let since = try database.position(of: token, db)
            if token != nil, since.oldestNeeded < entered {
                throw ShareSyncError(
                    .changeTokenExpired, "zone \(zoneID.zoneName) was shared with you (or shared again) after this token was made; \(ServerChangeToken.expiredAdvice)",
                    zoneID: zoneID, rule: .changeTokenExpired)
            }
            // A viewer of the whole zone reads the zone's own feed: every record and deletion after the
            // token (which is never from before they entered: checked above).
            let (page, moreComing, bytes) = try database.feedPage(
                db.cachedStatement(
                    sql: direct
                        ? """
                        SELECT seq, json, length(json) AS size, name, type FROM record WHERE zone = ?2 AND seq > ?3
                        UNION ALL SELECT seq, NULL AS json, NULL AS size, name, type FROM recordTombstone WHERE zone = ?2 AND seq > ?4
                        ORDER BY seq LIMIT ?5
                        """
                        : """
                        SELECT v.seq, r.json, length(r.json) AS size, v.name, v.type FROM viewLog v
                        LEFT JOIN record r ON r.zone = v.zone AND r.name = v.name AND v.present = 1
                        WHERE v.viewer = ?1 AND v.zone = ?2 AND v.seq > ?3 AND (v.present = 1 OR v.seq > ?4)
                        ORDER BY v.seq LIMIT ?5
                        """),
                arguments: [viewer, zoneID.zoneName, since.sequence, since.deletionsAfter, limit + 1], limit: limit,
                byteBudget: budget, allowEmpty: allowEmpty)
            if page.isEmpty && moreComing { return nil }
            let changes: [FeedPage<Item>.Change] = try page.map { row in
                let (name, type) = (try row.requiredName(), try row.requiredType())
                if let json = row.json { return .changed(try record(json, name, type, shared, db)) }
                return .deleted(name: name, type: type)
            }
            return FeedPage(
                zoneID: shared, changes: changes,
                changeToken: try database.token(afterSeq: page.last?.seq, moreComing: moreComing, from: since, db), moreComing: moreComing,
                bytes: bytes)
        }
    }

    /// A zone in the caller's view: when they entered it, and whether they read the zone's own feed
    /// (a zone-wide share) rather than their copy in `viewLog`. Nil for a zone not shared with them.
    private func viewedZone(_ zoneName: String, _ db: Database) throws -> (enteredSeq: Int64, direct: Bool)? {
        try Row.fetchOne(
            db.cachedStatement(sql: "SELECT enteredSeq, direct FROM viewZone WHERE viewer = ? AND zone = ? AND present = 1"),
            arguments: [viewer, zoneName]
        ).map { ($0[0], $0[1]) }
    }

    /// Fetches records in the caller's view. A record outside it fails with
    /// ``ShareSyncError/Code/unknownItem``, exactly as a record that does not exist.
    ///
    /// Records that would not fit in one answer (``Limits/maximumResponseSize``, counted over the records
    /// in the caller's view only) fail the whole fetch with ``ShareSyncError/Code/limitExceeded``
    /// (rule `maximumResponseSize`) before any record is read: fetch fewer at a time.
    public func fetchRecords(_ recordIDs: [ShareSyncCore.Record.ID]) throws(ShareSyncError)
        -> [ShareSyncCore.Record.ID: Result<ShareSyncCore.Record, ShareSyncError>]
    {
        try database.read { db in
            var total = 0
            for id in recordIDs where id.zoneID.ownerName == database.ownerName {
                let size = try Int.fetchOne(
                    db.cachedStatement(sql: """
                        SELECT length(r.json) FROM record r JOIN member m ON m.zone = r.zone AND m.share = r.shareName AND m.user = ?
                        WHERE r.zone = ? AND r.name = ?
                        """),
                    arguments: [viewer, id.zoneID.zoneName, id.recordName])
                if let size { total += size + Limits.responseOverheadPerItem }
            }
            let budget = database.limits.maximumResponseSize
            guard total <= budget else {
                throw ShareSyncError(
                    .limitExceeded,
                    "the \(recordIDs.count) records asked for come to about \(total) bytes; one answer carries at most \(budget) "
                        + "bytes (fetch fewer records at a time)",
                    rule: .maximumResponseSize)
            }
            var results: [Record.ID: Result<Record, ShareSyncError>] = [:]
            for id in recordIDs {
                let json = id.zoneID.ownerName == database.ownerName
                    ? try Data.fetchOne(
                        db.cachedStatement(sql: """
                            SELECT r.json FROM record r JOIN member m ON m.zone = r.zone AND m.share = r.shareName AND m.user = ?
                            WHERE r.zone = ? AND r.name = ?
                            """),
                        arguments: [viewer, id.zoneID.zoneName, id.recordName]) : nil
                if let json {
                    results[id] = .success(
                        database.present(try Record(jsonData: json), to: viewer, zoneID: database.sharedZoneID(id.zoneID.zoneName), in: db))
                } else {
                    results[id] = .failure(ShareSyncError(.unknownItem, "record \(id.recordName) does not exist", recordID: id))
                }
            }
            return results
        }
    }

    /// Saves and deletes records in the caller's shares, as a read-write participant. The same rules
    /// as the owner's `modifyRecords`, plus the access policy: read-only participants and records
    /// outside the view get ``ShareSyncError/Code/permissionFailure``. Deleting a share record leaves it.
    public func modifyRecords(
        saving recordsToSave: [ShareSyncCore.Record] = [], deleting recordIDsToDelete: [ShareSyncCore.Record.ID] = [],
        savePolicy: SavePolicy = .ifServerRecordUnchanged, atomically: Bool = true
    ) throws(ShareSyncError) -> ModifyRecordsResult {
        guard viewer != database.ownerName else {
            return try database.modifyRecords(
                saving: recordsToSave, deleting: recordIDsToDelete, savePolicy: savePolicy, atomically: atomically)
        }
        try checkSharedWithViewer(recordsToSave.map(\.recordID) + recordIDsToDelete)
        let result = try database.modifyRecords(
            saving: recordsToSave, deleting: recordIDsToDelete, savePolicy: savePolicy, atomically: atomically,
            as: viewer, authorize: { _ in })
        return try database.read { db in presented(result, in: db) }
    }

    /// The newest answers to writes with a write ID kept per participant, at least (``modifyRecordsOnce``;
    /// older ones go in batches of 16, not at every write). A participant's node sends its writes one
    /// at a time, so only the last few can be sent again.
    public static let appliedWritesKept = 64

    /// ``modifyRecords(saving:deleting:savePolicy:atomically:)`` applied at most once per `writeID`:
    /// in one transaction, the answer to an earlier request of this viewer with the same `writeID` is
    /// returned as it was, and nothing is applied; otherwise the write is applied, `answer` makes the
    /// answer from its result (as the participant sees it), and the answer is kept with the write if
    /// anything of it was applied (a write that changed nothing may simply run again). For a write
    /// sent again after its answer was lost: before, it was applied twice (a save over a change made
    /// in between, a deletion of a record made again since).
    ///
    /// A repeat gets its first answer before the write's item count is checked: limits lowered since
    /// the first request must not turn it into a refusal, after which the client would send its items
    /// again as other writes. (A caller that checks limits of its own first looks for the repeat with
    /// ``keptAnswer(writeID:)`` when they refuse the request.)
    public func modifyRecordsOnce(
        writeID: String, saving recordsToSave: [ShareSyncCore.Record] = [], deleting recordIDsToDelete: [ShareSyncCore.Record.ID] = [],
        savePolicy: SavePolicy = .ifServerRecordUnchanged, atomically: Bool = true,
        answer: @escaping (ModifyRecordsResult) throws -> Data
    ) throws(ShareSyncError) -> (answer: Data, repeated: Bool) {
        if viewer != database.ownerName { try checkSharedWithViewer(recordsToSave.map(\.recordID) + recordIDsToDelete) }
        let (database, viewer) = (self.database, self.viewer)
        return try database.write { db in
            if let kept = try Data.fetchOne(
                db.cachedStatement(sql: "SELECT answer FROM appliedWrite WHERE user = ? AND writeID = ?"), arguments: [viewer, writeID])
            {
                return (kept, true)
            }
            try database.checkItemCount(recordsToSave.count + recordIDsToDelete.count)
            let result = try database.modifyRecords(
                in: db, saving: recordsToSave, deleting: recordIDsToDelete, savePolicy: savePolicy, atomically: atomically,
                as: viewer, authorize: { _ in })
            let data = try answer(viewer == database.ownerName ? result : presented(result, in: db))
            let applied = result.saveResults.values.contains { if case .success = $0 { true } else { false } }
                || result.deleteResults.values.contains { if case .success = $0 { true } else { false } }
            if applied {
                // One B-tree (no rowid, no second index): the least the write adds to its commit.
                let seq = try Int64.fetchOne(
                    db.cachedStatement(sql: "SELECT COALESCE(MAX(seq), 0) + 1 FROM appliedWrite WHERE user = ?"), arguments: [viewer]) ?? 1
                try db.executeCached(
                    "INSERT INTO appliedWrite (user, writeID, seq, answer) VALUES (?, ?, ?, ?)", [viewer, writeID, seq, data])
                if seq % 16 == 0 {
                    try db.executeCached(
                        "DELETE FROM appliedWrite WHERE user = ? AND seq <= ?", [viewer, seq - Int64(Self.appliedWritesKept)])
                }
            }
            return (data, false)
        }
    }

    /// The answer kept with this viewer's write `writeID`, if it was applied
    /// (``modifyRecordsOnce(writeID:saving:deleting:savePolicy:atomically:answer:)``), read
    /// without a write transaction: a request over the limits is refused at this cost when it is not
    /// a repeat.
    public func keptAnswer(writeID: String) throws(ShareSyncError) -> Data? {
        let viewer = self.viewer
        return try database.read { db in
            try Data.fetchOne(
                db.cachedStatement(sql: "SELECT answer FROM appliedWrite WHERE user = ? AND writeID = ?"), arguments: [viewer, writeID])
        }
    }

    /// Refuses records of another owner's zones: a participant's shared zones are all this owner's.
    private func checkSharedWithViewer(_ ids: [ShareSyncCore.Record.ID]) throws(ShareSyncError) {
        for id in ids where id.zoneID.ownerName != database.ownerName {
            throw ShareSyncError(.zoneNotFound, "zone \(id.zoneID.zoneName) is not shared with you", zoneID: id.zoneID)
        }
    }

    /// A write's results as the viewer sees them (their own names for the owner and the zone).
    private func presented(_ result: ModifyRecordsResult, in db: Database) -> ModifyRecordsResult {
        var result = result
        for (id, outcome) in result.saveResults {
            let zoneID = database.sharedZoneID(id.zoneID.zoneName)
            if case .success(let r) = outcome {
                result.saveResults[id] = .success(database.present(r, to: viewer, zoneID: zoneID, in: db))
            }
            if case .failure(var e) = outcome, let server = e.serverRecord {
                e.serverRecord = database.present(server, to: viewer, zoneID: zoneID, in: db)
                result.saveResults[id] = .failure(e)
            }
        }
        return result
    }

    /// Leaves a share: the caller's status becomes removed and the share's records leave their view.
    public func leaveShare(_ shareID: ShareSyncCore.Record.ID) throws(ShareSyncError) {
        // The deletion's own error, as a sharing request's refusal (protocol.md): not a
        // `partialFailure` around it, which an owner never sends.
        if case .failure(let error)? = try modifyRecords(deleting: [shareID]).deleteResults[shareID] { throw error }
    }
}

/// A page of a viewer's feed of one zone: its records, each as the caller of
/// ``SharedDatabaseView/fetchZoneChangesPageJSON(_:since:resultsLimit:byteBudget:allowEmpty:)`` (or
/// the record-valued variant) made it from the stored JSON, and its deletions, in commit order.
package struct FeedPage<Item>: Sendable where Item: Sendable {
    package enum Change: Sendable {
        case changed(Item)
        case deleted(name: String, type: String)
    }

    /// The zone as the viewer sees it (owned by the owner).
    package var zoneID: RecordZone.ID
    package var changes: [Change]
    package var changeToken: ServerChangeToken
    package var moreComing: Bool
    /// The stored bytes the page counted against its budget.
    package var bytes: Int

    /// The changes in commit order, made by `changed` and by `deleted` (a deletion in the page's zone).
    package func changes<Change>(_ changed: (Item) -> Change, _ deleted: (DeletedRecord) -> Change) -> [Change] {
        changes.map { change in
            switch change {
            case .changed(let item): changed(item)
            case .deleted(let name, let type): deleted(DeletedRecord(recordID: Record.ID(recordName: name, zoneID: zoneID), recordType: type))
            }
        }
    }
}
