import NIOPosix
import ShareSyncCore

/// Threads of their own for SQLite work, off Swift's cooperative pool (issue 15).
///
/// A transaction of a few milliseconds (a page of 400 records, a push, a `record import` batch) run
/// directly in async code would hold one of the cooperative pool's threads (two on a 2-core machine)
/// for that long, stalling every other task of the process meanwhile. So the tasks that touch a
/// database prefer ``executor``: each owner's link in the sync engine, and each control request. Their
/// SQLite calls then run on these threads, and their awaits let other work in.
enum StoreThreads {
    /// Four threads: a link applying a page while control requests read and write.
    static let pool: NIOThreadPool = {
        let pool = NIOThreadPool(numberOfThreads: 4)
        pool.start()
        return pool
    }()

    /// The executor that runs tasks on these threads.
    static let executor = ThreadPoolTaskExecutor(pool)

    /// Runs `body` on a store thread and returns its result; its error comes through as it was thrown.
    static func run<T: Sendable>(_ body: @escaping @Sendable () throws(ShareSyncError) -> T) async throws(ShareSyncError) -> T {
        do {
            return try await pool.runIfActive { try body() }
        } catch let error as ShareSyncError {
            throw error
        } catch {
            throw ShareSyncError(.internalError, "the store's threads could not run the write: \(error)")
        }
    }
}

/// Runs tasks on a thread pool's threads (see ``StoreThreads``).
final class ThreadPoolTaskExecutor: TaskExecutor {
    private let pool: NIOThreadPool

    init(_ pool: NIOThreadPool) { self.pool = pool }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        // Run whatever the pool's state: a job that never ran would leave its task waiting forever.
        pool.submit { _ in job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}
