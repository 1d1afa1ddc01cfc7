import Foundation
import ShareSyncCore
import ShareSyncStore
import Synchronization

/// The daemon's change feeds for `sharesync changes` and `sharesync watch`.
///
/// - **Private database**: the store's own feeds (`fetchDatabaseChanges`, then `fetchZoneChanges` of
///   each changed zone) from one database token; tokens are `private:` + the store's token and stay
///   valid across restarts until the store compacts past them (`changeTokenExpired`).
/// - **Shared database**: the replica keeps no history, so the daemon keeps one. From the first request
///   on, it compares the replica after every committed write with what it saw before and journals the
///   differences (records changed or deleted, zones gone). Tokens are `shared:EPOCH:SEQUENCE`; they are
///   valid while this daemon runs (a restarted daemon answers `changeTokenExpired`: read from no token).
///
/// A request with `waitSeconds` and nothing to return waits for the next commit (long poll), which is
/// how `watch` streams.
public final class NodeChangeFeeds: Sendable {
    /// The most shared changes kept; an older token gets `changeTokenExpired`.
    static let journalCapacity = 200_000

    let database: PrivateDatabase
    let replica: SharedDatabaseReplica
    let epoch = String(UUID().uuidString.prefix(8)).lowercased()

    private struct RecordKey: Hashable, Comparable {
        var owner: String
        var zone: String
        var name: String
        static func < (a: Self, b: Self) -> Bool { (a.owner, a.zone, a.name) < (b.owner, b.zone, b.name) }
    }

    private struct Journal {
        var active = false
        /// Each record's change tag as last seen, by zone.
        var seen: [RecordZone.ID: [String: String]] = [:]
        var entries: [(sequence: Int, change: ChangeInfo)] = []
        var sequence = 0
        var waiters: [UInt64: ParticipantWakeup] = [:]
        var nextWaiter: UInt64 = 0
    }

    private let journal = Mutex(Journal())
    /// Serializes comparisons, so they are journaled in the order they read the replica.
    private let refreshing = Mutex(())
    private let observers = Mutex<(replica: UInt64?, database: UInt64?)>((nil, nil))

    public init(database: PrivateDatabase, replica: SharedDatabaseReplica) {
        self.database = database
        self.replica = replica
        let replicaObserver = replica.addChangeObserver { [weak self] in self?.replicaChanged() }
        let databaseObserver = database.addCommitObserver { [weak self] in self?.wakeWaiters() }
        observers.withLock { $0 = (replicaObserver, databaseObserver) }
    }

    /// Stops observing the databases and wakes every waiting request.
    public func close() {
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
    public func changes(shared: Bool, since token: String?, wait: Duration?) async throws(ShareSyncError) -> ChangesPage {
        let deadline = ContinuousClock.now + (wait ?? .zero)
        let wakeup = ParticipantWakeup()
        let waiterID = journal.withLock { j in
            j.nextWaiter += 1
            j.waiters[j.nextWaiter] = wakeup
            return j.nextWaiter
        }
        defer { _ = journal.withLock { $0.waiters.removeValue(forKey: waiterID) } }
        while true {
            let page = shared ? try sharedChanges(since: token) : try privateChanges(since: token)
            let remaining = deadline - ContinuousClock.now
            if !page.changes.isEmpty || token == nil || remaining <= .zero || Task.isCancelled { return page }
            await wakeup.wait(upTo: remaining)
        }
    }

    /// The token for now.
    public func currentToken(shared: Bool) throws(ShareSyncError) -> String {
        if shared {
            try activate()
            return sharedToken(journal.withLock { $0.sequence })
        }
        return "private:" + (try database.currentChangeToken()).stringValue
    }

    // MARK: Private database

    func privateChanges(since token: String?) throws(ShareSyncError) -> ChangesPage {
        var since: ServerChangeToken?
        if let token {
            guard token.hasPrefix("private:") else { throw Self.foreignToken(token, expected: "private database") }
            since = ServerChangeToken(stringValue: String(token.dropFirst("private:".count)))
        }
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
        return ChangesPage(changes: changes, token: "private:" + now.stringValue)
    }

    // MARK: Shared database

    func sharedChanges(since token: String?) throws(ShareSyncError) -> ChangesPage {
        try activate()
        try refresh()
        guard let token else {
            // Everything in the replica now, and the journal position it corresponds to.
            return try refreshing.withLock { _ throws(ShareSyncError) in
                let sequence = journal.withLock { $0.sequence }
                var changes: [ChangeInfo] = []
                for zoneID in try replica.allZones() {
                    changes += try replica.records(owner: zoneID.ownerName, zoneName: zoneID.zoneName)
                        .map { .changed($0, owner: zoneID.ownerName) }
                }
                return ChangesPage(changes: changes, token: sharedToken(sequence))
            }
        }
        let parts = token.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 3, parts[0] == "shared", let after = Int(parts[2]) else {
            throw Self.foreignToken(token, expected: "shared database")
        }
        guard parts[1] == epoch else {
            throw ShareSyncError(
                .changeTokenExpired,
                "the daemon restarted since this token was issued; read the changes again without --since",
                rule: "changeTokenExpired")
        }
        return try journal.withLock { j throws(ShareSyncError) in
            guard after <= j.sequence else {
                throw ShareSyncError(
                    .changeTokenExpired,
                    "the change token is ahead of this daemon's history (position \(after), the daemon is at \(j.sequence)); "
                        + "read the changes again without --since",
                    rule: "changeTokenExpired")
            }
            if let first = j.entries.first, first.sequence > after + 1 {
                throw ShareSyncError(
                    .changeTokenExpired, "this token is older than the changes the daemon keeps; read again without --since",
                    rule: "changeTokenExpired")
            }
            let changes = j.entries.drop { $0.sequence <= after }.map(\.change)
            return ChangesPage(changes: Array(changes), token: sharedToken(j.sequence))
        }
    }

    private func sharedToken(_ sequence: Int) -> String { "shared:\(epoch):\(sequence)" }

    /// Starts journaling (on the first shared request): the replica as it is now is the baseline.
    private func activate() throws(ShareSyncError) {
        guard !journal.withLock({ $0.active }) else { return }
        try refreshing.withLock { _ throws(ShareSyncError) in
            guard !journal.withLock({ $0.active }) else { return }
            let snapshot = try readReplica()
            journal.withLock { j in
                j.seen = snapshot.mapValues { $0.mapValues { $0.recordChangeTag ?? "" } }
                j.active = true
            }
        }
    }

    private func readReplica() throws(ShareSyncError) -> [RecordZone.ID: [String: Record]] {
        var snapshot: [RecordZone.ID: [String: Record]] = [:]
        for zoneID in try replica.allZones() {
            let records = try replica.records(owner: zoneID.ownerName, zoneName: zoneID.zoneName)
            snapshot[zoneID] = Dictionary(records.map { ($0.recordID.recordName, $0) }, uniquingKeysWith: { a, _ in a })
        }
        return snapshot
    }

    /// Compares the replica with what was last seen and journals the differences.
    func refresh() throws(ShareSyncError) {
        guard journal.withLock({ $0.active }) else { return }
        let added = try refreshing.withLock { _ throws(ShareSyncError) -> Int in
            let now = try readReplica()
            return journal.withLock { j in
                var changes: [ChangeInfo] = []
                for zoneID in now.keys.sorted(by: { ($0.ownerName, $0.zoneName) < ($1.ownerName, $1.zoneName) }) {
                    let records = now[zoneID]!
                    let before = j.seen[zoneID] ?? [:]
                    for name in records.keys.sorted() where before[name] != (records[name]!.recordChangeTag ?? "") {
                        changes.append(.changed(records[name]!, owner: zoneID.ownerName))
                    }
                    for name in before.keys.sorted() where records[name] == nil {
                        changes.append(ChangeInfo(
                            kind: .recordDeleted, ownerName: zoneID.ownerName, zoneName: zoneID.zoneName, recordName: name))
                    }
                }
                for zoneID in j.seen.keys.sorted(by: { ($0.ownerName, $0.zoneName) < ($1.ownerName, $1.zoneName) })
                where now[zoneID] == nil {
                    changes.append(ChangeInfo(kind: .zoneDeleted, ownerName: zoneID.ownerName, zoneName: zoneID.zoneName))
                }
                j.seen = now.mapValues { $0.mapValues { $0.recordChangeTag ?? "" } }
                for change in changes {
                    j.sequence += 1
                    j.entries.append((j.sequence, change))
                }
                if j.entries.count > Self.journalCapacity { j.entries.removeFirst(j.entries.count - Self.journalCapacity) }
                return changes.count
            }
        }
        if added > 0 { wakeWaiters() }
    }

    private func replicaChanged() {
        // Waiters re-read (and so compare) themselves; nobody waiting means nothing to do now.
        wakeWaiters()
    }

    private func wakeWaiters() {
        for waiter in journal.withLock({ Array($0.waiters.values) }) { waiter.signal() }
    }

    static func foreignToken(_ token: String, expected: String) -> ShareSyncError {
        ShareSyncError(
            .invalidArguments, "\(token.prefix(80).debugDescription) is not a change token of the \(expected)",
            rule: "changeTokenSyntax")
    }
}
