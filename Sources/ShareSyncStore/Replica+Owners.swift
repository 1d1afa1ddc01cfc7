import Foundation
import GRDB
import ShareSyncCore

extension SharedDatabaseReplica {
    /// The owners whose shares this node replicates, by owner name.
    public func owners() throws(ShareSyncError) -> [OwnerInfo] {
        try read { db in
            try Row.fetchAll(
                db.cachedStatement(sql: "SELECT owner, host, port, fingerprint FROM replicaOwner ORDER BY owner")).map {
                OwnerInfo(ownerName: $0["owner"], host: $0["host"], port: $0["port"], fingerprint: $0["fingerprint"])
            }
        }
    }

    /// The owner with this user record name, or `nil`.
    public func owner(named ownerName: String) throws(ShareSyncError) -> OwnerInfo? {
        try owners().first { $0.ownerName == ownerName }
    }

    /// When the replica last was caught up with `owner` (``noteLastSynced(owner:at:)``), or `nil`.
    public func lastSynced(owner: String) throws(ShareSyncError) -> Date? {
        try read { db in
            try Double.fetchOne(db.cachedStatement(sql: "SELECT lastSynced FROM replicaOwner WHERE owner = ?"), arguments: [owner])
                .map(Date.init(timeIntervalSince1970:))
        }
    }

    /// Notes that the replica was caught up with `owner` at `date` (an unknown owner: nothing).
    /// Not synced to the disk at once (``Durability/refetchable``): a crash may lose the last one,
    /// and the status then says an earlier moment.
    public func noteLastSynced(owner: String, at date: Date) throws(ShareSyncError) {
        try write(.refetchable, notifying: false) { db in
            try db.cachedStatement(sql: "UPDATE replicaOwner SET lastSynced = ? WHERE owner = ?")
                .execute(arguments: [date.timeIntervalSince1970, owner])
        }
    }

    /// Points a known owner at an address set by hand (`owner address`), forgetting the address it
    /// last announced: the one set by hand is then the only one tried (until a connection there hears
    /// the owner announce again). Before, a mistyped address fell back, without a word, on the announced one, and looked
    /// as if it worked (protocol.md: an address set by hand keeps being used). Returns false for an
    /// owner the replica does not know.
    public func setOwnerAddressByHand(owner: String, host: String, port: Int) throws(ShareSyncError) -> Bool {
        try write { db in
            try db.execute(
                sql: "UPDATE replicaOwner SET host = ?, port = ?, announcedHost = NULL, announcedPort = NULL WHERE owner = ?",
                arguments: [host, port, owner])
            return db.changesCount == 1
        }
    }

    /// Adds an owner, or updates the address of one already known (keeping its zones, records,
    /// tokens and outbox).
    public func setOwner(_ info: OwnerInfo) throws(ShareSyncError) {
        guard !info.ownerName.isEmpty else {
            throw ShareSyncError(.invalidArguments, "an owner needs a user record name", rule: .replicaOwnerName)
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

    /// Notes the address an owner announced (in its `welcome` or an `ownerAddress` push) and returns
    /// the owner's entry if its address changed because of it.
    ///
    /// The first announcement heard from an owner is only remembered: the address the node reached it
    /// by (the share URL's, or one set by hand) keeps working, even when it differs from what the owner
    /// advertises (a port forwarded, a name only the participant's network resolves). An announcement
    /// that differs from the last one heard means the owner changed its advertised address: the
    /// owner's host and port become the announced ones, its zones, records, tokens and outbox stay.
    /// `nil` for an unknown owner or an address already followed.
    public func noteAnnouncedAddress(owner: String, host: String, port: Int) throws(ShareSyncError) -> OwnerInfo? {
        try write { db -> OwnerInfo? in
            guard
                let row = try Row.fetchOne(
                db.cachedStatement(sql: "SELECT host, port, fingerprint, announcedHost, announcedPort FROM replicaOwner WHERE owner = ?"),
                    arguments: [owner])
            else { return nil }
            let announcedHost: String? = row["announcedHost"]
            let announcedPort: Int? = row["announcedPort"]
            let first = announcedHost == nil || announcedPort == nil
            let sameAsLast = announcedHost == host && announcedPort == port
            let current = OwnerInfo(ownerName: owner, host: row["host"], port: row["port"], fingerprint: row["fingerprint"])
            if sameAsLast { return nil }
            if first || (current.host == host && current.port == port) {
                try db.execute(
                    sql: "UPDATE replicaOwner SET announcedHost = ?, announcedPort = ? WHERE owner = ?",
                    arguments: [host, port, owner])
                return nil
            }
            try db.execute(
                sql: "UPDATE replicaOwner SET host = ?, port = ?, announcedHost = ?, announcedPort = ? WHERE owner = ?",
                arguments: [host, port, host, port, owner])
            return OwnerInfo(ownerName: owner, host: host, port: port, fingerprint: current.fingerprint)
        }
    }

    /// The address an owner last announced (``noteAnnouncedAddress(owner:host:port:)``), if it announced
    /// one: where to try when the stored address no longer answers.
    public func announcedAddress(owner: String) throws(ShareSyncError) -> (host: String, port: Int)? {
        try read { db in
            guard let row = try Row.fetchOne(
                db.cachedStatement(sql: "SELECT announcedHost, announcedPort FROM replicaOwner WHERE owner = ?"), arguments: [owner]),
                let host = row["announcedHost"] as String?, let port = row["announcedPort"] as Int?
            else { return nil }
            return (host, port)
        }
    }

    /// Forgets an owner and everything replicated from it: zones, records, tokens and pending writes.
    /// Changes that arrive for it afterwards are refused until it is added again.
    public func removeOwner(_ ownerName: String) throws(ShareSyncError) {
        try write { db in
            try db.execute(sql: "DELETE FROM replicaOwner WHERE owner = ?", arguments: [ownerName])
        }
    }

    /// Forgets an owner of whom the replica holds nothing: no zone (fetched or being fetched), no
    /// write in the outbox, no leave the owner has not been told of, no zone to fetch again. Checked and
    /// done in one transaction; returns whether the owner was forgotten. The sync engine calls it
    /// after a catch-up that left nothing of the owner (the last of its shares left, stopped or
    /// deleted, or this participant removed), so that it stops connecting to an owner it no longer
    /// follows; accepting one of the owner's shares adds it again.
    /// Observers are not told: no record, zone or journal entry changes (and the engine calls it
    /// under its lock, which an observer calling the engine would wait for).
    public func removeOwnerIfNothingLeft(_ ownerName: String) throws(ShareSyncError) -> Bool {
        try write(notifying: false) { db in
            try db.execute(
                sql: """
                    DELETE FROM replicaOwner WHERE owner = ?1
                        AND NOT EXISTS (SELECT 1 FROM replicaZone WHERE owner = ?1)
                        AND NOT EXISTS (SELECT 1 FROM replicaStagedZone WHERE owner = ?1)
                        AND NOT EXISTS (SELECT 1 FROM replicaOutbox WHERE owner = ?1)
                        AND NOT EXISTS (SELECT 1 FROM replicaPendingLeave WHERE owner = ?1)
                        AND NOT EXISTS (SELECT 1 FROM replicaZoneRefetch WHERE owner = ?1)
                    """,
                arguments: [ownerName])
            return db.changesCount > 0
        }
    }

    /// The owner's shared-database change token: pass it to the next `fetchDatabaseChanges`.
    /// `nil` if the database was never fetched (or the owner is unknown).
    public func databaseChangeToken(owner: String) throws(ShareSyncError) -> ServerChangeToken? {
        try read { db in
            try String.fetchOne(
                db.cachedStatement(sql: "SELECT databaseToken FROM replicaOwner WHERE owner = ?"), arguments: [owner])
                .map(ServerChangeToken.init(stringValue:))
        }
    }

    /// A zone's change token: pass it to the next `fetchZoneChanges`. `nil` if the zone was never
    /// fetched (fetch from the start).
    public func zoneChangeToken(owner: String, zoneName: String) throws(ShareSyncError) -> ServerChangeToken? {
        try read { db in
            try String.fetchOne(
                db.cachedStatement(sql: "SELECT token FROM replicaZone WHERE owner = ? AND zone = ?"), arguments: [owner, zoneName]
            ).map(ServerChangeToken.init(stringValue:))
        }
    }
}
