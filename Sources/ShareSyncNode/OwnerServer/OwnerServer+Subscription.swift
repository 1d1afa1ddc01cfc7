import Foundation
import Logging
import NIOCore
import NIOPosix
import ShareSyncCore
import ShareSyncStore
import ShareSyncWire
import Synchronization

/// A connection's subscription to its caller's view: after each commit it computes the changes since
/// its cursor and pushes them. Passes run serially on the thread pool; wake-ups that arrive while one
/// runs are coalesced into one more pass.
///
/// The cursor moves only once a push has been written to the socket, and the next pass starts only
/// then: at most one push per subscriber is held in memory, so a subscriber that stops reading slows
/// its own pushes, not the owner. A push that cannot be encoded or written, or that waits longer than
/// `writeTimeout` to be written, closes the connection (logged); the client resumes from its last
/// stored token, so no change is ever skipped.
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
    private let writeTimeout: TimeAmount
    private let logger: Logger
    private let state: Mutex<State>

    init(
        executor: RequestExecutor, cursor: ServerChangeToken, channel: any Channel, threadPool: NIOThreadPool,
        writeTimeout: TimeAmount, logger: Logger
    ) {
        self.executor = executor
        self.channel = channel
        self.threadPool = threadPool
        self.writeTimeout = writeTimeout
        self.logger = logger
        self.state = Mutex(State(cursor: cursor))
    }

    /// The position up to which pushes have been written.
    var cursor: ServerChangeToken { state.withLock { $0.cursor } }

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

    /// Asks for a pass; if one runs (or its push is being written), asks for another after it.
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
        if start { submit() }
    }

    private func submit() {
        threadPool.submit { [self] poolState in
            guard case .active = poolState else { return self.stop() }
            self.run()
        }
    }

    /// One pass: compute the push since the cursor and write it; the pass ends when the write has
    /// completed (``written(_:push:)``), or at once if there is nothing to push.
    private func run() {
        let cursor = state.withLock { s in
            s.pending = false
            return s.cursor
        }
        let push: ChangesPush?
        do {
            push = try executor.changes(since: cursor)
        } catch {
            if error.code == .changeTokenExpired {
                // The history moved past the cursor: tell the client and stop; it fetches from nil.
                logger.notice("subscription token expired", metadata: ["error": "\(error)"])
                let payload = try? MessageCoding.encode(ErrorResponse(id: nil, error))
                if let payload { channel.writeAndFlush(payload, promise: nil) }
                cancel()
                return stop()
            }
            // The next commit wakes the subscription again; the cursor has not moved.
            logger.warning("push failed", metadata: ["error": "\(error)"])
            return passEnded()
        }
        guard let push else { return passEnded() }
        let payload: ByteBuffer
        do {
            payload = try MessageCoding.encode(push)
        } catch {
            return abandon("the push could not be encoded: \(error)")
        }
        guard channel.isActive else { return stop() }
        let channel = self.channel
        let timeout = writeTimeout
        let deadline = channel.eventLoop.scheduleTask(in: timeout) { [self] in
            self.abandon("the subscriber read nothing for \(timeout) while a push waited to be written")
        }
        channel.writeAndFlush(payload).whenComplete { [self] result in
            deadline.cancel()
            switch result {
            case .success:
                self.state.withLock { $0.cursor = push.token }
                self.passEnded()
            case .failure(let error):
                self.abandon("the push could not be written: \(error)")
            }
        }
    }

    /// Runs another pass if a wake-up came meanwhile.
    private func passEnded() {
        let again = state.withLock { s -> Bool in
            if s.pending && !s.cancelled { return true }
            s.running = false
            return false
        }
        if again { submit() }
    }

    /// Closes the connection without moving the cursor: the client resumes from its stored token.
    private func abandon(_ reason: String) {
        let wasCancelled = state.withLock { $0.cancelled }
        cancel()
        stop()
        guard !wasCancelled, channel.isActive else { return }
        logger.error("closing the connection: \(reason); the client resumes from its last token")
        channel.close(promise: nil)
    }

    private func stop() {
        state.withLock { $0.running = false }
    }
}
