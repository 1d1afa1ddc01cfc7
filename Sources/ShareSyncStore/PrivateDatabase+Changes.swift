import Foundation
import GRDB
import ShareSyncCore

extension PrivateDatabase {
    /// The zones created, changed or deleted since a token, like `CKFetchDatabaseChangesOperation`.
    ///
    /// A `nil` token returns every zone that exists (the default zone only once it holds changes).
    public func fetchDatabaseChanges(
        since token: ServerChangeToken?, resultsLimit: Int? = nil
    ) throws(ShareSyncError) -> DatabaseChanges {
        let limit = effectiveLimit(resultsLimit)
        return try read { db in
            let since = try position(of: token, db)
            let rows = try Row.fetchAll(
                db.cachedStatement(sql: """
                    SELECT name, seq, 1 AS live FROM zone WHERE seq > ?1
                    UNION ALL SELECT name, seq, 0 AS live FROM zoneTombstone WHERE seq > ?2
                    ORDER BY seq LIMIT ?3
                    """),
                arguments: [since.sequence, since.deletionsAfter, limit + 1])
            let page = rows.prefix(limit)
            let moreComing = rows.count > limit
            return DatabaseChanges(
                changedZoneIDs: page.filter { $0["live"] as Bool }.map { zoneID($0["name"]) },
                deletedZoneIDs: page.filter { !($0["live"] as Bool) }.map { zoneID($0["name"]) },
                changeToken: try self.token(after: page, moreComing: moreComing, from: since, db), moreComing: moreComing)
        }
    }

    /// The records changed and deleted in a zone since a token, in commit order, like
    /// `CKFetchRecordZoneChangesOperation`. Each record appears once, in its latest state.
    ///
    /// A `nil` token returns every record of the zone. At most `resultsLimit` changes come back (and
    /// never more than ``Limits/maximumResultsPerFetch``), and no more than fit in
    /// ``Limits/maximumResponseSize`` bytes (one record always comes); `moreComing` says whether to
    /// fetch again.
    public func fetchZoneChanges(
        _ zoneID: RecordZone.ID, since token: ServerChangeToken?, resultsLimit: Int? = nil
    ) throws(ShareSyncError) -> ZoneChanges {
        try checkOwner(zoneID)
        let limit = effectiveLimit(resultsLimit)
        return try read { db in
            guard let created = try Int64.fetchOne(db.cachedStatement(sql: "SELECT createdSeq FROM zone WHERE name = ?"), arguments: [zoneID.zoneName]) else {
                throw ShareSyncError(.zoneNotFound, "zone \(zoneID.zoneName) does not exist", zoneID: zoneID)
            }
            let since = try position(of: token, db)
            if token != nil, since.oldestNeeded < created {
                throw ShareSyncError(
                    .changeTokenExpired, "zone \(zoneID.zoneName) was deleted and created again since this token; \(ServerChangeToken.expiredAdvice)",
                    zoneID: zoneID, rule: .changeTokenExpired)
            }
            let (page, moreComing, _) = try feedPage(
                db.cachedStatement(sql: """
                    SELECT seq, json, length(json) AS size, NULL AS name, NULL AS type FROM record WHERE zone = ?1 AND seq > ?2
                    UNION ALL SELECT seq, NULL AS json, NULL AS size, name, type FROM recordTombstone WHERE zone = ?1 AND seq > ?3
                    ORDER BY seq LIMIT ?4
                    """),
                arguments: [zoneID.zoneName, since.sequence, since.deletionsAfter, limit + 1], limit: limit,
                byteBudget: limits.maximumResponseSize, allowEmpty: false)
            let owned = self.zoneID(zoneID.zoneName)
            let changes: [RecordChange] = try page.map { row in
                if let json = row.json { return .changed(present(try Record(jsonData: json), zoneID: owned, in: db)) }
                return .deleted(DeletedRecord(recordID: Record.ID(recordName: try row.requiredName(), zoneID: owned), recordType: try row.requiredType()))
            }
            return ZoneChanges(
                zoneID: owned, changes: changes,
                changeToken: try self.token(afterSeq: page.last?.seq, moreComing: moreComing, from: since, db), moreComing: moreComing)
        }
    }

    /// The token for "now": fetching with it returns only later changes.
    public func currentChangeToken() throws(ShareSyncError) -> ServerChangeToken {
        try ServerChangeToken(databaseID: databaseID, position: .init(sequence: try read { db in try currentSeq(db) }), sealing: positions)
    }

    /// The token of a position, whether or not this database got there (tests make tokens of positions
    /// ahead of it, and of earlier positions, with it).
    package func changeToken(at sequence: Int64) throws(ShareSyncError) -> ServerChangeToken {
        try ServerChangeToken(databaseID: databaseID, position: .init(sequence: sequence), sealing: positions)
    }

    /// Forgets deletions (tombstones) up to a token, or all of them. Tokens older than that point then
    /// fail with ``ShareSyncError/Code/changeTokenExpired``, and their holders fetch again from nil.
    public func compactHistory(upTo token: ServerChangeToken? = nil) throws(ShareSyncError) {
        try write { db in
            let current = try currentSeq(db)
            let horizon = try token.map { t throws(ShareSyncError) in try t.position(expectedDatabaseID: databaseID, sealing: positions).sequence } ?? current
            let upTo = min(horizon, current)
            try db.execute(sql: "DELETE FROM recordTombstone WHERE seq <= ?", arguments: [upTo])
            try db.execute(sql: "DELETE FROM zoneTombstone WHERE seq <= ?", arguments: [upTo])
            try compactSharedViews(db, upTo: upTo)
            try db.execute(
                sql: "UPDATE meta SET value = MAX(CAST(value AS INTEGER), ?) WHERE key = 'horizon'", arguments: [upTo])
        }
    }

    // MARK: Helpers

    func effectiveLimit(_ resultsLimit: Int?) -> Int {
        guard let resultsLimit, resultsLimit > 0 else { return limits.maximumResultsPerFetch }
        return min(resultsLimit, limits.maximumResultsPerFetch)
    }

    /// Reads a feed query's rows in order until `limit` rows, or until the next row would take the page
    /// past `byteBudget` bytes. The query selects, in this order, `seq`, `json` (NULL for a deletion),
    /// `size` (the JSON's length), `name` and `type` (NULL where the JSON says them), and asks for
    /// `limit + 1` rows, so that `moreComing` is known. Each row counts its size plus
    /// ``Limits/responseOverheadPerItem``. The first row always comes, unless `allowEmpty` (a push that
    /// already holds other changes), when a page may come back empty with `moreComing`. Rows are read
    /// through a cursor: a row past the budget is never copied out of SQLite. (Columns are read by
    /// position: GRDB lowercases a column's name on every `row["…"]`, for each of a page's 400 rows.)
    func feedPage(_ statement: Statement, arguments: StatementArguments, limit: Int, byteBudget: Int, allowEmpty: Bool)
        throws -> (page: [FeedRow], moreComing: Bool, bytes: Int)
    {
        var rows: [FeedRow] = []
        rows.reserveCapacity(min(limit, 512))
        var bytes = 0
        let cursor = try Row.fetchCursor(statement, arguments: arguments)
        while let row = try cursor.next() {
            let size = (row[2] as Int? ?? 0) + Limits.responseOverheadPerItem
            if rows.count == limit || (bytes + size > byteBudget && (allowEmpty || !rows.isEmpty)) {
                return (rows, true, bytes)
            }
            bytes += size
            rows.append(FeedRow(seq: row[0], json: row[1], name: row[3], type: row[4]))
        }
        return (rows, false, bytes)
    }

    func currentSeq(_ db: Database) throws -> Int64 { try Self.currentSeq(db) }

    /// The sequence number of the last change (`meta.seq`).
    static func currentSeq(_ db: Database) throws -> Int64 {
        try Int64.fetchOne(db.cachedStatement(sql: "SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'seq'")) ?? 0
    }

    /// Where a token points, checked against the retained history. A nil token starts a scan: live
    /// rows from the beginning, and (on later pages) only deletions after the scan began.
    func position(of token: ServerChangeToken?, _ db: Database) throws -> ServerChangeToken.Position {
        let current = try currentSeq(db)
        guard let token else { return .init(sequence: 0, scanSnapshot: current) }
        let position = try token.position(expectedDatabaseID: databaseID, sealing: positions)
        let horizon = try Int64.fetchOne(db.cachedStatement(sql: "SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'horizon'")) ?? 0
        guard position.sequence <= current, (position.scanSnapshot ?? 0) <= current else {
            // Ahead of every change this database made: it was restored from an older copy. The holder's
            // copy cannot be trusted: fetch again from nil. (The message gives no numbers: they are the
            // owner's change counter, which tokens keep from their holders.)
            throw ShareSyncError(
                .changeTokenExpired, "the change token is ahead of this database's history; \(ServerChangeToken.expiredAdvice)",
                rule: .changeTokenExpired)
        }
        guard epochs.holds(position) else {
            // Issued by a history this database does not have: it was restored from an older copy
            // and written again since. Its position may have been reached again, by other changes.
            throw ShareSyncError(
                .changeTokenExpired,
                "the change token is from a history this database no longer has (it was restored from a copy); \(ServerChangeToken.expiredAdvice)",
                rule: .changeTokenExpired)
        }
        guard position.oldestNeeded >= horizon else {
            throw ShareSyncError(
                .changeTokenExpired,
                "the change token is older than the history this database keeps; \(ServerChangeToken.expiredAdvice)",
                rule: .changeTokenExpired)
        }
        return position
    }

    /// The token after a page: mid-scan it keeps the scan's start; after the last page, "now".
    func token(after page: ArraySlice<Row>, moreComing: Bool, from position: ServerChangeToken.Position, _ db: Database)
        throws -> ServerChangeToken
    {
        try token(afterSeq: page.last.map { $0["seq"] }, moreComing: moreComing, from: position, db)
    }

    /// ``token(after:moreComing:from:_:)`` from the last row's sequence.
    func token(afterSeq lastSeq: Int64?, moreComing: Bool, from position: ServerChangeToken.Position, _ db: Database)
        throws -> ServerChangeToken
    {
        guard moreComing, let lastSeq else {
            return try ServerChangeToken(databaseID: databaseID, position: .init(sequence: try currentSeq(db)), sealing: positions)
        }
        // In the epoch it is handed out in, not the one of its position (PositionEpochs.epoch(sealing:)):
        // a page read now holds rows as they are now, which a copy taken earlier may not have.
        let sealing = positions
        return try ServerChangeToken(
            databaseID: databaseID,
            position: .init(sequence: lastSeq, scanSnapshot: position.scanSnapshot, epoch: sealing.epochs.current), sealing: sealing)
    }

    /// A stored record as the owner sees it in their private database.
    func present(_ record: Record, zoneID: RecordZone.ID, in db: Database) -> Record {
        present(record, to: ownerName, zoneID: zoneID, in: db)
    }
}

/// A row of a feed page (``PrivateDatabase/feedPage(_:arguments:limit:byteBudget:allowEmpty:)``).
struct FeedRow {
    let seq: Int64
    /// The record's stored JSON; nil for a deletion.
    let json: Data?
    let name: String?
    let type: String?

    /// The name, which the query gives for this row.
    func requiredName() throws -> String {
        guard let name else { throw ShareSyncError(.internalError, "a change feed row at \(seq) has no record name") }
        return name
    }

    /// The type, which the query gives for this row.
    func requiredType() throws -> String {
        guard let type else { throw ShareSyncError(.internalError, "a change feed row at \(seq) has no record type") }
        return type
    }
}
