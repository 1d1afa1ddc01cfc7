import NIOCore
import ShareSyncCore
import ShareSyncStore
import Synchronization

extension ParticipantSync {
    /// Something the sync engine did or saw, for a UI, the CLI's `watch`, or a test that waits
    /// without sleeping (see ``ParticipantSync/events()`` and ``ParticipantSync/waitUntil(timeout:_:)``).
    public enum Event: Sendable {
        /// A connection to the owner's node is open and authenticated.
        case connected(owner: String)
        /// The connection ended (or could not be opened); the engine tries again after `retryIn`.
        case disconnected(owner: String, error: ShareSyncError?, retryIn: Duration)
        /// A catch-up from the stored tokens finished; `zones` are the owner's zones now in the replica.
        case synced(owner: String, zones: [String])
        /// Changes to a zone were applied (a fetched page or a push): `changed` records saved, `deleted` removed.
        case zoneChanged(owner: String, zoneName: String, changed: Int, deleted: Int)
        /// A zone was fetched again from no token and replaced (after `changeTokenExpired`).
        case zoneReplaced(owner: String, zoneName: String, records: Int)
        /// A zone left the replica with all its records: the owner deleted it, stopped the share, or
        /// removed, blocked or let go of this participant.
        case zonePurged(owner: String, zoneName: String)
        /// A write was placed in the outbox (the owner was not reachable).
        case queued(owner: String, operationID: Int64)
        /// A write from the outbox got its answer from the owner (after conflict resolution) and left the outbox.
        case operationSent(owner: String, operationID: Int64, result: ModifyRecordsResult)
        /// A queued save met a newer record on the owner (`serverRecordChanged`); `resolved` says
        /// whether the merge hook gave a record to save instead (`false` without a hook). That merged
        /// save is then sent: how it ends comes later, as ``operationSent(owner:operationID:result:)``
        /// or, if the owner refuses it or it meets a newer record again, ``operationKept(owner:operation:)``.
        case conflict(owner: String, recordID: Record.ID, resolved: Bool)
        /// A write from the outbox was answered with a conflict or a refusal and stays in the outbox,
        /// no longer sent, until it is resolved: `operation.state` is ``OutboxOperation/State/conflict``
        /// (with the owner's records in `operation.serverRecords`) or ``OutboxOperation/State/refused``,
        /// `operation.error` says why. It holds only the items the owner did not accept.
        case operationKept(owner: String, operation: OutboxOperation)
        /// The owner's address changed: `announced` when the owner said so itself (its welcome or an
        /// `ownerAddress` push), else set by hand (``ParticipantSync/setOwnerAddress(owner:host:port:)``).
        /// The engine reconnects there from now on.
        case ownerAddressChanged(owner: String, host: String, port: Int, announced: Bool)
        /// A catch-up or a push left nothing of the owner's in the replica (no zone, no queued write, no
        /// leave to tell it): the last of its shares was left, stopped or deleted, or this participant removed.
        /// The engine forgot the owner and no longer connects to it; accepting one of its shares again
        /// brings it back.
        case ownerForgotten(owner: String)
        /// A failure the engine handled (an outbox operation refused, a refused page); sync goes on.
        case error(owner: String?, ShareSyncError)
    }

    /// Where an owner's link stands.
    public enum LinkStatus: Sendable, Hashable {
        /// Opening a connection.
        case connecting
        /// Connected: sending the outbox, fetching changes since the stored tokens.
        case syncing
        /// Caught up and subscribed: changes arrive as pushes.
        case following
        /// Disconnected; waiting before the next attempt (capped exponential backoff).
        case waitingToReconnect
        /// Stopped (``ParticipantSync/stop()``, or the owner was forgotten: ``Event/ownerForgotten(owner:)``).
        case stopped
    }
}

/// Fans events out to every subscriber and wakes every ``ParticipantSync/waitUntil(timeout:_:)``.
final class ParticipantEventHub: Sendable {
    private struct State {
        var subscribers: [UInt64: AsyncStream<ParticipantSync.Event>.Continuation] = [:]
        var watchers: [UInt64: ParticipantWakeup] = [:]
        var nextID: UInt64 = 0
        var finished = false
    }

    private let state = Mutex(State())
    private let received = Atomic<Int>(0)

    /// The number of record changes (saves and deletions) received from owners since the engine started.
    var recordsReceived: Int { received.load(ordering: .relaxed) }

    func countReceived(_ n: Int) {
        received.add(n, ordering: .relaxed)
    }

    func emit(_ event: ParticipantSync.Event) {
        let (subscribers, watchers) = state.withLock { (Array($0.subscribers.values), Array($0.watchers.values)) }
        for subscriber in subscribers { subscriber.yield(event) }
        for watcher in watchers { watcher.signal() }
    }

    /// Wakes the waiters without an event (a status change).
    func notifyWatchers() {
        for watcher in state.withLock({ Array($0.watchers.values) }) { watcher.signal() }
    }

    func stream() -> AsyncStream<ParticipantSync.Event> {
        let (stream, continuation) = AsyncStream<ParticipantSync.Event>.makeStream()
        let id = state.withLock { s -> UInt64? in
            guard !s.finished else { return nil }
            s.nextID += 1
            s.subscribers[s.nextID] = continuation
            return s.nextID
        }
        guard let id else {
            continuation.finish()
            return stream
        }
        continuation.onTermination = { [weak self] _ in
            _ = self?.state.withLock { $0.subscribers.removeValue(forKey: id) }
        }
        return stream
    }

    func waitUntil(timeout: Duration, _ condition: () throws -> Bool) async rethrows -> Bool {
        let wakeup = ParticipantWakeup()
        let id = state.withLock { s in
            s.nextID += 1
            s.watchers[s.nextID] = wakeup
            return s.nextID
        }
        defer { _ = state.withLock { $0.watchers.removeValue(forKey: id) } }
        // One deadline for every wait, so that they share one timer (``ParticipantWakeup/wait(until:)``).
        let deadline = NIODeadline.now() + TimeAmount(timeout)
        while true {
            if try condition() { return true }
            if NIODeadline.now() >= deadline || Task.isCancelled { return false }
            await wakeup.wait(until: deadline)
        }
    }

    func finish() {
        let subscribers = state.withLock { s in
            s.finished = true
            defer { s.subscribers = [:] }
            return Array(s.subscribers.values)
        }
        for subscriber in subscribers { subscriber.finish() }
        notifyWatchers()
    }
}
