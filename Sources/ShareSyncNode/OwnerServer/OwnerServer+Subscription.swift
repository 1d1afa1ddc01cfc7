import Foundation
import Logging
import NIOCore
import ShareSyncCore
import ShareSyncStore
import ShareSyncWire
import Synchronization

/// A connection's subscription to its caller's view, run as a child task of the connection: after
/// each commit it computes the changes since its cursor (on the server's thread pool, once for all of
/// the caller's connections at that cursor, in one read transaction with other callers' pushes:
/// ``PushCache``) and pushes them.
/// Wake-ups that come while a pass runs are coalesced into one more pass.
///
/// The cursor moves only once a push has been written (the channel's outbound buffer is back under its
/// low watermark: the push is in the socket, save the last few kilobytes), and the next pass starts
/// only then: at most one push per subscriber waits in memory, and a subscriber that stops reading
/// slows its own pushes, not the owner. A push that cannot be encoded, is over the frame limit, or
/// waits longer than `pushWriteTimeout` to be written (``PushDeadline``) closes the connection
/// (logged); the client resumes from its last stored token, so no change is ever skipped.
///
/// A push another of the caller's connections has already read (``PushCache``) is taken without
/// hopping to the thread pool.
enum SubscriptionPusher {
    /// Answers a `subscribe` (its in-flight count ends with the answer), then pushes until the
    /// connection ends or another `subscribe` replaces this one.
    static func start(
        id: Int, token: ServerChangeToken?, executor: RequestExecutor, connection: ServerConnection, shared: ConnectionShared,
        outbound: ServerConnection.Outbound, logger: Logger
    ) async throws {
        let start: ServerChangeToken
        do {
            guard let token = try await subscriptionStart(token, id: id, executor: executor, connection: connection, outbound: outbound) else {
                return shared.endRequest()  // refused, and told why
            }
            start = token
        } catch {
            shared.endRequest()
            throw error
        }
        guard let (wakes, wake, number) = shared.replaceSubscription() else { return shared.endRequest() }
        let database = executor.database
        // A commit during one of this connection's writes wakes it once that write is answered.
        let observer = database.addCommitObserver { if shared.commitObserved() { wake.yield() } }
        defer { database.removeCommitObserver(observer) }
        let deadline = PushDeadline(
            timeout: connection.server.configuration.pushWriteTimeout, eventLoop: connection.channel.channel.eventLoop
        ) { timeout in
            abandon("the subscriber read nothing for \(timeout) while a push waited to be written", connection: connection, logger: logger)
        }
        defer { deadline.stop() }
        do {
            defer { shared.endRequest() }
            try await answer(try subscribed(id: id, from: start), id: id, executor: executor, connection: connection, outbound: outbound)
        }
        wake.yield()  // once now, for changes already past the cursor
        var cursor = start
        for await _ in wakes {
            // Replaced (its stream finished but still held a wake-up): read and write nothing more. A
            // read it had already asked for is dropped before it is written, below. (Checking in the
            // read itself too needed two more parameters in `next`, whose frame every subscription's
            // task keeps: the 1,000-connection fan-out's owner went from 129 to 141 MB.)
            guard shared.isCurrentSubscription(number) else { return }
            let push: SplicedChangesPush
            let payload: ByteBuffer
            switch await next(since: cursor, executor: executor, connection: connection, logger: logger) {
            case .push(let next, let bytes):
                push = next
                payload = bytes
            case .nothing:
                continue
            case .expired(let error):
                // The history moved past the cursor: tell the client and stop; it fetches from nil.
                return try await send(error, to: outbound)
            case .stop:
                return
            }
            guard shared.isCurrentSubscription(number) else { return }
            deadline.begin()
            try await write(payload, connection: connection, outbound: outbound)
            deadline.end()
            cursor = served(push, caller: executor.caller, connection: connection)
        }
    }

    // The loop above suspends for as long as the connection lives, and a task keeps the largest
    // stack of async frames it ever had (the task allocator keeps its slabs): what does not need to
    // be in its frame is in the functions below, so that each connection holds less. With all of it
    // inline, `start`'s frame was 10.5 KB (its async function pointer's context size).

    /// The answer to the `subscribe`: the token the subscription starts from.
    @inline(never)
    private static func subscribed(id: Int, from start: ServerChangeToken) throws -> ByteBuffer {
        try MessageCoding.encode(Response(id: id, ok: SubscribeResult(token: start)))
    }

    @inline(never)
    private static func answer(
        _ payload: ByteBuffer, id: Int, executor: RequestExecutor, connection: ServerConnection, outbound: ServerConnection.Outbound
    ) async throws {
        try await connection.writeAnswer(payload, id: id, executor: executor, to: outbound)
    }

    /// Hands `payload` to the channel.
    @inline(never)
    private static func send(_ payload: ByteBuffer, to outbound: ServerConnection.Outbound) async throws {
        try await outbound.write(payload)
    }

    /// Writes `payload` and returns once the channel has taken it (its outbound buffer is back under
    /// the low watermark).
    @inline(never)
    private static func write(_ payload: ByteBuffer, connection: ServerConnection, outbound: ServerConnection.Outbound) async throws {
        try await outbound.write(payload)
        try await connection.writability.waitUntilWritable()
    }

    /// The token a subscription starts from, read on the thread pool; nil if it cannot start (the
    /// refusal was written).
    @inline(never)
    private static func subscriptionStart(
        _ token: ServerChangeToken?, id: Int, executor: RequestExecutor, connection: ServerConnection, outbound: ServerConnection.Outbound
    ) async throws -> ServerChangeToken? {
        do {
            return try await connection.server.threadPool.runIfActive { try executor.subscriptionStart(token) }
        } catch {
            try await answer(refusal(error, id: id, executor: executor), id: id, executor: executor, connection: connection, outbound: outbound)
            return nil
        }
    }

    @inline(never)
    private static func refusal(_ error: any Error, id: Int, executor: RequestExecutor) -> ByteBuffer {
        executor.errorResponse(
            id: id, error as? ShareSyncError ?? ShareSyncError(.serviceUnavailable, "the server is shutting down: \(error)"))
    }

    private enum Next {
        case push(SplicedChangesPush, ByteBuffer)
        /// Nothing to push now.
        case nothing
        /// The cursor expired: this error is written and the subscription ends.
        case expired(ByteBuffer)
        /// The subscription ends (the connection is closed, or the server is shutting down).
        case stop
    }

    /// The push from `since`: another of the caller's connections' (``PushCache``), else read on the thread pool.
    @inline(never)
    private static func next(
        since: ServerChangeToken, executor: RequestExecutor, connection: ServerConnection, logger: Logger
    ) async -> Next {
        let pushes = connection.server.pushes
        let next: (push: SplicedChangesPush, payload: ByteBuffer)?
        if let shared = pushes.finished(for: executor.caller, since: since, database: executor.database) {
            // Another of the caller's connections read it already: no hop to the thread pool.
            next = shared
        } else {
            let read: @Sendable () throws -> (SplicedChangesPush, ByteBuffer)? = { [registry = connection.server.registry] in
                try registry.injectedPushReadFailure()
                guard let push = try executor.splicedChanges(since: since) else { return nil }
                do {
                    return (push, try MessageCoding.encode(push))
                } catch {
                    throw PushNotEncodable(error: error)
                }
            }
            do {
                // Read once for all of the caller's connections woken by the same commit, in one read
                // transaction with the other callers' pushes.
                next = try await pushes.batchedPush(
                    for: executor.caller, since: since, database: executor.database, threadPool: connection.server.threadPool, read: read)
            } catch let error as ShareSyncError where error.code != .changeTokenExpired {
                // A store failure (a busy or failing disk) may pass: read once more, alone, before
                // closing the connection. A batch's transaction that could not begin fails every
                // push in it, and closing all of those subscribers for one bad moment is harsh.
                logger.warning("a push could not be read; trying once more", metadata: ["error": "\(error)"])
                do {
                    next = try await connection.server.threadPool.runIfActive { try read() }
                } catch {
                    return failed(error, connection: connection, logger: logger)
                }
            } catch {
                return failed(error, connection: connection, logger: logger)
            }
        }
        guard let (push, payload) = next else { return .nothing }
        let limit = connection.server.configuration.transport.limits.maximumFrameSize
        guard payload.readableBytes <= limit else {
            abandon("the push is \(payload.readableBytes) bytes, over the frame limit (\(limit))", connection: connection, logger: logger)
            return .stop
        }
        return .push(push, payload)
    }

    /// What a failed read of a push means for the subscription.
    @inline(never)
    private static func failed(_ error: any Error, connection: ServerConnection, logger: Logger) -> Next {
        switch error {
        case let error as ShareSyncError where error.code == .changeTokenExpired:
            logger.notice("subscription token expired", metadata: ["error": "\(error)"])
            guard let payload = try? MessageCoding.encode(ErrorResponse(id: nil, error)) else { return .stop }
            return .expired(payload)
        case let error as ShareSyncError:
            // The connection closes, and the client catches up from its stored tokens when it comes
            // back (and hears the error itself if the read keeps failing). Before, the subscription
            // waited for the next commit: on a quiet owner a committed change was never delivered
            // while the participant showed itself in sync.
            abandon("a push could not be read: \(error)", connection: connection, logger: logger)
            return .stop
        case let error as PushNotEncodable:
            abandon("the push could not be encoded: \(error.error)", connection: connection, logger: logger)
            return .stop
        default:
            return .stop  // the thread pool stopped: the server is shutting down
        }
    }

    /// Notes a written push (metrics, what the caller was served); the cursor it moves to.
    @inline(never)
    private static func served(_ push: SplicedChangesPush, caller: Caller, connection: ServerConnection) -> ServerChangeToken {
        ShareSyncMetrics.pushSent()
        let states = connection.server.syncStates
        states.servedDatabaseChanges(caller.userRecordName)
        for zone in push.zoneChanges { states.served(caller.userRecordName, zoneName: zone.zoneName, token: zone.token) }
        return push.token
    }

    private struct PushNotEncodable: Error {
        let error: any Error
    }


    /// Closes the connection without moving the cursor: the client resumes from its stored token.
    @inline(never)
    private static func abandon(_ reason: String, connection: ServerConnection, logger: Logger) {
        let channel = connection.channel.channel
        guard channel.isActive else { return }
        logger.error("closing the connection: \(reason); the client resumes from its last token")
        channel.close(promise: nil)
    }
}

/// The deadline of the push a subscription is writing: if one push waits longer than `timeout` to be
/// written (the subscriber reads nothing), `expired` runs once, on the channel's event loop, and the
/// connection is closed there; the write or the wait then throws.
///
/// One timer per subscription rather than one per push: scheduling and cancelling a timer for every
/// push, from the subscription's task, cost two hops onto the event loop and a scan of its timer heap
/// per push and connection (3-4 % of an owner's CPU with 1,000 subscribers, perf). Here a push only
/// notes when it began and ended; the timer is armed when a push begins and none is armed, and when
/// it fires it expires the push in flight only if that push began `timeout` ago, else it is armed
/// again for that push's own deadline (or not at all if no push is in flight). So each push gets
/// exactly its `timeout`, as before, and a subscriber that keeps reading costs one timer per
/// `timeout`. Measured with the bench's 1,000-connection fan-out, 2 interleaved pairs, together with
/// ``PushCache/finished(for:since:database:)``: the owner's CPU per change 96.8/102.0 → 90.4/93.0 ms,
/// the last participant at p50 131/137 → 119/124 ms; no difference at 100 connections (6 pairs).
final class PushDeadline: Sendable {
    private struct State {
        /// When the push in flight began; nil between pushes.
        var pushBegan: NIODeadline?
        /// Whether a timer is scheduled or about to be (``timer`` is set once it is).
        var armed = false
        var timer: Scheduled<Void>?
        var stopped = false
    }

    private let timeout: TimeAmount
    private let eventLoop: any EventLoop
    private let expired: @Sendable (TimeAmount) -> Void
    private let state = Mutex(State())

    init(timeout: TimeAmount, eventLoop: any EventLoop, expired: @escaping @Sendable (TimeAmount) -> Void) {
        self.timeout = timeout
        self.eventLoop = eventLoop
        self.expired = expired
    }

    /// A push begins to be written now.
    func begin() {
        let now = eventLoop.now
        let arm = state.withLock { state -> Bool in
            state.pushBegan = now
            guard !state.armed, !state.stopped else { return false }
            state.armed = true
            return true
        }
        if arm { schedule(at: now + timeout) }
    }

    /// The push has been written.
    func end() {
        state.withLock { $0.pushBegan = nil }
    }

    /// The subscription ended: no push will expire.
    func stop() {
        let timer = state.withLock { state -> Scheduled<Void>? in
            state.stopped = true
            defer { state.timer = nil }
            return state.timer
        }
        timer?.cancel()
    }

    private func schedule(at due: NIODeadline) {
        let scheduled = eventLoop.scheduleTask(deadline: due) { [self] in fire() }
        let cancelAtOnce = state.withLock { state -> Bool in
            if state.stopped { return true }
            state.timer = scheduled
            return false
        }
        if cancelAtOnce { scheduled.cancel() }
    }

    private func fire() {
        let now = eventLoop.now
        enum Next { case nothing, expire, rearm(NIODeadline) }
        let next = state.withLock { state -> Next in
            guard !state.stopped else { return .nothing }
            guard let began = state.pushBegan else {
                state.armed = false
                state.timer = nil
                return .nothing
            }
            if now >= began + timeout {
                state.armed = false
                state.timer = nil
                return .expire
            }
            return .rearm(began + timeout)
        }
        switch next {
        case .nothing: break
        case .expire: expired(timeout)
        case .rearm(let due): schedule(at: due)
        }
    }
}
