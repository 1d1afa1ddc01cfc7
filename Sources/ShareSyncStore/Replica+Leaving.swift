import GRDB
import ShareSyncCore

/// A share left locally whose owner has not been told yet.
public struct PendingLeave: Sendable, Hashable {
    /// The owner's user record name.
    public var owner: String
    /// The shared zone left.
    public var zoneName: String
    /// The share's record name.
    public var shareName: String

    public init(owner: String, zoneName: String, shareName: String) {
        self.owner = owner
        self.zoneName = zoneName
        self.shareName = shareName
    }
}

// Leaving a share without the owner (`sharesync leave --local`): the zone leaves the replica at once,
// and the leave waits here until the owner's node is reached again.
extension SharedDatabaseReplica {
    /// Purges a shared zone now and remembers to tell its owner, in one transaction. Until
    /// ``removePendingLeave(_:)``, nothing the owner sends brings the zone back.
    /// An owner the replica does not hold (forgotten meanwhile) is `unknownItem`: the leave would
    /// never be sent, and would be told first at a later accept of the share, which it would refuse.
    public func leaveLocally(_ leave: PendingLeave) throws(ShareSyncError) {
        try write { db in
            try requireOwner(db, leave.owner)
            try db.execute(
                sql: "INSERT OR IGNORE INTO replicaPendingLeave (owner, zone, share) VALUES (?, ?, ?)",
                arguments: [leave.owner, leave.zoneName, leave.shareName])
            try db.execute(sql: "DELETE FROM replicaZone WHERE owner = ? AND zone = ?", arguments: [leave.owner, leave.zoneName])
            try db.execute(
                sql: "DELETE FROM replicaStagedZone WHERE owner = ? AND zone = ?", arguments: [leave.owner, leave.zoneName])
        }
    }

    /// The leaves not yet told to an owner (every owner's when `owner` is nil).
    public func pendingLeaves(owner: String? = nil) throws(ShareSyncError) -> [PendingLeave] {
        try read { db in
            try Row.fetchAll(
                db, sql: "SELECT owner, zone, share FROM replicaPendingLeave WHERE ?1 IS NULL OR owner = ?1 ORDER BY owner, zone, share",
                arguments: [owner]
            ).map { PendingLeave(owner: $0["owner"], zoneName: $0["zone"], shareName: $0["share"]) }
        }
    }

    /// Forgets a pending leave once the owner has it (the zone may then come back if shared again).
    public func removePendingLeave(_ leave: PendingLeave) throws(ShareSyncError) {
        try write { db in
            try db.execute(
                sql: "DELETE FROM replicaPendingLeave WHERE owner = ? AND zone = ? AND share = ?",
                arguments: [leave.owner, leave.zoneName, leave.shareName])
        }
    }

    /// Forgets a pending leave the owner now has, purges its zone, and notes the zone for a fetch from
    /// the start at the next catch-up (``zonesToRefetch(owner:)``), in one transaction: another share
    /// of the same zone that this node keeps comes back whole (the owner answers `zoneNotFound` if
    /// there is none, and the note goes). Only purged, the zone was fetched again only if the owner's
    /// database feed listed it after the stored token, and a push applied meanwhile could have moved
    /// that token past the zone's change: the other share's records were then missing for good. A
    /// zone another pending leave still covers stays out.
    public func resolvePendingLeave(_ leave: PendingLeave) throws(ShareSyncError) {
        try write { db in
            try db.execute(
                sql: "DELETE FROM replicaPendingLeave WHERE owner = ? AND zone = ? AND share = ?",
                arguments: [leave.owner, leave.zoneName, leave.shareName])
            // Resolved already (by the owner's link and an accept at once): the zone may have been
            // fetched again since, and stays.
            guard db.changesCount > 0 else { return }
            try db.execute(sql: "DELETE FROM replicaZone WHERE owner = ? AND zone = ?", arguments: [leave.owner, leave.zoneName])
            try db.execute(
                sql: "DELETE FROM replicaStagedZone WHERE owner = ? AND zone = ?", arguments: [leave.owner, leave.zoneName])
            guard try !isLeaving(db, owner: leave.owner, zoneName: leave.zoneName),
                try Bool.fetchOne(db, sql: "SELECT 1 FROM replicaOwner WHERE owner = ?", arguments: [leave.owner]) ?? false
            else { return }
            try db.execute(
                sql: "INSERT OR IGNORE INTO replicaZoneRefetch (owner, zone) VALUES (?, ?)", arguments: [leave.owner, leave.zoneName])
        }
    }

    /// The zones of `owner` the next catch-up fetches from the start though the replica does not hold
    /// them (``resolvePendingLeave(_:)``), by name.
    public func zonesToRefetch(owner: String) throws(ShareSyncError) -> [String] {
        try read { db in
            try String.fetchAll(db, sql: "SELECT zone FROM replicaZoneRefetch WHERE owner = ? ORDER BY zone", arguments: [owner])
        }
    }

    /// A zone of ``zonesToRefetch(owner:)`` was fetched from the start (or the owner no longer has it for
    /// this node).
    public func refetched(owner: String, zoneName: String) throws(ShareSyncError) {
        try write { db in
            try db.execute(sql: "DELETE FROM replicaZoneRefetch WHERE owner = ? AND zone = ?", arguments: [owner, zoneName])
        }
    }

    func isLeaving(_ db: Database, owner: String, zoneName: String) throws -> Bool {
        try Bool.fetchOne(
            db.cachedStatement(sql: "SELECT 1 FROM replicaPendingLeave WHERE owner = ? AND zone = ?"), arguments: [owner, zoneName])
            ?? false
    }
}
