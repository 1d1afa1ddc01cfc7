import Foundation
import NIOCore
import NIOPosix
import ShareSyncCore
import ShareSyncStore
import ShareSyncWire
import Synchronization

/// The push for one caller from one cursor, computed once while the database does not change and
/// shared by that caller's connections (a person's devices, which subscribe from the same token and
/// are woken by the same commits). Each connection's subscription used to read and encode the same
/// push for itself.
///
/// A push is reused only while ``PrivateDatabase/changeGeneration`` is what it was before the push
/// was read and still was after: no write began during the read or since, so it is what a read now
/// would give. A subscription woken by a commit always sees that commit's generation or a later one
/// (the database moves the generation before it tells observers), so it is never handed a push read
/// before the commit that woke it. A caller that arrives while the first is reading waits for it.
/// Finished pushes are kept until the next write, at most ``retainedBytes`` of them.
final class PushCache: Sendable {
    typealias Push = (push: SplicedChangesPush, payload: ByteBuffer)

    /// The most pushes one read transaction of ``batchedPush(for:since:database:threadPool:read:)``
    /// serves; the rest wait for the job's next transaction.
    ///
    /// Measured reason: uncapped, a commit's pushes to 1,000 connections went out in one burst, and
    /// the owner's peak RSS in the bench's 1,000-connection fan-out rose from 115 to 149-150 MB
    /// (target ≤ 150; the live heap did not grow: memory that connections had allocated but never
    /// touched became resident). Capped at 16 (or 4), 126.8 MB, and most of the CPU saved stays
    /// saved: consecutive transactions with no commit between them keep the reader's page cache.
    static let maximumBatch = 16

    /// How many bytes of finished pushes are kept for the caller's other connections.
    static let retainedBytes = 16 * 1024 * 1024

    /// What an entry costs against ``retainedBytes`` besides its push's payload and its key's cursor:
    /// an empty push (nothing changed since the cursor) is kept too, and without a cost of its own a
    /// caller subscribing from one token after another could make entries without bound until the
    /// next write.
    static let entryOverhead = 256

    private struct Key: Hashable {
        var caller: Caller
        var cursor: String
    }

    /// One read of a push, waited on by the connections that asked for it meanwhile.
    private final class Flight: @unchecked Sendable {
        private let condition = NSCondition()
        private var outcome: (push: Push?, reusable: Bool)?

        func finish(_ push: Push?, reusable: Bool) {
            condition.lock()
            outcome = (push, reusable)
            condition.broadcast()
            condition.unlock()
        }

        /// The outcome if the read is done, without waiting for it.
        var finished: (push: Push?, reusable: Bool)? {
            condition.lock()
            defer { condition.unlock() }
            return outcome
        }

        func wait() -> (push: Push?, reusable: Bool) {
            condition.lock()
            defer { condition.unlock() }
            while outcome == nil { condition.wait() }
            return outcome!
        }
    }

    private struct State {
        var generation: UInt64 = 0
        var flights: [Key: Flight] = [:]
        var bytes = 0
    }

    private let state = Mutex(State())

    /// Shared reads and reads made alone, for tests.
    let counts = Mutex((computed: 0, shared: 0))

    /// A push asked for with ``batchedPush(for:since:database:threadPool:read:)``, waiting for the batch job.
    private struct Pending: Sendable {
        let caller: Caller
        let cursor: ServerChangeToken
        let read: @Sendable () throws -> Push?
        let done: @Sendable (Result<Push?, any Error>) -> Void
    }

    /// The pushes waiting to be read, and whether a batch job is running (or about to).
    private let queue = Mutex<(pending: [Pending], running: Bool)>(([], false))

    /// How many read transactions the batch jobs opened, and how many pushes they served (tests).
    let batches = Mutex((transactions: 0, pushes: 0))

    /// How many pushes wait for a batch job to take them (tests).
    var waiting: Int { queue.withLock { $0.pending.count } }

    /// How many reads are kept for the caller's other connections (tests).
    var entries: Int { state.withLock { $0.flights.count } }

    /// The push for `caller` from `cursor`: another connection's, if it was read since the last write,
    /// else `read()`'s. An error of `read()` is thrown to its own caller only; the others read again.
    ///
    /// `readSince` is the generation read before the read transaction that `read()` joins began, if
    /// it joins one already open: its snapshot may be older than the generation now, and the push is
    /// kept for others only if no write began or ended since that one.
    func push(
        for caller: Caller, since cursor: ServerChangeToken, database: PrivateDatabase, readSince: UInt64? = nil,
        read: () throws -> Push?
    ) throws -> Push? {
        let generation = readSince ?? database.changeGeneration
        let key = Key(caller: caller, cursor: cursor.stringValue)
        let (flight, first) = state.withLock { state -> (Flight?, Bool) in
            if generation > state.generation {
                state = State(generation: generation)
            } else if generation < state.generation {
                return (nil, false)
            }
            if let flight = state.flights[key] { return (flight, false) }
            let flight = Flight()
            state.flights[key] = flight
            return (flight, true)
        }
        guard let flight else { return try readAlone(read) }  // this pass is older than the cache
        if !first {
            let (push, reusable) = flight.wait()
            guard reusable else { return try readAlone(read) }
            counts.withLock { $0.shared += 1 }
            return push
        }
        let push: Push?
        do {
            push = try readAlone(read)
        } catch {
            flight.finish(nil, reusable: false)
            forget(key, flight)
            throw error
        }
        let reusable = database.changeGeneration == generation
        flight.finish(push, reusable: reusable)
        let size = (push?.payload.readableBytes ?? 0) + key.cursor.utf8.count + Self.entryOverhead
        let keep = state.withLock { state -> Bool in
            guard reusable, state.generation == generation, state.bytes + size <= Self.retainedBytes else { return false }
            state.bytes += size
            return true
        }
        if !keep { forget(key, flight) }
        return push
    }

    /// The push for `caller` from `cursor` if another of its connections has read it since the last
    /// write and the read is done: what ``push(for:since:database:read:)`` would hand back without
    /// reading or waiting, so a connection can take it without leaving its event loop. `nil` when
    /// there is none (the push itself is `nil` when there were no changes to push).
    func finished(for caller: Caller, since cursor: ServerChangeToken, database: PrivateDatabase) -> Push?? {
        let generation = database.changeGeneration
        let key = Key(caller: caller, cursor: cursor.stringValue)
        guard let flight = state.withLock({ $0.generation == generation ? $0.flights[key] : nil }),
            let outcome = flight.finished, outcome.reusable
        else { return nil }
        counts.withLock { $0.shared += 1 }
        return .some(outcome.push)
    }

    /// ``push(for:since:database:read:)`` on `threadPool`, together with the other subscriptions that
    /// ask meanwhile: one job of the pool reads the pushes waiting, first asked first read, one after
    /// another in one read transaction of `database` (``PrivateDatabase/readTogether(_:)``), at most
    /// ``maximumBatch`` per transaction, until none waits.
    ///
    /// Every push a job reads comes from a snapshot taken after its subscription asked: a job takes
    /// the pushes waiting, and only then begins its transaction. A subscription asks after the commit
    /// that woke it has ended, so that commit is in the snapshot: no subscription is handed a push
    /// read before the commit that woke it.
    ///
    /// Measured reason: after each commit every subscribed caller's push was read on its own
    /// thread-pool job, in a read transaction of its own. SQLite drops a reader's page cache whenever
    /// the WAL has changed, so each of those reads started cold. With one subscriber, timed stage by
    /// stage, beginning the read took 57 µs and the push's two queries 93 µs. In one transaction,
    /// the second caller's read finds the pages the first one read, and so does the next
    /// transaction if no commit came between. The bench's 100-connection fan-out (50 callers), 4
    /// interleaved pairs, uncapped: the owner's CPU per change 10.7-11.0 → 6.3-6.8 ms, the last
    /// participant at p50 13.3-13.9 → 9.6-10.2 ms and at p99 22.6-24.1 → 13.6-16.0 ms. With the cap,
    /// see the commit that added it.
    func batchedPush(
        for caller: Caller, since cursor: ServerChangeToken, database: PrivateDatabase, threadPool: NIOThreadPool,
        read: @escaping @Sendable () throws -> Push?
    ) async throws -> Push? {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Push?, any Error>) in
            let pending = Pending(caller: caller, cursor: cursor, read: read, done: { continuation.resume(with: $0) })
            let start = queue.withLock { queue -> Bool in
                queue.pending.append(pending)
                guard !queue.running else { return false }
                queue.running = true
                return true
            }
            guard start else { return }
            threadPool.submit { state in
                guard case .active = state else {
                    // The pool stopped (the server is shutting down): nothing more is read.
                    self.failWaiting(NIOThreadPoolError.ThreadPoolInactive())
                    return
                }
                self.readWaiting(database)
            }
        }
    }

    /// The batch job: reads the pushes waiting, a transaction at a time, until none waits.
    private func readWaiting(_ database: PrivateDatabase) {
        while true {
            let batch = queue.withLock { queue -> [Pending] in
                if queue.pending.isEmpty { queue.running = false }
                let taken = min(queue.pending.count, Self.maximumBatch)
                defer { queue.pending.removeFirst(taken) }
                return Array(queue.pending.prefix(taken))
            }
            guard !batch.isEmpty else { return }
            var served = 0
            // Read before the transaction takes its snapshot. A push read later in the transaction
            // must not be kept under the generation of that moment: a write that ended in between is
            // not in its snapshot, and a subscription woken by that write would be handed a push
            // without it (and, its wake-up used, hold it until the next commit).
            let generation = database.changeGeneration
            do {
                try database.readTogether {
                    batches.withLock { $0.transactions += 1 }
                    for pending in batch {
                        let result = Result { () throws(any Error) -> Push? in
                            try push(
                                for: pending.caller, since: pending.cursor, database: database, readSince: generation, read: pending.read)
                        }
                        served += 1
                        batches.withLock { $0.pushes += 1 }  // before the caller resumes: tests read it then
                        pending.done(result)
                    }
                }
            } catch {
                // The read transaction could not begin (or end): the pushes not yet handed out fail.
                for pending in batch[served...] { pending.done(.failure(error)) }
            }
        }
    }

    private func failWaiting(_ error: any Error) {
        let waiting = queue.withLock { queue -> [Pending] in
            defer {
                queue.pending = []
                queue.running = false
            }
            return queue.pending
        }
        for pending in waiting { pending.done(.failure(error)) }
    }

    private func readAlone(_ read: () throws -> Push?) throws -> Push? {
        counts.withLock { $0.computed += 1 }
        return try read()
    }

    private func forget(_ key: Key, _ flight: Flight) {
        state.withLock { state in
            if state.flights[key] === flight { state.flights[key] = nil }
        }
    }
}
