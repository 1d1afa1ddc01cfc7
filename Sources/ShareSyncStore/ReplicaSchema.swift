import GRDB

/// The schema of a participant's replica of its shared database, built by named migrations that are
/// only ever appended. It is separate from the private database's schema (``Schema``): a node keeps
/// the two in separate files.
///
/// Everything is keyed by the owner's user record name first, so shares from several owners (who may
/// well use the same zone names) never mix; a record, by its zone row's id (which stands for the owner
/// and the zone name).
enum ReplicaSchema {
    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("replica-v1") { db in
            try db.execute(
                sql: """
                    -- one row per owner whose shares this node replicates: where to reconnect, and the
                    -- owner's shared-database change token (NULL until the first fetch)
                    CREATE TABLE replicaOwner (
                        owner TEXT PRIMARY KEY NOT NULL, host TEXT NOT NULL, port INTEGER NOT NULL,
                        fingerprint TEXT NOT NULL, databaseToken TEXT);
                    -- one row per zone known to be shared with us; token is NULL until its first fetch
                    CREATE TABLE replicaZone (
                        owner TEXT NOT NULL REFERENCES replicaOwner(owner) ON DELETE CASCADE,
                        zone TEXT NOT NULL, token TEXT,
                        PRIMARY KEY (owner, zone));
                    -- one row per replicated record; json is the record's full JSON form
                    CREATE TABLE replicaRecord (
                        owner TEXT NOT NULL, zone TEXT NOT NULL, name TEXT NOT NULL, type TEXT NOT NULL,
                        json BLOB NOT NULL,
                        PRIMARY KEY (owner, zone, name),
                        FOREIGN KEY (owner, zone) REFERENCES replicaZone(owner, zone) ON DELETE CASCADE);
                    -- a zone being refetched from no token (after changeTokenExpired), swapped in at commit
                    -- (complete: the last page staged had no moreComing)
                    CREATE TABLE replicaStagedZone (
                        owner TEXT NOT NULL REFERENCES replicaOwner(owner) ON DELETE CASCADE,
                        zone TEXT NOT NULL, token TEXT, complete INTEGER NOT NULL DEFAULT 0,
                        PRIMARY KEY (owner, zone));
                    CREATE TABLE replicaStagedRecord (
                        owner TEXT NOT NULL, zone TEXT NOT NULL, name TEXT NOT NULL, type TEXT NOT NULL,
                        json BLOB NOT NULL,
                        PRIMARY KEY (owner, zone, name),
                        FOREIGN KEY (owner, zone) REFERENCES replicaStagedZone(owner, zone) ON DELETE CASCADE);
                    -- writes made locally and not yet accepted by the owner, sent in id order
                    CREATE TABLE replicaOutbox (
                        id INTEGER PRIMARY KEY AUTOINCREMENT,
                        owner TEXT NOT NULL REFERENCES replicaOwner(owner) ON DELETE CASCADE,
                        json BLOB NOT NULL);
                    CREATE INDEX replicaOutbox_owner ON replicaOutbox(owner, id);
                    """)
        }
        migrator.registerMigration("replica-v2-outbox-state") { db in
            try db.execute(
                sql: """
                    -- an operation the owner answered with a conflict or a refusal stays, no longer sent:
                    -- state is pending, conflict or refused; error is the owner's error as JSON
                    -- ({"code","message","rule","recordName"}); serverRecords the owner's versions of the
                    -- conflicting records, a JSON array
                    ALTER TABLE replicaOutbox ADD COLUMN state TEXT NOT NULL DEFAULT 'pending';
                    ALTER TABLE replicaOutbox ADD COLUMN error BLOB;
                    ALTER TABLE replicaOutbox ADD COLUMN serverRecords BLOB;
                    """)
        }
        migrator.registerMigration("replica-v3-change-journal") { db in
            try db.execute(
                sql: """
                    -- the shared database's change journal (SharedDatabaseReplica.journalChanges), so that
                    -- change tokens outlive the daemon: one row of state (the journal's epoch, which a token
                    -- carries, and the sequence below which trimmed deletions make tokens expire)
                    CREATE TABLE replicaFeedState (
                        id INTEGER PRIMARY KEY CHECK (id = 1), epoch TEXT NOT NULL,
                        expiredBelow INTEGER NOT NULL DEFAULT 0);
                    -- what the journal last saw: each record's change tag, and each zone (name '')
                    CREATE TABLE replicaFeedSeen (
                        owner TEXT NOT NULL, zone TEXT NOT NULL, name TEXT NOT NULL, tag TEXT NOT NULL,
                        PRIMARY KEY (owner, zone, name));
                    -- one entry per record (its latest change: changed or deleted) and zone entries
                    -- (zoneAdded, zoneDeleted; name ''), in the order they were seen
                    CREATE TABLE replicaFeedEntry (
                        seq INTEGER PRIMARY KEY AUTOINCREMENT, owner TEXT NOT NULL, zone TEXT NOT NULL,
                        name TEXT NOT NULL, kind TEXT NOT NULL);
                    CREATE INDEX replicaFeedEntry_key ON replicaFeedEntry(owner, zone, name);
                    """)
        }
        migrator.registerMigration("replica-v4-pending-leaves") { db in
            try db.execute(
                sql: """
                    -- shares left locally (`leave --local`) while the owner was unreachable: the zone is
                    -- purged at once and stays out of the replica; the owner is told when it next connects
                    CREATE TABLE replicaPendingLeave (
                        owner TEXT NOT NULL, zone TEXT NOT NULL, share TEXT NOT NULL,
                        PRIMARY KEY (owner, zone, share));
                    """)
        }
        migrator.registerMigration("replica-v5-owner-announced-address") { db in
            try db.execute(
                sql: """
                    -- the address the owner last announced (its welcome's or an ownerAddress push):
                    -- when an announcement differs from it, the owner moved and host/port follow it
                    ALTER TABLE replicaOwner ADD COLUMN announcedHost TEXT;
                    ALTER TABLE replicaOwner ADD COLUMN announcedPort INTEGER;
                    """)
        }
        migrator.registerMigration("replica-v6-journal-dirty-keys") { db in
            // The journal compares only the keys written since its last call (it used to decode every
            // record of the replica on each call: seconds per change at 100k records). Triggers note
            // every key a write touches, whatever path wrote it (pages, pushes, zone replacements,
            // purges, and the cascades of deleting a zone or an owner); they do nothing until the
            // journal is first used (no replicaFeedState row). `scanned` 0: the next call compares
            // the whole replica (a journal kept by an older version, which noted no keys). Keys are
            // appended, repeats and all, and made distinct when read: a trigger that skipped known
            // keys (INSERT … WHERE NOT EXISTS) halved the speed of applying a page, appending costs
            // about a third (Python, 100k rows of this schema in pages of 400). (Not INSERT OR
            // IGNORE either: in a trigger the conflict policy of the statement that fired it
            // applies instead, and an upsert's is ABORT.)

            // Notes the key of `row` (NEW or OLD); `name` is `row.name` for records, '' for zones.
            func note(_ row: String, name: String) -> String {
                "INSERT INTO replicaFeedDirty (owner, zone, name) VALUES (\(row).owner, \(row).zone, \(name));"
            }
            // The trigger replicaFeedDirty_`name` on `event` ("AFTER INSERT ON replicaRecord"), running
            // `body` once the journal is in use.
            func trigger(_ name: String, _ event: String, _ body: String...) -> String {
                """
                CREATE TRIGGER replicaFeedDirty_\(name) \(event)
                WHEN EXISTS (SELECT 1 FROM replicaFeedState) BEGIN
                \(body.joined(separator: "\n"))
                END;
                """
            }
            try db.execute(
                sql: """
                    ALTER TABLE replicaFeedState ADD COLUMN scanned INTEGER NOT NULL DEFAULT 0;
                    CREATE TABLE replicaFeedDirty (owner TEXT NOT NULL, zone TEXT NOT NULL, name TEXT NOT NULL);
                    \(trigger("recordInsert", "AFTER INSERT ON replicaRecord", note("NEW", name: "NEW.name")))
                    \(trigger("recordUpdate", "AFTER UPDATE ON replicaRecord", note("OLD", name: "OLD.name"), note("NEW", name: "NEW.name")))
                    \(trigger("recordDelete", "AFTER DELETE ON replicaRecord", note("OLD", name: "OLD.name")))
                    \(trigger("zoneInsert", "AFTER INSERT ON replicaZone", note("NEW", name: "''")))
                    \(trigger("zoneUpdate", "AFTER UPDATE OF owner, zone ON replicaZone", note("OLD", name: "''"), note("NEW", name: "''")))
                    \(trigger("zoneDelete", "AFTER DELETE ON replicaZone", note("OLD", name: "''")))
                    """)
        }
        migrator.registerMigration("replica-v7-query-indexes") { db in
            // A query of the shared database (SharedDatabaseReplica.records(matching:…)) names a zone
            // and a record type: without this index it walked every record of the zone through the
            // primary key. `parent ==` walks the same index and compares each record's parent. (An
            // index on the parent, an expression over the JSON, halved the initial sync: 100k records
            // daemon to daemon, 64-68k records/s without any index, 59-65k with this one, 31-34k with
            // both; the participant's CPU 1.1 s, 1.2 s and 2.3-2.5 s.)
            try db.execute(sql: "CREATE INDEX replicaRecord_type ON replicaRecord(owner, zone, type, name)")
        }
        migrator.registerMigration("replica-v8-journal-triggers-on-use") { db in
            // The dirty-key triggers of v6 ran their `WHEN EXISTS (SELECT 1 FROM replicaFeedState)`
            // for every row written, journal in use or not: a replica that never used its journal paid
            // for it in every page applied (Python, this schema, 100k rows in pages of 400: 270k rows/s
            // without the triggers, 233k with them; the replica's apply in `sharesync-bench store`
            // below). They are now created when the journal is first used, without the condition
            // (``installJournalTriggers(_:)``), and here for a replica whose journal is in use.
            for name in journalTriggerNamesV8 { try db.execute(sql: "DROP TRIGGER IF EXISTS replicaFeedDirty_\(name)") }
            if try Bool.fetchOne(db, sql: "SELECT 1 FROM replicaFeedState") == true { try installJournalTriggersV8(db) }
        }
        migrator.registerMigration("replica-v9-journal-deletion-index") { db in
            // The change journal keeps at most `journalCapacity` deletions, the oldest trimmed first; this
            // index holds only them, so counting and trimming them never walks the live records' entries
            // (one per record of the replica).
            try db.execute(
                sql: """
                    CREATE INDEX replicaFeedEntry_deletion ON replicaFeedEntry(seq)
                    WHERE kind IN ('deleted', 'zoneDeleted')
                    """)
        }
        migrator.registerMigration("replica-v10-record-zone-key") { db in
            // A record names its zone by the zone row's integer id, not by the owner's user record name
            // and the zone name: every entry of the record table and of both its indexes carried the
            // owner's 33 characters. Python, this schema, 100k records of about 400 bytes applied in
            // pages of 400: 174-189k rows/s with the text key, 234-244k with the integer one, and a
            // file of 49 MB instead of 62. The zone table is rebuilt with an INTEGER PRIMARY KEY (a
            // plain rowid may change in a VACUUM), the record table around it; the journal's triggers
            // go with the old tables and are created again for a journal in use.
            let journalInUse = try Bool.fetchOne(db, sql: "SELECT 1 FROM replicaFeedState") == true
            try db.execute(
                sql: """
                    CREATE TABLE replicaZoneNew (
                        id INTEGER PRIMARY KEY,
                        owner TEXT NOT NULL REFERENCES replicaOwner(owner) ON DELETE CASCADE,
                        zone TEXT NOT NULL, token TEXT,
                        UNIQUE (owner, zone));
                    INSERT INTO replicaZoneNew (owner, zone, token) SELECT owner, zone, token FROM replicaZone ORDER BY owner, zone;
                    CREATE TABLE replicaRecordNew (
                        zoneKey INTEGER NOT NULL REFERENCES replicaZoneNew(id) ON DELETE CASCADE,
                        name TEXT NOT NULL, type TEXT NOT NULL, json BLOB NOT NULL,
                        PRIMARY KEY (zoneKey, name));
                    INSERT INTO replicaRecordNew (zoneKey, name, type, json)
                        SELECT z.id, r.name, r.type, r.json FROM replicaRecord r
                        JOIN replicaZoneNew z ON z.owner = r.owner AND z.zone = r.zone ORDER BY z.id, r.name;
                    DROP TABLE replicaRecord;
                    DROP TABLE replicaZone;
                    ALTER TABLE replicaZoneNew RENAME TO replicaZone;
                    ALTER TABLE replicaRecordNew RENAME TO replicaRecord;
                    CREATE INDEX replicaRecord_type ON replicaRecord(zoneKey, type, name);
                    """)
            if journalInUse { try installJournalTriggers(db) }
        }
        migrator.registerMigration("replica-v11-zones-to-refetch") { db in
            // Zones to fetch again from the start at the next catch-up, kept out of sight (no zone row):
            // a zone left locally whose leave the owner now has, where another share of that zone may
            // still be this node's (``SharedDatabaseReplica/resolvePendingLeave(_:)``).
            try db.execute(
                sql: """
                    CREATE TABLE replicaZoneRefetch (
                        owner TEXT NOT NULL REFERENCES replicaOwner(owner) ON DELETE CASCADE,
                        zone TEXT NOT NULL,
                        PRIMARY KEY (owner, zone));
                    """)
        }
        migrator.registerMigration("replica-v12-journal-record-types") { db in
            // Each record's type, kept by the journal with what it saw and written into a deletion's
            // entry: a shared database's fetched deletions carry their type, as the private
            // database's do (before, ""; apps routing deletions by type deleted nothing).
            try db.execute(
                sql: """
                    ALTER TABLE replicaFeedSeen ADD COLUMN type TEXT;
                    ALTER TABLE replicaFeedEntry ADD COLUMN type TEXT;
                    """)
        }
        migrator.registerMigration("replica-v13-journal-record-types-filled") { db in
            // The types of the records the journal saw before v12, from the records themselves: their
            // deletions report it too (v12 left them NULL, and such a deletion reported "").
            try db.execute(
                sql: """
                    UPDATE replicaFeedSeen SET type = (
                        SELECT r.type FROM replicaRecord r JOIN replicaZone z ON z.id = r.zoneKey
                        WHERE z.owner = replicaFeedSeen.owner AND z.zone = replicaFeedSeen.zone AND r.name = replicaFeedSeen.name)
                    WHERE type IS NULL AND name != '';
                    """)
        }
        migrator.registerMigration("replica-v14-owner-last-synced") { db in
            // When the replica last was caught up with each owner (seconds since 1970): a restarted
            // node's status says so, instead of "never" and a lag counted from its start.
            try db.execute(sql: "ALTER TABLE replicaOwner ADD COLUMN lastSynced REAL")
        }
        migrator.registerMigration("replica-v15-outbox-answers") { db in
            // The owner's answer to each request of an outbox write sent in several, by the request's
            // write ID, kept as it comes: sent again, the write skips the requests answered (the
            // owner keeps only its newest answers, and a long write's first ones may be gone).
            try db.execute(
                sql: """
                    CREATE TABLE replicaOutboxAnswer (
                        operation INTEGER NOT NULL REFERENCES replicaOutbox(id) ON DELETE CASCADE,
                        request TEXT NOT NULL, answer BLOB NOT NULL,
                        PRIMARY KEY (operation, request)) WITHOUT ROWID;
                    """)
        }
        return migrator
    }

    static let journalTriggerNames = [
        "recordInsert", "recordUpdate", "recordDelete", "zoneInsert", "zoneUpdate", "zoneDelete", "zoneDeleteRecords",
    ]
    /// The triggers migration v8 created (records keyed by owner and zone name, before v10).
    static let journalTriggerNamesV8 = ["recordInsert", "recordUpdate", "recordDelete", "zoneInsert", "zoneUpdate", "zoneDelete"]

    /// The journal triggers as migration v8 created them, for the record table before v10 (it named
    /// each record's owner and zone). Kept as they were: a migration does what it did when it shipped.
    static func installJournalTriggersV8(_ db: Database) throws {
        func note(_ row: String, name: String) -> String {
            "INSERT INTO replicaFeedDirty (owner, zone, name) VALUES (\(row).owner, \(row).zone, \(name));"
        }
        func trigger(_ name: String, _ event: String, _ body: String...) -> String {
            "CREATE TRIGGER IF NOT EXISTS replicaFeedDirty_\(name) \(event) BEGIN \(body.joined(separator: " ")) END;"
        }
        try db.execute(
            sql: [
                trigger("recordInsert", "AFTER INSERT ON replicaRecord", note("NEW", name: "NEW.name")),
                trigger("recordUpdate", "AFTER UPDATE ON replicaRecord", note("OLD", name: "OLD.name"), note("NEW", name: "NEW.name")),
                trigger("recordDelete", "AFTER DELETE ON replicaRecord", note("OLD", name: "OLD.name")),
                trigger("zoneInsert", "AFTER INSERT ON replicaZone", note("NEW", name: "''")),
                trigger("zoneUpdate", "AFTER UPDATE OF owner, zone ON replicaZone", note("OLD", name: "''"), note("NEW", name: "''")),
                trigger("zoneDelete", "AFTER DELETE ON replicaZone", note("OLD", name: "''")),
            ].joined(separator: "\n"))
    }

    /// Creates the triggers that note every key a write touches for the change journal
    /// (``SharedDatabaseReplica/journalChanges(capacity:fullScan:)``): called by the journal's first
    /// use, in the transaction that starts it. Whatever path writes (pages, pushes, zone replacements,
    /// purges, and the cascades of deleting a zone or an owner), its keys are appended to
    /// replicaFeedDirty, repeats and all, and made distinct when read: a trigger that skipped known keys
    /// (INSERT … WHERE NOT EXISTS) halved the speed of applying a page, appending costs about a third.
    /// (Not INSERT OR IGNORE either: in a trigger the conflict policy of the statement that fired it
    /// applies instead, and an upsert's is ABORT.) Changing them needs a migration that drops and
    /// creates them again in replicas whose journal is in use.
    static func installJournalTriggers(_ db: Database) throws {
        // Notes the key of a record row (NEW or OLD): its zone's owner and name come from the zone row.
        // A record deleted with its zone finds no zone row any more: `zoneDeleteRecords` notes the
        // zone's records before the zone row goes.
        func noteRecord(_ row: String) -> String {
            "INSERT INTO replicaFeedDirty (owner, zone, name) SELECT owner, zone, \(row).name FROM replicaZone WHERE id = \(row).zoneKey;"
        }
        func noteZone(_ row: String) -> String {
            "INSERT INTO replicaFeedDirty (owner, zone, name) VALUES (\(row).owner, \(row).zone, '');"
        }
        func trigger(_ name: String, _ event: String, _ body: String...) -> String {
            "CREATE TRIGGER IF NOT EXISTS replicaFeedDirty_\(name) \(event) BEGIN \(body.joined(separator: " ")) END;"
        }
        try db.execute(
            sql: [
                trigger("recordInsert", "AFTER INSERT ON replicaRecord", noteRecord("NEW")),
                trigger("recordUpdate", "AFTER UPDATE ON replicaRecord", noteRecord("OLD"), noteRecord("NEW")),
                trigger("recordDelete", "AFTER DELETE ON replicaRecord", noteRecord("OLD")),
                trigger("zoneInsert", "AFTER INSERT ON replicaZone", noteZone("NEW")),
                trigger("zoneUpdate", "AFTER UPDATE OF owner, zone ON replicaZone", noteZone("OLD"), noteZone("NEW")),
                trigger("zoneDelete", "AFTER DELETE ON replicaZone", noteZone("OLD")),
                trigger(
                    "zoneDeleteRecords", "BEFORE DELETE ON replicaZone",
                    "INSERT INTO replicaFeedDirty (owner, zone, name) SELECT OLD.owner, OLD.zone, name FROM replicaRecord WHERE zoneKey = OLD.id;"),
            ].joined(separator: "\n"))
    }

    /// Creates a replica file with the migrations up to `migration` only, then runs `sql` on it: a file
    /// as an older version left it, for migration tests.
    static func createOlderFile(path: String, upTo migration: String, sql: String) throws {
        let queue = try DatabaseQueue(path: path)
        try migrator.migrate(queue, upTo: migration)
        try queue.write { try $0.execute(sql: sql) }
    }
}
