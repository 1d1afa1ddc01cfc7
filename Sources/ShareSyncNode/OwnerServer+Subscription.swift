import Foundation
import Logging
import NIOCore
import NIOPosix
import ShareSyncCore
import ShareSyncStore
import ShareSyncWire
import Synchronization

/// A connection's subscription to its caller's view: after each commit it computes the changes since
/// its cursor and pushes them, then advances the cursor. Work runs serially on the thread pool;
/// wake-ups that arrive while it runs are coalesced into one more pass.
final class Subscription: Sendable {
    private struct State {
        var cursor: ServerChangeToken
        var running = false
        var pending = false
        var cancelled = false
        var observerID: UInt64?
    }

    private let executor: RequestExecutor
    private let channel: any Channel
    private let threadPool: NIOThreadPool
    private let logger: Logger
    private let state: Mutex<State>

    init(executor: RequestExecutor, cursor: ServerChangeToken, channel: any Channel, threadPool: NIOThreadPool, logger: Logger) {
        self.executor = executor
        self.channel = channel
        self.threadPool = threadPool
        self.logger = logger
        self.state = Mutex(State(cursor: cursor))
    }

    /// Starts observing commits, and checks once for changes already past the cursor.
    func begin() {
        let id = executor.database.addCommitObserver { [weak self] in self?.wake() }
        let cancelled = state.withLock { s in
            s.observerID = id
            return s.cancelled
        }
        if cancelled { executor.database.removeCommitObserver(id) }
        wake()
    }

    /// Stops pushing.
    func cancel() {
        let id = state.withLock { s in
            s.cancelled = true
            defer { s.observerID = nil }
            return s.observerID
        }
        if let id { executor.database.removeCommitObserver(id) }
    }

    /// Asks for a pass; if one runs, asks for another after it.
    func wake() {
        let start = state.withLock { s -> Bool in
            guard !s.cancelled else { return false }
            if s.running {
                s.pending = true
                return false
            }
            s.running = true
            return true
        }
        if start {
            threadPool.submit { [self] poolState in
                guard case .active = poolState else { return self.stop() }
                self.run()
            }
        }
    }

    private func run() {
        while true {
            let cursor = state.withLock { s in
                s.pending = false
                return s.cursor
            }
            do {
                if let push = try executor.changes(since: cursor) {
                    let payload = try MessageCoding.encode(push)
                    guard channel.isActive else { return stop() }
                    channel.writeAndFlush(payload, promise: nil)
                    state.withLock { $0.cursor = push.token }
                }
            } catch {
                logger.warning("push failed", metadata: ["error": "\(error)"])
                if error.code == .changeTokenExpired {
                    // The history moved past the cursor: tell the client and stop; it fetches from nil.
                    let payload = try? MessageCoding.encode(ErrorResponse(id: nil, error))
                    if let payload { channel.writeAndFlush(payload, promise: nil) }
                    cancel()
                    return stop()
                }
            }
            let again = state.withLock { s -> Bool in
                if s.pending && !s.cancelled { return true }
                s.running = false
                return false
            }
            if !again { return }
        }
    }

    private func stop() {
        state.withLock { $0.running = false }
    }
}
