import Foundation
import Logging
import OrderedCollections
import ShareSyncNode
import Synchronization

/// Keeps an app's local store in step with a database, like `CKSyncEngine`.
///
/// The app tells the engine what changed locally (``State/add(pendingRecordZoneChanges:)``), and hands it
/// the records to save when it asks (``Configuration/recordProvider``). The engine sends them when it
/// can, fetches what changed on the other side, and reports everything as ``events``:
///
/// ```swift
/// let engine = SyncEngine(SyncEngine.Configuration(
///     database: container.sharedDatabase, stateSerialization: savedState
/// ) { recordID in store.record(for: recordID) })
/// Task {
///     for await event in engine.events {
///         switch event {
///         case .stateUpdate(let state): store.saveEngineState(state)
///         case .fetchedRecordZoneChanges(let changes): store.apply(changes)
///         case .sentRecordZoneChanges(let sent):
///             for failure in sent.failedRecordSaves where failure.error.code == .serverRecordChanged {
///                 store.merge(failure.error.serverRecord!)   // then add the save again
///                 engine.state.add(pendingRecordZoneChanges: [.saveRecord(failure.record.recordID)])
///             }
///         default: break
///         }
///     }
/// }
/// store.save(note)
/// engine.state.add(pendingRecordZoneChanges: [.saveRecord(note.recordID)])
/// ```
///
/// With ``Configuration/automaticallySync`` (the default) the engine fetches when the database changes
/// (a long poll on its change feed) and sends soon after changes are added; without it the app calls
/// ``fetchChanges()`` and ``sendChanges()``. Either way one fetch or send runs at a time.
///
/// Sends use `SavePolicy.ifServerRecordUnchanged`: a record changed on the server since the app's copy
/// fails with `serverRecordChanged`, whose `ShareSyncError.serverRecord` the app merges with before it
/// adds the save again. A save or delete that failed for a reason that may pass (the owner unreachable,
/// the node busy) stays pending and is tried again; any other failure is removed from the pending changes
/// and reported once. In the shared database the engine does not use the node's outbox: its own pending
/// changes are the queue.
///
/// Call ``stop()`` when done with an engine: its automatic sync runs until then.
public final class SyncEngine: Sendable {
    /// How an engine runs.
    public struct Configuration: Sendable {
        /// The database to sync: a container's private or shared database.
        public var database: Database
        /// The state from an earlier engine (its last ``Event/stateUpdate(_:)``): tokens and pending
        /// changes. `nil` starts from scratch: the first fetch returns everything.
        public var stateSerialization: State.Serialization?
        /// Whether the engine fetches and sends by itself.
        public var automaticallySync: Bool
        /// The record to save for a pending ``PendingRecordZoneChange/saveRecord(_:)``, as the app holds it
        /// now (with the change tag of the last version it fetched or saved); `nil` drops the change.
        public var recordProvider: @Sendable (Record.ID) async -> Record?
        /// How long to wait before trying again after a failure that may pass. Each failure in a row
        /// doubles the wait, up to ``maximumRetryInterval``, and a failure that says when to come back
        /// (`ShareSyncError.retryAfterSeconds`, up to an hour) waits at least that long. A pass that
        /// succeeds starts the count again; a local change, or a change on the node, tries at once.
        public var retryInterval: Duration
        /// The longest wait between tries while failures go on.
        public var maximumRetryInterval: Duration
        /// Where the engine logs; by default nowhere.
        public var logger: Logger

        /// A configuration; see the properties for each parameter.
        public init(
            database: Database, stateSerialization: State.Serialization? = nil, automaticallySync: Bool = true,
            retryInterval: Duration = .seconds(2), maximumRetryInterval: Duration = .seconds(60),
            logger: Logger = Logger(label: "sharesync.syncengine", factory: { _ in SwiftLogNoOpLogHandler() }),
            recordProvider: @escaping @Sendable (Record.ID) async -> Record?
        ) {
            self.database = database
            self.stateSerialization = stateSerialization
            self.automaticallySync = automaticallySync
            self.retryInterval = retryInterval
            self.maximumRetryInterval = max(maximumRetryInterval, retryInterval)
            self.logger = logger
            self.recordProvider = recordProvider
        }
    }

    /// What the engine reports, in order, on ``events``.
    public enum Event: Sendable {
        /// The engine's state changed (tokens, pending changes): store it and pass it to the next engine.
        case stateUpdate(State.Serialization)
        /// Zones changed or deleted in the database.
        case fetchedDatabaseChanges(FetchedDatabaseChanges)
        /// Records changed or deleted in a zone (one event per page).
        case fetchedRecordZoneChanges(FetchedRecordZoneChanges)
        /// Zones saved or deleted, and those that failed.
        case sentDatabaseChanges(SentDatabaseChanges)
        /// Records saved or deleted, and those that failed (with `serverRecordChanged` carrying the server's record).
        case sentRecordZoneChanges(SentRecordZoneChanges)
        /// A shared zone appeared in the shared database: a share was accepted (here or by another app of this node).
        case shareAccepted(RecordZone.ID)
        /// A shared zone left the shared database: the share was left, stopped, or this node was removed from it.
        case shareRemoved(RecordZone.ID)
        /// A fetch starts.
        case willFetchChanges
        /// A fetch ended (its changes were reported before this event).
        case didFetchChanges
        /// A send starts.
        case willSendChanges
        /// A send ended.
        case didSendChanges
        /// With ``Configuration/automaticallySync``: a fetch the engine started failed (after its
        /// ``didFetchChanges``). The engine tries again after ``Configuration/retryInterval``, doubled for
        /// each failure in a row up to ``Configuration/maximumRetryInterval``; an error
        /// that does not pass by itself (a foreign token, a failing store, the node gone) comes again
        /// each time, so the app can tell the user. A fetch the app calls throws instead.
        case fetchFailed(ShareSyncError)
        /// A request of a send failed as a whole for a reason that may pass (the node not running, the
        /// network, a full disk): its changes stay pending, and with ``Configuration/automaticallySync``
        /// the engine tries again after ``Configuration/retryInterval``, backing off as for
        /// ``fetchFailed(_:)`` (changes refused one by one are
        /// in ``sentRecordZoneChanges(_:)``). Also when the engine's own send threw. Before, such a
        /// send said nothing: pending changes could wait for ever while the app showed them as sent.
        case sendFailed(ShareSyncError)
        /// The saved state given in ``Configuration/stateSerialization`` could not be read (damaged, or
        /// written by a newer ShareSync): the engine started from no state, and the pending changes it
        /// held are not sent. The first event; the next ``stateUpdate(_:)`` replaces the saved state,
        /// so keep a copy of the old one first if you may want it. Before, only the logger heard of it.
        case stateUnreadable(ShareSyncError)
    }

    /// A change the app made locally, waiting to be sent, like `CKSyncEngine.PendingRecordZoneChange`.
    public enum PendingRecordZoneChange: Sendable, Hashable, Codable {
        /// Save the record: the engine asks the record provider for it when it sends.
        case saveRecord(Record.ID)
        /// Delete the record.
        case deleteRecord(Record.ID)

        /// The record the change is about.
        public var recordID: Record.ID {
            switch self {
            case .saveRecord(let id), .deleteRecord(let id): id
            }
        }
    }

    /// A zone change the app made locally, like `CKSyncEngine.PendingDatabaseChange` (private database).
    public enum PendingDatabaseChange: Sendable, Hashable, Codable {
        /// Create the zone.
        case saveZone(RecordZone)
        /// Delete the zone and everything in it.
        case deleteZone(RecordZone.ID)

        /// The zone the change is about.
        public var zoneID: RecordZone.ID {
            switch self {
            case .saveZone(let zone): zone.zoneID
            case .deleteZone(let id): id
            }
        }
    }

    /// Zones that changed in the database (``Event/fetchedDatabaseChanges(_:)``).
    public struct FetchedDatabaseChanges: Sendable, Hashable {
        /// Zones whose records changed, or that appeared.
        public var modifications: [RecordZone.ID]
        /// Zones deleted (or no longer shared with this node).
        public var deletions: [RecordZone.ID]
    }

    /// A page of a zone's changes (``Event/fetchedRecordZoneChanges(_:)``).
    public struct FetchedRecordZoneChanges: Sendable, Hashable {
        /// The zone.
        public var zoneID: RecordZone.ID
        /// Records created or changed, in their latest state.
        public var modifications: [Record]
        /// Records deleted (or no longer shared with this node).
        public var deletions: [DeletedRecord]
    }

    /// What a send did to zones (``Event/sentDatabaseChanges(_:)``).
    public struct SentDatabaseChanges: Sendable {
        /// The zones saved.
        public var savedZones: [RecordZone] = []
        /// The zone saves that failed, with their errors.
        public var failedZoneSaves: [(zone: RecordZone, error: ShareSyncError)] = []
        /// The zones deleted.
        public var deletedZoneIDs: [RecordZone.ID] = []
        /// The zone deletes that failed, with their errors.
        public var failedZoneDeletes: [RecordZone.ID: ShareSyncError] = [:]
    }

    /// What a send did to records (``Event/sentRecordZoneChanges(_:)``).
    public struct SentRecordZoneChanges: Sendable {
        /// The records saved, as the database now holds them (store their change tags). A save the
        /// database already held exactly (type, fields, parent: sent again after its answer was lost)
        /// is here too, not a conflict in ``failedRecordSaves``.
        public var savedRecords: [Record] = []
        /// The saves that failed: the record sent and the error.
        public var failedRecordSaves: [FailedRecordSave] = []
        /// The records deleted. A delete answered `unknownItem` is here too, not in
        /// ``failedRecordDeletes``: the record is gone, as the change asked (deleted by someone else
        /// first, or by this delete sent before, its answer lost: an app killed before it stored the
        /// state after that send). In the shared database `unknownItem` means the record was in the
        /// participant's view and is deleted; a record outside the view (never in it, or in it before
        /// the owner's history of the view was trimmed) is `permissionFailure`, and fails.
        public var deletedRecordIDs: [Record.ID] = []
        /// The deletes that failed, with their errors.
        public var failedRecordDeletes: [Record.ID: ShareSyncError] = [:]
    }

    /// A record save that failed.
    public struct FailedRecordSave: Sendable {
        /// The record as the engine sent it.
        public var record: Record
        /// Why it was not saved; `serverRecordChanged` carries the server's record in `ShareSyncError.serverRecord`.
        public var error: ShareSyncError
    }

    /// The engine's state: its change tokens and the changes waiting to be sent, like `CKSyncEngine.State`.
    public final class State: Sendable {
        /// The state in a form to store: pass it back in ``Configuration/stateSerialization``.
        public struct Serialization: Sendable, Hashable, Codable {
            /// The state's JSON.
            public var data: Data
        }

        struct Stored: Codable, Sendable {
            var databaseToken: String?
            var zoneTokens: [String: String] = [:]
            var knownZones: [RecordZone.ID] = []
            /// By record: adding a change for a record already pending replaces it in place, in O(1).
            var pendingRecordZoneChanges: OrderedDictionary<Record.ID, Pending> = [:]
            /// Numbers each addition, so a send drops only the additions it sent.
            var additions: UInt64 = 0
            var pendingDatabaseChanges: OrderedDictionary<RecordZone.ID, PendingDatabaseChange> = [:]

            init() {}

            /// Also reads a state saved before additions were numbered (its pending changes as
            /// arrays, in order), so that an engine upgraded from it keeps its changes to send: that
            /// state failed to decode, and the engine started afresh, dropping them without a word.
            init(from decoder: any Decoder) throws {
                let c = try decoder.container(keyedBy: CodingKeys.self)
                databaseToken = try c.decodeIfPresent(String.self, forKey: .databaseToken)
                zoneTokens = try c.decodeIfPresent([String: String].self, forKey: .zoneTokens) ?? [:]
                knownZones = try c.decodeIfPresent([RecordZone.ID].self, forKey: .knownZones) ?? []
                additions = try c.decodeIfPresent(UInt64.self, forKey: .additions) ?? 0
                if let pending = try? c.decodeIfPresent(OrderedDictionary<Record.ID, Pending>.self, forKey: .pendingRecordZoneChanges) {
                    pendingRecordZoneChanges = pending
                } else {
                    for change in try c.decode([PendingRecordZoneChange].self, forKey: .pendingRecordZoneChanges) {
                        additions += 1
                        pendingRecordZoneChanges[change.recordID] = Pending(change: change, addition: additions)
                    }
                }
                if let pending = try? c.decodeIfPresent(
                    OrderedDictionary<RecordZone.ID, PendingDatabaseChange>.self, forKey: .pendingDatabaseChanges)
                {
                    pendingDatabaseChanges = pending
                } else {
                    for change in try c.decode([PendingDatabaseChange].self, forKey: .pendingDatabaseChanges) {
                        pendingDatabaseChanges[change.zoneID] = change
                    }
                }
            }
        }

        /// A pending record change and the addition that made it.
        struct Pending: Codable, Sendable, Hashable {
            var change: PendingRecordZoneChange
            var addition: UInt64
        }

        let stored: Mutex<Stored>
        private let changed: @Sendable () -> Void

        /// Why the saved state could not be read, if it could not (the engine started from no state).
        let unreadable: ShareSyncError?

        init(_ serialization: Serialization?, logger: Logger? = nil, changed: @escaping @Sendable () -> Void) {
            var decoded: Stored?
            var unreadable: ShareSyncError?
            if let serialization {
                do {
                    decoded = try JSONDecoder().decode(Stored.self, from: serialization.data)
                } catch {
                    logger?.error(
                        "the saved sync engine state cannot be read; starting from no state (changes it held are not sent)",
                        metadata: ["error": "\(error)"])
                    unreadable = ShareSyncError(
                        .invalidArguments,
                        "the saved sync engine state cannot be read (\(error)); the engine started from no state, and the changes "
                            + "it held are not sent")
                }
            }
            self.unreadable = unreadable
            stored = Mutex(decoded ?? Stored())
            self.changed = changed
            self.logger = logger
        }

        private let logger: Logger?

        /// The record changes waiting to be sent, in the order their records were first added.
        public var pendingRecordZoneChanges: [PendingRecordZoneChange] { stored.withLock { $0.pendingRecordZoneChanges.values.map(\.change) } }

        /// The zone changes waiting to be sent.
        public var pendingDatabaseChanges: [PendingDatabaseChange] { stored.withLock { Array($0.pendingDatabaseChanges.values) } }

        /// Adds record changes to send. One change is pending per record: a save and a delete of the same
        /// record replace each other (the last one added counts, in the first one's place).
        public func add(pendingRecordZoneChanges changes: [PendingRecordZoneChange]) {
            stored.withLock { s in
                for change in changes {
                    s.additions += 1
                    s.pendingRecordZoneChanges[change.recordID] = Pending(change: change, addition: s.additions)
                }
            }
            changed()
        }

        /// Removes record changes (the app no longer wants them sent).
        public func remove(pendingRecordZoneChanges changes: [PendingRecordZoneChange]) {
            stored.withLock { s in
                for change in changes where s.pendingRecordZoneChanges[change.recordID]?.change == change {
                    s.pendingRecordZoneChanges.removeValue(forKey: change.recordID)
                }
            }
            changed()
        }

        /// Adds zone changes to send (one per zone: the last one added counts).
        public func add(pendingDatabaseChanges changes: [PendingDatabaseChange]) {
            stored.withLock { s in
                for change in changes { s.pendingDatabaseChanges[change.zoneID] = change }
            }
            changed()
        }

        /// Removes zone changes.
        public func remove(pendingDatabaseChanges changes: [PendingDatabaseChange]) {
            stored.withLock { s in
                for change in changes where s.pendingDatabaseChanges[change.zoneID] == change {
                    s.pendingDatabaseChanges.removeValue(forKey: change.zoneID)
                }
            }
            changed()
        }

        /// Drops the changes sent (or failed for good): each only if no change was added for its record
        /// since the send took it (the app edited the record again: that edit is still to send).
        func finish(records: Set<Pending>, zones: Set<PendingDatabaseChange> = []) {
            stored.withLock { s in
                if !records.isEmpty { s.pendingRecordZoneChanges.removeAll { records.contains($0.value) } }
                if !zones.isEmpty { s.pendingDatabaseChanges.removeAll { zones.contains($0.value) } }
            }
        }

        /// The state now, encoded; `nil` if it cannot be encoded (logged).
        func serialization() -> Serialization? {
            let snapshot = stored.withLock { $0 }
            let encoder = JSONEncoder()
            encoder.outputFormatting = .sortedKeys
            do {
                return Serialization(data: try encoder.encode(snapshot))
            } catch {
                // Handed out empty, it was stored by the app and read back as unreadable: the next
                // engine started from no state, without its pending changes.
                logger?.error("the sync engine's state could not be encoded; no stateUpdate for this change", metadata: ["error": "\(error)"])
                return nil
            }
        }

        /// Held while a snapshot is taken and handed out, so that the app receives snapshots in the
        /// order they were taken: before, an app's `add` and the engine's own update could each take
        /// theirs and send it after the other's, and the last one stored missed a change.
        private let emission = Mutex(())

        /// Takes a snapshot of the state and hands it to `body`, one snapshot at a time.
        func emitSerialization(_ body: (Serialization) -> Void) {
            emission.withLock { _ in
                if let serialization = serialization() { body(serialization) }
            }
        }

        /// Runs `body`, a change of the state and the event that reports it, with no snapshot taken in
        /// between: a snapshot an app's ``add(pendingRecordZoneChanges:)`` takes meanwhile goes out
        /// after the event. Before, it could go out first: an app that stored it and was killed before
        /// it handled the event lost what the event reports (failed saves no longer pending, zones
        /// whose tokens were dropped without their deletions).
        func reporting(_ body: () -> Void) {
            emission.withLock { _ in body() }
        }
    }

    /// The engine's configuration.
    public let configuration: Configuration
    /// Its state: add the app's changes here.
    public let state: State
    /// What the engine does, in order. One consumer reads it; it ends at ``stop()``.
    public let events: AsyncStream<Event>

    private let continuation: AsyncStream<Event>.Continuation
    private let wakes: AsyncStream<Void>.Continuation
    private let serial = SerialRunner()
    private let tasks = Mutex<[Task<Void, Never>]>([])
    /// The retry waiting to wake the loop (``retryLater(after:)``).
    private let retry = Mutex<Task<Void, Never>?>(nil)
    private let stopped = Atomic<Bool>(false)
    /// The connection the change watcher long-polls on (connected containers), closed by ``stop()`` to end its wait.
    private let watcherClient = Mutex<ControlClient?>(nil)
    /// The longest batch of records one send carries.
    static let batchSize = 200
    /// For tests: runs between a send's change of the state and the event that reports it, under the
    /// snapshot lock (``State/reporting(_:)``): a body that changes the state on its own thread waits
    /// for itself for ever; the test's adds from another thread, bounded.
    let betweenChangeAndReport = Mutex<(@Sendable () -> Void)?>(nil)

    /// Creates an engine; with ``Configuration/automaticallySync`` it starts fetching and sending at once.
    public init(_ configuration: Configuration) {
        self.configuration = configuration
        (events, continuation) = AsyncStream.makeStream(of: Event.self, bufferingPolicy: .unbounded)
        let (wakeStream, wakes) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        self.wakes = wakes
        let automatic = configuration.automaticallySync
        let continuation = continuation
        let stateBox = Mutex<State?>(nil)
        state = State(configuration.stateSerialization, logger: configuration.logger) {
            stateBox.withLock({ $0 })?.emitSerialization { continuation.yield(.stateUpdate($0)) }
            if automatic { wakes.yield() }
        }
        stateBox.withLock { $0 = state }
        if let unreadable = state.unreadable { continuation.yield(.stateUnreadable(unreadable)) }
        guard automatic else { return }
        wakes.yield()
        let loop = Task { [weak self] in
            for await _ in wakeStream {
                guard let self, !self.stopped.load(ordering: .acquiring) else { return }
                // A fetch that fails does not keep local changes from going out, nor the other way round.
                // Each failure is an event (before, only the logger heard of it, a no-op by default:
                // a failure that kept coming back looped in silence).
                var failure: ShareSyncError?
                do throws(ShareSyncError) {
                    try await self.fetchChanges()
                } catch where error.code == .operationCancelled && self.stopped.load(ordering: .acquiring) {
                    return
                } catch {
                    self.logFailure("fetch", error)
                    self.emit(.fetchFailed(error))
                    failure = error
                }
                do throws(ShareSyncError) {
                    try await self.sendChanges()
                } catch where error.code == .operationCancelled && self.stopped.load(ordering: .acquiring) {
                    return
                } catch {
                    self.logFailure("send", error)
                    self.emit(.sendFailed(error))
                    failure = failure ?? error
                }
                if let failure {
                    self.retryLater(after: failure)
                } else if self.retry.withLock({ $0 }) == nil {
                    // A pass with nothing to try again: the next failure waits the shortest time.
                    self.failuresInARow.store(0, ordering: .relaxed)
                }
            }
        }
        let watcher = Task { [weak self] () -> Void in await self?.watchForChanges() }
        tasks.withLock { $0 = [loop, watcher] }
    }

    deinit {
        for task in tasks.withLock({ $0 }) { task.cancel() }
        wakes.finish()
        continuation.finish()
    }

    /// Stops the engine: no more fetches or sends (``fetchChanges()`` and ``sendChanges()`` throw
    /// `operationCancelled`), and ``events`` ends once the fetch or send in progress (the engine's own
    /// or one the app began) has finished and reported.
    public func stop() async {
        stopped.store(true, ordering: .releasing)
        let running = tasks.withLock { t -> [Task<Void, Never>] in defer { t = [] }; return t }
        retry.withLock { $0 }?.cancel()
        wakes.finish()
        for task in running { task.cancel() }
        if let client = watcherClient.withLock({ $0 }) { await client.close() }
        // Called from inside a fetch or send of this engine (the record provider): nothing to wait
        // for that would not wait for this call.
        guard Self.runningBodyOf != ObjectIdentifier(self) else { return continuation.finish() }
        for task in running { await task.value }
        // A fetch or send the app began itself finishes first (it stops between pages and batches):
        // its events (a send's new change tags, the state without the changes it sent) go out before
        // the stream ends. Before, they went into the finished stream, and the app's stored state
        // sent those changes again later.
        _ = try? await serial.run { () throws(ShareSyncError) in }
        continuation.finish()
    }

    /// Failed passes of the loop in a row (``retryLater(after:)``).
    private let failuresInARow = Atomic<Int>(0)

    /// How long to wait after the `failures`-th failure in a row: `base` doubled for each failure
    /// after the first, at most `maximum`, and at least what the failure asked for (`retryAfter`
    /// seconds, up to an hour). Before, every retry came after `base` (2 s), for as long as an owner
    /// was away, each a full fetch and a resend of every pending change.
    static func retryDelay(failures: Int, base: Duration, maximum: Duration, retryAfter: Double?) -> Duration {
        var delay = base
        for _ in 1..<max(1, min(failures, 32)) where delay < maximum { delay *= 2 }
        delay = min(delay, maximum)
        if let seconds = retryAfter, seconds.isFinite, seconds > 0 {
            delay = max(delay, .milliseconds(Int64(min(seconds, 3600) * 1000)))
        }
        return delay
    }

    /// Wakes the loop after ``retryDelay(failures:base:maximum:retryAfter:)``, unless a retry already
    /// waits: one task at a time (each failure added one before, kept until ``stop()``).
    private func retryLater(after failure: ShareSyncError? = nil) {
        let failures = failuresInARow.add(1, ordering: .relaxed).newValue
        let interval = Self.retryDelay(
            failures: failures, base: configuration.retryInterval, maximum: configuration.maximumRetryInterval,
            retryAfter: failure?.retryAfterSeconds)
        retry.withLock { waiting in
            guard waiting == nil else { return }
            waiting = Task { [weak self] in
                try? await Task.sleep(for: interval)
                self?.retry.withLock { $0 = nil }
                self?.wakes.yield()
            }
        }
    }

    /// Long-polls the database's change feed and wakes the loop when something changes.
    private func watchForChanges() async {
        let shared = configuration.database.scope == .shared
        var transport: Transport?
        var token: String?
        /// Failed attempts in a row: the watcher backs off as the loop does.
        var failures = 0
        while !Task.isCancelled, !stopped.load(ordering: .acquiring) {
            do {
                if transport == nil {
                    let opened = try await configuration.database.container.waitingTransport()
                    if case .connected(let client) = opened, client !== configuration.database.container.connectedClient {
                        watcherClient.withLock { $0 = client }
                    }
                    transport = opened
                    if stopped.load(ordering: .acquiring) { break }
                }
                if token == nil {
                    let now: ChangesPage = try await transport!.call(.currentChangeToken(shared: shared))
                    token = now.token
                    // A change committed after the loop's fetch read the database feed and before this
                    // token is behind the long-poll: one more fetch covers it. Before, it waited for
                    // some later change to wake the loop.
                    wakes.yield()
                }
                let page: ChangesPage = try await transport!.call(.changes(shared: shared, since: token, waitSeconds: 10))
                if !page.changes.isEmpty { wakes.yield() }
                token = page.token
                failures = 0
            } catch {
                if case .connected(let client)? = transport, client !== configuration.database.container.connectedClient {
                    await client.close()
                }
                transport = nil
                token = nil
                // A closed container does not come back: nothing more to watch.
                if Task.isCancelled { break }
                if case .closed = configuration.database.container.transport { break }
                failures += 1
                try? await Task.sleep(
                    for: Self.retryDelay(
                        failures: failures, base: configuration.retryInterval, maximum: configuration.maximumRetryInterval,
                        retryAfter: nil))
                // Something may have changed while the feed was not watched; the feed's current token,
                // once read again, wakes the loop too.
                if failures == 1 { wakes.yield() }
            }
        }
        if case .connected(let client)? = transport, client !== configuration.database.container.connectedClient {
            await client.close()
        }
    }

    private func emit(_ event: Event) { continuation.yield(event) }

    /// Logs a failed automatic fetch or send: at notice for what passes by itself (the network, a
    /// busy node), at warning for what does not.
    private func logFailure(_ what: String, _ error: ShareSyncError) {
        let level: Logger.Level = Self.requestMayPass(error) && error.code != .internalError ? .notice : .warning
        configuration.logger.log(level: level, "\(what) failed; trying again", metadata: ["error": "\(error)"])
    }
    private func emitState() { state.emitSerialization { emit(.stateUpdate($0)) } }

    // MARK: Fetching

    /// Fetches what changed in the database since the engine's tokens, reporting it as events.
    public func fetchChanges() async throws(ShareSyncError) {
        try await serial.run { () throws(ShareSyncError) in
            try self.checkRunning()  // checked when its turn comes: stopped meanwhile, it reports nothing
            try await self.asBody { () throws(ShareSyncError) in try await self.fetch() }
        }
    }

    /// The engine whose fetch or send the current task runs (``asBody(_:)``): a ``stop()`` called from
    /// inside it (the record provider, say) does not wait for it, which would wait for itself.
    @TaskLocal private static var runningBodyOf: ObjectIdentifier?

    /// Runs `body` marked as this engine's fetch or send (``runningBodyOf``).
    private func asBody(_ body: () async throws(ShareSyncError) -> Void) async throws(ShareSyncError) {
        do {
            try await Self.$runningBodyOf.withValue(ObjectIdentifier(self)) { try await body() }
        } catch let error as ShareSyncError {
            throw error
        } catch {
            throw ShareSyncError(.internalError, "\(error)")  // body throws only ShareSyncError
        }
    }

    /// Throws `operationCancelled` once stopped: a fetch or send then could report nothing (``events``
    /// has ended), so a send's new change tags would be lost and the app's stored state resent later.
    private func checkRunning() throws(ShareSyncError) {
        if stopped.load(ordering: .acquiring) {
            throw ShareSyncError(.operationCancelled, "the sync engine was stopped; start a new one to fetch or send")
        }
    }

    private func fetch() async throws(ShareSyncError) {
        let database = configuration.database
        emit(.willFetchChanges)
        defer { emit(.didFetchChanges) }
        var pages = 0
        /// While fetching again from no token: the zones known before, and those seen since.
        var refetch: (known: [String: RecordZone.ID], seen: Set<String>)?
        while pages < 10_000 {
            if stopped.load(ordering: .acquiring) { return }  // each page's tokens are kept already
            pages += 1
            let token = state.stored.withLock { $0.databaseToken }
            let changes: DatabaseChangesResult
            do {
                changes = try await database.databaseChanges(since: token.map(ServerChangeToken.init(stringValue:)))
            } catch where error.code == .changeTokenExpired && token != nil && refetch == nil {
                // The database token expired (the history it points into is gone: trimmed, the replica
                // rebuilt, the store restored from a copy). Every zone the engine knew is reported
                // deleted, then everything is fetched again from no token, as CKSyncEngine does: the
                // app drops what it holds of them, and what still exists comes back. Zones that do not
                // come back get no second report; in the shared database they end in `shareRemoved`.
                // Before, the zones came again from nil as modifications only, and records deleted
                // meanwhile stayed in the app for good. (The zone tokens cannot be kept instead: after a
                // restore from a copy a zone token may still look valid in a history that diverged.)
                configuration.logger.notice("the database change token expired; fetching everything again", metadata: ["error": "\(error)"])
                var known: [String: RecordZone.ID] = [:]
                state.reporting {
                    known = state.stored.withLock { s in
                        var known: [String: RecordZone.ID] = [:]
                        for zoneID in s.knownZones { known[Self.key(zoneID)] = zoneID }
                        for key in s.zoneTokens.keys where known[key] == nil { known[key] = Self.zoneID(key: key) }
                        s.databaseToken = nil
                        s.zoneTokens = [:]
                        return known
                    }
                    let zones = known.values.sorted { Self.key($0) < Self.key($1) }
                    if !zones.isEmpty { emit(.fetchedDatabaseChanges(FetchedDatabaseChanges(modifications: [], deletions: zones))) }
                }
                refetch = (known, [])
                continue
            }
            for zoneID in changes.modifiedZoneIDs { refetch?.seen.insert(Self.key(zoneID)) }
            if !changes.modifiedZoneIDs.isEmpty || !changes.deletedZoneIDs.isEmpty {
                emit(.fetchedDatabaseChanges(FetchedDatabaseChanges(modifications: changes.modifiedZoneIDs, deletions: changes.deletedZoneIDs)))
            }
            if database.scope == .shared {
                let known = Set(state.stored.withLock { $0.knownZones })
                for zoneID in changes.modifiedZoneIDs where !known.contains(zoneID) { emit(.shareAccepted(zoneID)) }
                for zoneID in changes.deletedZoneIDs where known.contains(zoneID) { emit(.shareRemoved(zoneID)) }
                state.stored.withLock { s in
                    s.knownZones.removeAll { changes.deletedZoneIDs.contains($0) }
                    for zoneID in changes.modifiedZoneIDs where !s.knownZones.contains(zoneID) { s.knownZones.append(zoneID) }
                }
            }
            state.stored.withLock { s in
                for zoneID in changes.deletedZoneIDs { s.zoneTokens.removeValue(forKey: Self.key(zoneID)) }
            }
            for zoneID in changes.modifiedZoneIDs { try await fetchZone(zoneID) }
            state.stored.withLock { $0.databaseToken = changes.changeToken.stringValue }
            if !changes.moreComing, database.scope == .shared, let (known, seen) = refetch {
                // Shares that did not come back (their zones were reported deleted when the refetch began).
                let gone = known.filter { !seen.contains($0.key) }.map(\.value)
                let stillKnown = Set(state.stored.withLock { $0.knownZones })
                for zoneID in gone where stillKnown.contains(zoneID) { emit(.shareRemoved(zoneID)) }
                state.stored.withLock { $0.knownZones.removeAll { gone.contains($0) } }
            }
            emitState()
            if !changes.moreComing { break }
        }
    }

    private func fetchZone(_ zoneID: RecordZone.ID) async throws(ShareSyncError) {
        let database = configuration.database
        var restarted = false
        var pages = 0
        while pages < 100_000 {
            if stopped.load(ordering: .acquiring) { return }
            pages += 1
            let token = state.stored.withLock { $0.zoneTokens[Self.key(zoneID)] }
            let page: RecordZoneChangesResult
            do {
                page = try await database.recordZoneChanges(
                    inZoneWith: zoneID, since: token.map(ServerChangeToken.init(stringValue:)), resultsLimit: Self.batchSize)
            } catch where error.code == .changeTokenExpired && !restarted {
                // The zone's history since its token is gone (the zone replaced, the journal trimmed):
                // deletions in it may have been missed. It is reported deleted, then fetched again from
                // nil, so the app starts it over rather than keep records that no longer exist.
                restarted = true
                state.reporting {
                    state.stored.withLock { _ = $0.zoneTokens.removeValue(forKey: Self.key(zoneID)) }
                    emit(.fetchedDatabaseChanges(FetchedDatabaseChanges(modifications: [], deletions: [zoneID])))
                }
                continue
            } catch where error.code == .zoneNotFound {
                return  // deleted since the database changes were read; the next fetch reports it
            }
            if page.zoneDeleted {
                // The zone went and came back since the token: the feed keeps no deletions of its
                // records from before, so what the app holds of it goes first, then this page's records.
                emit(.fetchedDatabaseChanges(FetchedDatabaseChanges(modifications: [], deletions: [zoneID])))
            }
            if !page.modifications.isEmpty || !page.deletions.isEmpty {
                emit(.fetchedRecordZoneChanges(
                    FetchedRecordZoneChanges(zoneID: zoneID, modifications: page.modifications, deletions: page.deletions)))
            }
            state.stored.withLock { $0.zoneTokens[Self.key(zoneID)] = page.changeToken.stringValue }
            if !page.moreComing { return }
        }
    }

    private static func key(_ zoneID: RecordZone.ID) -> String { zoneID.ownerName + "\u{0}" + zoneID.zoneName }

    private static func zoneID(key: String) -> RecordZone.ID {
        let parts = key.split(separator: "\u{0}", maxSplits: 1, omittingEmptySubsequences: false)
        return parts.count == 2 ? RecordZone.ID(zoneName: String(parts[1]), ownerName: String(parts[0])) : RecordZone.ID(zoneName: key)
    }

    // MARK: Sending

    /// Sends the pending changes: zones first, then records in batches, reporting the results as events.
    /// Changes that failed for a reason that may pass stay pending.
    public func sendChanges() async throws(ShareSyncError) {
        try await serial.run { () throws(ShareSyncError) in
            try self.checkRunning()  // checked when its turn comes: stopped meanwhile, it reports nothing
            try await self.asBody { () throws(ShareSyncError) in try await self.send() }
        }
    }

    private func send() async throws(ShareSyncError) {
        // Both read at once: zone changes go before record changes, and a zone added just before its
        // records must not be missed by a send that sees the records (they would fail with zoneNotFound).
        var (zoneChanges, recordChanges) = state.stored.withLock {
            (Array($0.pendingDatabaseChanges.values), Array($0.pendingRecordZoneChanges.values))
        }
        guard !zoneChanges.isEmpty || !recordChanges.isEmpty else { return }
        emit(.willSendChanges)
        defer { emit(.didSendChanges) }
        var retry = false
        /// A request that failed as a whole and stays pending: the app hears of it (``Event/sendFailed(_:)``).
        var failure: ShareSyncError?
        if !zoneChanges.isEmpty {
            let outcome = try await sendZones(zoneChanges)
            retry = outcome.retry || retry
            failure = outcome.failure ?? failure
            // The records of a zone whose save stays pending wait for it: sent now they failed with
            // zoneNotFound, and a change that fails so is reported and no longer pending (lost, for
            // a zone that a moment of network trouble kept from being saved).
            let count = recordChanges.count
            recordChanges.removeAll { Self.waitsForZoneSave($0.change, pendingZoneChanges: outcome.pending) }
            if recordChanges.count < count { retry = true }
        }
        // A save refused because its deleteSelf reference names a record saved later in this send (a
        // later batch or request), or a participant's new record refused as outside their view whose
        // new parent is saved later (``waits(_:refusedWith:on:)``), goes again once the rest is sent,
        // in more rounds (in batches too) while each round saves some of them (a chain given in the
        // wrong order). Refused again while
        // its target is pending for another reason (its save failed in a way that may pass), it stays
        // pending with it; refused again for want of a save among those still waiting (a loop of
        // references cut into two requests), or of nothing pending, it is reported failed.
        /// Sends `changes` in batches of ``batchSize``; returns the saves waiting on a target.
        func sendInBatches(_ changes: [State.Pending], waitOn: Set<String>, stayOn: Set<String>) async throws(ShareSyncError)
            -> [State.Pending]
        {
            var waiting: [State.Pending] = []
            var start = 0
            while start < changes.count, !stopped.load(ordering: .acquiring) {
                let batch = Array(changes[start..<min(start + Self.batchSize, changes.count)])
                start += batch.count
                let outcome = try await sendRecords(batch, waitOn: waitOn, stayOn: stayOn)
                retry = outcome.retry || retry
                failure = outcome.failure ?? failure
                waiting += outcome.waiting
            }
            return waiting
        }
        var waiting = try await sendInBatches(recordChanges, waitOn: Self.saveKeys(recordChanges.map(\.change)), stayOn: [])
        var rounds = 0
        while !waiting.isEmpty, !stopped.load(ordering: .acquiring) {
            rounds += 1
            let waitingKeys = Self.saveKeys(waiting.map(\.change))
            let last = rounds == Self.referenceRounds
            // On the last round nothing waits any more: a target among the waiting saves is not coming.
            let stayOn = Self.saveKeys(state.pendingRecordZoneChanges).subtracting(waitingKeys)
            let next = try await sendInBatches(waiting, waitOn: last ? [] : waitingKeys, stayOn: stayOn)
            // No progress: one last round, where they are reported.
            if next.count == waiting.count, !last { rounds = Self.referenceRounds - 1 }
            waiting = next
        }
        emitState()
        if let failure {
            logFailure("send", failure)
            emit(.sendFailed(failure))
        }
        if retry, configuration.automaticallySync { retryLater() }
    }

    /// Sends zone changes; returns whether some stay pending to try again, and the last error of a
    /// request that failed as a whole and stays pending.
    private func sendZones(_ changes: [PendingDatabaseChange]) async throws(ShareSyncError)
        -> (retry: Bool, failure: ShareSyncError?, pending: Set<PendingDatabaseChange>)
    {
        var sent = SentDatabaseChanges()
        var done: [PendingDatabaseChange] = []
        var retry = false
        var failure: ShareSyncError?
        for change in changes {
            do {
                switch change {
                case .saveZone(let zone): sent.savedZones.append(try await configuration.database.save(zone))
                case .deleteZone(let zoneID):
                    try await configuration.database.deleteRecordZone(withID: zoneID)
                    sent.deletedZoneIDs.append(zoneID)
                }
                done.append(change)
            } catch where Self.requestMayPass(error) {
                retry = true
                failure = error
            } catch {
                switch change {
                case .saveZone(let zone): sent.failedZoneSaves.append((zone, error))
                case .deleteZone(let zoneID): sent.failedZoneDeletes[zoneID] = error
                }
                done.append(change)
            }
        }
        state.reporting {
            state.finish(records: [], zones: Set(done))
            emit(.sentDatabaseChanges(sent))
        }
        return (retry, failure, Set(changes).subtracting(done))
    }

    /// Whether `change` waits for a save of its zone that is still pending (``send()``).
    static func waitsForZoneSave(_ change: PendingRecordZoneChange, pendingZoneChanges: Set<PendingDatabaseChange>) -> Bool {
        let zone = key(change.recordID.zoneID)
        return pendingZoneChanges.contains { pending in
            if case .saveZone(let saved) = pending { key(saved.zoneID) == zone } else { false }
        }
    }

    /// The most bytes of record JSON one request carries: a control line is at most 4 MiB (a
    /// connected container's request over it closed its connection), and a record of the largest
    /// legal size (1 MB) always fits in a request of its own.
    static let requestBytes = 3 * 1024 * 1024

    /// Sends one batch of record changes; returns whether some stay pending to try again, and the last
    /// error of a request that failed as a whole and stays pending.
    ///
    /// One request per zone, and within a zone requests of at most ``requestBytes``: a request that
    /// fails as a whole for a reason that will not pass by itself (`zoneNotFound`: deleted, or a share
    /// left or revoked; a request the node refuses as a whole) fails its own items, each reported with
    /// that error and no longer pending, as CloudKit reports a per-record `zoneNotFound`; changes to
    /// other zones go on. Before, the batch failed as one, the send threw, and every change behind it
    /// waited for good. A record that cannot be encoded (a non-finite double) is reported failed on
    /// its own, before any request: it made its whole request fail, for good, with `internalError`.
    ///
    /// A save refused with `referenceViolation` whose `deleteSelf` reference names one of `waitOn`
    /// (``saveKeys(_:)`` of saves of this send, perhaps in a later batch), or a participant's save
    /// refused as outside their view whose parent is one of them (a new record under a new parent, in a
    /// share of a hierarchy), is not reported: it is returned in `waiting`, to go again once they are
    /// sent (CloudKit asks for a reference's target in the same operation; an engine cuts its changes
    /// into batches the app does not see); one naming one of `stayOn` (saves still pending for
    /// another reason) stays pending for the next send, as its target does.
    private func sendRecords(_ batch: [State.Pending], waitOn: Set<String>, stayOn: Set<String>) async throws(ShareSyncError)
        -> (retry: Bool, failure: ShareSyncError?, waiting: [State.Pending])
    {
        var waiting: [State.Pending] = []
        var requests: [(saving: [Record], deleting: [Record.ID], bytes: Int)] = []
        var lastRequest: [RecordZone.ID: Int] = [:]
        var sentBy: [Record.ID: State.Pending] = [:]
        var finished: Set<State.Pending> = []
        var sent = SentRecordZoneChanges()
        func place(_ zoneID: RecordZone.ID, bytes: Int) -> Int {
            if let i = lastRequest[zoneID], requests[i].bytes + bytes <= Self.requestBytes || requests[i].bytes == 0 { return i }
            requests.append(([], [], 0))
            lastRequest[zoneID] = requests.count - 1
            return requests.count - 1
        }
        for pending in batch {
            let id = pending.change.recordID
            sentBy[id] = pending
            switch pending.change {
            case .saveRecord:
                // No record for it: the app dropped the change.
                guard let record = await configuration.recordProvider(id) else {
                    finished.insert(pending)
                    continue
                }
                let bytes: Int
                do {
                    bytes = try record.jsonData().count
                } catch {
                    // The check of its content names what is wrong (rule finiteDouble, locationRange…).
                    var failure = error
                    do { try record.checkContent(limits: Limits()) } catch { failure = error }
                    sent.failedRecordSaves.append(FailedRecordSave(record: record, error: failure))
                    finished.insert(pending)
                    continue
                }
                let i = place(id.zoneID, bytes: bytes)
                requests[i].saving.append(record)
                requests[i].bytes += bytes
            case .deleteRecord:
                requests[place(id.zoneID, bytes: 0)].deleting.append(id)
            }
        }
        var retry = false
        var failure: ShareSyncError?
        for (saving, deleting, _) in requests {
            let results: ModifyRecordsResults
            do {
                results = try await configuration.database.modifyRecords(
                    saving: saving, deleting: deleting, savePolicy: .ifServerRecordUnchanged, atomically: false, queue: false)
            } catch where Self.requestMayPass(error) {
                retry = true
                failure = error
                continue
            } catch {
                for record in saving {
                    sent.failedRecordSaves.append(FailedRecordSave(record: record, error: error))
                    if let pending = sentBy[record.recordID] { finished.insert(pending) }
                }
                for id in deleting {
                    sent.failedRecordDeletes[id] = error
                    if let pending = sentBy[id] { finished.insert(pending) }
                }
                continue
            }
            for record in saving {
                switch results.saveResults[record.recordID] {
                case .success(let saved)?:
                    sent.savedRecords.append(saved)
                    if let pending = sentBy[record.recordID] { finished.insert(pending) }
                case .failure(let error)? where error.code == .serverRecordChanged && error.serverRecord.map(record.holdsSameContent) == true:
                    // Sent before, its answer lost (an app killed before it stored the state after
                    // that send): the server holds exactly this save. Saved, under the server's tag;
                    // before, the app was told its own save conflicted.
                    sent.savedRecords.append(error.serverRecord!)
                    if let pending = sentBy[record.recordID] { finished.insert(pending) }
                case .failure(let error)? where Self.mayPass(error) || error.code == .batchRequestFailed:
                    // batchRequestFailed: not sent, an earlier request of the write having been refused.
                    retry = true
                case .failure(let error)? where Self.waits(record, refusedWith: error, on: waitOn):
                    if let pending = sentBy[record.recordID] { waiting.append(pending) }
                case .failure(let error)? where Self.waits(record, refusedWith: error, on: stayOn):
                    retry = true
                case .failure(let error)?:
                    sent.failedRecordSaves.append(FailedRecordSave(record: record, error: error))
                    if let pending = sentBy[record.recordID] { finished.insert(pending) }
                case nil:
                    retry = true  // unanswered: try again
                }
            }
            for id in deleting {
                switch results.deleteResults[id] {
                case .success?:
                    sent.deletedRecordIDs.append(id)
                    if let pending = sentBy[id] { finished.insert(pending) }
                case .failure(let error)? where error.code == .unknownItem:
                    // Already gone, as the change asked (``SentRecordZoneChanges/deletedRecordIDs``).
                    sent.deletedRecordIDs.append(id)
                    if let pending = sentBy[id] { finished.insert(pending) }
                case .failure(let error)? where Self.mayPass(error) || error.code == .batchRequestFailed:
                    retry = true
                case .failure(let error)?:
                    sent.failedRecordDeletes[id] = error
                    if let pending = sentBy[id] { finished.insert(pending) }
                case nil:
                    retry = true
                }
            }
        }
        state.reporting {
            state.finish(records: finished)
            betweenChangeAndReport.withLock { $0 }?()
            emit(.sentRecordZoneChanges(sent))
        }
        return (retry, failure, waiting)
    }

    /// How many rounds saves waiting on their `deleteSelf` targets or new parents get after the first (``sendChanges()``).
    static let referenceRounds = 8

    /// The saves among `changes`, by owner, zone and record name.
    static func saveKeys(_ changes: [PendingRecordZoneChange]) -> Set<String> {
        Set(changes.compactMap { if case .saveRecord(let id) = $0 { key(id.zoneID, id.recordName) } else { nil } })
    }

    private static func key(_ zoneID: RecordZone.ID, _ name: String) -> String {
        zoneID.ownerName + "\u{0}" + zoneID.zoneName + "\u{0}" + name
    }

    /// Whether `record`'s save, refused with `error`, may pass once a save of `keys` (``saveKeys(_:)``)
    /// is made, `record` aside: one of the targets of its `deleteSelf` references for
    /// `referenceViolation`; its parent for a participant's save refused as outside their view
    /// (`permissionFailure`, rule `outsideView`: a new record is in a share of a hierarchy once its
    /// parent is). Never for any other refusal.
    static func waits(_ record: Record, refusedWith error: ShareSyncError, on keys: Set<String>) -> Bool {
        guard !keys.isEmpty else { return false }
        let awaited: Set<String> =
            switch error.code {
            case .referenceViolation: record.deleteSelfTargetNames
            case .permissionFailure where error.rule == .outsideView: record.parent.map { [$0.recordID.recordName] } ?? []
            default: []
            }
        return awaited.contains { $0 != record.recordID.recordName && keys.contains(key(record.recordID.zoneID, $0)) }
    }

    /// Whether a failure may pass by itself (the change stays pending and is tried again).
    static func mayPass(_ error: ShareSyncError) -> Bool {
        [.networkFailure, .networkUnavailable, .serviceUnavailable, .requestRateLimited, .operationCancelled].contains(error.code)
    }

    /// Whether a request that failed as a whole may go through later: ``mayPass(_:)``, or the node's
    /// store failing (a full disk, `quotaExceeded`; a storage error, `internalError`), which passes once
    /// the cause is gone. Its changes stay pending; only a refusal of the request itself fails them.
    static func requestMayPass(_ error: ShareSyncError) -> Bool {
        mayPass(error) || error.code == .quotaExceeded || error.code == .internalError
    }
}

/// Runs one body at a time, in the order they arrive.
private actor SerialRunner {
    private var busy = false
    private var waiting: [CheckedContinuation<Void, Never>] = []

    func run<T: Sendable>(_ body: @Sendable () async throws(ShareSyncError) -> T) async throws(ShareSyncError) -> T {
        if busy {
            await withCheckedContinuation { waiting.append($0) }
        } else {
            busy = true
        }
        defer {
            if waiting.isEmpty { busy = false } else { waiting.removeFirst().resume() }
        }
        return try await body()
    }
}
