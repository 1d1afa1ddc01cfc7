import Foundation
import GRDB
import ShareSyncCore

extension PrivateDatabase {
    /// Creates zones that do not exist yet; saving an existing zone changes nothing.
    /// - Returns: the zones as the database holds them.
    @discardableResult
    public func saveZones(_ zones: [RecordZone]) throws(ShareSyncError) -> [RecordZone] {
        for zone in zones {
            try checkOwner(zone.zoneID)
            try Names.checkZoneName(zone.zoneID.zoneName, limits: limits)
        }
        return try write { db in
            var ctx = try WriteContext(db: db, database: self, actor: ownerName)
            for zone in zones where try !ctx.zoneExists(zone.zoneID.zoneName) {
                let seq = ctx.nextSeq()
                // A zone created again after a deletion expires older zone tokens (see fetchZoneChanges).
                let recreated = try Bool.fetchOne(
                    db, sql: "SELECT 1 FROM zoneTombstone WHERE name = ?", arguments: [zone.zoneID.zoneName]) ?? false
                try db.execute(
                    sql: "INSERT INTO zone (name, seq, createdSeq) VALUES (?, ?, ?)",
                    arguments: [zone.zoneID.zoneName, seq, recreated ? seq : 0])
                try db.execute(sql: "DELETE FROM zoneTombstone WHERE name = ?", arguments: [zone.zoneID.zoneName])
            }
            try ctx.finish()
            return zones.map { RecordZone(zoneID: zoneID($0.zoneID.zoneName)) }
        }
    }

    /// Creates a zone if it does not exist yet.
    @discardableResult
    public func saveZone(_ zone: RecordZone) throws(ShareSyncError) -> RecordZone {
        try saveZones([zone])[0]
    }

    /// Fetches a zone; ``ShareSyncError/Code/zoneNotFound`` if it does not exist.
    public func fetchZone(_ zoneID: RecordZone.ID) throws(ShareSyncError) -> RecordZone {
        try checkOwner(zoneID)
        let exists = try read { db in
            try Bool.fetchOne(db, sql: "SELECT 1 FROM zone WHERE name = ?", arguments: [zoneID.zoneName]) ?? false
        }
        guard exists else {
            throw ShareSyncError(.zoneNotFound, "zone \(zoneID.zoneName) does not exist", zoneID: zoneID)
        }
        return RecordZone(zoneID: self.zoneID(zoneID.zoneName))
    }

    /// All zones, the default zone first, then by name.
    public func fetchAllZones() throws(ShareSyncError) -> [RecordZone] {
        try read { db in
            try String.fetchAll(
                db, sql: "SELECT name FROM zone ORDER BY name != ?, name", arguments: [RecordZone.ID.defaultZoneName])
        }.map { RecordZone(zoneID: zoneID($0)) }
    }

    /// Deletes a zone and every record in it (and every share of it). The default zone cannot be deleted.
    public func deleteZone(_ zoneID: RecordZone.ID) throws(ShareSyncError) {
        try checkOwner(zoneID)
        guard !zoneID.isDefaultZone else {
            throw .init(.invalidArguments, "the default zone cannot be deleted", zoneID: zoneID, rule: .defaultZone)
        }
        try write { db in
            var ctx = try WriteContext(db: db, database: self, actor: ownerName)
            try ctx.requireZone(zoneID)
            let name = zoneID.zoneName
            try ctx.willDeleteZone(name)
            for table in ["record", "recordTombstone", "deleteSelfReference"] {
                try db.execute(sql: "DELETE FROM \(table) WHERE zone = ?", arguments: [name])
            }
            try db.execute(sql: "DELETE FROM zone WHERE name = ?", arguments: [name])
            try db.execute(
                sql: "INSERT OR REPLACE INTO zoneTombstone (name, seq) VALUES (?, ?)", arguments: [name, ctx.nextSeq()])
            try ctx.finish()
        }
    }
}
