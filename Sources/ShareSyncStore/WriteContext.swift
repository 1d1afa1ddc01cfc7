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
    /// The sequence when the transaction began: ``finish()`` writes it back only if it moved.
    private let startSeq: Int64
    /// What this transaction changed that sharing depends on, zone by zone (read by `settleSharing`).
    var delta = SharingDelta()
    /// The last change of each zone in this transaction; ``finish()`` writes them to `zone.seq` once.
    private(set) var zoneSeqs: [String: Int64] = [:]
    /// What this transaction already read of the zone, share, member and record tables. Only this
    /// context writes those tables, and it keeps the cache in step; a rolled-back try or item clears it.
    let cache: WriteCache

    /// The records this request saves that have not been tried yet, by zone, so that a `deleteSelf`
    /// reference may name one saved later in the same request (``checkDeleteSelfTargets(_:existing:)``:
    /// targets are saved first, so this is a loop of references, or a record naming itself); one tried
    /// is taken out, saved or not. `nil`: such references are not checked (an import, whose batches may
    /// name records of later batches).
    var requestSaves: [String: Set<String>]? = [:]

    /// Whether the writer is the owner (otherwise a participant, checked by ``AccessPolicy``).
    var isOwner: Bool { actor == database.ownerName }

    init(db: Database, database: PrivateDatabase, actor: String) throws {
        self.db = db
        self.database = database
        self.actor = actor
        self.cache = WriteCache(keepsRows: database.setBasedWrites)
        self.now = Millis.normalize(database.clock())
        self.seq = try Int64.fetchOne(db.cachedStatement(sql: "SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'seq'")) ?? 0
        self.startSeq = seq
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
        // Only if something changed: a write that applied nothing (every item refused, a caller in no
        // share) then commits nothing, so it costs no disk sync and wakes no subscription.
        guard seq != startSeq else { return }
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
        let stored: WriteCache.StoredRecord?
        if let prefetched = cache.takePrefetched(zone: zone, name: name) {
            stored = prefetched
        } else {
            stored = try Row.fetchOne(
                db.cachedStatement(sql: "SELECT json, shareName FROM record WHERE zone = ? AND name = ?"), arguments: [zone, name]
            ).map { WriteCache.StoredRecord(json: $0["json"], shareName: $0["shareName"]) }
        }
        delta.noteShareBefore(zone: zone, name: name, stored?.shareName)
        return try stored.map { try Record(jsonData: $0.json) }
    }

    /// Reads, in three statements per zone, what saving these records will ask about each of them:
    /// its stored JSON and share (``loadExisting(zone:name:)``), its type and parent, whether it has a
    /// tombstone, and the type, parent and share of the parents they name (the cycle check and
    /// membership walk up from them). Without it each record costs those statements one by one.
    /// Only with ``PrivateDatabase/setBasedWrites``.
    func prefetch(_ batch: [Record]) throws {
        guard cache.keepsRows else { return }
        // By zone, names only (records are large values, not worth copying).
        var zones: [String: (names: Set<String>, parents: Set<String>)] = [:]
        for record in batch where record.recordType != Record.shareRecordType {
            zones[record.recordID.zoneID.zoneName, default: ([], [])].names.insert(record.recordID.recordName)
            if let parent = record.parent?.recordID.recordName {
                zones[record.recordID.zoneID.zoneName, default: ([], [])].parents.insert(parent)
            }
        }
        for (zone, (names, parentNames)) in zones {
            let list = Self.jsonList(names)
            var found: Set<String> = []
            let rows = try Row.fetchCursor(
                db.cachedStatement(sql: """
                    SELECT name, type, parent, shareName, json FROM record
                    WHERE zone = ?1 AND name IN (SELECT value FROM json_each(?2))
                    """),
                arguments: [zone, list])
            while let row = try rows.next() {
                let name: String = row[0]
                found.insert(name)
                let state = RowState(type: row[1], parent: row[2], shareName: row[3])
                cache.setRow(zone: zone, name: name, state)
                cache.prefetched[zone, default: [:]][name] = .some(WriteCache.StoredRecord(json: row[4], shareName: state.shareName))
            }
            var noTombstone = names
            for name in try String.fetchAll(
                db.cachedStatement(sql: "SELECT name FROM recordTombstone WHERE zone = ?1 AND name IN (SELECT value FROM json_each(?2))"),
                arguments: [zone, list])
            {
                noTombstone.remove(name)
            }
            for name in names where !found.contains(name) {
                cache.setRow(zone: zone, name: name, nil)
                cache.prefetched[zone, default: [:]][name] = .some(nil)
            }
            cache.noTombstone[zone, default: []].formUnion(noTombstone)
            let parents = parentNames.filter { cache.row(zone: zone, name: $0) == nil }
            guard !parents.isEmpty else { continue }
            var parentsFound: Set<String> = []
            let parentRows = try Row.fetchCursor(
                db.cachedStatement(sql: """
                    SELECT name, type, parent, shareName FROM record
                    WHERE zone = ?1 AND name IN (SELECT value FROM json_each(?2))
                    """),
                arguments: [zone, Self.jsonList(parents)])
            while let row = try parentRows.next() {
                let name: String = row[0]
                parentsFound.insert(name)
                cache.setRow(zone: zone, name: name, RowState(type: row[1], parent: row[2], shareName: row[3]))
            }
            for name in parents where !parentsFound.contains(name) { cache.setRow(zone: zone, name: name, nil) }
        }
    }

    /// Names as a JSON array, for `json_each`.
    private static func jsonList(_ names: some Collection<String>) -> Data {
        var writer = JSONWriter(capacity: names.count * 16)
        writer.array(Array(names)) { $0.string($1) }
        return Data(writer.bytes)
    }

    /// A record row's type, parent and share (nil: no such row), from the cache when this transaction
    /// knows it.
    func rowState(zone: String, name: String) throws -> RowState? {
        if let known = cache.row(zone: zone, name: name) { return known }
        let rows = try Row.fetchCursor(
            db.cachedStatement(sql: "SELECT type, parent, shareName FROM record WHERE zone = ? AND name = ?"), arguments: [zone, name])
        let state = try rows.next().map { RowState(type: $0[0], parent: $0[1], shareName: $0[2]) }
        cache.setRow(zone: zone, name: name, state)
        return state
    }

    /// What a store knows of the version it replaces.
    enum Replacing {
        /// Nothing: it may or may not exist.
        case unknown
        /// The stored version (nil: there is none), as read in this transaction.
        case known(Record?)
    }

    /// Stores a record as given (system fields already set except the change tag), replacing any
    /// previous version, and returns it as stored.
    mutating func store(_ record: Record, replacing previous: Replacing = .unknown) throws -> Record {
        var record = record
        let zone = record.recordID.zoneID.zoneName
        let name = record.recordID.recordName
        try noteShareBefore(zone: zone, name: name)
        let seq = nextSeq()
        record.recordChangeTag = try database.positions.changeTag(seq)
        let json = try record.jsonData()
        try record.checkSize(of: json, limits: database.limits)
        let isShare = record.recordType == Record.shareRecordType
        // A new row starts in the share it will most likely settle in (the share record itself, the
        // zone's zone-wide share, or none in an unshared zone), so settling usually finds it right;
        // an existing row keeps its share until `settleSharing` recomputes it.
        let initialShare: String? = isShare ? name : try zoneShareName(zone)
        let parent = record.parent?.recordID.recordName
        if !(try updateInPlace(previous, with: record, seq: seq, parent: parent, json: json)) {
            try db.cachedStatement(
                sql: """
                    INSERT INTO record (zone, name, type, seq, parent, json, shareName) VALUES (?, ?, ?, ?, ?, ?, ?)
                    ON CONFLICT (zone, name) DO UPDATE SET type = excluded.type, seq = excluded.seq,
                        parent = excluded.parent, json = excluded.json
                    """
            ).execute(arguments: [zone, name, record.recordType, seq, parent, json, initialShare])
        }
        // The row's share: a new row's is the initial one; an updated row keeps its own.
        let before = cache.row(zone: zone, name: name)
        cache.forgetPrefetched(zone: zone, name: name)
        if let before {
            let shareName = before == nil ? initialShare : before!.shareName
            cache.setRow(zone: zone, name: name, RowState(type: record.recordType, parent: record.parent?.recordID.recordName, shareName: shareName))
        }
        if !cache.hasNoTombstone(zone: zone, name: name) {
            try db.cachedStatement(sql: "DELETE FROM recordTombstone WHERE zone = ? AND name = ?").execute(arguments: [zone, name])
        }
        // The rows naming this record as a source exist only while a stored version has deleteSelf
        // references (deleting the record or its zone removes them).
        let mayHaveReferences: Bool
        if cache.keepsRows, case .known(let replaced) = previous {
            mayHaveReferences = replaced?.hasDeleteSelfReferences ?? false
        } else {
            mayHaveReferences = true
        }
        if mayHaveReferences {
            try db.cachedStatement(sql: "DELETE FROM deleteSelfReference WHERE zone = ? AND source = ?").execute(arguments: [zone, name])
        }
        for target in record.deleteSelfTargetNames {
            try db.cachedStatement(sql: "INSERT INTO deleteSelfReference (zone, target, source) VALUES (?, ?, ?)")
                .execute(arguments: [zone, target, name])
        }
        zoneSeqs[zone] = seq
        if isShare { cache.forgetShare(zone: zone, name: name) }
        delta.touch(zone: zone, name: name)
        return record
    }

    /// Rewrites a row known to exist (`previous`, read in this transaction) with an `UPDATE` that sets
    /// only the columns whose value changes: `seq` and `json` always, `parent` when it moved; `type`
    /// never changes for an existing record (rule `recordTypeImmutable`). Returns false, having
    /// written nothing, when the row is not known to exist with the same type; the caller then
    /// upserts every column.
    ///
    /// Measured reason: SQLite rewrites the entry of every index whose column a statement assigns,
    /// even to the same value, and the upsert assigns `type` and `parent`, so an edit touched the
    /// `record_type` and `record_parent` leaves for nothing. Edits of 100k records in batches of 400
    /// (`sharesync-bench store`, "owner edits") went from 49-52k to 62-63k records/s (3 runs each).
    /// A one-record save through the daemon dirties 7-8 pages instead of 9-10 (counted with the WAL
    /// hook); its latency did not move measurably: the commit's disk sync dominates it. Only on the
    /// set-based path (``PrivateDatabase/setBasedWrites``): the row-by-row one keeps the upsert, and
    /// `SetBasedWritesTests` compares the two.
    private func updateInPlace(_ previous: Replacing, with record: Record, seq: Int64, parent: String?, json: Data) throws -> Bool {
        guard cache.keepsRows, case .known(let replaced?) = previous, replaced.recordType == record.recordType else { return false }
        let zone = record.recordID.zoneID.zoneName
        let name = record.recordID.recordName
        if replaced.parent?.recordID.recordName == parent {
            try db.cachedStatement(sql: "UPDATE record SET seq = ?, json = ? WHERE zone = ? AND name = ?")
                .execute(arguments: [seq, json, zone, name])
        } else {
            try db.cachedStatement(sql: "UPDATE record SET seq = ?, parent = ?, json = ? WHERE zone = ? AND name = ?")
                .execute(arguments: [seq, parent, json, zone, name])
        }
        // The row was read in this transaction, and only this context writes the table; were it gone
        // all the same, the upsert puts it back.
        return db.changesCount == 1
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
            if let first = deleted.first { try checkCascadedDelete(record, deleting: first.recordID) }
            try noteShareBefore(zone: zone, name: next)
            let seq = nextSeq()
            try db.cachedStatement(sql: "DELETE FROM record WHERE zone = ? AND name = ?").execute(arguments: [zone, next])
            cache.forgetPrefetched(zone: zone, name: next)
            cache.setRow(zone: zone, name: next, nil)
            try db.cachedStatement(sql: "INSERT OR REPLACE INTO recordTombstone (zone, name, type, seq) VALUES (?, ?, ?, ?)")
                .execute(arguments: [zone, next, record.recordType, seq])
            cache.noTombstone[zone]?.remove(next)
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
            current = try rowState(zone: zone, name: c)?.parent
            steps += 1
        }
        return false
    }
}

/// A record row's type, parent and share.
struct RowState: Equatable {
    var type: String
    var parent: String?
    var shareName: String?
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

    /// A stored record's JSON and share, as ``WriteContext/prefetch(_:)`` read it.
    struct StoredRecord {
        var json: Data
        var shareName: String?
    }

    var zones: Set<String> = []
    var shares: [String: ZoneShares] = [:]
    var shareValues: [String: [String: Share]] = [:]
    var members: [String: [String: [String]]] = [:]
    var viewerZones: Set<[String]> = []
    /// The viewers who read a zone's own feed (`viewZone.direct`), by zone.
    var directViewers: [String: Set<String>] = [:]
    /// Whether record rows are cached (``rows``, ``prefetched``, ``noTombstone``): with
    /// ``PrivateDatabase/setBasedWrites``. Every write of a record row goes through ``WriteContext``,
    /// which updates or forgets the row's entries.
    let keepsRows: Bool
    /// Record rows this transaction read or wrote, by zone and name; a nil state: no row.
    private var rows: [String: [String: RowState?]] = [:]
    /// Records a batch is about to save, read ahead; each entry is taken once, by the save.
    var prefetched: [String: [String: StoredRecord?]] = [:]
    /// Names known to have no tombstone.
    var noTombstone: [String: Set<String>] = [:]

    init(keepsRows: Bool) {
        self.keepsRows = keepsRows
    }

    func clear() {
        zones = []
        shares = [:]
        shareValues = [:]
        members = [:]
        viewerZones = []
        directViewers = [:]
        forgetRows()
    }

    /// The cached state of a row: nil when not known, `.some(nil)` when known not to exist.
    func row(zone: String, name: String) -> RowState?? {
        guard keepsRows, let zoneRows = rows[zone], let state = zoneRows[name] else { return nil }
        return .some(state)
    }

    func setRow(zone: String, name: String, _ state: RowState?) {
        guard keepsRows else { return }
        rows[zone, default: [:]][name] = .some(state)
    }

    func takePrefetched(zone: String, name: String) -> StoredRecord?? {
        prefetched[zone]?.removeValue(forKey: name)
    }

    func forgetPrefetched(zone: String, name: String) {
        prefetched[zone]?[name] = nil
    }

    func hasNoTombstone(zone: String, name: String) -> Bool {
        noTombstone[zone]?.contains(name) ?? false
    }

    /// Forgets every record row of a zone (after a statement that changed many), or of all zones.
    func forgetRows(zone: String? = nil) {
        if let zone {
            rows[zone] = nil
            prefetched[zone] = nil
            noTombstone[zone] = nil
        } else {
            rows = [:]
            prefetched = [:]
            noTombstone = [:]
        }
    }

    /// A share record changed or went: its decoded value and the zone's share list are read again.
    func forgetShare(zone: String, name: String) {
        shareValues[zone]?[name] = nil
        shares[zone] = nil
    }
}
