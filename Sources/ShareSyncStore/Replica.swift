import Foundation
import GRDB
import ShareSyncCore
import Synchronization

/// A participant's local replica of its shared database, like the shared database of a CloudKit
/// app: the zones other users share with this node, their records, the change tokens to resume from,
/// and an outbox of local writes waiting for the owner.
///
/// One replica holds the shares of several owners at once, kept apart by the owner's user record
/// name (the ``RecordZone/ID/ownerName`` of their zones). Every write that applies fetched or pushed
/// changes stores the records and the token after them in one transaction, so a crash never loses a
/// change nor applies one twice. `Sendable`: call it from any thread; writes are serialized, reads run
/// concurrently (WAL).
///
/// ```swift
/// let replica = try SharedDatabaseReplica(path: home.appending(path: "shared.sqlite"))
/// try replica.setOwner(OwnerInfo(ownerName: owner, host: "10.0.0.2", port: 7420, fingerprint: fp))
/// let page = try await connection.fetchZoneChanges(zoneName: "Topics",
///     since: try replica.zoneChangeToken(owner: owner, zoneName: "Topics"))
/// try replica.apply(page, owner: owner)
/// ```
public final class SharedDatabaseReplica: Sendable {
    let writer: any DatabaseWriter
    let observers = CommitObservers()
    /// Checkpoints the WAL away from commits (a replica in a file).
    let checkpointer: BackgroundCheckpointer?
    /// How many times ``syncToDisk()`` synced the WAL (tests read it).
    package let diskSyncs = Atomic<Int>(0)
    /// Moves once before and once after every ``Durability/synced`` write: odd while one runs. Only
    /// those writes add or remove owners and outbox operations (pages and pushes are
    /// ``Durability/refetchable`` and touch neither), so an answer of ``writeReadiness(owner:)`` read
    /// while it stayed even and unchanged is still the answer until it moves.
    let syncedWrites = Atomic<UInt64>(0)
    /// ``writeReadiness(owner:)``'s last answer for each known owner, with the ``syncedWrites`` it holds for.
    let readiness = Mutex<[String: (generation: UInt64, known: Bool, writesWaiting: Bool)]>([:])
    /// Called at the start of every write transaction (tests read the connection's settings there).
    let writeProbe = Mutex<(@Sendable (Database) throws -> Void)?>(nil)
    /// How many of the next reads fail (tests set it: a read that meets a storage error).
    let readFailures = Atomic<Int>(0)
    /// How many of the next returns to `synchronous = FULL` after a ``Durability/refetchable`` write
    /// fail (tests set it: SQLite refuses the pragma on a connection still in a transaction).
    let levelRestoreFailures = Atomic<Int>(0)
    /// Set when the writing connection may have been left at `synchronous = NORMAL` (its return to
    /// FULL after a ``Durability/refetchable`` write failed): the next ``Durability/synced`` write sets
    /// FULL again before it writes, or fails. Read and written on the writer's queue only.
    let levelNeedsRestore = Atomic<Bool>(false)

    /// Opens (or creates) a replica in a file, in WAL mode. The file is readable by its user only.
    public convenience init(path: String) throws(ShareSyncError) {
        try createPrivateFile(path, what: "the replica file")
        let pool: DatabasePool
        let checkpointer = BackgroundCheckpointer(path: path)
        do {
            var config = Configuration()
            config.busyMode = .timeout(10)
            checkpointer.configure(&config)
            // A write is on the disk when it returns, unless it says otherwise (``Durability``).
            pool = try openDurablePool(path: path, configuration: config)
        } catch {
            throw ShareSyncError(.internalError, "cannot open the replica \(path): \(error)")
        }
        try self.init(writer: pool, checkpointer: checkpointer)
        for suffix in ["", "-wal", "-shm"] { chmod(path + suffix, 0o600) }
    }

    /// Creates a replica in memory, for tests and tools: `SharedDatabaseReplica(inMemory: ())`.
    public convenience init(inMemory: ()) throws(ShareSyncError) {
        let queue: DatabaseQueue
        do { queue = try DatabaseQueue() } catch {
            throw ShareSyncError(.internalError, "cannot create an in-memory replica: \(error)")
        }
        try self.init(writer: queue)
    }

    init(writer: any DatabaseWriter, checkpointer: BackgroundCheckpointer? = nil) throws(ShareSyncError) {
        self.writer = writer
        self.checkpointer = checkpointer
        do {
            try ReplicaSchema.migrator.migrateRefusingNewer(writer, what: "the replica")
        } catch let error as ShareSyncError {
            throw error
        } catch {
            throw ShareSyncError(.internalError, "cannot migrate the replica: \(error)")
        }
    }

    // MARK: Observers

    /// Calls `callback` after every committed write (on the writing thread; keep it short, for example
    /// a wake-up of a task that then reads the replica). Returns an ID for ``removeChangeObserver(_:)``.
    public func addChangeObserver(_ callback: @escaping @Sendable () -> Void) -> UInt64 {
        observers.add(callback)
    }

    /// Stops calling an observer.
    public func removeChangeObserver(_ id: UInt64) {
        observers.remove(id)
    }

    // MARK: Transactions

    /// How a write of the replica reaches the disk.
    enum Durability {
        /// On the disk when the write returns (SQLite's `synchronous = FULL`, the replica's
        /// setting): what only this node knows, such as the outbox, pending leaves, the owners and
        /// their addresses, the identities, and the journal whose positions readers keep.
        case synced
        /// Committed when the write returns, so kept if the process dies, and on the disk after the
        /// next synced write, the next checkpoint (within ``BackgroundCheckpointer/interval`` of the
        /// commit) or ``syncToDisk()`` (`synchronous = NORMAL`). For what the owner's node holds and
        /// sends again: pages and pushes, each stored in the transaction that stores its token. A
        /// power loss before the sync takes back the changes and their token together, and the next
        /// fetch from the token brings them again. A push or page pays no fsync of its own: this
        /// is how every replica write ran before (GRDB's default in WAL mode), so the change latency
        /// keeps it.
        case refetchable
    }

    /// Runs a write transaction, turning database failures into ``ShareSyncError``, then tells observers
    /// (unless `notifying` is false: bookkeeping no reader of records, zones or the journal sees).
    /// If `body` throws, the transaction is rolled back: nothing it wrote stays.
    func write<T>(
        _ durability: Durability = .synced, notifying: Bool = true, _ body: (Database) throws -> T
    ) throws(ShareSyncError) -> T {
        let probe = writeProbe.withLock { $0 }
        if durability == .synced { syncedWrites.add(1, ordering: .sequentiallyConsistent) }
        defer { if durability == .synced { syncedWrites.add(1, ordering: .sequentiallyConsistent) } }
        let result = try withStoreErrors("replica write", path: writer.path) {
            // A replica in memory has no disk to sync: its writes skip the pragmas.
            guard checkpointer != nil else {
                return try writer.write { db in
                    try probe?(db)
                    return try body(db)
                }
            }
            return try writer.writeWithoutTransaction { db in
                // The level is set when SQLite prepares the pragma, which it does again at each step.
                switch durability {
                case .synced:
                    // Before, a failed return to FULL was ignored (`try?`), and every later write of
                    // what only this node knows would have committed without its sync.
                    if levelNeedsRestore.load(ordering: .acquiring) {
                        try db.cachedStatement(sql: "PRAGMA synchronous = FULL").execute()
                        levelNeedsRestore.store(false, ordering: .releasing)
                    }
                case .refetchable:
                    try db.cachedStatement(sql: "PRAGMA synchronous = NORMAL").execute()
                }
                defer { if durability == .refetchable { restoreFullLevel(db) } }
                var result: T?
                try db.inTransaction {
                    try probe?(db)
                    result = try body(db)
                    return .commit
                }
                return result!
            }
        }
        checkpointer?.committed()
        if notifying { observers.notify() }
        return result
    }

    /// Returns the writing connection to `synchronous = FULL` after a ``Durability/refetchable``
    /// write; if SQLite refuses, the next ``Durability/synced`` write does it before it writes.
    private func restoreFullLevel(_ db: Database) {
        do {
            if levelRestoreFailures.takeOne() { throw ShareSyncError(.internalError, "synchronous = FULL refused (injected)") }
            try db.cachedStatement(sql: "PRAGMA synchronous = FULL").execute()
        } catch {
            levelNeedsRestore.store(true, ordering: .releasing)
        }
    }

    /// Syncs the replica's committed writes to the disk now, ``Durability/refetchable`` ones
    /// included (an fdatasync of the WAL file). The sync engine calls it at the end of each
    /// catch-up: an accept, or ``ParticipantSync/waitUntilSynced(owner:timeout:)``, returns once
    /// what it waited for is on the disk. Nothing to do for a replica in memory.
    public func syncToDisk() throws(ShareSyncError) {
        guard checkpointer != nil else { return }
        let wal = writer.path + "-wal"
        let fd = open(wal, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            if errno == ENOENT { return }  // no WAL: every commit is in the database file, synced by its checkpoint
            throw ShareSyncError(.internalError, "cannot open the replica's WAL \(wal) to sync it: \(String(cString: strerror(errno)))")
        }
        defer { close(fd) }
        guard fdatasync(fd) == 0 else {
            throw ShareSyncError(.internalError, "cannot sync the replica's WAL \(wal) to the disk: \(String(cString: strerror(errno)))")
        }
        diskSyncs.add(1, ordering: .relaxed)
    }

    /// Runs a read, turning database failures into ``ShareSyncError``.
    func read<T>(_ body: (Database) throws -> T) throws(ShareSyncError) -> T {
        if readFailures.takeOne() {
            throw ShareSyncError(.internalError, "a replica read failed (injected)")
        }
        return try withStoreErrors("replica read", path: writer.path) { try writer.storeRead(body) }
    }

    /// Throws ``ShareSyncError/Code/unknownItem`` unless the owner was added with ``setOwner(_:)``:
    /// changes arriving for an owner already removed (a late page after leaving) are refused.
    func requireOwner(_ db: Database, _ owner: String) throws {
        guard try Bool.fetchOne(db.cachedStatement(sql: "SELECT 1 FROM replicaOwner WHERE owner = ?"), arguments: [owner]) == true else {
            throw ShareSyncError(
                .unknownItem, "owner \(owner) is not in this replica; add it with setOwner first", rule: .replicaUnknownOwner)
        }
    }
}

extension SharedDatabaseReplica {
    /// Writes a copy of the replica, as it is now, to a new file at `path` (mode 0600), while it stays
    /// in use: reads go on meanwhile, writes wait until the copy is made. The copy holds the zones and
    /// records of the shared database, the change tokens they were fetched to, and this node's writes
    /// waiting in the outbox. A replica restored from it catches up from those tokens (or fetches
    /// again when an owner no longer has their history); writes queued after the copy are not in it.
    /// Returns the copy's size. A file at `path` is not replaced, and a name SQLite takes for a side
    /// file (ending in `-journal`, `-wal`, `-shm`) is refused: `invalidArguments`.
    public func backup(to path: String) throws(ShareSyncError) -> Int {
        try copyDatabase(of: writer, to: path) { _ in }
    }

    /// Checkpoints the whole WAL into the replica's file and empties it: the file alone then holds
    /// every commit so far (the outbox's writes included). A node that stops calls it.
    package func checkpointWhole() throws(ShareSyncError) { try checkpointWAL(of: writer) }
}
