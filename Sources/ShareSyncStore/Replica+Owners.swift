import GRDB
import ShareSyncCore

extension SharedDatabaseReplica {
    /// The owners whose shares this node replicates, by owner name.
    public func owners() throws(ShareSyncError) -> [OwnerInfo] {
        try read { db in
            try Row.fetchAll(db, sql: "SELECT owner, host, port, fingerprint FROM replicaOwner ORDER BY owner").map {
                OwnerInfo(ownerName: $0["owner"], host: $0["host"], port: $0["port"], fingerprint: $0["fingerprint"])
            }
        }
    }

    /// The owner with this user record name, or `nil`.
    public func owner(named ownerName: String) throws(ShareSyncError) -> OwnerInfo? {
        try owners().first { $0.ownerName == ownerName }
    }

    /// Adds an owner, or updates the address of one already known (keeping its zones, records,
    /// tokens and outbox).
    public func setOwner(_ info: OwnerInfo) throws(ShareSyncError) {
        guard !info.ownerName.isEmpty else {
            throw ShareSyncError(.invalidArguments, "an owner needs a user record name", rule: "replicaOwnerName")
        }
        try write { db in
            try db.execute(
                sql: """
                    INSERT INTO replicaOwner (owner, host, port, fingerprint) VALUES (?, ?, ?, ?)
                    ON CONFLICT (owner) DO UPDATE SET host = excluded.host, port = excluded.port,
                        fingerprint = excluded.fingerprint
                    """,
                arguments: [info.ownerName, info.host, info.port, info.fingerprint])
        }
    }

    /// Forgets an owner and everything replicated from it: zones, records, tokens and pending writes.
    /// Changes that arrive for it afterwards are refused until it is added again.
    public func removeOwner(_ ownerName: String) throws(ShareSyncError) {
        try write { db in
            try db.execute(sql: "DELETE FROM replicaOwner WHERE owner = ?", arguments: [ownerName])
        }
    }

    /// The owner's shared-database change token: pass it to the next `fetchDatabaseChanges`.
    /// `nil` if the database was never fetched (or the owner is unknown).
    public func databaseChangeToken(owner: String) throws(ShareSyncError) -> ServerChangeToken? {
        try read { db in
            try String.fetchOne(db, sql: "SELECT databaseToken FROM replicaOwner WHERE owner = ?", arguments: [owner])
                .map(ServerChangeToken.init(stringValue:))
        }
    }

    /// A zone's change token: pass it to the next `fetchZoneChanges`. `nil` if the zone was never
    /// fetched (fetch from the start).
    public func zoneChangeToken(owner: String, zoneName: String) throws(ShareSyncError) -> ServerChangeToken? {
        try read { db in
            try String.fetchOne(
                db, sql: "SELECT token FROM replicaZone WHERE owner = ? AND zone = ?", arguments: [owner, zoneName]
            ).map(ServerChangeToken.init(stringValue:))
        }
    }
}
