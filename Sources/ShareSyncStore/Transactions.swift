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
func withStoreErrors<T>(_ what: String, _ body: () throws -> T) throws(ShareSyncError) -> T {
    do {
        return try body()
    } catch let error as ShareSyncError {
        throw error
    } catch {
        throw ShareSyncError(.internalError, "database \(what) failed: \(error)")
    }
}
