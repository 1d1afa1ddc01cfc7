import Foundation
import GRDB
import ShareSyncCore

// Applying what an owner's node sends: pages of fetchZoneChanges and fetchDatabaseChanges, and pushes.
// Each call is one transaction that stores the changes together with the token after them: after a
// crash the replica holds either the page and its token, or neither, and the next fetch resumes from
// the token it holds. Applying a page twice is harmless (saves are upserts, deletions idempotent).

extension SharedDatabaseReplica {
    /// Applies one page of a zone's changes (a `fetchZoneChanges` result): saves the changed records,
    /// deletes the deleted ones and stores the page's change token, in one transaction.
    ///
    /// The zone ID of the page and of every record in it must carry `owner` as its owner name
    /// (``ShareSyncError/Code/invalidArguments`` otherwise, and nothing is changed). The owner must have
    /// been added with ``setOwner(_:)``.
    public func apply(_ changes: ZoneChanges, owner: String) throws(ShareSyncError) {
        try apply(try encoded(changes, owner: owner), owner: owner)
    }

    /// ``apply(_:owner:)-(ZoneChanges,_)`` with each record as the bytes it came in: what the sync
    /// engine applies, storing the bytes without decoding and encoding them again.
    package func apply(_ changes: EncodedZoneChanges, owner: String) throws(ShareSyncError) {
        try write(.refetchable) { db in
            try requireOwner(db, owner)
            try applyZoneChanges(db, changes, owner: owner)
        }
    }

    /// Applies one page of database changes (a `fetchDatabaseChanges` result) in one transaction:
    /// deleted zones (deleted by the owner, or no longer shared with you) are purged with their
    /// records and token, changed zones become known (with no token until they are fetched), and the
    /// page's token is stored as the owner's ``databaseChangeToken(owner:)``.
    public func apply(databaseChanges: DatabaseChanges, owner: String) throws(ShareSyncError) {
        try write(.refetchable) { db in
            try requireOwner(db, owner)
            try applyDatabaseChanges(db, databaseChanges, owner: owner)
        }
    }

    /// Applies a push from the owner's subscription in one transaction: the database changes, every
    /// zone's changes (each storing its zone token) and finally `token` as the owner's database change
    /// token. If anything is invalid nothing is changed.
    public func apply(
        databaseChanges: DatabaseChanges, zoneChanges: [ZoneChanges], token: ServerChangeToken, owner: String
    ) throws(ShareSyncError) {
        try write(.refetchable) { db in
            try requireOwner(db, owner)
            // A zone with changes in the push is made known by its page below, and the push's token
            // replaces the database changes' own: neither is written twice. A zone waiting to be
            // fetched again from the start (``zonesToRefetch(owner:)``) is left to that fetch: a push
            // applied to it stored a current token over the records it lacks, and the catch-up then
            // went on from that token.
            let refetch = Set(
                try String.fetchAll(db.cachedStatement(sql: "SELECT zone FROM replicaZoneRefetch WHERE owner = ?"), arguments: [owner]))
            let paged = Set(zoneChanges.map(\.zoneID))
            let skipped = paged.union(databaseChanges.changedZoneIDs.filter { refetch.contains($0.zoneName) })
            try applyDatabaseChanges(db, databaseChanges, owner: owner, skippingZones: skipped, storingToken: false)
            for changes in zoneChanges where !refetch.contains(changes.zoneID.zoneName) {
                try applyZoneChanges(db, try encoded(changes, owner: owner), owner: owner)
            }
            try db.executeCached("UPDATE replicaOwner SET databaseToken = ? WHERE owner = ?", [token.stringValue, owner])
        }
    }

    /// Removes a zone and all its records and token, as when the owner revokes the share or the zone
    /// stops being shared with you. Pending writes to the zone stay in the outbox (the owner's node
    /// will refuse them). Purging a zone that is not there does nothing.
    public func purgeZone(owner: String, zoneName: String) throws(ShareSyncError) {
        try write { db in
            try db.executeCached("DELETE FROM replicaZone WHERE owner = ? AND zone = ?", [owner, zoneName])
            try db.executeCached("DELETE FROM replicaStagedZone WHERE owner = ? AND zone = ?", [owner, zoneName])
        }
    }

    // MARK: Inside a transaction

    func applyZoneChanges(_ db: Database, _ changes: EncodedZoneChanges, owner: String) throws {
        let zoneID = changes.zoneID
        try checkOwner(zoneID, owner)
        if try isLeaving(db, owner: owner, zoneName: zoneID.zoneName) { return }  // left locally: stays out
        // One statement makes the zone known, stores the page's token and names the zone's row (the
        // transaction stores the records with it, or nothing). The journal's zone triggers fire as
        // they did for an insert and a separate token update: on the insert, and not on a token.
        let key = try Int64.fetchOne(
            db.cachedStatement(
                sql: """
                    INSERT INTO replicaZone (owner, zone, token) VALUES (?, ?, ?)
                    ON CONFLICT (owner, zone) DO UPDATE SET token = excluded.token RETURNING id
                    """),
            arguments: [owner, zoneID.zoneName, changes.changeToken.stringValue])
        guard let key else {
            throw ShareSyncError(.internalError, "the replica could not store zone \(zoneID.zoneName) of owner \(owner)")
        }
        try applyRecordChanges(db, changes, table: .live(zoneKey: key), owner: owner)
    }

    /// A page of records encoded for ``applyRecordChanges(_:_:table:owner:)``, after checking that the
    /// page and each of its records are in a zone of `owner` (the checks come first: a record of
    /// another zone fails with its own error, not with one of encoding).
    func encoded(_ changes: ZoneChanges, owner: String) throws(ShareSyncError) -> EncodedZoneChanges {
        try checkOwner(changes.zoneID, owner)
        for change in changes.changes {
            switch change {
            case .changed(let record): try checkZone(record.recordID, changes.zoneID)
            case .deleted(let deleted): try checkZone(deleted.recordID, changes.zoneID)
            }
        }
        return try EncodedZoneChanges(changes)
    }

    /// Saves and deletes the records of a page in `table` (the live records or the staging area),
    /// checking each one as it goes: a bad item throws, and the caller's transaction rolls back.
    func applyRecordChanges(_ db: Database, _ changes: EncodedZoneChanges, table: RecordTable, owner: String) throws {
        let zoneID = changes.zoneID
        // The live records name their zone by its row's id (the zone row exists: the caller made it).
        let zone: ReplicaUpsert.Zone
        let (zoneColumns, placeholders): (String, String)
        switch table {
        case .live(let key):
            zone = .key(key)
            (zoneColumns, placeholders) = ("zoneKey", "?")
        case .staged:
            zone = .names(owner: owner, zone: zoneID.zoneName)
            (zoneColumns, placeholders) = ("owner, zone", "?, ?")
        }
        // Prepared once per connection (GRDB's statement cache), bound per record: a page of 400 saves
        // costs 400 steps, not 400 parses.
        let upsert = try ReplicaUpsert(
            db.cachedStatement(
                sql: """
                    INSERT INTO \(table.name) (\(zoneColumns), name, type, json) VALUES (\(placeholders), ?, ?, ?)
                    ON CONFLICT (\(zoneColumns), name) DO UPDATE SET type = excluded.type, json = excluded.json
                    """), zone: zone, in: db)
        var delete: Statement?
        for change in changes.changes {
            switch change {
            case .changed(let record):
                try checkZone(record.recordID, zoneID)
                try upsert.run(name: record.recordID.recordName, type: record.recordType, json: record.json)
            case .deleted(let deleted):
                try checkZone(deleted.recordID, zoneID)
                switch zone {
                case .key(let key):
                    if delete == nil { delete = try db.cachedStatement(sql: "DELETE FROM replicaRecord WHERE zoneKey = ? AND name = ?") }
                    try delete!.execute(arguments: [key, deleted.recordID.recordName])
                case .names(let owner, let zoneName):
                    if delete == nil {
                        delete = try db.cachedStatement(sql: "DELETE FROM replicaStagedRecord WHERE owner = ? AND zone = ? AND name = ?")
                    }
                    try delete!.execute(arguments: [owner, zoneName, deleted.recordID.recordName])
                }
            }
        }
    }

    /// Where ``applyRecordChanges(_:_:table:owner:)`` stores a page: the live records of the zone whose
    /// row has this id, or the staging area of a zone being fetched again.
    enum RecordTable {
        case live(zoneKey: Int64)
        case staged

        var name: String {
            switch self {
            case .live: "replicaRecord"
            case .staged: "replicaStagedRecord"
            }
        }
    }

    /// Applies database changes; `skippingZones` are changed zones the caller stores a page of in the
    /// same transaction (``applyZoneChanges(_:_:owner:)`` makes them known), and `storingToken` false
    /// leaves the owner's database token to the caller.
    func applyDatabaseChanges(
        _ db: Database, _ changes: DatabaseChanges, owner: String, skippingZones: Set<RecordZone.ID> = [], storingToken: Bool = true
    ) throws {
        // Deletions first: a zone deleted and created again is purged, then known afresh with no token.
        for zoneID in changes.deletedZoneIDs {
            try checkOwner(zoneID, owner)
            try db.executeCached("DELETE FROM replicaZone WHERE owner = ? AND zone = ?", [owner, zoneID.zoneName])
            try db.executeCached("DELETE FROM replicaStagedZone WHERE owner = ? AND zone = ?", [owner, zoneID.zoneName])
        }
        for zoneID in changes.changedZoneIDs {
            try checkOwner(zoneID, owner)
            if skippingZones.contains(zoneID) { continue }
            if try isLeaving(db, owner: owner, zoneName: zoneID.zoneName) { continue }
            try db.executeCached("INSERT OR IGNORE INTO replicaZone (owner, zone) VALUES (?, ?)", [owner, zoneID.zoneName])
        }
        if storingToken {
            try db.executeCached("UPDATE replicaOwner SET databaseToken = ? WHERE owner = ?", [changes.changeToken.stringValue, owner])
        }
    }

    func checkOwner(_ zoneID: RecordZone.ID, _ owner: String) throws(ShareSyncError) {
        guard zoneID.ownerName == owner else {
            throw ShareSyncError(
                .invalidArguments, "zone \(zoneID.zoneName) belongs to owner \(zoneID.ownerName), not to \(owner)",
                zoneID: zoneID, rule: .replicaOwnerMismatch)
        }
    }

    func checkZone(_ recordID: Record.ID, _ zoneID: RecordZone.ID) throws(ShareSyncError) {
        guard recordID.zoneID == zoneID else {
            throw ShareSyncError(
                .invalidArguments, "record \(recordID.recordName) is in zone \(recordID.zoneID), not in \(zoneID)",
                recordID: recordID, rule: .replicaZoneMismatch)
        }
    }
}
