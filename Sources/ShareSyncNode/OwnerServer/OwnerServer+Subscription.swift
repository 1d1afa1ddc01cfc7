import Foundation
import Logging
import NIOCore
import ShareSyncCore
import ShareSyncStore
import ShareSyncWire

/// A connection's subscription to its caller's view, run as a child task of the connection: after
/// each commit it computes the changes since its cursor (on the server's thread pool, once for all of
/// the caller's connections at that cursor: ``PushCache``) and pushes them.
/// Wake-ups that come while a pass runs are coalesced into one more pass.
///
/// The cursor moves only once a push has been written (the channel's outbound buffer is back under its
/// low watermark), and the next pass starts only then: at most one push per subscriber waits in
/// memory, and a subscriber that stops reading slows its own pushes, not the owner. A push that
/// cannot be encoded, is over the frame limit, or waits longer than `pushWriteTimeout` to be written
/// closes the connection (logged); the client resumes from its last stored token, so no change is
/// ever skipped.
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
            try await write(payload, to: outbound, within: connection.server.configuration.pushWriteTimeout, connection: connection, logger: logger)
            ShareSyncMetrics.pushSent()
            let states = connection.server.syncStates
            let caller = executor.caller.userRecordName
            states.servedDatabaseChanges(caller)
            for zone in push.zoneChanges { states.served(caller, zoneName: zone.zoneName, token: zone.token) }
            cursor = push.token
        }
    }

    /// Writes a push and waits until the channel has taken it (its outbound buffer is back under the
    /// low watermark: the push is in the socket, save the last few kilobytes); if that takes longer
    /// than `timeout` (the subscriber reads nothing), closes the connection, and the write or the wait
    /// throws. The deadline is a timer on the channel's event loop, cancelled once the push is taken
    /// (a task group racing the write with a sleep cost two child tasks per push and subscriber).
    private static func write(
        _ payload: ByteBuffer, to outbound: ServerConnection.Outbound, within timeout: TimeAmount, connection: ServerConnection,
        logger: Logger
    ) async throws {
        let deadline = connection.channel.channel.eventLoop.scheduleTask(in: timeout) {
            abandon("the subscriber read nothing for \(timeout) while a push waited to be written", connection: connection, logger: logger)
        }
        defer { deadline.cancel() }
        try await outbound.write(payload)
        try await connection.writability.waitUntilWritable()
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
