import GRDB
import ShareSyncCore

// Refetching a zone after changeTokenExpired: the zone is fetched again from no token, and what was
// fetched replaces the local contents in one transaction, so readers see either the old zone or the
// new one, never a mix. Small zones: `replaceZone(owner:zoneName:with:)` with all pages at once.
// Large zones: stage page by page (`beginZoneReplacement`, `stageZoneReplacement`), then
// `commitZoneReplacement`; staged pages survive a restart until committed or discarded.

extension SharedDatabaseReplica {
    /// Replaces a zone's records and token with a complete refetch from no token, in one transaction.
    ///
    /// `pages` are the `fetchZoneChanges` pages from a `nil` token, in order; the last must not have
    /// `moreComing`. Its token becomes the zone's token.
    public func replaceZone(owner: String, zoneName: String, with pages: [ZoneChanges]) throws(ShareSyncError) {
        let zoneID = RecordZone.ID(zoneName: zoneName, ownerName: owner)
        guard let last = pages.last, !last.moreComing else {
            throw ShareSyncError(
                .invalidArguments, "a zone replacement needs every page of the refetch, up to one without moreComing",
                zoneID: zoneID, rule: .replicaIncompleteReplacement)
        }
        try write { db in
            try requireOwner(db, owner)
            try db.execute(sql: "DELETE FROM replicaZone WHERE owner = ? AND zone = ?", arguments: [owner, zoneName])
            for page in pages {
                try checkReplacementPage(page, zoneID)
                try applyZoneChanges(db, try encoded(page, owner: owner), owner: owner)
            }
        }
    }

    /// Starts (or restarts) a staged replacement of a zone: forgets anything staged for it before.
    /// The zone's current records stay visible until ``commitZoneReplacement(owner:zoneName:)``.
    public func beginZoneReplacement(owner: String, zoneName: String) throws(ShareSyncError) {
        try write { db in
            try requireOwner(db, owner)
            try db.execute(sql: "DELETE FROM replicaStagedZone WHERE owner = ? AND zone = ?", arguments: [owner, zoneName])
            try db.execute(sql: "INSERT INTO replicaStagedZone (owner, zone) VALUES (?, ?)", arguments: [owner, zoneName])
        }
    }

    /// Stages the next page of a zone's refetch from no token (after ``beginZoneReplacement(owner:zoneName:)``).
    public func stageZoneReplacement(_ page: ZoneChanges, owner: String) throws(ShareSyncError) {
        try stageZoneReplacement(try encoded(page, owner: owner), owner: owner)
    }

    /// ``stageZoneReplacement(_:owner:)-(ZoneChanges,_)`` with each record as the bytes it came in.
    package func stageZoneReplacement(_ page: EncodedZoneChanges, owner: String) throws(ShareSyncError) {
        let zoneID = page.zoneID
        try checkOwner(zoneID, owner)
        try write(.refetchable) { db in
            guard try Bool.fetchOne(
                db, sql: "SELECT 1 FROM replicaStagedZone WHERE owner = ? AND zone = ?", arguments: [owner, zoneID.zoneName]
            ) == true else {
                throw ShareSyncError(
                    .invalidArguments, "no replacement of zone \(zoneID.zoneName) was begun", zoneID: zoneID,
                    rule: .replicaReplacementNotBegun)
            }
            try applyRecordChanges(db, page, table: .staged, owner: owner)
            try db.execute(
                sql: "UPDATE replicaStagedZone SET token = ?, complete = ? WHERE owner = ? AND zone = ?",
                arguments: [page.changeToken.stringValue, !page.moreComing, owner, zoneID.zoneName])
        }
    }

    /// Swaps the staged pages in for the zone's records and token, in one transaction. The last page
    /// staged must not have had `moreComing`.
    public func commitZoneReplacement(owner: String, zoneName: String) throws(ShareSyncError) {
        let zoneID = RecordZone.ID(zoneName: zoneName, ownerName: owner)
        try write { db in
            let row = try Row.fetchOne(
                db, sql: "SELECT token, complete FROM replicaStagedZone WHERE owner = ? AND zone = ?",
                arguments: [owner, zoneName])
            guard let row, let token = row["token"] as String?, row["complete"] as Bool == true else {
                throw ShareSyncError(
                    .invalidArguments, "the replacement of zone \(zoneName) is not complete: stage every page first",
                    zoneID: zoneID, rule: .replicaIncompleteReplacement)
            }
            if try isLeaving(db, owner: owner, zoneName: zoneName) {  // left locally meanwhile: stays out
                try db.execute(sql: "DELETE FROM replicaStagedZone WHERE owner = ? AND zone = ?", arguments: [owner, zoneName])
                return
            }
            try db.execute(sql: "DELETE FROM replicaZone WHERE owner = ? AND zone = ?", arguments: [owner, zoneName])
            try db.execute(
                sql: "INSERT INTO replicaZone (owner, zone, token) VALUES (?, ?, ?)", arguments: [owner, zoneName, token])
            try db.execute(
                sql: """
                    INSERT INTO replicaRecord (zoneKey, name, type, json)
                    SELECT z.id, s.name, s.type, s.json FROM replicaStagedRecord s
                    JOIN replicaZone z ON z.owner = s.owner AND z.zone = s.zone WHERE s.owner = ?1 AND s.zone = ?2
                    """,
                arguments: [owner, zoneName])
            try db.execute(sql: "DELETE FROM replicaStagedZone WHERE owner = ? AND zone = ?", arguments: [owner, zoneName])
        }
    }

    /// Forgets a staged replacement; the zone keeps its current records and token.
    public func discardZoneReplacement(owner: String, zoneName: String) throws(ShareSyncError) {
        try write { db in
            try db.execute(sql: "DELETE FROM replicaStagedZone WHERE owner = ? AND zone = ?", arguments: [owner, zoneName])
        }
    }

    func checkReplacementPage(_ page: ZoneChanges, _ zoneID: RecordZone.ID) throws(ShareSyncError) {
        guard page.zoneID == zoneID else {
            throw ShareSyncError(
                .invalidArguments, "a page of zone \(page.zoneID) cannot replace zone \(zoneID)", zoneID: zoneID,
                rule: .replicaZoneMismatch)
        }
    }
}
