import NIOPosix
import ShareSyncCore

/// Threads of its own for the replica's SQLite transactions, off Swift's cooperative pool (issue 15).
///
/// Applying a page of 400 records, or a push, is a transaction of a few milliseconds; run directly in
/// async code it would hold one of the cooperative pool's threads (two on a 2-core machine) for that
/// long, stalling every other task of the process meanwhile. The engine awaits these calls one at a
/// time, so pages and pushes are still applied in order.
enum StoreThreads {
    /// Two threads: one engine writing while another reads (each replica serializes its own writes).
    static let pool: NIOThreadPool = {
        let pool = NIOThreadPool(numberOfThreads: 2)
        pool.start()
        return pool
    }()

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
