import Foundation
import GRDB
import ShareSyncCore

// Keeping each participant's view current. A viewer's view of a zone is the records of the shares in
// it that they have accepted. `viewLog` holds, per viewer, the last change of every record that is or
// was in their view (present or not); `viewZone` says which zones they see. Both take fresh sequence
// numbers, so a participant's feeds are "rows above my token, in order", exactly like the owner's.
//
// A viewer who enters a zone through its zone-wide share sees every record of the zone, so their feed
// of it is the zone's own: `viewZone.direct`, and no `viewLog` rows (``PrivateDatabase/directZoneFeeds``).
// Their tokens are checked against `enteredSeq` as the others' are: a fetch from nil carries the
// sequence number it began at (`1s` tokens), which is never below it.

extension WriteContext {
    /// Recomputes share membership for what this transaction touched, syncs the member lists of
    /// changed shares, and updates every affected viewer's feed. Call once, after all items.
    mutating func settleSharing() throws {
        for zone in delta.zonesToSettle.sorted() {
            let hasShares = try zoneHasShares(zone)
            let hadViewers = try Bool.fetchOne(db.cachedStatement(sql: "SELECT 1 FROM member WHERE zone = ? LIMIT 1"), arguments: [zone]) ?? false
            if !hasShares && !hadViewers && delta[zone].sharesChanged.isEmpty {
                // Nothing shared here: clear any stale membership and move on.
                try db.cachedStatement(sql: "UPDATE record SET shareName = NULL WHERE zone = ? AND shareName IS NOT NULL").execute(arguments: [zone])
                cache.forgetRows(zone: zone)
                continue
            }
            let (moved, rows) = try recomputeMembership(zone: zone)
            let memberChanges = try syncMembers(zone: zone)
            try updateViews(zone: zone, records: delta[zone].touched.union(moved), rows: rows, memberChanges: memberChanges)
        }
    }

    /// Recomputes the share of touched records, and of dirty records with all their descendants.
    /// Returns the records whose share changed, and the type and share of every live record it looked at.
    private mutating func recomputeMembership(zone: String) throws -> (moved: Set<String>, rows: [String: RecordShare]) {
        let zoneShare = try zoneShareName(zone)
        let dirty = delta[zone].wholeZoneDirty ? Int.max : delta[zone].touched.count + delta[zone].membershipDirty.count
        if database.setBasedWrites, dirty >= database.wholeZoneSettleThreshold, try zoneShare != nil || !zoneHasShares(zone) {
            return try recomputeMembershipOfZone(zone, zoneShare: zoneShare)
        }
        var names = delta[zone].touched
        if delta[zone].wholeZoneDirty {
            names.formUnion(try String.fetchAll(db.cachedStatement(sql: "SELECT name FROM record WHERE zone = ?"), arguments: [zone]))
        }
        // Under a zone-wide share every record belongs to it whatever its parent (the whole zone was
        // recomputed when it was created), so a moved record's descendants cannot change share.
        let parentsMatter = zoneShare == nil
        for name in delta[zone].membershipDirty {
            names.insert(name)
            if parentsMatter { names.formUnion(try descendants(zone: zone, of: name)) }
        }
        var changed: Set<String> = []
        var rows: [String: RecordShare] = [:]
        for name in names {
            guard var state = try rowState(zone: zone, name: name) else { continue }
            let type = state.type
            let current = state.shareName
            let computed = type == Record.shareRecordType ? name : try membership(zone: zone, name: name)
            if computed != current {
                try noteShareBefore(zone: zone, name: name)
                try db.cachedStatement(sql: "UPDATE record SET shareName = ? WHERE zone = ? AND name = ?")
                    .execute(arguments: [computed, zone, name])
                state.shareName = computed
                cache.setRow(zone: zone, name: name, state)
                cache.forgetPrefetched(zone: zone, name: name)
                changed.insert(name)
            }
            rows[name] = RecordShare(type: type, shareName: computed)
        }
        return (changed, rows)
    }

    /// ``recomputeMembership(zone:)`` for a zone where no record's share depends on its parent (under a
    /// zone-wide share every record is in it; with no share, none is; a share record is always in
    /// itself), in two statements over the zone whatever its size: one reads the rows whose stored
    /// share is not the computed one, the other sets it. Row by row, sharing an existing zone of 100k
    /// records took 1.85 s and one of 300k 7.3-8.2 s: each record was read and updated by name, in hash
    /// order, so past SQLite's page cache every update dirtied a page written to the WAL more than once
    /// (`sharesync-bench store`). Returns the records that moved, with their type and new share; the
    /// zone's cached rows are forgotten.
    private mutating func recomputeMembershipOfZone(_ zone: String, zoneShare: String?) throws -> (moved: Set<String>, rows: [String: RecordShare]) {
        let computed = "CASE WHEN type = ?2 THEN name ELSE ?3 END"
        let arguments: StatementArguments = [zone, Record.shareRecordType, zoneShare]
        var moved: Set<String> = []
        var rows: [String: RecordShare] = [:]
        let stale = try Row.fetchCursor(
            db.cachedStatement(sql: "SELECT name, type, shareName FROM record WHERE zone = ?1 AND shareName IS NOT \(computed)"),
            arguments: arguments)
        while let row = try stale.next() {
            let name: String = row[0]
            let type: String = row[1]
            delta.noteShareBefore(zone: zone, name: name, row[2])
            moved.insert(name)
            rows[name] = RecordShare(type: type, shareName: type == Record.shareRecordType ? name : zoneShare)
        }
        if !moved.isEmpty {
            try db.cachedStatement(sql: "UPDATE record SET shareName = \(computed) WHERE zone = ?1 AND shareName IS NOT \(computed)")
                .execute(arguments: arguments)
        }
        cache.forgetRows(zone: zone)
        return (moved, rows)
    }

    /// A live record's type and the share it belongs to.
    struct RecordShare {
        var type: String
        var shareName: String?
    }

    /// Brings the `member` table in line with the accepted participants of each changed share.
    /// Returns, per viewer, whether they gained or lost shares in this zone.
    private mutating func syncMembers(zone: String) throws -> [String: (added: Set<String>, removed: Set<String>)] {
        var changes: [String: (added: Set<String>, removed: Set<String>)] = [:]
        for name in delta[zone].sharesChanged {
            let before = Set(try members(zone: zone, share: name))
            let after = try share(zone: zone, name: name).map(AccessPolicy.viewers(of:)) ?? []
            cache.members[zone]?[name] = nil
            for user in after.subtracting(before) {
                try db.cachedStatement(sql: "INSERT INTO member (zone, share, user) VALUES (?, ?, ?)").execute(arguments: [zone, name, user])
                changes[user, default: ([], [])].added.insert(name)
            }
            for user in before.subtracting(after) {
                try db.cachedStatement(sql: "DELETE FROM member WHERE zone = ? AND share = ? AND user = ?").execute(arguments: [zone, name, user])
                changes[user, default: ([], [])].removed.insert(name)
            }
        }
        try forgetAppliedWrites(ofFormer: changes.filter { !$0.value.removed.isEmpty }.keys)
        return changes
    }

    /// Drops the kept answers to the writes (``SharedDatabaseView/modifyRecordsOnce``) of those of
    /// `users` who are no longer a participant of any share: nobody else sends writes under their
    /// name, and each kept answer may be as large as a response. (A write whose answer was lost just
    /// before, sent again only after the participant was invited back, is applied again: a narrow
    /// case, against answers kept for good.)
    private func forgetAppliedWrites<Users: Sequence<String>>(ofFormer users: Users) throws {
        for user in users {
            let stillMember = try Bool.fetchOne(
                db.cachedStatement(sql: "SELECT EXISTS (SELECT 1 FROM member WHERE user = ?)"), arguments: [user]) ?? false
            if !stillMember {
                try db.cachedStatement(sql: "DELETE FROM appliedWrite WHERE user = ?").execute(arguments: [user])
            }
        }
    }

    private func members(zone: String, share: String?) throws -> [String] {
        guard let share else { return [] }
        if let cached = cache.members[zone]?[share] { return cached }
        let users = try String.fetchAll(db.cachedStatement(sql: "SELECT user FROM member WHERE zone = ? AND share = ?"), arguments: [zone, share])
        cache.members[zone, default: [:]][share] = users
        return users
    }

    private mutating func updateViews(
        zone: String, records: Set<String>, rows: [String: RecordShare],
        memberChanges: [String: (added: Set<String>, removed: Set<String>)]
    ) throws {
        var viewersTouched: Set<String> = []
        // Viewers who gained or lost shares.
        for (viewer, change) in memberChanges.sorted(by: { $0.key < $1.key }) {
            let accepted = Set(try String.fetchAll(db.cachedStatement(sql: "SELECT share FROM member WHERE zone = ? AND user = ?"), arguments: [zone, viewer]))
            if accepted.isEmpty {
                try leaveZone(viewer: viewer, zone: zone)
                continue
            }
            // A zone-wide share is the only share of its zone: a viewer reading the zone's own feed
            // who still has a share in it has that one, and their feed needs nothing.
            if try directViewers(zone).contains(viewer) || enterZoneDirectlyIfWhole(viewer: viewer, zone: zone, accepted: accepted) {
                viewersTouched.insert(viewer)
                continue
            }
            try enterZoneIfNeeded(viewer: viewer, zone: zone)
            for share in change.added.sorted() {
                try enterView(viewer: viewer, zone: zone, share: share)
            }
            if !change.removed.isEmpty {
                let rows = try Row.fetchAll(
                    db,
                    sql: """
                        SELECT v.name, v.type, r.shareName FROM viewLog v LEFT JOIN record r ON r.zone = v.zone AND r.name = v.name
                        WHERE v.viewer = ? AND v.zone = ? AND v.present = 1 ORDER BY v.seq
                        """,
                    arguments: [viewer, zone])
                for row in rows where !accepted.contains((row["shareName"] as String?) ?? "") {
                    try setView(viewer: viewer, zone: zone, name: row["name"], type: row["type"], present: false)
                }
            }
            viewersTouched.insert(viewer)
        }
        // Records that changed, were deleted, or moved between shares: each viewer who sees one now
        // gets it, each who saw it before and no longer does loses it; viewer by viewer, by name.
        // Viewers reading the zone's own feed find it there.
        let direct = try directViewers(zone)
        if !records.isEmpty { viewersTouched.formUnion(direct) }
        var entries: [String: [ViewEntry]] = [:]
        for name in records.sorted() {
            let row: RecordShare? = try rows[name] ?? rowState(zone: zone, name: name).map { RecordShare(type: $0.type, shareName: $0.shareName) }
            let now: String? = row?.shareName
            let before: String? = delta[zone].shareBefore[name].map(\.name) ?? now  // as noted when first changed
            var type: String = row?.type ?? ""
            if row == nil {
                type = try String.fetchOne(db.cachedStatement(sql: "SELECT type FROM recordTombstone WHERE zone = ? AND name = ?"), arguments: [zone, name]) ?? ""
            }
            let seeing = Set(try members(zone: zone, share: now)).subtracting(direct)
            if row != nil {
                for viewer in seeing { entries[viewer, default: []].append(ViewEntry(name: name, type: type, present: true)) }
            }
            for viewer in Set(try members(zone: zone, share: before)).subtracting(seeing).subtracting(direct) {
                entries[viewer, default: []].append(ViewEntry(name: name, type: type, present: false))
            }
        }
        for (viewer, list) in entries.sorted(by: { $0.key < $1.key }) {
            if list.contains(where: \.present) { try enterZoneIfNeeded(viewer: viewer, zone: zone) }
            try setViews(viewer: viewer, zone: zone, list)
            viewersTouched.insert(viewer)
        }
        for viewer in viewersTouched.sorted() {
            try db.executeCached("UPDATE viewZone SET seq = ? WHERE viewer = ? AND zone = ? AND present = 1", [nextSeq(), viewer, zone])
        }
    }

    /// Every record of a share enters a viewer's view, in the order of their last change, each with
    /// the next sequence number: one statement, however many records (a share of a million records
    /// is accepted without reading them into memory).
    private mutating func enterView(viewer: String, zone: String, share: String) throws {
        try enterZoneIfNeeded(viewer: viewer, zone: zone)
        let count = try Int64.fetchOne(
            db.cachedStatement(sql: "SELECT COUNT(*) FROM record WHERE zone = ? AND shareName = ?"), arguments: [zone, share]) ?? 0
        let before = reserveSeqs(count)
        try db.cachedStatement(
            sql: """
                INSERT INTO viewLog (viewer, zone, name, type, seq, present)
                SELECT ?1, zone, name, type, ?3 + ROW_NUMBER() OVER (ORDER BY seq), 1 FROM record
                WHERE zone = ?2 AND shareName = ?4
                ON CONFLICT (viewer, zone, name) DO UPDATE SET seq = excluded.seq, present = 1, type = excluded.type
                """
        ).execute(arguments: [viewer, zone, before, share])
    }

    /// A record entering (present) or leaving a viewer's view.
    struct ViewEntry {
        var name: String
        var type: String
        var present: Bool
    }

    /// From how many entries ``setViews(viewer:zone:_:)`` writes them in one statement each way.
    static let setViewsThreshold = 4

    /// Records that records are (or are no longer) in a viewer's view, each with the next sequence
    /// number in order: row by row as ``setView(viewer:zone:name:type:present:)`` does, or, with
    /// ``PrivateDatabase/setBasedWrites`` and enough entries, with the same numbers in two statements
    /// (one for those present, one for those that left) whatever their count.
    private mutating func setViews(viewer: String, zone: String, _ entries: [ViewEntry]) throws {
        guard database.setBasedWrites, entries.count >= Self.setViewsThreshold else {
            for entry in entries { try setView(viewer: viewer, zone: zone, name: entry.name, type: entry.type, present: entry.present) }
            return
        }
        let base = reserveSeqs(Int64(entries.count))
        // Each entry with its sequence number, in order; then one JSON list each way for json_each.
        let numbered = entries.enumerated().map { (seq: base + 1 + Int64($0.offset), entry: $0.element) }
        let entering = numbered.filter(\.entry.present)
        let leaving = numbered.filter { !$0.entry.present }
        if !entering.isEmpty {
            var present = JSONWriter(capacity: entering.count * 32)
            present.array(entering) { w, item in
                w.raw("[")
                w.string(item.entry.name)
                w.raw(",")
                w.string(item.entry.type)
                w.raw(",")
                w.int(item.seq)
                w.raw("]")
            }
            try db.cachedStatement(
                sql: """
                    INSERT INTO viewLog (viewer, zone, name, type, seq, present)
                    SELECT ?1, ?2, json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]'), 1
                    FROM json_each(?3) WHERE true
                    ON CONFLICT (viewer, zone, name) DO UPDATE SET seq = excluded.seq, present = 1, type = excluded.type
                    """
            ).execute(arguments: [viewer, zone, String(decoding: present.bytes, as: UTF8.self)])
        }
        if !leaving.isEmpty {
            var absent = JSONWriter(capacity: leaving.count * 24)
            absent.array(leaving) { w, item in
                w.raw("[")
                w.string(item.entry.name)
                w.raw(",")
                w.int(item.seq)
                w.raw("]")
            }
            try db.cachedStatement(
                sql: """
                    UPDATE viewLog SET seq = json_extract(left.value, '$[1]'), present = 0 FROM json_each(?3) AS left
                    WHERE viewer = ?1 AND zone = ?2 AND name = json_extract(left.value, '$[0]') AND present = 1
                    """
            ).execute(arguments: [viewer, zone, String(decoding: absent.bytes, as: UTF8.self)])
        }
    }

    /// Records that a record is (or is no longer) in a viewer's view. A record that leaves a view it
    /// was never in leaves no trace.
    private mutating func setView(viewer: String, zone: String, name: String, type: String, present: Bool) throws {
        if present {
            try enterZoneIfNeeded(viewer: viewer, zone: zone)
            try db.cachedStatement(
                sql: """
                    INSERT INTO viewLog (viewer, zone, name, type, seq, present) VALUES (?, ?, ?, ?, ?, 1)
                    ON CONFLICT (viewer, zone, name) DO UPDATE SET seq = excluded.seq, present = 1, type = excluded.type
                    """
            ).execute(arguments: [viewer, zone, name, type, nextSeq()])
        } else {
            try db.cachedStatement(
                sql: "UPDATE viewLog SET seq = ?, present = 0 WHERE viewer = ? AND zone = ? AND name = ? AND present = 1"
            ).execute(arguments: [nextSeq(), viewer, zone, name])
        }
    }

    private mutating func enterZoneIfNeeded(viewer: String, zone: String) throws {
        guard try !isInZone(viewer: viewer, zone: zone) else { return }
        try enterZone(viewer: viewer, zone: zone, direct: false)
    }

    /// Whether the viewer sees the zone now (as far as this transaction has gone); from here on in
    /// the transaction they do, entered by the caller if not.
    private mutating func isInZone(viewer: String, zone: String) throws -> Bool {
        guard !cache.viewerZones.contains([viewer, zone]) else { return true }
        let present = try Bool.fetchOne(db.cachedStatement(sql: "SELECT present FROM viewZone WHERE viewer = ? AND zone = ?"), arguments: [viewer, zone]) ?? false
        cache.viewerZones.insert([viewer, zone])
        return present
    }

    private mutating func enterZone(viewer: String, zone: String, direct: Bool) throws {
        let seq = nextSeq()
        try db.cachedStatement(
            sql: """
                INSERT INTO viewZone (viewer, zone, seq, present, enteredSeq, direct) VALUES (?1, ?2, ?3, 1, ?3, ?4)
                ON CONFLICT (viewer, zone) DO UPDATE SET seq = excluded.seq, present = 1, enteredSeq = excluded.enteredSeq, direct = excluded.direct
                """
        ).execute(arguments: [viewer, zone, seq, direct])
        if direct { cache.directViewers[zone, default: []].insert(viewer) }
    }

    /// A viewer who enters a zone through its zone-wide share (and no other: there is none) reads the
    /// zone's own feed. Returns whether they entered so; a viewer who already sees the zone (they
    /// left its other shares in this transaction) keeps their copied feed.
    private mutating func enterZoneDirectlyIfWhole(viewer: String, zone: String, accepted: Set<String>) throws -> Bool {
        guard database.directZoneFeeds, let zoneShare = try zoneShareName(zone), accepted == [zoneShare],
            try !isInZone(viewer: viewer, zone: zone)
        else { return false }
        try enterZone(viewer: viewer, zone: zone, direct: true)
        return true
    }

    /// The viewers who read a zone's own feed (``PrivateDatabase/directZoneFeeds``).
    private func directViewers(_ zone: String) throws -> Set<String> {
        if let cached = cache.directViewers[zone] { return cached }
        let viewers = Set(
            try String.fetchAll(
                db.cachedStatement(sql: "SELECT viewer FROM viewZone WHERE zone = ? AND direct = 1 AND present = 1"), arguments: [zone]))
        cache.directViewers[zone] = viewers
        return viewers
    }

    /// The zone leaves a viewer's shared database: their feed of it is dropped.
    mutating func leaveZone(viewer: String, zone: String) throws {
        cache.viewerZones.remove([viewer, zone])
        cache.directViewers[zone]?.remove(viewer)
        try db.cachedStatement(sql: "DELETE FROM viewLog WHERE viewer = ? AND zone = ?").execute(arguments: [viewer, zone])
        try db.execute(
            sql: "UPDATE viewZone SET seq = ?, present = 0, direct = 0 WHERE viewer = ? AND zone = ? AND present = 1",
            arguments: [nextSeq(), viewer, zone])
    }

    /// Before a zone is deleted: every viewer loses it, and its shares and members go.
    mutating func willDeleteZone(_ zone: String) throws {
        for viewer in try String.fetchAll(db.cachedStatement(sql: "SELECT viewer FROM viewZone WHERE zone = ? AND present = 1"), arguments: [zone]) {
            try leaveZone(viewer: viewer, zone: zone)
        }
        let members = try String.fetchAll(db.cachedStatement(sql: "SELECT DISTINCT user FROM member WHERE zone = ?"), arguments: [zone])
        try db.cachedStatement(sql: "DELETE FROM member WHERE zone = ?").execute(arguments: [zone])
        try forgetAppliedWrites(ofFormer: members)
        try db.cachedStatement(sql: "DELETE FROM share WHERE zone = ?").execute(arguments: [zone])
        cache.members[zone] = nil
        cache.shares[zone] = nil
        cache.shareValues[zone] = nil
        cache.zones.remove(zone)
        cache.directViewers[zone] = nil
        cache.forgetRows(zone: zone)
    }
}

extension PrivateDatabase {
    /// Drops view history up to the horizon (rows of records that left a view, zones that left).
    func compactSharedViews(_ db: Database, upTo: Int64) throws {
        try db.cachedStatement(sql: "DELETE FROM viewLog WHERE present = 0 AND seq <= ?").execute(arguments: [upTo])
        try db.cachedStatement(sql: "DELETE FROM viewZone WHERE present = 0 AND seq <= ?").execute(arguments: [upTo])
    }
}
