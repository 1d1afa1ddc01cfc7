import Foundation
import GRDB
import ShareSyncCore

extension SharedDatabaseReplica {
    /// The zones an owner shares with this node, by name; their IDs carry the owner's name.
    public func fetchAllZones(owner: String) throws(ShareSyncError) -> [RecordZone] {
        try read { db in
            try String.fetchAll(
                db.cachedStatement(sql: "SELECT zone FROM replicaZone WHERE owner = ? ORDER BY zone"), arguments: [owner])
                .map { RecordZone(zoneID: RecordZone.ID(zoneName: $0, ownerName: owner)) }
        }
    }

    /// The IDs of all zones shared with this node, of every owner, by owner then name.
    public func allZones() throws(ShareSyncError) -> [RecordZone.ID] {
        try read { db in
            try Row.fetchAll(
                db.cachedStatement(sql: "SELECT owner, zone FROM replicaZone ORDER BY owner, zone")).map {
                RecordZone.ID(zoneName: $0["zone"], ownerName: $0["owner"])
            }
        }
    }

    /// The records of a zone, by record name.
    public func records(owner: String, zoneName: String) throws(ShareSyncError) -> [ShareSyncCore.Record] {
        try read { db in
            try Data.fetchAll(
                db.cachedStatement(sql: "SELECT json FROM replicaRecord WHERE zoneKey = (SELECT id FROM replicaZone WHERE owner = ? AND zone = ?) ORDER BY name"),
                arguments: [owner, zoneName]
            ).map { try Record(jsonData: $0) }
        }
    }

    /// A page of a zone's records in the byte order of their names: those after `after` (nil: from the
    /// first), at most `limit` and no more than `byteBudget` bytes of JSON (the first always comes).
    public func records(owner: String, zoneName: String, after: String?, limit: Int, byteBudget: Int) throws(ShareSyncError) -> (records: [ShareSyncCore.Record], bytes: Int) {
        try read { db in
            try listingPage(
                db.cachedStatement(sql: "SELECT json FROM replicaRecord WHERE zoneKey = (SELECT id FROM replicaZone WHERE owner = ? AND zone = ?) AND name > ? ORDER BY name LIMIT ?"),
                arguments: [owner, zoneName, after ?? "", max(1, limit)], byteBudget: byteBudget
            ) { try Record(jsonData: $0) }
        }
    }

    /// The records of a zone of one type, by record name (through the type index: finding a zone's
    /// shares reads only them).
    public func records(owner: String, zoneName: String, ofType type: String) throws(ShareSyncError) -> [ShareSyncCore.Record] {
        try read { db in
            try Data.fetchAll(
                db.cachedStatement(sql: "SELECT json FROM replicaRecord WHERE zoneKey = (SELECT id FROM replicaZone WHERE owner = ? AND zone = ?) AND type = ? ORDER BY name"),
                arguments: [owner, zoneName, type]
            ).map { try Record(jsonData: $0) }
        }
    }

    /// The record with this ID, or `nil`. The owner is the ID's ``RecordZone/ID/ownerName``.
    public func fetchRecord(_ id: ShareSyncCore.Record.ID) throws(ShareSyncError) -> ShareSyncCore.Record? {
        try read { db in
            try Data.fetchOne(
                db.cachedStatement(sql: "SELECT json FROM replicaRecord WHERE zoneKey = (SELECT id FROM replicaZone WHERE owner = ? AND zone = ?) AND name = ?"),
                arguments: [id.zoneID.ownerName, id.zoneID.zoneName, id.recordName]
            ).map { try Record(jsonData: $0) }
        }
    }

    /// The number of records in a zone.
    public func recordCount(owner: String, zoneName: String) throws(ShareSyncError) -> Int {
        try read { db in
            try Int.fetchOne(
                db.cachedStatement(sql: "SELECT COUNT(*) FROM replicaRecord WHERE zoneKey = (SELECT id FROM replicaZone WHERE owner = ? AND zone = ?)"), arguments: [owner, zoneName]) ?? 0
        }
    }
}
