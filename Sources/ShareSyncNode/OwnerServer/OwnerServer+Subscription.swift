import Foundation
import Logging
import NIOCore
import ShareSyncCore
import ShareSyncStore
import ShareSyncWire
import Synchronization

/// A connection's subscription to its caller's view, run as a child task of the connection: after
/// each commit it computes the changes since its cursor (on the server's thread pool, once for all of
/// the caller's connections at that cursor: ``PushCache``) and pushes them.
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
            start = try await connection.server.threadPool.runIfActive { try executor.subscriptionStart(token) }
        } catch {
            defer { shared.endRequest() }
            let error = error as? ShareSyncError ?? ShareSyncError(.serviceUnavailable, "the server is shutting down: \(error)")
            return try await connection.writeAnswer(executor.errorResponse(id: id, error), id: id, executor: executor, to: outbound)
        }
        guard let (wakes, wake) = shared.replaceSubscription() else { return shared.endRequest() }
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
            let answer = try MessageCoding.encode(Response(id: id, ok: SubscribeResult(token: start)))
            try await connection.writeAnswer(answer, id: id, executor: executor, to: outbound)
        }
        wake.yield()  // once now, for changes already past the cursor
        var cursor = start
        for await _ in wakes {
            let next: (push: SplicedChangesPush, payload: ByteBuffer)?
            let since = cursor
            do {
                let pushes = connection.server.pushes
                if let shared = pushes.finished(for: executor.caller, since: since, database: executor.database) {
                    // Another of the caller's connections read it already: no hop to the thread pool.
                    next = shared
                } else {
                    next = try await connection.server.threadPool.runIfActive { () throws -> (SplicedChangesPush, ByteBuffer)? in
                        // Read once for all of the caller's connections woken by the same commit.
                        try pushes.push(for: executor.caller, since: since, database: executor.database) {
                            guard let push = try executor.splicedChanges(since: since) else { return nil }
                            do {
                                return (push, try MessageCoding.encode(push))
                            } catch {
                                throw PushNotEncodable(error: error)
                            }
                        }
                    }
                }
            } catch let error as ShareSyncError where error.code == .changeTokenExpired {
                // The history moved past the cursor: tell the client and stop; it fetches from nil.
                logger.notice("subscription token expired", metadata: ["error": "\(error)"])
                return try await outbound.write(try MessageCoding.encode(ErrorResponse(id: nil, error)))
            } catch let error as ShareSyncError {
                // The next commit wakes the subscription again; the cursor has not moved.
                logger.warning("push failed", metadata: ["error": "\(error)"])
                continue
            } catch let error as PushNotEncodable {
                return abandon("the push could not be encoded: \(error.error)", connection: connection, logger: logger)
            } catch {
                return  // the thread pool stopped: the server is shutting down
            }
            guard let (push, payload) = next else { continue }
            let limit = connection.server.configuration.transport.limits.maximumFrameSize
            guard payload.readableBytes <= limit else {
                return abandon(
                    "the push is \(payload.readableBytes) bytes, over the frame limit (\(limit))", connection: connection, logger: logger)
            }
            deadline.begin()
            try await outbound.write(payload)
            try await connection.writability.waitUntilWritable()
            deadline.end()
            ShareSyncMetrics.pushSent()
            let states = connection.server.syncStates
            let caller = executor.caller.userRecordName
            states.servedDatabaseChanges(caller)
            for zone in push.zoneChanges { states.served(caller, zoneName: zone.zoneName, token: zone.token) }
            cursor = push.token
        }
    }

    private struct PushNotEncodable: Error {
        let error: any Error
    }

    /// Closes the connection without moving the cursor: the client resumes from its stored token.
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
