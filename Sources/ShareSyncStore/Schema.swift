import GRDB
import ShareSyncCore

/// The schema of a private database, built by named migrations that are only ever appended.
///
/// Every change gets the next number of one sequence (`meta.seq`). Rows keep the number of their last
/// change, so a change feed is "rows with a number above the token's, in order".
enum Schema {
    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1-records") { db in
            try db.execute(
                sql: """
                    CREATE TABLE meta (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL);
                    -- seq: the last change in the zone (the zone itself or any of its records)
                    CREATE TABLE zone (name TEXT PRIMARY KEY NOT NULL, seq INTEGER NOT NULL);
                    CREATE INDEX zone_seq ON zone(seq);
                    CREATE TABLE zoneTombstone (name TEXT PRIMARY KEY NOT NULL, seq INTEGER NOT NULL);
                    CREATE INDEX zoneTombstone_seq ON zoneTombstone(seq);
                    -- one row per live record; json is the record's full JSON form
                    CREATE TABLE record (
                        zone TEXT NOT NULL, name TEXT NOT NULL, type TEXT NOT NULL, seq INTEGER NOT NULL,
                        parent TEXT, json BLOB NOT NULL,
                        PRIMARY KEY (zone, name));
                    CREATE UNIQUE INDEX record_seq ON record(zone, seq);
                    CREATE INDEX record_parent ON record(zone, parent);
                    CREATE TABLE recordTombstone (
                        zone TEXT NOT NULL, name TEXT NOT NULL, type TEXT NOT NULL, seq INTEGER NOT NULL,
                        PRIMARY KEY (zone, name));
                    CREATE INDEX recordTombstone_seq ON recordTombstone(zone, seq);
                    -- deleteSelf references: deleting `target` deletes `source`
                    CREATE TABLE deleteSelfReference (
                        zone TEXT NOT NULL, target TEXT NOT NULL, source TEXT NOT NULL,
                        PRIMARY KEY (zone, target, source));
                    CREATE INDEX deleteSelfReference_source ON deleteSelfReference(zone, source);
                    """)
        }
        migrator.registerMigration("v2-sharing") { db in
            try db.execute(
                sql: """
                    -- the share a record belongs to (a share record belongs to itself)
                    ALTER TABLE record ADD COLUMN shareName TEXT;
                    CREATE INDEX record_share ON record(zone, shareName);
                    -- every share: its root (NULL for a zone-wide share) and its stable URL token
                    CREATE TABLE share (
                        zone TEXT NOT NULL, name TEXT NOT NULL, root TEXT, token TEXT NOT NULL,
                        PRIMARY KEY (zone, name));
                    CREATE UNIQUE INDEX share_token ON share(token);
                    -- accepted participants (other than the owner): who sees a share's records
                    CREATE TABLE member (
                        zone TEXT NOT NULL, share TEXT NOT NULL, user TEXT NOT NULL,
                        PRIMARY KEY (zone, share, user));
                    CREATE INDEX member_user ON member(user, zone);
                    -- each viewer's feed: the last change of each record in (or once in) their view
                    CREATE TABLE viewLog (
                        viewer TEXT NOT NULL, zone TEXT NOT NULL, name TEXT NOT NULL, type TEXT NOT NULL,
                        seq INTEGER NOT NULL, present INTEGER NOT NULL,
                        PRIMARY KEY (viewer, zone, name));
                    CREATE INDEX viewLog_seq ON viewLog(viewer, zone, seq);
                    -- each viewer's zones: present while they see any share in it
                    CREATE TABLE viewZone (
                        viewer TEXT NOT NULL, zone TEXT NOT NULL, seq INTEGER NOT NULL,
                        present INTEGER NOT NULL, enteredSeq INTEGER NOT NULL,
                        PRIMARY KEY (viewer, zone));
                    CREATE INDEX viewZone_seq ON viewZone(viewer, seq);
                    """)
        }
        migrator.registerMigration("v3-zone-created") { db in
            // When a zone was created again after being deleted: a zone token from before that
            // refers to the zone that was deleted, and expires.
            try db.execute(sql: "ALTER TABLE zone ADD COLUMN createdSeq INTEGER NOT NULL DEFAULT 0")
        }
        migrator.registerMigration("v4-record-type-index") { db in
            // Queries (`records(matching:)`) find a zone's records of one type without walking the zone.
            try db.execute(sql: "CREATE INDEX record_type ON record(zone, type)")
        }
        migrator.registerMigration("v5-direct-zone-feeds") { db in
            // direct = 1: the viewer sees the zone through its zone-wide share, which holds every record
            // of the zone, so their feed of it is the zone's own (`record` and `recordTombstone`, from
            // `enteredSeq` on) and keeps no `viewLog` rows. Zones entered before this stay as they are.
            try db.execute(
                sql: """
                    ALTER TABLE viewZone ADD COLUMN direct INTEGER NOT NULL DEFAULT 0;
                    CREATE INDEX viewZone_direct ON viewZone(zone) WHERE direct = 1 AND present = 1;
                    """)
        }
        migrator.registerMigration("v6-applied-writes") { db in
            // The answers to participants' writes sent with a write ID (``SharedDatabaseView/modifyRecordsOnce``),
            // the newest few per participant: a write sent again after its answer was lost is answered
            // from here, and applied once.
            try db.execute(
                sql: """
                    CREATE TABLE appliedWrite (
                        user TEXT NOT NULL,
                        writeID TEXT NOT NULL,
                        seq INTEGER NOT NULL,
                        answer BLOB NOT NULL,
                        PRIMARY KEY (user, writeID)
                    ) WITHOUT ROWID;
                    """)
        }
        return migrator
    }
}

/// GRDB has a `Record` class too; in this module, `Record` is ShareSync's.
typealias Record = ShareSyncCore.Record
