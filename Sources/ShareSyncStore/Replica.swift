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

    /// Opens (or creates) a replica in a file, in WAL mode. The file is readable by its user only.
    public convenience init(path: String) throws(ShareSyncError) {
        try createPrivateFile(path, what: "the replica file")
        let pool: DatabasePool
        let checkpointer = BackgroundCheckpointer(path: path)
        do {
            var config = Configuration()
            config.busyMode = .timeout(10)
            checkpointer.configure(&config)
            pool = try DatabasePool(path: path, configuration: config)
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
            try ReplicaSchema.migrator.migrate(writer)
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

    /// Runs a write transaction, turning database failures into ``ShareSyncError``, then tells observers.
    /// If `body` throws, the transaction is rolled back: nothing it wrote stays.
    func write<T>(_ body: (Database) throws -> T) throws(ShareSyncError) -> T {
        let result = try withStoreErrors("replica write", path: writer.path) { try writer.write(body) }
        checkpointer?.committed()
        observers.notify()
        return result
    }

    /// Runs a read, turning database failures into ``ShareSyncError``.
    func read<T>(_ body: (Database) throws -> T) throws(ShareSyncError) -> T {
        try withStoreErrors("replica read", path: writer.path) { try writer.storeRead(body) }
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
