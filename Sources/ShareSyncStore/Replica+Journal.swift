import Foundation
import GRDB
import ShareSyncCore

/// One entry of the replica's change journal (see ``SharedDatabaseReplica/journalChanges()``).
public struct ReplicaJournalEntry: Sendable, Hashable {
    public enum Kind: String, Sendable {
        /// The record changed (or appeared); read it from the replica for its latest state.
        case changed
        /// The record is gone.
        case deleted
        /// The zone appeared in the replica.
        case zoneAdded
        /// The zone is gone, with all its records.
        case zoneDeleted
    }

    /// The entry's position: a token at or after it has seen it.
    public var sequence: Int64
    /// The owner's user record name.
    public var owner: String
    /// The zone's name.
    public var zoneName: String
    /// The record's name; `nil` for zone entries.
    public var recordName: String?
    /// What happened.
    public var kind: Kind
    /// A deleted record's type (`nil` for other entries, and for deletions journaled before types were).
    public var recordType: String? = nil
}

/// Where the replica's change journal stands.
public struct ReplicaJournalPosition: Sendable, Hashable {
    /// Identifies this journal: a token of another epoch (a replica file made afresh) is expired.
    public var epoch: String
    /// The last entry's sequence (0: none yet).
    public var sequence: Int64
    /// Deletions up to this sequence were trimmed: an older token (but 0) is expired.
    public var expiredBelow: Int64
}

// The shared database's change journal. The replica applies what owners send in many ways (pages,
// pushes, zone replacements, purges); rather than journal each, the journal compares the replica
// with what it last saw (kept in replicaFeedSeen) and records the differences, in the replica file:
// tokens (positions in the journal) stay valid across daemon restarts, and what changed while the
// daemon was down is found by the next comparison. Each record keeps only its latest entry (an
// older one is superseded), so the journal from 0 is the replica's whole content.
extension SharedDatabaseReplica {
    /// The most deletions (of records and zones) the journal keeps: beyond it the oldest are dropped and
    /// tokens from before them expire. Live records always keep their entry, however many there are
    /// (the journal from 0 is the replica's content), so a replica larger than this never expires a
    /// token for keeping it.
    public static let journalCapacity = 200_000

    /// Compares the replica with what the journal last saw and appends the differences (records
    /// changed or deleted, zones added or deleted), in one transaction. The first call journals the
    /// whole replica; later calls compare only the keys written since (noted by triggers created by the first
    /// call, see `ReplicaSchema.installJournalTriggers`), with the same result as comparing everything.
    /// Observers are not told (the journal is not shared data). Past `capacity` deletions the oldest
    /// are dropped (tests use a small one). `fullScan` compares the whole replica anyway (tests check
    /// that both ways agree).
    @discardableResult
    public func journalChanges(
        capacity: Int = journalCapacity, fullScan: Bool = false
    ) throws(ShareSyncError) -> (position: ReplicaJournalPosition, added: Int) {
        defer { checkpointer?.committed() }
        return try withStoreErrors("replica journal", path: writer.path) {
            try writer.write { db in
                let scanned = try Int.fetchOne(db.cachedStatement(sql: "SELECT scanned FROM replicaFeedState WHERE id = 1"))
                if scanned == nil {
                    // The first use: from now on every write notes its keys (compared in full this time).
                    try db.execute(
                        sql: "INSERT INTO replicaFeedState (id, epoch) VALUES (1, ?)",
                        arguments: [String(UUID().uuidString.prefix(8)).lowercased()])
                    try ReplicaSchema.installJournalTriggers(db)
                }
                let everything = fullScan || scanned != 1
                struct Key: Hashable, Comparable {
                    var owner: String, zone: String, name: String
                    static func < (a: Self, b: Self) -> Bool { (a.owner, a.zone, a.name) < (b.owner, b.zone, b.name) }
                }
                // Each key's change tag ("" for zones), and each record's type (what a deletion reports).
                var seen: [Key: String] = [:]
                var now: [Key: String] = [:]
                var seenTypes: [Key: String] = [:]
                var nowTypes: [Key: String] = [:]
                func key(_ row: Row) -> Key { Key(owner: row[0], zone: row[1], name: row[2]) }
                func noteNow(_ row: Row) throws {
                    let record = try ShareSyncCore.Record(jsonData: row[3])
                    now[key(row)] = record.recordChangeTag ?? ""
                    nowTypes[key(row)] = record.recordType
                }
                if everything {
                    for row in try Row.fetchAll(db, sql: "SELECT owner, zone, name, tag, type FROM replicaFeedSeen") {
                        seen[key(row)] = row[3]
                        seenTypes[key(row)] = row[4]
                    }
                    for row in try Row.fetchAll(db, sql: "SELECT owner, zone FROM replicaZone") {
                        now[Key(owner: row[0], zone: row[1], name: "")] = ""
                    }
                    for row in try Row.fetchAll(db, sql: "SELECT z.owner, z.zone, r.name, r.json FROM replicaRecord r JOIN replicaZone z ON z.id = r.zoneKey") {
                        try noteNow(row)
                    }
                } else {
                    // Only the keys written since the last call; any other key is as it was seen. (CROSS
                    // JOIN keeps those keys the outer loop: without statistics SQLite may walk the
                    // other table.)
                    for row in try Row.fetchAll(
                        db.cachedStatement(sql: """
                            SELECT s.owner, s.zone, s.name, s.tag, s.type FROM (SELECT DISTINCT owner, zone, name FROM replicaFeedDirty) d
                            CROSS JOIN replicaFeedSeen s ON s.owner = d.owner AND s.zone = d.zone AND s.name = d.name
                            """))
                    {
                        seen[key(row)] = row[3]
                        seenTypes[key(row)] = row[4]
                    }
                    for row in try Row.fetchAll(
                        db.cachedStatement(sql: """
                            SELECT d.owner, d.zone, d.name FROM (SELECT DISTINCT owner, zone, name FROM replicaFeedDirty) d
                            CROSS JOIN replicaZone z ON z.owner = d.owner AND z.zone = d.zone WHERE d.name = ''
                            """))
                    {
                        now[key(row)] = ""
                    }
                    for row in try Row.fetchAll(
                        db.cachedStatement(sql: """
                            SELECT d.owner, d.zone, d.name, r.json FROM (SELECT DISTINCT owner, zone, name FROM replicaFeedDirty) d
                            CROSS JOIN replicaZone z ON z.owner = d.owner AND z.zone = d.zone
                            CROSS JOIN replicaRecord r ON r.zoneKey = z.id AND r.name = d.name
                            WHERE d.name != ''
                            """))
                    {
                        try noteNow(row)
                    }
                }
                try db.executeCached("DELETE FROM replicaFeedDirty", [])
                try db.executeCached("UPDATE replicaFeedState SET scanned = 1 WHERE id = 1", [])
                var added = 0
                var deletionsAdded = 0
                func append(_ key: Key, _ kind: ReplicaJournalEntry.Kind, type: String? = nil) throws {
                    switch kind {
                    case .changed, .deleted:
                        try db.execute(
                            sql: "DELETE FROM replicaFeedEntry WHERE owner = ? AND zone = ? AND name = ?",
                            arguments: [key.owner, key.zone, key.name])
                    case .zoneDeleted:
                        try db.execute(
                            sql: "DELETE FROM replicaFeedEntry WHERE owner = ? AND zone = ?", arguments: [key.owner, key.zone])
                    case .zoneAdded:
                        break  // an earlier zoneDeleted stays: older tokens must learn the old records are gone
                    }
                    try db.execute(
                        sql: "INSERT INTO replicaFeedEntry (owner, zone, name, kind, type) VALUES (?, ?, ?, ?, ?)",
                        arguments: [key.owner, key.zone, key.name, kind.rawValue, type])
                    added += 1
                    if kind == .deleted || kind == .zoneDeleted { deletionsAdded += 1 }
                }
                let goneZones = Set(seen.keys.filter { $0.name.isEmpty && now[$0] == nil }.map { [$0.owner, $0.zone] })
                // Zones gone first (their records go with them), then in key order: a zone before its records.
                for key in seen.keys.sorted() where key.name.isEmpty && now[key] == nil {
                    try append(key, .zoneDeleted)
                    try db.execute(
                        sql: "DELETE FROM replicaFeedSeen WHERE owner = ? AND zone = ?", arguments: [key.owner, key.zone])
                }
                for key in seen.keys.sorted() where !key.name.isEmpty && now[key] == nil && !goneZones.contains([key.owner, key.zone]) {
                    try append(key, .deleted, type: seenTypes[key])
                    try db.execute(
                        sql: "DELETE FROM replicaFeedSeen WHERE owner = ? AND zone = ? AND name = ?",
                        arguments: [key.owner, key.zone, key.name])
                }
                for key in now.keys.sorted() where seen[key] == now[key] && !goneZones.contains([key.owner, key.zone]) && seenTypes[key] != nowTypes[key] {
                    // Seen before types were kept: the type is noted, and nothing is journaled.
                    try db.execute(
                        sql: "UPDATE replicaFeedSeen SET type = ? WHERE owner = ? AND zone = ? AND name = ?",
                        arguments: [nowTypes[key], key.owner, key.zone, key.name])
                }
                for key in now.keys.sorted() where seen[key] != now[key] || goneZones.contains([key.owner, key.zone]) {
                    try append(key, key.name.isEmpty ? .zoneAdded : .changed)
                    try db.execute(
                        sql: """
                            INSERT INTO replicaFeedSeen (owner, zone, name, tag, type) VALUES (?, ?, ?, ?, ?)
                            ON CONFLICT (owner, zone, name) DO UPDATE SET tag = excluded.tag, type = excluded.type
                            """,
                        arguments: [key.owner, key.zone, key.name, now[key]!, nowTypes[key]])
                }
                // Trimming: past `capacity` deletions, the oldest go. Only a call that added deletions
                // can take them past it, and both statements walk the deletions' own index
                // (replicaFeedEntry_deletion), never the live records' entries: counting every entry
                // on each call took 1.1 ms at 100k records and 15 ms at 300k (`sharesync-bench store`).
                let deletions = deletionsAdded == 0 ? 0 : try Int.fetchOne(db.cachedStatement(sql: """
                    SELECT COUNT(*) FROM replicaFeedEntry INDEXED BY replicaFeedEntry_deletion
                    WHERE kind IN ('deleted', 'zoneDeleted')
                    """)) ?? 0
                if deletions > capacity {
                    if let last = try Int64.fetchOne(
                        db,
                        sql: """
                            SELECT MAX(seq) FROM (SELECT seq FROM replicaFeedEntry INDEXED BY replicaFeedEntry_deletion
                            WHERE kind IN ('deleted', 'zoneDeleted') ORDER BY seq LIMIT ?)
                            """, arguments: [deletions - capacity])
                    {
                        try db.execute(
                            sql: """
                                DELETE FROM replicaFeedEntry INDEXED BY replicaFeedEntry_deletion
                                WHERE kind IN ('deleted', 'zoneDeleted') AND seq <= ?
                                """,
                            arguments: [last])
                        try db.execute(
                            sql: "UPDATE replicaFeedState SET expiredBelow = MAX(expiredBelow, ?) WHERE id = 1", arguments: [last])
                    }
                }
                return (try journalPosition(db), added)
            }
        }
    }

    func journalPosition(_ db: Database) throws -> ReplicaJournalPosition {
        let state = try Row.fetchOne(db, sql: "SELECT epoch, expiredBelow FROM replicaFeedState WHERE id = 1")
        let sequence = try Int64.fetchOne(db, sql: "SELECT seq FROM sqlite_sequence WHERE name = 'replicaFeedEntry'") ?? 0
        return ReplicaJournalPosition(
            epoch: state?["epoch"] ?? "", sequence: sequence, expiredBelow: state?["expiredBelow"] ?? 0)
    }

    /// The journal's entries after `after` and up to `through`, in order, of one owner's zone (or of
    /// every zone), at most `limit`; `zonesAdded: false` leaves out the `zoneAdded` entries (record views).
    ///
    /// Throws ``ShareSyncError/Code/changeTokenExpired`` if entries after `after` were trimmed (`after`
    /// is below the journal's `expiredBelow`, checked in the same snapshot as the entries; 0, a read
    /// of everything, never expires). A reader checks its token against the position
    /// ``journalChanges(capacity:fullScan:)`` gave, but another reader's call may trim between that and
    /// this read: the entries it dropped were missing from the answer, with no expiry.
    public func journalEntries(
        after: Int64, through: Int64, owner: String? = nil, zoneName: String? = nil, limit: Int = .max,
        zonesAdded: Bool = true
    ) throws(ShareSyncError) -> [ReplicaJournalEntry] {
        try read { db in
            if after > 0, let expiredBelow = try Int64.fetchOne(db, sql: "SELECT expiredBelow FROM replicaFeedState WHERE id = 1"),
                after < expiredBelow
            {
                throw ShareSyncError(
                    .changeTokenExpired, "this token is older than the changes the replica keeps; read again without --since",
                    rule: .changeTokenExpired)
            }
            var sql = "SELECT seq, owner, zone, name, kind, type FROM replicaFeedEntry WHERE seq > ? AND seq <= ?"
            if !zonesAdded { sql += " AND kind != 'zoneAdded'" }
            var arguments: [(any DatabaseValueConvertible)?] = [after, through]
            if let owner {
                sql += " AND owner = ?"
                arguments.append(owner)
            }
            if let zoneName {
                sql += " AND zone = ?"
                arguments.append(zoneName)
            }
            sql += " ORDER BY seq LIMIT ?"
            arguments.append(Int64(clamping: limit))
            return try Row.fetchAll(db, sql: sql, arguments: StatementArguments(arguments)).map { row in
                let name: String = row["name"]
                return ReplicaJournalEntry(
                    sequence: row["seq"], owner: row["owner"], zoneName: row["zone"], recordName: name.isEmpty ? nil : name,
                    kind: ReplicaJournalEntry.Kind(rawValue: row["kind"]) ?? .changed, recordType: row["type"])
            }
        }
    }
}
