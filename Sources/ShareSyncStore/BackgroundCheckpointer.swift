import Dispatch
import Foundation
import GRDB
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
/// before the WAL reaches SQLite's 1,000 pages unless writes come in bulk. SQLite's own automatic
/// checkpoint stays at ``backstopPages`` for those: with it at 10,000 pages the WAL of a
/// million-record import grew to tens of megabytes, and the node's next start (which reads the WAL)
/// went from 32 to 61 ms, and the 1M sync from 10.2 to 13.5 times the 100k one.
final class BackgroundCheckpointer: Sendable {
    /// The longest a commit waits before a checkpoint covers it.
    static let interval: DispatchTimeInterval = .milliseconds(50)
    /// The WAL size (in pages) at which a committing writer checkpoints itself: SQLite's default.
    static let backstopPages = 1_000

    private let path: String
    private let queue = DispatchQueue(label: "sharesync.checkpoint", qos: .utility)
    private let scheduled = Atomic<Bool>(false)
    /// The checkpointing connection, opened on the first checkpoint.
    private let connection = Mutex<DatabaseQueue?>(nil)

    /// A checkpointer for the database at `path`; call ``configure(_:)`` on the writer's
    /// configuration before opening it.
    init(path: String) {
        self.path = path
    }

    /// Raises the automatic checkpoint of the connections `configuration` opens to the backstop.
    static func configure(_ configuration: inout Configuration) {
        configuration.prepareDatabase { db in try db.execute(sql: "PRAGMA wal_autocheckpoint = \(backstopPages)") }
    }

    /// Notes a commit: a checkpoint runs within ``interval`` unless one is already due.
    func committed() {
        guard scheduled.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged else { return }
        queue.asyncAfter(deadline: .now() + Self.interval) { [self] in
            scheduled.store(false, ordering: .releasing)
            checkpoint()
        }
    }

    /// Runs one passive checkpoint now; returns the WAL's frames and how many are in the database
    /// file, or nil if it could not run (the next commit tries again).
    @discardableResult
    func checkpoint() -> (walFrames: Int, checkpointed: Int)? {
        connection.withLock { connection in
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
