import Dispatch
import Foundation
import GRDB
import GRDBSQLite
import Synchronization

/// Runs the WAL checkpoints of a database file on a connection and a queue of their own, so that no
/// commit waits for one.
///
/// SQLite's automatic checkpoint runs inside the commit that takes the WAL past 1,000 pages: that
/// commit copies the pages back into the database file and syncs both files. Through the daemon, 1 in
/// about 70 one-record saves took that turn, and it made the p99 of a save 11.7 ms against a p50 of
/// 0.73 ms (`sharesync-bench control`, zone shared with a connected participant); with checkpoints
/// moved here the p99 was 1.3 ms. Here a passive checkpoint (it never blocks the writer or readers,
/// and copies what no reader still needs) runs at most every ``interval`` after commits, long
/// before the WAL reaches 1,000 pages unless writes come in bulk.
///
/// Bulk writes (a page of an initial sync every few milliseconds, an import) fill the WAL faster
/// than that: a commit of at least ``bulkCommitPages`` that leaves it past ``soonPages`` asks for a
/// checkpoint at once (the writer's WAL hook, ``configure(_:)``). Before, the writer itself
/// checkpointed every tenth page of an initial sync, 11-22 ms each: 0.4 s of a 1 s sync of 100k
/// records, traced page by page. A commit that still leaves more than ``backstopPages`` checkpoints
/// itself, as SQLite's automatic checkpoint would:
/// with that at 10,000 pages the WAL of a million-record import grew to tens of megabytes, and the
/// node's next start (which reads the WAL) went from 32 to 61 ms, and the 1M sync from 10.2 to 13.5
/// times the 100k one. (A shorter ``interval`` instead, 5 ms, cost single saves in a shared zone
/// 130 µs at p50: a checkpoint after nearly every save. Asking at once after any commit past
/// ``soonPages`` cost single saves about 25 µs: small commits wait for ``interval`` as before.)
final class BackgroundCheckpointer: Sendable {
    /// The longest a commit waits before a checkpoint covers it.
    static let interval: DispatchTimeInterval = .milliseconds(50)
    /// The WAL size (in pages) from which a bulk commit asks for a checkpoint at once.
    static let soonPages: Int32 = 256
    /// The pages a commit adds to the WAL to count as bulk (a page of 400 records adds about 100; a
    /// one-record save a handful).
    static let bulkCommitPages: Int32 = 32
    /// The WAL size (in pages) at which a committing writer checkpoints itself: SQLite's default.
    static let backstopPages: Int32 = 1_000

    private let path: String
    private let queue = DispatchQueue(label: "sharesync.checkpoint", qos: .utility)
    private let scheduled = Atomic<Bool>(false)
    private let soonScheduled = Atomic<Bool>(false)
    /// How many times a commit asked for a checkpoint at once (tests read it).
    let soonRequests = Atomic<Int>(0)
    /// The checkpointing connection, opened on the first checkpoint.
    private let connection = Mutex<DatabaseQueue?>(nil)

    /// A checkpointer for the database at `path`; call ``configure(_:)`` on the writer's
    /// configuration before opening it.
    init(path: String) {
        self.path = path
    }

    /// Installs this checkpointer's WAL hook on the writing connection `configuration` opens (it
    /// replaces SQLite's automatic checkpoint, see ``walHook``).
    func configure(_ configuration: inout Configuration) {
        let signal = CheckpointSignal(self)
        configuration.prepareDatabase { db in
            guard !db.configuration.readonly else { return }
            // Retained for as long as the connection may commit: the hook has no way to release it. A few
            // bytes per database opened, and it holds the checkpointer weakly.
            sqlite3_wal_hook(db.sqliteConnection, walHook, Unmanaged.passRetained(signal).toOpaque())
        }
    }

    /// A bulk commit left the WAL past ``soonPages``: a checkpoint runs now unless one is already on its way.
    fileprivate func checkpointSoon() {
        soonRequests.add(1, ordering: .relaxed)
        guard soonScheduled.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged else { return }
        queue.async { [self] in
            soonScheduled.store(false, ordering: .releasing)
            checkpoint()
        }
    }

    /// Notes a commit: a checkpoint runs within ``interval`` unless one is already due.
    func committed() {
        guard scheduled.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged else { return }
        queue.asyncAfter(deadline: .now() + Self.interval) { [self] in
            scheduled.store(false, ordering: .releasing)
            checkpoint()
        }
    }

    /// Runs `body` while no background checkpoint runs or starts: tests use it to see what the
    /// writer's own checkpoint does. (Two checkpoints cannot run at once; the second does nothing.)
    func withBackgroundCheckpointsHeld(_ body: () throws -> Void) throws {
        queue.suspend()
        defer { queue.resume() }
        // Held for the whole of `body`: a checkpoint already running ends first, and one already taken
        // off the queue waits.
        try connection.withLock { _ in try body() }
    }

    /// Whether ``close()`` was called: no checkpoint runs any more.
    private let closed = Atomic<Bool>(false)

    /// Closes the checkpointing connection; checkpoints scheduled already do nothing (the database's
    /// files may be moved once it returns).
    func close() {
        closed.store(true, ordering: .releasing)
        connection.withLock { connection in
            try? connection?.close()
            connection = nil
        }
    }

    /// Runs one passive checkpoint now; returns the WAL's frames and how many are in the database
    /// file, or nil if it could not run (the next commit tries again).
    @discardableResult
    func checkpoint() -> (walFrames: Int, checkpointed: Int)? {
        connection.withLock { connection in
            guard !closed.load(ordering: .acquiring) else { return nil }
            do {
                if connection == nil {
                    var configuration = Configuration()
                    configuration.label = "checkpoint"
                    connection = try DatabaseQueue(path: path, configuration: configuration)
                }
                return try connection!.writeWithoutTransaction { db in
                    let result = try db.checkpoint(.passive)
                    return (result.walFrameCount, result.checkpointedFrameCount)
                }
            } catch {
                return nil
            }
        }
    }
}

/// What the WAL hook holds: the checkpointer, weakly (a database closed while a connection lingers
/// leaves nothing to call), and the WAL's size after the last commit. The reference is set once,
/// before any connection opens; weak loads are atomic.
private final class CheckpointSignal: @unchecked Sendable {
    weak var checkpointer: BackgroundCheckpointer?
    let lastPages = Atomic<Int32>(0)
    init(_ checkpointer: BackgroundCheckpointer) { self.checkpointer = checkpointer }
}

/// The writer's WAL hook, called after each commit with the WAL's size in pages: past
/// ``BackgroundCheckpointer/backstopPages`` it checkpoints in the commit, as SQLite's automatic
/// checkpoint does (`sqlite3WalDefaultHook`); past ``BackgroundCheckpointer/soonPages``, after a
/// commit of at least ``BackgroundCheckpointer/bulkCommitPages``, it asks the background
/// checkpointer to run now.
private func walHook(
    _ context: UnsafeMutableRawPointer?, _ db: OpaquePointer?, _ name: UnsafePointer<CChar>?, _ pages: Int32
) -> Int32 {
    guard let context else { return SQLITE_OK }
    let signal = Unmanaged<CheckpointSignal>.fromOpaque(context).takeUnretainedValue()
    let last = signal.lastPages.exchange(pages, ordering: .relaxed)
    let added = pages > last ? pages - last : pages  // smaller: the WAL started over
    if pages >= BackgroundCheckpointer.backstopPages {
        sqlite3_wal_checkpoint(db, name)
    } else if pages >= BackgroundCheckpointer.soonPages, added >= BackgroundCheckpointer.bulkCommitPages {
        signal.checkpointer?.checkpointSoon()
    }
    return SQLITE_OK
}
