import Foundation
import GRDB
import ShareSyncCore
import Synchronization

/// Callbacks run after every committed write of a database (the private database or the replica).
final class CommitObservers: Sendable {
    private let callbacks = Mutex<(next: UInt64, all: [UInt64: @Sendable () -> Void])>((0, [:]))

    func add(_ callback: @escaping @Sendable () -> Void) -> UInt64 {
        callbacks.withLock { state in
            state.next += 1
            state.all[state.next] = callback
            return state.next
        }
    }

    func remove(_ id: UInt64) {
        _ = callbacks.withLock { $0.all.removeValue(forKey: id) }
    }

    func notify() {
        for callback in callbacks.withLock({ Array($0.all.values) }) { callback() }
    }
}

/// Runs GRDB work, turning database failures into ``ShareSyncError`` (what: "write", "replica read", …).
/// A full disk (SQLite's `SQLITE_FULL`) is ``ShareSyncError/Code/quotaExceeded`` with rule `diskFull`,
/// naming the database file: the transaction was rolled back, and the same work succeeds once there
/// is space again.
func withStoreErrors<T>(_ what: String, path: String, _ body: () throws -> T) throws(ShareSyncError) -> T {
    do {
        return try body()
    } catch let error as ShareSyncError {
        throw error
    } catch let error as DatabaseError where error.resultCode == .SQLITE_FULL {
        throw ShareSyncError.diskFull(path: path, what: what, error.message ?? "SQLITE_FULL")
    } catch let error as DatabaseError where passingStoreFailures.contains(error.resultCode) {
        // Rolled back, and one that passes (a busy lock, an I/O error, a read-only or missing file, no
        // memory): said with its own rule, so that a participant keeps a write the owner's store failed
        // on pending rather than refused. Others (a constraint, a damaged file) would fail again the
        // same way, and hold every later write back for good: they stay plain internal errors.
        throw ShareSyncError(.internalError, "database \(what) failed: \(error)", rule: .storeFailure)
    } catch {
        throw ShareSyncError(.internalError, "database \(what) failed: \(error)")
    }
}

/// SQLite's failures that pass once their cause is gone (rule ``Rule/storeFailure``).
private let passingStoreFailures: [ResultCode] = [
    .SQLITE_BUSY, .SQLITE_LOCKED, .SQLITE_IOERR, .SQLITE_READONLY, .SQLITE_CANTOPEN, .SQLITE_NOMEM, .SQLITE_PROTOCOL,
]

extension ShareSyncError {
    /// The error of a write that found the disk (or the database's page limit) full.
    static func diskFull(path: String, what: String, _ detail: String) -> ShareSyncError {
        ShareSyncError(
            .quotaExceeded,
            "the disk holding \(path) is full: the \(what) was rolled back and nothing of it was saved; free some space "
                + "and it is retried (SQLite: \(detail))",
            rule: .diskFull)
    }
}

/// Opens a database file in WAL mode whose writes are on the disk when they commit (SQLite's
/// `synchronous = FULL`: the WAL is synced before each commit returns and before readers see it).
/// GRDB's `DatabasePool` sets `synchronous = NORMAL` when it turns WAL on, which syncs only at
/// checkpoints: a power loss or a crash of the host could then take back commits that were already
/// acknowledged, answered or pushed. For the owner's database that would lose saves and reuse
/// sequence numbers that participants already hold tokens past (they would skip what came next).
/// Set after the pool opens, on its one writing connection: `prepareDatabase` runs before GRDB's
/// WAL set-up, which would override it.
func openDurablePool(path: String, configuration: Configuration) throws -> DatabasePool {
    let pool = try DatabasePool(path: path, configuration: configuration)
    try pool.writeWithoutTransaction { try $0.execute(sql: "PRAGMA synchronous = FULL") }
    return pool
}

/// Creates `path` (if it does not exist) with mode 0600 before SQLite opens it, so the database is
/// never readable by others, not even briefly; SQLite gives the -wal and -shm files the mode of the
/// database file. An existing file is set to 0600.
func createPrivateFile(_ path: String, what: String) throws(ShareSyncError) {
    let fd = open(path, O_CREAT | O_RDWR, 0o600)
    guard fd >= 0 else {
        throw ShareSyncError(.internalError, "cannot create \(what) \(path): \(String(cString: strerror(errno)))")
    }
    close(fd)
    chmod(path, 0o600)
}

/// Creates `path`, which must not exist, with mode 0600: `invalidArguments` naming it (or `shownAs`,
/// the name the caller asked for when `path` is a temporary one beside it) otherwise.
func createNewPrivateFile(_ path: String, what: String, shownAs: String? = nil) throws(ShareSyncError) {
    let fd = open(path, O_CREAT | O_EXCL | O_RDWR, 0o600)
    guard fd >= 0 else {
        let reason = errno == EEXIST ? "the file exists; name a new one" : String(cString: strerror(errno))
        throw ShareSyncError(.invalidArguments, "cannot write \(what) to \(shownAs ?? path): \(reason)")
    }
    close(fd)
}

/// Writes a copy of the database `writer` holds, as it is now, to a new file at `path` (mode 0600): one
/// SQLite file (no `-wal`), written under another name beside it (`path.partial-…`), synced, then
/// linked to `path`, so that a file at `path` is always a whole copy. The copy is made with the writer
/// held (reads go on, writes wait), and `underWriter` runs then too, after the copy. Returns the
/// copy's size. A file at `path`, the database itself, and a name SQLite takes for a side file
/// (ending in `-journal`, `-wal`, `-shm`) are refused (`invalidArguments`).
func copyDatabase(
    of writer: any DatabaseWriter, to path: String, underWriter: (Database) throws -> Void
) throws(ShareSyncError) -> Int {
    func refused(_ reason: String) -> ShareSyncError {
        ShareSyncError(.invalidArguments, "cannot write the copy to \(path): \(reason)")
    }
    let exists = "the file exists; name a new one"
    if path == writer.path { throw refused("it is the database itself") }
    // SQLite takes a file named like a database's journal or WAL for one: it replays or deletes it
    // when that database opens (the replica's, say).
    if let suffix = ["-journal", "-wal", "-shm", "-wal2"].first(where: { path.hasSuffix($0) }) {
        throw refused("a name ending in \(suffix) is SQLite's for a database's side file, which it may replay or delete; name the copy otherwise")
    }
    // Refused at once rather than after the copy (linking it there refuses it again, atomically).
    var existing = stat()
    if lstat(path, &existing) == 0 { throw refused(exists) }
    let partial = path + ".partial-" + String(UInt32.random(in: 0...UInt32.max), radix: 16)
    var created = false
    do {
        try createNewPrivateFile(partial, what: "the copy", shownAs: path)
        created = true
        let copy = try DatabaseQueue(path: partial)
        try writer.writeWithoutTransaction { db in
            try copy.writeWithoutTransaction { destination in
                try db.backup(to: destination)
                // One file, whole once synced: no WAL to lose beside it.
                try destination.execute(sql: "PRAGMA journal_mode = DELETE")
            }
            try underWriter(db)
        }
        try copy.close()
        // The copy appears at `path` whole, or not at all; an existing file is never replaced.
        guard link(partial, path) == 0 else { throw refused(errno == EEXIST ? exists : String(cString: strerror(errno))) }
        unlink(partial)
        syncDirectory(of: path)
    } catch {
        if created {
            for suffix in ["", "-wal", "-shm", "-journal"] { unlink(partial + suffix) }
        }
        switch error {
        case let error as ShareSyncError: throw error
        case let error as DatabaseError where error.resultCode == .SQLITE_FULL:
            throw ShareSyncError(
                .quotaExceeded, "the disk holding \(path) is full: no copy was written (SQLite: \(error.message ?? "SQLITE_FULL"))",
                rule: .diskFull)
        default:
            throw ShareSyncError(.internalError, "cannot write the copy to \(path): \(error)")
        }
    }
    var info = stat()
    return stat(path, &info) == 0 ? Int(info.st_size) : 0
}

/// Checkpoints the whole WAL of a database in WAL mode into its file and empties it: the file alone
/// then holds every commit so far. Fails if a read holds part of the WAL past the busy timeout.
func checkpointWAL(of writer: any DatabaseWriter) throws(ShareSyncError) {
    guard let pool = writer as? DatabasePool else { return }
    try withStoreErrors("checkpoint", path: writer.path) {
        try pool.writeWithoutTransaction { db in
            let result = try db.checkpoint(.truncate)
            guard result.walFrameCount == 0 || result.walFrameCount == result.checkpointedFrameCount else {
                throw ShareSyncError(
                    .internalError, "\(result.walFrameCount - result.checkpointedFrameCount) WAL frames could not be checkpointed")
            }
        }
    }
}

/// Syncs the directory holding `path`, so that a file just created or renamed there survives a power
/// loss (SQLite syncs a file's contents, not the directory's entry for it). Best effort.
func syncDirectory(of path: String) {
    let directory = (path as NSString).deletingLastPathComponent
    let fd = open(directory.isEmpty ? "." : directory, O_RDONLY)
    guard fd >= 0 else { return }
    fsync(fd)
    close(fd)
}

extension Database {
    /// Runs one statement through GRDB's per-connection statement cache: parsed once per connection,
    /// not once per call. `execute(sql:)` parses (and runs GRDB's authorizer) every time, which was
    /// about a fifth of a participant's CPU while it applied pushes (`sharesync-bench suite --only fan-out`).
    func executeCached(_ sql: String, _ arguments: StatementArguments) throws {
        try cachedStatement(sql: sql).execute(arguments: arguments)
    }
}

extension DatabaseWriter {
    /// A read of the store. On a `DatabasePool` (a store in a file) it is GRDB's `read`: a reader
    /// connection of its own, in a transaction. On a `DatabaseQueue` (a store in memory) it runs on
    /// the one connection, which serializes it with every write, so it needs no transaction to be
    /// consistent. There GRDB's `read` would turn `PRAGMA query_only` on and off, and SQLite expires
    /// every prepared statement of a connection when a flag pragma changes: the next write then
    /// compiled each of its cached statements again (`sqlite3Reprepare` on every step, counted with a
    /// uprobe in `sharesync-bench suite --only fan-out`, whose participants keep their replicas in
    /// memory).
    ///
    /// Inside ``storeReadTogether(_:)`` of the same store, it is part of that one read.
    func storeRead<T>(_ body: (Database) throws -> T) throws -> T {
        if ReadingTogether.store == ObjectIdentifier(self) { return try unsafeReentrantRead(body) }
        if let queue = self as? DatabaseQueue { return try queue.unsafeRead(body) }
        return try read(body)
    }

    /// Runs `body` inside one read of the store: every ``storeRead(_:)`` of this store that `body`
    /// makes on this thread joins it, so they all see one snapshot and take a reader connection and
    /// begin a transaction once, not once each.
    func storeReadTogether<T>(_ body: () throws -> T) throws -> T {
        let store = ObjectIdentifier(self)
        if ReadingTogether.store == store { return try body() }
        return try storeRead { _ in try ReadingTogether.$store.withValue(store) { try body() } }
    }
}

/// The store whose reads join the read of ``DatabaseWriter/storeReadTogether(_:)`` running on this
/// thread (a task-local value, which synchronous code outside tasks keeps per thread).
private enum ReadingTogether {
    @TaskLocal static var store: ObjectIdentifier?
}
