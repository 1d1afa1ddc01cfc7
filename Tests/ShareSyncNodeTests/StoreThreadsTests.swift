import Foundation
import ShareSyncCore
import Testing

@testable import ShareSyncNode

#if canImport(Glibc)
import Glibc
#endif

/// SQLite work runs on the store's threads, and a task already there (a link applying a push, a
/// control request) runs it in place instead of handing it to another store thread.
@Suite("Store threads")
struct StoreThreadsTests {
    @TaskLocal static var caller: String?

    @Test("from a task on the store's threads, the work runs in that task, on its thread")
    func runsInPlaceOnAStoreThread() async throws {
        let (caller, worker, seen) = try await Task(executorPreference: StoreThreads.executor) {
            () async throws -> (pthread_t, pthread_t, String?) in
            #expect(StoreThreads.isCurrent)
            #expect(Self.threadName().hasPrefix("TP-#"))
            let caller = pthread_self()
            // A task-local value is seen by work run in the calling task, not by a job of the pool.
            let (worker, seen) = try await Self.$caller.withValue("link") {
                try await StoreThreads.run { () throws(ShareSyncError) in (pthread_self(), Self.caller) }
            }
            return (caller, worker, seen)
        }.value
        #expect(seen == "link", "the work was handed to another store thread")
        #expect(pthread_equal(caller, worker) != 0)
    }

    @Test("from a task elsewhere, the work goes to a store thread")
    func hopsFromElsewhere() async throws {
        #expect(!StoreThreads.isCurrent)
        #expect(!Self.threadName().hasPrefix("TP-#"))
        let worker = try await StoreThreads.run { () throws(ShareSyncError) in Self.threadName() }
        #expect(worker.hasPrefix("TP-#"), "ran on \(worker), not on a thread of the store's pool")
    }

    /// The calling thread's name (NIOThreadPool names its threads `TP-#n`).
    static func threadName() -> String {
        ((try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8)) ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
    }

    @Test("an error thrown by the work comes through as it was, in place or not")
    func errorsComeThrough() async throws {
        let refused = ShareSyncError(.permissionFailure, "not yours")
        await #expect(throws: ShareSyncError.self) { try await StoreThreads.run { () throws(ShareSyncError) in throw refused } }
        let inPlace = await Task(executorPreference: StoreThreads.executor) { () async -> (any Error)? in
            do {
                try await StoreThreads.run { () throws(ShareSyncError) in throw refused }
                return nil
            } catch {
                return error
            }
        }.value as? ShareSyncError
        #expect(inPlace?.code == .permissionFailure)
        #expect(inPlace?.message == "not yours")
    }
}
