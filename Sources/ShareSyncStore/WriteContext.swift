import Foundation
import GRDB
import ShareSyncCore

/// One write transaction of the private database: it hands out sequence numbers, stores and deletes
/// records with their tombstones and references, and at the end writes the sequence back.
///
/// Every change to a record or zone takes the next number, so the change feeds are ordered by it.
struct WriteContext {
    let db: Database
    let database: PrivateDatabase
    /// The user record name of who is writing (the owner, or a participant through their share).
    let actor: String
    let now: Date
    private(set) var seq: Int64
    /// What this transaction changed that sharing depends on, zone by zone (read by `settleSharing`).
    var delta = SharingDelta()
    /// The last change of each zone in this transaction; ``finish()`` writes them to `zone.seq` once.
    private(set) var zoneSeqs: [String: Int64] = [:]
    /// What this transaction already read of the zone, share and member tables. Only this context
    /// writes those tables, and it keeps the cache in step; a rolled-back try or item clears it.
    let cache = WriteCache()

    /// Whether the writer is the owner (otherwise a participant, checked by ``AccessPolicy``).
    var isOwner: Bool { actor == database.ownerName }

    init(db: Database, database: PrivateDatabase, actor: String) throws {
        self.db = db
        self.database = database
        self.actor = actor
        self.now = Millis.normalize(database.clock())
        self.seq = try Int64.fetchOne(db.cachedStatement(sql: "SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'seq'")) ?? 0
    }

    mutating func nextSeq() -> Int64 {
        seq += 1
        return seq
    }

    /// Takes the next `count` sequence numbers at once; returns the one before them.
    mutating func reserveSeqs(_ count: Int64) -> Int64 {
        defer { seq += count }
        return seq
    }

    /// Writes the sequence, and each changed zone's last change, back; call once at the end of the
    /// transaction.
    func finish() throws {
        let zoneUpdate = try db.cachedStatement(sql: "UPDATE zone SET seq = ? WHERE name = ?")
        for (zone, seq) in zoneSeqs { try zoneUpdate.execute(arguments: [seq, zone]) }
        try db.cachedStatement(sql: "UPDATE meta SET value = ? WHERE key = 'seq'").execute(arguments: [String(seq)])
    }

    /// Undoes what this context remembers of a try or item that was rolled back: restores `snapshot`
    /// (taken before it) and forgets the cached reads.
    mutating func rollBack(to snapshot: WriteContext) {
        self = snapshot
        cache.clear()
    }

    // MARK: Zones

    func zoneExists(_ name: String) throws -> Bool {
        if cache.zones.contains(name) { return true }
        let exists = try Bool.fetchOne(db.cachedStatement(sql: "SELECT 1 FROM zone WHERE name = ?"), arguments: [name]) ?? false
        if exists { cache.zones.insert(name) }
        return exists
    }

    func requireZone(_ zoneID: RecordZone.ID) throws {
        try database.checkOwner(zoneID)
        guard try zoneExists(zoneID.zoneName) else {
            throw ShareSyncError(.zoneNotFound, "zone \(zoneID.zoneName) does not exist", zoneID: zoneID)
        }
    }

    // MARK: Records

    func loadRecord(zone: String, name: String) throws -> Record? {
        guard let json = try Data.fetchOne(db.cachedStatement(sql: "SELECT json FROM record WHERE zone = ? AND name = ?"), arguments: [zone, name])
        else { return nil }
        return try Record(jsonData: json)
    }

    /// Loads the record a save replaces (nil if it is new), noting the share it belongs to now
    /// (as ``noteShareBefore(zone:name:)`` does) from the same row.
    mutating func loadExisting(zone: String, name: String) throws -> Record? {
        guard let row = try Row.fetchOne(
            db.cachedStatement(sql: "SELECT json, shareName FROM record WHERE zone = ? AND name = ?"), arguments: [zone, name])
        else {
            delta.noteShareBefore(zone: zone, name: name, nil)
            return nil
        }
        delta.noteShareBefore(zone: zone, name: name, row["shareName"])
        return try Record(jsonData: row["json"] as Data)
    }

    /// Stores a record as given (system fields already set except the change tag), replacing any
    /// previous version, and returns it as stored.
    mutating func store(_ record: Record) throws -> Record {
        var record = record
        let zone = record.recordID.zoneID.zoneName
        let name = record.recordID.recordName
        try noteShareBefore(zone: zone, name: name)
        let seq = nextSeq()
        record.recordChangeTag = String(seq, radix: 36)
        let json = try record.jsonData()
        try record.checkSize(of: json, limits: database.limits)
        let isShare = record.recordType == Record.shareRecordType
        // A new row starts in the share it will most likely settle in (the share record itself, the
        // zone's zone-wide share, or none in an unshared zone), so settling usually finds it right;
        // an existing row keeps its share until `settleSharing` recomputes it.
        let initialShare: String? = isShare ? name : try zoneShareName(zone)
        try db.cachedStatement(
            sql: """
                INSERT INTO record (zone, name, type, seq, parent, json, shareName) VALUES (?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT (zone, name) DO UPDATE SET type = excluded.type, seq = excluded.seq,
                    parent = excluded.parent, json = excluded.json
                """
        ).execute(arguments: [zone, name, record.recordType, seq, record.parent?.recordID.recordName, json, initialShare])
        try db.cachedStatement(sql: "DELETE FROM recordTombstone WHERE zone = ? AND name = ?").execute(arguments: [zone, name])
        try db.cachedStatement(sql: "DELETE FROM deleteSelfReference WHERE zone = ? AND source = ?").execute(arguments: [zone, name])
        let targets = Set(record.fields.values.flatMap(\.references).filter { $0.action == .deleteSelf }.map(\.recordID.recordName))
        for target in targets {
            try db.cachedStatement(sql: "INSERT INTO deleteSelfReference (zone, target, source) VALUES (?, ?, ?)")
                .execute(arguments: [zone, target, name])
        }
        zoneSeqs[zone] = seq
        if isShare { cache.forgetShare(zone: zone, name: name) }
        delta.touch(zone: zone, name: name)
        return record
    }

    /// Remembers the share a record belongs to before this transaction changes it.
    mutating func noteShareBefore(zone: String, name: String) throws {
        guard !delta.hasShareBefore(zone: zone, name: name) else { return }
        delta.noteShareBefore(zone: zone, name: name, try storedShareName(zone: zone, name: name))
    }

    /// Deletes a record and, transitively, the records whose `deleteSelf` references point at it.
    /// Leaves a tombstone for each. Returns the deleted records (nothing if it did not exist).
    @discardableResult
    mutating func delete(zone: String, name: String) throws -> [Record] {
        var deleted: [Record] = []
        var work = [name]
        var seen: Set<String> = []
        while let next = work.popLast() {
            guard seen.insert(next).inserted, let record = try loadRecord(zone: zone, name: next) else { continue }
            try noteShareBefore(zone: zone, name: next)
            let seq = nextSeq()
            try db.cachedStatement(sql: "DELETE FROM record WHERE zone = ? AND name = ?").execute(arguments: [zone, next])
            try db.cachedStatement(sql: "INSERT OR REPLACE INTO recordTombstone (zone, name, type, seq) VALUES (?, ?, ?, ?)")
                .execute(arguments: [zone, next, record.recordType, seq])
            try db.cachedStatement(sql: "DELETE FROM deleteSelfReference WHERE zone = ? AND source = ?").execute(arguments: [zone, next])
            zoneSeqs[zone] = seq
            if record.recordType == Record.shareRecordType { cache.forgetShare(zone: zone, name: next) }
            work += try String.fetchAll(db.cachedStatement(sql: "SELECT source FROM deleteSelfReference WHERE zone = ? AND target = ?"), arguments: [zone, next])
            delta.touch(zone: zone, name: next)
            deleted.append(record)
        }
        return deleted
    }

    /// The names of a record's descendants through `parent`, at any depth (not including itself).
    func descendants(zone: String, of name: String) throws -> [String] {
        try String.fetchAll(
            db.cachedStatement(
                sql: """
                    WITH RECURSIVE sub(name) AS (
                        SELECT name FROM record WHERE zone = ?1 AND parent = ?2
                        UNION SELECT r.name FROM record r JOIN sub ON r.zone = ?1 AND r.parent = sub.name)
                    SELECT name FROM sub
                    """),
            arguments: [zone, name])
    }

    /// Whether making `parent` the parent of `name` would close a cycle.
    func wouldCycle(zone: String, name: String, parent: String) throws -> Bool {
        var current: String? = parent
        var steps = 0
        while let c = current, steps < 100_000 {
            if c == name { return true }
            current = try String.fetchOne(db.cachedStatement(sql: "SELECT parent FROM record WHERE zone = ? AND name = ?"), arguments: [zone, c])
            steps += 1
        }
        return false
    }
}

/// Reads a write transaction keeps so it does not repeat them for every record: which zones exist,
/// each zone's shares (few per zone), decoded share records, share members, and the zones each
/// viewer already sees. A reference type, so the non-mutating lookups of ``WriteContext`` can fill it;
/// ``WriteContext/rollBack(to:)`` clears it.
final class WriteCache {
    /// A zone's shares: every share's root (nil for the zone-wide share), by share name.
    struct ZoneShares {
        var roots: [String: String?] = [:]
        var zoneShare: String? { roots.first { $0.value == nil }?.key }
        func share(rootedAt root: String) -> String? { roots.first { $0.value == root }?.key }
    }

    var zones: Set<String> = []
    var shares: [String: ZoneShares] = [:]
    var shareValues: [String: [String: Share]] = [:]
    var members: [String: [String: [String]]] = [:]
    var viewerZones: Set<[String]> = []

    func clear() {
        zones = []
        shares = [:]
        shareValues = [:]
        members = [:]
        viewerZones = []
    }

    /// A share record changed or went: its decoded value and the zone's share list are read again.
    func forgetShare(zone: String, name: String) {
        shareValues[zone]?[name] = nil
        shares[zone] = nil
    }
}
