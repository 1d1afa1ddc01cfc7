import Foundation
import NIOCore
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

    /// How many bytes of finished pushes are kept for the caller's other connections.
    static let retainedBytes = 16 * 1024 * 1024

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

    /// The push for `caller` from `cursor`: another connection's, if it was read since the last write,
    /// else `read()`'s. An error of `read()` is thrown to its own caller only; the others read again.
    func push(
        for caller: Caller, since cursor: ServerChangeToken, database: PrivateDatabase, read: () throws -> Push?
    ) throws -> Push? {
        let generation = database.changeGeneration
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
        let size = push?.payload.readableBytes ?? 0
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
