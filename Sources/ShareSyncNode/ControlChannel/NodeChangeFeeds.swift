import Foundation
import NIOCore
import ShareSyncCore
import ShareSyncStore
import Synchronization

/// The daemon's change feeds for `sharesync changes` and `sharesync watch`.
///
/// - **Private database**: the store's own feeds (`fetchDatabaseChanges`, then `fetchZoneChanges` of
///   each changed zone) from one database token; tokens are `private:` + the store's token and stay
///   valid across restarts until the store compacts past them (`changeTokenExpired`).
/// - **Shared database**: the replica's change journal (``SharedDatabaseReplica/journalChanges()``),
///   which compares the replica with what it last saw and keeps the differences in the replica file.
///   Tokens are `shared:EPOCH:SEQUENCE`, positions in that journal; they stay valid across daemon
///   restarts (what changed while the daemon was down comes with the next read), until the journal
///   trims the deletions after them (`changeTokenExpired`).
///
/// Three views of each database, as CloudKit has them: the merged view (every record change, the
/// default), the database view (zones changed and deleted, like `CKFetchDatabaseChangesOperation`)
/// and one zone's records (like `CKFetchRecordZoneChangesOperation`). With a limit, a page holds at
/// most that many changes (zones in the database view) and says `moreComing`; its token goes on.
///
/// A request with `waitSeconds` and nothing to return waits for the next commit (long poll), which is
/// how `watch` streams.
public final class NodeChangeFeeds: Sendable {
    let database: PrivateDatabase
    let replica: SharedDatabaseReplica

    private struct Waiters {
        var waiters: [UInt64: ParticipantWakeup] = [:]
        var nextWaiter: UInt64 = 0
    }

    private let journal = Mutex(Waiters())
    /// ``close()`` was called: a request waiting for a change returns what it has at once.
    private let closed = Atomic<Bool>(false)
    private let observers = Mutex<(replica: UInt64?, database: UInt64?)>((nil, nil))

    public init(database: PrivateDatabase, replica: SharedDatabaseReplica) {
        self.database = database
        self.replica = replica
        let replicaObserver = replica.addChangeObserver { [weak self] in self?.wakeWaiters() }
        let databaseObserver = database.addCommitObserver { [weak self] in self?.wakeWaiters() }
        observers.withLock { $0 = (replicaObserver, databaseObserver) }
    }

    /// Stops observing the databases and ends every wait: a waiting request returns what it has (no
    /// change) at once. Before, it was woken and went back to waiting, so a node stopping with a
    /// `sharesync watch` attached waited out the control server's 5-second grace.
    public func close() {
        closed.store(true, ordering: .sequentiallyConsistent)
        let ids = observers.withLock { ids in
            defer { ids = (nil, nil) }
            return ids
        }
        if let id = ids.replica { replica.removeChangeObserver(id) }
        if let id = ids.database { database.removeCommitObserver(id) }
        wakeWaiters()
    }

    // MARK: Requests

    /// The changes since `token` (`nil`: everything), waiting up to `wait` for one if there is none.
    /// `zone` (with `owner` for the shared database, when several owners share a zone of that name)
    /// narrows them to one zone; `limit` makes a page of at most that many changes.
    public func changes(
        shared: Bool, since token: String?, wait: Duration?, zone: String? = nil, owner: String? = nil, limit: Int? = nil
    ) async throws(ShareSyncError) -> ChangesPage {
        if let limit, limit < 1 {
            throw ShareSyncError(.invalidArguments, "the limit must be 1 or more, not \(limit)", rule: .limitRange)
        }
        if owner != nil, !shared || zone == nil {
            throw ShareSyncError(.invalidArguments, "an owner goes with a shared zone", rule: .ownerWithSharedZone)
        }
        if limit != nil, !shared, zone == nil {
            throw ShareSyncError(
                .invalidArguments, "in the private database a limit goes with one zone or the database view",
                rule: .limitNeedsView)
        }
        // One deadline for every wait, so that they share one timer (``ParticipantWakeup/wait(until:)``).
        let deadline = NIODeadline.now() + TimeAmount(wait ?? .zero)
        let wakeup = ParticipantWakeup()
        let waiterID = journal.withLock { j in
            j.nextWaiter += 1
            j.waiters[j.nextWaiter] = wakeup
            return j.nextWaiter
        }
        defer { _ = journal.withLock { $0.waiters.removeValue(forKey: waiterID) } }
        while true {
            let page =
                shared
                ? try sharedChanges(since: token, owner: owner, zone: zone, limit: limit)
                : try Self.inControlTerms { () throws(ShareSyncError) in try privateChanges(since: token, zone: zone, limit: limit) }
            // A limited page can be empty and still say `moreComing` (its entries were records deleted
            // since): its token moved on, so it returns at once rather than waiting for a commit.
            if !page.changes.isEmpty || page.moreComing || token == nil || NIODeadline.now() >= deadline || Task.isCancelled
                || closed.load(ordering: .sequentiallyConsistent)
            {
                return page
            }
            await wakeup.wait(until: deadline)
        }
    }

    /// The zones changed and deleted since `token`, like `CKFetchDatabaseChangesOperation`; with
    /// `limit`, at most that many zones.
    public func databaseChanges(shared: Bool, since token: String?, limit: Int? = nil) throws(ShareSyncError)
        -> DatabaseChangesPage
    {
        if let limit, limit < 1 {
            throw ShareSyncError(.invalidArguments, "the limit must be 1 or more, not \(limit)", rule: .limitRange)
        }
        if shared { return try sharedDatabaseChanges(since: token, limit: limit) }
        return try Self.inControlTerms { () throws(ShareSyncError) in try privateDatabaseChanges(since: token, limit: limit) }
    }

    private func privateDatabaseChanges(since token: String?, limit: Int?) throws(ShareSyncError) -> DatabaseChangesPage {
        let since = try privateToken(token)
        var changed: [RecordZone.ID] = []
        var deleted: [RecordZone.ID] = []
        var databaseToken = since
        var more = false
        repeat {
            let page = try database.fetchDatabaseChanges(since: databaseToken, resultsLimit: limit)
            changed.removeAll { page.deletedZoneIDs.contains($0) }
            deleted.removeAll { page.changedZoneIDs.contains($0) }
            changed += page.changedZoneIDs
            deleted += page.deletedZoneIDs
            databaseToken = page.changeToken
            more = page.moreComing
        } while more && limit == nil
        let now = try database.currentChangeToken()
        return DatabaseChangesPage(
            changedZones: changed.map { ZoneRef(ownerName: nil, zoneName: $0.zoneName) },
            deletedZones: deleted.map { ZoneRef(ownerName: nil, zoneName: $0.zoneName) }, moreComing: more,
            token: "private:" + (databaseToken ?? now).stringValue)
    }

    /// The token for now.
    public func currentToken(shared: Bool) throws(ShareSyncError) -> String {
        if shared {
            let position = try replica.journalChanges().position
            return sharedToken(position, position.sequence)
        }
        return "private:" + (try database.currentChangeToken()).stringValue
    }

    // MARK: Private database

    func privateToken(_ token: String?) throws(ShareSyncError) -> ServerChangeToken? {
        guard let token else { return nil }
        guard token.hasPrefix("private:") else { throw Self.foreignToken(token, expected: "private database") }
        return ServerChangeToken(stringValue: String(token.dropFirst("private:".count)))
    }

    /// One zone's record changes, like `CKFetchRecordZoneChangesOperation`.
    func privateZoneChanges(_ zone: String, since: ServerChangeToken?, limit: Int?) throws(ShareSyncError) -> ChangesPage {
        let zoneID = RecordZone.ID(zoneName: zone)
        var changes: [ChangeInfo] = []
        var zoneToken = since
        var more = false
        repeat {
            let page = try database.fetchZoneChanges(zoneID, since: zoneToken, resultsLimit: limit.map { $0 - changes.count })
            for change in page.changes {
                switch change {
                case .changed(let record):
                    changes.append(.changed(record, owner: nil))
                case .deleted(let deleted):
                    changes.append(ChangeInfo(
                        kind: .recordDeleted, ownerName: nil, zoneName: zone, recordName: deleted.recordID.recordName,
                        recordType: deleted.recordType))
                }
            }
            zoneToken = page.changeToken
            more = page.moreComing
        } while more && (limit.map { changes.count < $0 } ?? true)
        return ChangesPage(changes: changes, token: "private:" + zoneToken!.stringValue, moreComing: more)
    }

    func privateChanges(since token: String?, zone: String? = nil, limit: Int? = nil) throws(ShareSyncError) -> ChangesPage {
        let since = try privateToken(token)
        if let zone { return try privateZoneChanges(zone, since: since, limit: limit) }
        // Taken first: a change committed while reading comes again next time rather than never.
        let now = try database.currentChangeToken()
        var changedZones: [RecordZone.ID] = []
        var deletedZones: [RecordZone.ID] = []
        var databaseToken = since
        while true {
            let page = try database.fetchDatabaseChanges(since: databaseToken)
            changedZones += page.changedZoneIDs
            deletedZones += page.deletedZoneIDs
            databaseToken = page.changeToken
            if !page.moreComing { break }
        }
        var changes: [ChangeInfo] = []
        for zoneID in changedZones {
            var zoneToken = since
            while true {
                let page: ZoneChanges
                do {
                    page = try database.fetchZoneChanges(zoneID, since: zoneToken)
                } catch where error.code == .zoneNotFound {
                    break  // deleted since it was listed: its deletion comes next time
                } catch where error.code == .changeTokenExpired && error.zoneID != nil && zoneToken != nil && zoneToken == since {
                    // Deleted and created again since the token (the token is good for the database).
                    // The old zone's records went with it, deletions included: say so, then the zone
                    // as it is now. Before, the whole page failed, from this token for good.
                    changes.append(ChangeInfo(kind: .zoneDeleted, ownerName: nil, zoneName: zoneID.zoneName))
                    zoneToken = nil
                    continue
                }
                for change in page.changes {
                    switch change {
                    case .changed(let record):
                        changes.append(.changed(record, owner: nil))
                    case .deleted(let deleted):
                        changes.append(ChangeInfo(
                            kind: .recordDeleted, ownerName: nil, zoneName: zoneID.zoneName,
                            recordName: deleted.recordID.recordName, recordType: deleted.recordType))
                    }
                }
                zoneToken = page.changeToken
                if !page.moreComing { break }
            }
        }
        changes += deletedZones.map { ChangeInfo(kind: .zoneDeleted, ownerName: nil, zoneName: $0.zoneName) }
        return ChangesPage(changes: changes, token: "private:" + now.stringValue, moreComing: false)
    }

    // MARK: Shared database

    /// The journal position a shared token names (0 for no token), checked against the journal.
    func sharedPosition(_ token: String?, _ position: ReplicaJournalPosition) throws(ShareSyncError) -> Int64 {
        guard let token else { return 0 }
        let parts = token.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 3, parts[0] == "shared", let after = Int64(parts[2]), after >= 0 else {
            throw Self.foreignToken(token, expected: "shared database")
        }
        guard parts[1] == position.epoch else {
            throw ShareSyncError(
                .changeTokenExpired,
                "this token is from another replica (the replica was made afresh since); read the changes again without --since",
                rule: .changeTokenExpired)
        }
        guard after <= position.sequence else {
            throw ShareSyncError(
                .changeTokenExpired,
                "the change token is ahead of this replica's history (position \(after), the replica is at \(position.sequence)); "
                    + "read the changes again without --since",
                rule: .changeTokenExpired)
        }
        if after > 0, after < position.expiredBelow {
            throw ShareSyncError(
                .changeTokenExpired, "this token is older than the changes the replica keeps; read again without --since",
                rule: .changeTokenExpired)
        }
        return after
    }

    func sharedChanges(since token: String?, owner: String? = nil, zone: String? = nil, limit: Int? = nil)
        throws(ShareSyncError) -> ChangesPage
    {
        let position = try replica.journalChanges().position
        let after = try sharedPosition(token, position)
        var ownerName = owner
        if let zone, owner == nil {
            // The one owner sharing a zone of that name, as the record commands pick it.
            let owners = Set(try replica.allZones().filter { $0.zoneName == zone }.map(\.ownerName))
            if owners.count > 1 {
                throw ShareSyncError(
                    .invalidArguments, "several owners share a zone \(zone) (\(owners.sorted().joined(separator: ", "))); name one with --owner",
                    rule: .ambiguousOwner)
            }
            ownerName = owners.first
            if ownerName == nil, token == nil {
                throw ShareSyncError(
                    .zoneNotFound, "no shared zone \(zone) in the replica; see `sharesync zone list --shared`",
                    zoneID: RecordZone.ID(zoneName: zone, ownerName: "?"))
            }
        }
        // One more than asked for tells whether more come; a limit near Int.max would overflow.
        let fetch = limit.map { $0 < .max ? $0 + 1 : $0 } ?? .max
        let entries = try replica.journalEntries(
            after: after, through: position.sequence, owner: ownerName, zoneName: zone, limit: fetch, zonesAdded: false)
        var page = entries
        var more = false
        if let limit, entries.count > limit {
            page = Array(entries.prefix(limit))
            more = true
        }
        var changes: [ChangeInfo] = []
        for entry in page {
            switch entry.kind {
            case .changed:
                let id = Record.ID(recordName: entry.recordName ?? "", zoneID: RecordZone.ID(zoneName: entry.zoneName, ownerName: entry.owner))
                if let record = try replica.fetchRecord(id) { changes.append(.changed(record, owner: entry.owner)) }
            case .deleted:
                changes.append(ChangeInfo(
                    kind: .recordDeleted, ownerName: entry.owner, zoneName: entry.zoneName, recordName: entry.recordName,
                    recordType: entry.recordType))
            case .zoneDeleted:
                changes.append(ChangeInfo(kind: .zoneDeleted, ownerName: entry.owner, zoneName: entry.zoneName))
            case .zoneAdded:
                break
            }
        }
        if !changes.isEmpty {
            let identities = try ControlHandler.ownerIdentities(replica)
            for i in changes.indices { changes[i].ownerDisplayName = identities[changes[i].ownerName ?? ""]?.displayName }
        }
        let through = more ? page.last!.sequence : position.sequence
        return ChangesPage(changes: changes, token: sharedToken(position, through), moreComing: more)
    }

    func sharedDatabaseChanges(since token: String?, limit: Int?) throws(ShareSyncError) -> DatabaseChangesPage {
        let position = try replica.journalChanges().position
        let after = try sharedPosition(token, position)
        let entries = try replica.journalEntries(after: after, through: position.sequence)
        struct Zone: Hashable { var owner: String, zone: String }
        var order: [Zone] = []
        var deleted: [Zone: Bool] = [:]
        var through = position.sequence
        var more = false
        for entry in entries {
            let zone = Zone(owner: entry.owner, zone: entry.zoneName)
            if deleted[zone] == nil {
                if let limit, order.count == limit {
                    more = true
                    break
                }
                order.append(zone)
            }
            deleted[zone] = entry.kind == .zoneDeleted
            through = entry.sequence
        }
        if !more { through = position.sequence }
        let identities = order.isEmpty ? [:] : try ControlHandler.ownerIdentities(replica)
        func ref(_ zone: Zone) -> ZoneRef {
            ZoneRef(ownerName: zone.owner, zoneName: zone.zone, ownerDisplayName: identities[zone.owner]?.displayName)
        }
        return DatabaseChangesPage(
            changedZones: order.filter { deleted[$0] == false }.map(ref),
            deletedZones: order.filter { deleted[$0] == true }.map(ref),
            moreComing: more, token: sharedToken(position, through))
    }

    private func sharedToken(_ position: ReplicaJournalPosition, _ sequence: Int64) -> String {
        "shared:\(position.epoch):\(sequence)"
    }

    private func wakeWaiters() {
        for waiter in journal.withLock({ Array($0.waiters.values) }) { waiter.signal() }
    }

    /// Runs a read of the private database's feed, its expired-token advice ("fetch again from nil", the
    /// API's terms) given as the shared feed gives it, in the terms of the control channel's requests:
    /// after a restore, `sharesync watch` and `changes --since` told their user to fetch from nil.
    static func inControlTerms<T>(_ body: () throws(ShareSyncError) -> T) throws(ShareSyncError) -> T {
        do {
            return try body()
        } catch where error.code == .changeTokenExpired {
            var error = error
            error.message = error.message.replacingOccurrences(
                of: ServerChangeToken.expiredAdvice, with: "read the changes again without --since")
            throw error
        }
    }

    static func foreignToken(_ token: String, expected: String) -> ShareSyncError {
        ShareSyncError(
            .invalidArguments, "\(token.prefix(80).debugDescription) is not a change token of the \(expected)",
            rule: .changeTokenSyntax)
    }
}
