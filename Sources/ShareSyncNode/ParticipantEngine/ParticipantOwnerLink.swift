import Foundation
import Logging
import ShareSyncCore
import ShareSyncStore
import ShareSyncWire
import Synchronization

/// One owner, followed by one task over one connection at a time: connect, send the outbox, catch up,
/// follow pushes, back off, reconnect. The steps are described on ``ParticipantSync``.
///
/// Everything that changes the replica for this owner runs in the link's task, one step after another,
/// so fetched pages and pushes are never applied concurrently.
final class ParticipantOwnerLink: Sendable {
    let ownerName: String
    let replica: SharedDatabaseReplica
    let identity: NodeIdentity
    let configuration: ParticipantSync.Configuration
    let hub: ParticipantEventHub
    let logger: Logger
    /// Asks the engine to forget the owner, of whom the replica holds nothing; whether it did (the
    /// engine then stopped this link: ``forgottenByEngine()``).
    let forget: @Sendable () throws(ShareSyncError) -> Bool

    private struct State {
        var status = ParticipantSync.LinkStatus.connecting
        var connection: (any OwnerDatabase)?
        var pushes = PushQueue<OwnerConnection.Push>()
        var pushesEnded = false
        var subscription = 0
        var outboxPoked = false
        var syncRequested = 0
        var syncCompleted = 0
        var failures = 0
        var lastFailure: ShareSyncError?
        /// Why writes or leaves wait although the owner is connected (its disk full, its store failing).
        var heldBack: ShareSyncError?
        /// The owner's latest announced address, not yet noted in the replica, with the address
        /// generation of the connection that heard it.
        var announced: (address: WireAddress, generation: Int)?
        var task: Task<Void, Never>?
        /// ``stop()`` was called: the link never starts (again).
        var stopped = false
        /// When the link last was caught up (following), or started when it never was.
        var caughtUpAt = Date()
        /// When the link last was caught up, `nil` if it never was.
        var lastSynced: Date?
        /// ``reconnect()`` was asked since this connection (or attempt) began: it ends, and the next
        /// begins at once, at the owner's stored address.
        var reconnectAsked = false
        /// Moves on when an address is set by hand (``ignoreEarlierAnnouncements()``): announcements
        /// heard over connections from before are then dropped.
        var addressGeneration = 0
        /// The engine forgot the owner (nothing of it was left in the replica): the link has stopped.
        var forgotten = false
        /// Gives up the connection attempt under way (``connectUnlessGivenUp(_:)``), if there is one.
        var giveUpConnecting: (@Sendable () -> Void)?
    }

    private let state = Mutex(State())
    private let wakeup = ParticipantWakeup()
    /// Held while an announced address is noted: one at a time, in the order they were taken.
    private let announcing = Mutex(())

    init(
        ownerName: String, replica: SharedDatabaseReplica, identity: NodeIdentity,
        configuration: ParticipantSync.Configuration, hub: ParticipantEventHub, logger: Logger,
        forget: @escaping @Sendable () throws(ShareSyncError) -> Bool
    ) {
        self.forget = forget
        self.ownerName = ownerName
        self.replica = replica
        self.identity = identity
        self.configuration = configuration
        self.hub = hub
        var logger = logger
        logger[metadataKey: "owner"] = "\(ownerName)"
        self.logger = logger
        restoreLastSynced()
    }

    // MARK: Control

    /// Starts the link's task, unless ``stop()`` came first: the engine starts a new link after
    /// adding it (outside its lock), and a stop between the two found no task to cancel, so the
    /// link then ran, connected and wrote to the replica after the engine had stopped.
    func start() {
        state.withLock { s in
            guard !s.stopped, s.task == nil else { return }
            // On the store's threads: the link's replica reads and writes are SQLite calls (StoreThreads).
            s.task = Task(executorPreference: StoreThreads.executor) { await self.run() }
        }
    }

    func stop() async {
        let (task, connection) = state.withLock { s in
            s.stopped = true
            return (s.task, s.connection)
        }
        task?.cancel()
        await connection?.close()
        await task?.value
        setStatus(.stopped)
    }

    var status: ParticipantSync.LinkStatus { state.withLock { $0.status } }

    /// Whether the engine forgot the owner, of whom nothing was left in the replica.
    var forgotten: Bool { state.withLock { $0.forgotten } }

    /// The open connection, if the link has one.
    var activeConnection: (any OwnerDatabase)? {
        state.withLock { $0.connection }.flatMap { $0.isActive ? $0 : nil }
    }

    /// The number of the last sync request a completed catch-up covered.
    var completedSync: Int { state.withLock { $0.syncCompleted } }

    /// How many connections have ended in a failure so far.
    var failureCount: Int { state.withLock { $0.failures } }

    /// The failure that ended the last connection (or attempt), unless the link follows the owner now;
    /// while it follows, why its writes or leaves wait, if they do.
    var currentFailure: ShareSyncError? {
        state.withLock { $0.status == .following ? $0.heldBack : $0.lastFailure }
    }

    /// The last failure, if a connection ended in one after the first `count` failures and it is not a
    /// network problem the link waits out (a full disk, a refusal): what a caller waiting for a sync
    /// should be told instead of waiting for its timeout.
    func lastingFailure(after count: Int) -> ShareSyncError? {
        state.withLock { s in
            guard s.failures > count, let failure = s.lastFailure, !Self.isTransient(failure) else { return nil }
            return failure
        }
    }

    /// Asks for a catch-up; returns the request's number (see ``completedSync``).
    func requestSync() -> Int {
        let n = state.withLock { s in
            s.syncRequested += 1
            return s.syncRequested
        }
        wakeup.signal()
        return n
    }

    /// Ends the current connection, if there is one, and connects again at once at the owner's stored
    /// address (set by hand: `owner address`). Before, the link went on over its connection to the
    /// old address, and an address mistyped showed only once that connection ended, maybe days later.
    /// Waiting to reconnect, the wait ends.
    /// A connection attempt under way is given up at once: before, one to an old address that never
    /// answered held the new address back until its connect timeout (10 s by default).
    func reconnect() {
        let (connection, giveUp) = state.withLock { s -> ((any OwnerDatabase)?, (@Sendable () -> Void)?) in
            s.reconnectAsked = true
            return (s.connection, s.giveUpConnecting)
        }
        giveUp?()
        if let connection { Task { await connection.close() } }
        wakeup.signal()
    }

    /// Asks for the outbox to be sent now (a write was queued).
    func pokeOutbox() {
        state.withLock { $0.outboxPoked = true }
        wakeup.signal()
    }

    private func setStatus(_ status: ParticipantSync.LinkStatus) {
        let caughtUp = state.withLock { s -> Date? in
            defer { s.status = status }
            // Leaving `following` (or entering it) marks the last moment the replica was known current.
            guard status == .following || s.status == .following, status != s.status else { return nil }
            s.caughtUpAt = Date()
            s.lastSynced = s.caughtUpAt
            return s.caughtUpAt
        }
        if let caughtUp { noteCaughtUp(at: caughtUp) }
        hub.notifyWatchers()
    }

    /// Keeps in the replica when the link last was caught up, so that a restarted node's status says
    /// so (before: "never", and a lag counted from the restart). A node killed while following comes
    /// back with the moment it began to follow: a lag too long, not too short.
    private func noteCaughtUp(at date: Date) {
        do {
            try replica.noteLastSynced(owner: ownerName, at: date)
        } catch {
            logger.warning("could not note when the replica was caught up", metadata: ["error": "\(error)"])
        }
    }

    /// The link's status and times as the replica last saw them: when it last was caught up (before
    /// this link started), if ever.
    private func restoreLastSynced() {
        guard let date = try? replica.lastSynced(owner: ownerName) else { return }
        state.withLock { s in
            guard s.lastSynced == nil else { return }
            s.lastSynced = date
            s.caughtUpAt = date
        }
    }

    /// How far behind the owner the replica may be: zero while following (changes arrive as pushes),
    /// else the time since it last was (or since the link started, if it never was).
    var lag: Duration {
        state.withLock { s in
            s.status == .following ? .zero : .milliseconds(Int64(max(0, Date().timeIntervalSince(s.caughtUpAt)) * 1000))
        }
    }

    /// When the link last was caught up with the owner.
    var lastSynced: Date? { state.withLock { $0.status == .following ? Date() : $0.lastSynced } }

    /// Whether a stored change token cannot be used any more: expired, or one the owner does not read
    /// as a token at all (`changeTokenFormat`, `changeTokenVersion`: a replica file damaged, or
    /// written by something else). Either way the zones are listed, or the zone fetched, again from no
    /// token. Before, a malformed stored token failed every catch-up until someone intervened.
    static func storedTokenUnusable(_ error: ShareSyncError) -> Bool {
        error.code == .changeTokenExpired
            || (error.code == .invalidArguments && (error.rule == .changeTokenFormat || error.rule == .changeTokenVersion))
    }

    static func isTransient(_ error: ShareSyncError) -> Bool {
        [.networkFailure, .networkUnavailable, .serviceUnavailable, .requestRateLimited].contains(error.code)
    }

    /// Whether a queued write or a share left locally stays pending after `error`: a transient
    /// failure, or the request given up because the engine stopped (``ParticipantSync/stop()``
    /// cancels the link's task). The owner may or may not have taken it; the next connection sends
    /// it again (a write that landed is recognized then). Before, a stop during a flush kept the
    /// write as refused, with `operationCancelled`, and dropped a pending leave as told.
    ///
    /// A full disk (`quotaExceeded`) is not one of these: the connection is fine, and the link goes on
    /// reading (``holdsBackWrite(_:)``).
    static func keepsPending(_ error: ShareSyncError) -> Bool {
        isTransient(error) || error.code == .operationCancelled
    }

    /// Whether the owner's answer to a write is a failure of its own store that passes once the cause
    /// is gone: a full disk (`quotaExceeded`), or its database failing (`internalError`, rule
    /// `storeFailure`: an I/O error, a lock held too long). The write stays pending, and so do the later ones, but the
    /// connection goes on: the link catches up and follows pushes, and sends the outbox again after a
    /// pause (``holdBack(_:what:)``), showing the failure in its status meanwhile. Before, the write
    /// was kept as `refused`, as if the owner had refused it, and waited for the user.
    static func holdsBackWrite(_ error: ShareSyncError) -> Bool {
        error.code == .quotaExceeded || (error.code == .internalError && error.rule == .storeFailure)
    }

    /// The same for a share left locally: a full disk, or `internalError` (a failure of the owner's
    /// store). Any other refusal means the share is already gone there (left, removed, deleted).
    static func holdsBackLeave(_ error: ShareSyncError) -> Bool {
        holdsBackWrite(error) || error.code == .internalError
    }

    /// Notes that the owner could not take writes or leaves now (``holdsBackWrite(_:)``): they stay
    /// pending, the failure is logged and emitted and shown in the link's status, and the outbox is
    /// poked again after ``ParticipantSync/Configuration/maximumBackoff``.
    func holdBack(_ error: ShareSyncError, what: String) {
        state.withLock { $0.heldBack = error }
        logger.warning("the owner cannot take \(what) now; they stay pending", metadata: ["owner": "\(ownerName)", "error": "\(error)"])
        hub.emit(.error(owner: ownerName, error))
        let pause = configuration.maximumBackoff
        Task { [weak self] in
            try? await Task.sleep(for: pause)
            self?.pokeOutbox()
        }
    }

    /// The owner took what was held back: the status no longer shows it.
    func clearHeldBack() {
        state.withLock { $0.heldBack = nil }
    }

    // MARK: The loop

    private func run() async {
        var delay = configuration.initialBackoff
        while !Task.isCancelled {
            state.withLock { $0.reconnectAsked = false }
            setStatus(.connecting)
            var reachedFollowing = false
            var failure: ShareSyncError?
            do {
                // A failed read of the replica is a failure like any other, retried with backoff; only
                // an owner no longer in the replica stops the link. Before, a read error (a busy
                // timeout, a descriptor limit) stopped it for good, logged as the owner leaving: later
                // writes queued for nobody until the daemon restarted.
                guard let info = try replica.owner(named: ownerName) else {
                    logger.info("owner left the replica; link stops")
                    break
                }
                let connection = try await connectUnlessGivenUp(info)
                try await session(connection) { reachedFollowing = true }
            } catch {
                failure = error
            }
            // Stopped: an attempt given up because ``stop()`` came before its cancellation is no failure.
            if Task.isCancelled || forgotten || state.withLock({ $0.stopped }) { break }
            if state.withLock({ $0.reconnectAsked }) {
                // Ended by ``reconnect()``: not a failure, and no wait.
                logger.info("reconnecting at the owner's address")
                hub.emit(.disconnected(owner: ownerName, error: nil, retryIn: .zero))
                delay = configuration.initialBackoff
                continue
            }
            if reachedFollowing { delay = configuration.initialBackoff }
            var wait = delay
            // The owner's `retryAfterSeconds`, within reason: any Double comes off the wire, and one past
            // Int's milliseconds trapped here.
            if let seconds = failure?.retryAfterSeconds, seconds.isFinite, seconds > 0 {
                wait = max(wait, .milliseconds(Int(min(seconds, 3600) * 1000)))
            }
            if let failure {
                state.withLock { s in
                    s.failures += 1
                    s.lastFailure = failure
                }
                if !Self.isTransient(failure) {
                    logger.warning("sync with the owner failed; retrying", metadata: ["error": "\(failure)", "retryIn": "\(wait)"])
                }
            }
            logger.debug("disconnected", metadata: ["error": "\(failure.map(String.init(describing:)) ?? "none")"])
            setStatus(.waitingToReconnect)
            hub.emit(.disconnected(owner: ownerName, error: failure, retryIn: wait))
            await wakeup.wait(upTo: wait)
            // Woken by ``reconnect()`` (a new address): its first attempt is not a retry of the old one.
            delay = state.withLock({ $0.reconnectAsked }) ? configuration.initialBackoff : min(delay * 2, configuration.maximumBackoff)
        }
        setStatus(.stopped)
    }

    /// Connects to the owner at its stored address; if nothing answers there (a connection that could
    /// not be made, not a refusal from the owner) and the owner announced another address, tries that
    /// one for this connection (the owner's key is checked there as anywhere). The stored address is
    /// kept: it may be the one that works from here most of the time (a port forwarded, a name set by
    /// hand), and `owner address` or the owner's next announcement changes it. An owner that moved
    /// while this node only knew its old address (a share URL handed out before the move, accepted
    /// while the old address still answered) is found again instead of being lost. When both fail,
    /// the stored address's error is the one reported.
    private func connect(_ info: OwnerInfo) async throws(ShareSyncError) -> any OwnerDatabase {
        let connector = configuration.effectiveConnector
        do {
            return try await connector.connect(
                host: info.host, port: info.port, identity: identity, expectedOwnerFingerprint: info.fingerprint,
                displayName: configuration.displayName)
        } catch where [.networkFailure, .networkUnavailable].contains(error.code) {
            // Given up meanwhile (``connectUnlessGivenUp(_:)``): no second try, at an address that may
            // by now be someone else's.
            guard !Task.isCancelled, let announced = try replica.announcedAddress(owner: ownerName),
                announced.host != info.host || announced.port != info.port,
                HostName.isValid(announced.host), (1...65535).contains(announced.port),
                let connection = try? await connector.connect(
                    host: announced.host, port: announced.port, identity: identity, expectedOwnerFingerprint: info.fingerprint,
                    displayName: configuration.displayName)
            else { throw error }
            logger.notice(
                "the owner did not answer at its stored address; connected at the one it announced",
                metadata: ["stored": "\(info.host):\(info.port)", "announced": "\(announced.host):\(announced.port)"])
            return connection
        }
    }

    /// ``connect(_:)``, given up as soon as ``reconnect()`` asks for the owner's new address or the
    /// link stops (`operationCancelled`). Neither could cut short an attempt under way: one to an
    /// address where nothing answers (a host gone, packets dropped) lasted until its connect timeout,
    /// 10 s by default, and so did `owner address` and stopping the engine. The attempt given up is
    /// cancelled (a TLS handshake or authentication under way ends its connection at once; a TCP
    /// connect is left to its timeout, in the background), and a connection it makes all the same
    /// is closed.
    private func connectUnlessGivenUp(_ info: OwnerInfo) async throws(ShareSyncError) -> any OwnerDatabase {
        let race = ConnectRace()
        // On the store's threads, as the link is: the attempt reads the replica (the announced address).
        let attempt = Task(executorPreference: StoreThreads.executor) { [self] in
            let outcome: ConnectRace.Outcome
            do throws(ShareSyncError) { outcome = .connected(try await connect(info)) } catch { outcome = .failed(error) }
            if !race.finish(outcome), case .connected(let late) = outcome { await late.close() }
        }
        let giveUp: @Sendable () -> Void = { if race.finish(.givenUp) { attempt.cancel() } }
        let askedAlready = state.withLock { s in
            s.giveUpConnecting = giveUp
            return s.reconnectAsked || s.stopped
        }
        if askedAlready { giveUp() }
        let outcome = await withTaskCancellationHandler { await race.outcome() } onCancel: { giveUp() }
        state.withLock { $0.giveUpConnecting = nil }
        switch outcome {
        case .connected(let connection): return connection
        case .failed(let error): throw error
        case .givenUp: throw ShareSyncError(.operationCancelled, "the connection attempt to owner \(ownerName) was given up")
        }
    }

    /// One connection's life: outbox, catch-up, then pushes until the connection ends.
    private func session(_ connection: any OwnerDatabase, reachedFollowing: () -> Void) async throws(ShareSyncError) {
        // The pushes start empty with each subscription (``runSession(_:reachedFollowing:)``).
        let reconnectAsked = state.withLock { s in
            s.connection = connection
            return s.reconnectAsked
        }
        defer { state.withLock { $0.connection = nil } }
        if reconnectAsked {
            // Asked while this connection was being made (maybe to the address before): made again.
            await connection.close()
            return
        }
        do {
            try await runSession(connection, reachedFollowing: reachedFollowing)
        } catch {
            await connection.close()
            throw error
        }
        await connection.close()
    }

    private func runSession(_ connection: any OwnerDatabase, reachedFollowing: () -> Void) async throws(ShareSyncError) {
        guard connection.ownerName == ownerName else {
            throw ShareSyncError(
                .notAuthenticated, "the node at this address is owner \(connection.ownerName), not \(ownerName)",
                rule: .ownerMismatch)
        }
        hub.emit(.connected(owner: ownerName))
        // The owner says where it is reached: remembered, and followed when it changes (it moved).
        // The listener runs on the connection's reading task, on an event loop: the synced write of
        // the replica goes to the store's threads, the latest announcement first and one at a time.
        // The welcome's address goes the same way, after the listener is set: `announcedAddress` is the
        // latest heard, so an older one is never noted after a newer one.
        let generation = state.withLock { $0.addressGeneration }
        connection.onAddressAnnounced { [self] address in self.announce(address, generation: generation) }
        if let address = connection.announcedAddress { announce(address, generation: generation) }
        setStatus(.syncing)
        if try await !sendPendingLeaves(connection).heldBack { try await flushOutbox(connection) }
        while !Task.isCancelled {
            try await catchUpAndMark(connection)
            // The subscription's pushes are queued as the connection reads them (``receiver(_:)``) and
            // applied in order by ``follow(_:)``, here.
            let subscription = state.withLock { s in
                s.pushes = PushQueue()
                s.pushesEnded = false
                s.subscription += 1
                return s.subscription
            }
            do {
                try await connection.subscribe(
                    since: try replica.databaseChangeToken(owner: ownerName), receiver: receiver(subscription))
            } catch where error.code == .changeTokenExpired {
                continue  // the history moved past the token since the catch-up: catch up again
            }
            setStatus(.following)
            reachedFollowing()
            try await follow(connection)
            guard connection.isActive else {
                throw ShareSyncError(.networkFailure, "the connection to the owner closed")
            }
            // The subscription ended with the connection still open: its token expired. Start over.
            setStatus(.syncing)
        }
    }

    /// Notes the owner's announced address on the store's threads: the latest one first, one at a time.
    /// Drops every announcement heard over the connections made so far, noted or not yet: called
    /// before an address set by hand clears the announced one, so that a welcome or push of the old
    /// connection, noted a moment later on the store's threads, cannot bring back the silent fallback
    /// (``connect(_:)``) that setting it by hand ends. Returns once none of them is being noted.
    func ignoreEarlierAnnouncements() {
        announcing.withLock { _ in state.withLock { $0.addressGeneration += 1 } }
    }

    private func announce(_ address: WireAddress, generation: Int) {
        state.withLock { $0.announced = (address, generation) }
        Task(executorPreference: StoreThreads.executor) { [self] in
            announcing.withLock { _ in
                guard
                    let latest = state.withLock({ s -> WireAddress? in
                        defer { s.announced = nil }
                        guard let (address, generation) = s.announced, generation == s.addressGeneration else { return nil }
                        return address
                    })
                else { return }
                noteAnnounced(latest)
            }
        }
    }

    /// Stores an address the owner announced (see ``SharedDatabaseReplica/noteAnnouncedAddress(owner:host:port:)``).
    private func noteAnnounced(_ address: WireAddress) {
        // Only the proven owner announces, but an address nobody can reach would replace the working one
        // for good: ignored, and said.
        guard HostName.isValid(address.host), (1...65535).contains(address.port) else {
            logger.warning(
                "the owner announced an address that is not one; ignored",
                metadata: ["host": "\(address.host.prefix(80).debugDescription)", "port": "\(address.port)"])
            return
        }
        do {
            if let moved = try replica.noteAnnouncedAddress(owner: ownerName, host: address.host, port: address.port) {
                logger.notice("the owner announced a new address; reconnecting there from now on", metadata: ["address": "\(address)"])
                hub.emit(.ownerAddressChanged(owner: ownerName, host: moved.host, port: moved.port, announced: true))
            }
        } catch {
            hub.emit(.error(owner: ownerName, error))
        }
    }

    /// Queues subscription `subscription`'s pushes for ``follow(_:)`` as they arrive, then notes that it
    /// ended. Pushes of an earlier subscription, still on their way, are dropped: the catch-up before
    /// the current one read past them.
    private func receiver(_ subscription: Int) -> PushReceiver {
        PushReceiver(
            receive: { [self] push in
                let current = state.withLock { s in
                    guard s.subscription == subscription else { return false }
                    s.pushes.add(push)
                    return true
                }
                if current { wakeup.signal() }
            },
            end: { [self] in
                state.withLock { s in
                    if s.subscription == subscription { s.pushesEnded = true }
                }
                wakeup.signal()
            })
    }

    /// Tells the owner of the shares left locally (`leave --local`) while it was unreachable. A share
    /// the owner no longer has for this node (already left, removed, deleted) counts as told; a network
    /// failure keeps the leave for the next connection. Returns whether a zone was purged: the caller
    /// catches up before it applies another push, as the reconnect path does. Leaving one share
    /// empties its whole zone in the replica; once the owner is told, the zone is noted for a fetch
    /// from the start (``SharedDatabaseReplica/resolvePendingLeave(_:)``), so the catch-up brings back
    /// another share of the same zone that the node keeps. A push applied instead recreated the zone
    /// with a current token and none of that share's records.
    ///
    /// Returns whether one was resolved, and whether the owner held the leaves back
    /// (``holdsBackLeave(_:)``): the outbox then waits too, as it would behind them.
    private func sendPendingLeaves(_ connection: any OwnerDatabase) async throws(ShareSyncError) -> (purged: Bool, heldBack: Bool) {
        var purged = false
        for leave in try replica.pendingLeaves(owner: ownerName) {
            do {
                try await connection.leaveShare(zoneName: leave.zoneName, shareRecordName: leave.shareName)
                logger.info("owner told of a share left locally", metadata: ["zone": "\(leave.zoneName)"])
            } catch where Self.keepsPending(error) {
                throw error
            } catch where Self.holdsBackLeave(error) {
                holdBack(error, what: "the shares left locally")
                return (purged, true)
            } catch {
                logger.info(
                    "share left locally was already gone on the owner",
                    metadata: ["zone": "\(leave.zoneName)", "error": "\(error)"])
            }
            try replica.resolvePendingLeave(leave)
            purged = true
        }
        return (purged, false)
    }

    /// Applies pushes and serves pokes until the subscription ends (or the task is cancelled).
    private func follow(_ connection: any OwnerDatabase) async throws(ShareSyncError) {
        while !Task.isCancelled {
            let (queued, ended, outboxPoked, syncWanted) = state.withLock { s in
                defer { s.outboxPoked = false }
                return (s.pushes.take(), s.pushesEnded, s.outboxPoked, s.syncRequested > s.syncCompleted)
            }
            // Pushes dropped for too many waiting: none of those kept after them is applied either (a
            // push stores tokens past the dropped ones' changes); a catch-up from the stored tokens,
            // which reads past them all, replaces them.
            let pushes = queued.dropped ? [] : queued.items
            var fallenBehind = queued.dropped
            var purged = false
            for push in pushes {
                purged = purged || !push.databaseChanges.deletedZoneIDs.isEmpty
                // A push that says more is coming (cut by the owner's response size, or a database page
                // that did not hold every zone) is followed by a catch-up from the stored tokens before
                // any later push: those already queued are covered by that catch-up, which reads later.
                if try await apply(push) {
                    fallenBehind = true
                    break
                }
            }
            if outboxPoked {
                let leaves = try await sendPendingLeaves(connection)
                if leaves.purged { fallenBehind = true }
                if !leaves.heldBack { try await flushOutbox(connection) }
            }
            if fallenBehind || syncWanted {
                try await catchUpAndMark(connection)
            } else if purged || outboxPoked, try replica.fetchAllZones(owner: ownerName).isEmpty {
                // The owner's last zone here went (a share stopped, this participant removed), or the
                // last write kept for an owner whose zones had gone left the outbox.
                try forgetIfNothingLeft()
            }
            if ended { return }
            await wakeup.wait(upTo: .seconds(60))
        }
    }

    /// Applies a push in one transaction; returns whether it says more is coming (fetch to catch up).
    private func apply(_ push: OwnerConnection.Push) async throws(ShareSyncError) -> Bool {
        let purged = push.databaseChanges.deletedZoneIDs.map(\.zoneName)
        try await StoreThreads.run { [self] () throws(ShareSyncError) in
            try replica.apply(
                databaseChanges: push.databaseChanges, zoneChanges: push.zoneChanges, token: push.changeToken, owner: ownerName)
        }
        for zone in purged { hub.emit(.zonePurged(owner: ownerName, zoneName: zone)) }
        for page in push.zoneChanges { report(page) }
        return push.moreComing || push.databaseChanges.moreComing || push.zoneChanges.contains(where: \.moreComing)
    }

    private func report(_ page: ZoneChanges) {
        report(zoneName: page.zoneID.zoneName, changed: page.changedRecords.count, deleted: page.deletedRecords.count)
    }

    private func report(_ page: EncodedZoneChanges) {
        report(zoneName: page.zoneID.zoneName, changed: page.changedCount, deleted: page.deletedCount)
    }

    private func report(zoneName: String, changed: Int, deleted: Int) {
        hub.countReceived(changed + deleted)
        guard changed + deleted > 0 else { return }
        hub.emit(.zoneChanged(owner: ownerName, zoneName: zoneName, changed: changed, deleted: deleted))
    }

    // MARK: Catching up

    private func catchUpAndMark(_ connection: any OwnerDatabase) async throws(ShareSyncError) {
        let covers = state.withLock { $0.syncRequested }
        try await catchUp(connection)
        // Pages are applied without syncing each one (``SharedDatabaseReplica/Durability``): a sync
        // that completes (an accept, a waitUntilSynced) is on the disk.
        try await StoreThreads.run { [self] () throws(ShareSyncError) in try replica.syncToDisk() }
        let zones = (try? replica.fetchAllZones(owner: ownerName).map(\.zoneID.zoneName)) ?? []
        // Caught up now, whether or not the link goes on to follow: a node stopped between the
        // catch-up and the subscription's answer (an accept, then a stop) said it never was.
        let now = Date()
        state.withLock { s in
            s.syncCompleted = max(s.syncCompleted, covers)
            s.caughtUpAt = now
            s.lastSynced = now
        }
        noteCaughtUp(at: now)
        hub.emit(.synced(owner: ownerName, zones: zones))
        if zones.isEmpty { try forgetIfNothingLeft() }
    }

    /// Asks the engine to forget the owner if the replica holds nothing of it any more (after a
    /// catch-up, or a push that purged a zone); if it did, ends the session by throwing (its
    /// connection is closed), and the loop stops, as it does for a link whose owner is not in the replica.
    private func forgetIfNothingLeft() throws(ShareSyncError) {
        guard try forget() else { return }
        throw ShareSyncError(.operationCancelled, "the owner was forgotten")
    }

    /// The engine forgot the owner (``ParticipantSync/forgetIfNothingLeft(owner:)``), from this link's
    /// task or another: the link stops, its connection closed and any wait cut short.
    func forgottenByEngine() {
        let (task, connection) = state.withLock { s in
            s.forgotten = true
            return (s.task, s.connection)
        }
        task?.cancel()
        if let connection { Task { await connection.close() } }
        wakeup.signal()
    }

    /// Fetches everything since the stored tokens; see ``ParticipantSync``, step 3.
    private func catchUp(_ connection: any OwnerDatabase) async throws(ShareSyncError) {
        var changedZones: Set<String> = []
        if let token = try replica.databaseChangeToken(owner: ownerName) {
            do {
                changedZones = try await fetchDatabaseChanges(connection, since: token)
            } catch where Self.storedTokenUnusable(error) {
                logger.info("database change token expired; listing the zones again", metadata: ["error": "\(error)"])
                changedZones = try await refetchZoneList(connection)
            }
        } else {
            changedZones = try await refetchZoneList(connection)
        }
        let known = Set(try replica.fetchAllZones(owner: ownerName).map(\.zoneID.zoneName))
        let refetch = Set(try replica.zonesToRefetch(owner: ownerName))
        for zone in changedZones.union(known).union(refetch).sorted() {
            try Task.checkCancellation(or: ShareSyncError(.networkFailure, "the sync was stopped"))
            if refetch.contains(zone) {
                // From the start and swapped in whole, whatever the replica holds of it: a catch-up
                // that was paging through the zone when the leave was resolved (an accept's) went on
                // storing its later pages and their token into the purged zone. Synced from that
                // token, the records of the pages before were missing for good.
                try await replaceZone(connection, zone)
                try replica.refetched(owner: ownerName, zoneName: zone)
            } else {
                try await syncZone(connection, zone)
            }
        }
    }

    /// Applies database pages from a token; returns the zones listed as changed.
    private func fetchDatabaseChanges(_ connection: any OwnerDatabase, since token: ServerChangeToken)
        async throws(ShareSyncError) -> Set<String>
    {
        var token = token
        var changed: Set<String> = []
        while true {
            let page = try await connection.fetchDatabaseChanges(since: token, resultsLimit: configuration.pageSize)
            try checkProgress(moreComing: page.moreComing, token: page.changeToken, since: token, of: "database changes")
            try await StoreThreads.run { [self] () throws(ShareSyncError) in try replica.apply(databaseChanges: page, owner: ownerName) }
            for zone in page.deletedZoneIDs { hub.emit(.zonePurged(owner: ownerName, zoneName: zone.zoneName)) }
            changed.formUnion(page.changedZoneIDs.map(\.zoneName))
            token = page.changeToken
            if !page.moreComing { return changed }
        }
    }

    /// Lists the zones from no token; zones of the owner that are not listed any more are purged. The
    /// pages are applied only after the purge, so a crash in between repeats the whole step.
    private func refetchZoneList(_ connection: any OwnerDatabase) async throws(ShareSyncError) -> Set<String> {
        let pages: [DatabaseChanges]
        do {
            pages = try await listZones(connection, pageSize: configuration.pageSize)
        } catch where error.code == .changeTokenExpired && configuration.pageSize != nil {
            // A page token older than the owner's compaction horizon (see replaceZone): one page.
            pages = try await listZones(connection, pageSize: nil)
        }
        let listed = Set(pages.flatMap(\.changedZoneIDs).map(\.zoneName))
        for zone in try replica.fetchAllZones(owner: ownerName).map(\.zoneID.zoneName) where !listed.contains(zone) {
            try replica.purgeZone(owner: ownerName, zoneName: zone)
            hub.emit(.zonePurged(owner: ownerName, zoneName: zone))
        }
        for page in pages { try replica.apply(databaseChanges: page, owner: ownerName) }
        return listed
    }

    private func listZones(_ connection: any OwnerDatabase, pageSize: Int?) async throws(ShareSyncError) -> [DatabaseChanges] {
        var pages: [DatabaseChanges] = []
        var token: ServerChangeToken?
        var zones = 0
        repeat {
            let page = try await connection.fetchDatabaseChanges(since: token, resultsLimit: pageSize)
            try checkProgress(moreComing: page.moreComing, token: page.changeToken, since: token, of: "database changes")
            zones += page.changedZoneIDs.count + page.deletedZoneIDs.count
            guard zones <= Self.maximumListedZones else {
                throw ShareSyncError(
                    .limitExceeded,
                    "owner \(ownerName) lists more than \(Self.maximumListedZones) zones; not following it")
            }
            pages.append(page)
            token = page.changeToken
        } while pages.last!.moreComing
        return pages
    }

    /// The most zones one listing of an owner's zones holds in memory.
    static let maximumListedZones = 1_000_000

    /// A page of database changes that says more are coming must move the token on. An owner whose
    /// pages do not (a broken or hostile one) kept the link fetching the same page for ever; it is
    /// now a failure of the link, retried with backoff like any other.
    private func checkProgress(
        moreComing: Bool, token: ServerChangeToken, since asked: ServerChangeToken?, of what: String
    ) throws(ShareSyncError) {
        guard moreComing, token == asked else { return }
        throw ShareSyncError(
            .internalError, "owner \(ownerName) answered \(what) that say more are coming without moving their token on; not following it")
    }

    /// Fetches a zone's pages from its token, each applied with its token; replaces the zone if the token
    /// expired, purges it if it is no longer shared. The next page is fetched while one is applied
    /// (``ZonePageFetcher``); pages are applied in order, each in its own transaction with its token.
    private func syncZone(_ connection: any OwnerDatabase, _ zone: String) async throws(ShareSyncError) {
        var token = try replica.zoneChangeToken(owner: ownerName, zoneName: zone)
        do throws(ShareSyncError) {
            var pages = await ZonePageFetcher(connection, zoneName: zone, since: token, pageSize: configuration.pageSize)
            while let page = try await pages.next() {
                try checkProgress(moreComing: page.moreComing, token: page.changeToken, since: token, of: "changes of zone \(zone)")
                try await StoreThreads.run { [self] () throws(ShareSyncError) in try replica.apply(page, owner: ownerName) }
                report(page)
                token = page.changeToken
            }
        } catch where Self.storedTokenUnusable(error) && token != nil {
            logger.info("zone change token expired; fetching the zone again", metadata: ["zone": "\(zone)", "error": "\(error)"])
            try await replaceZone(connection, zone)
        } catch where error.code == .zoneNotFound {
            // The zone left the view between the database fetch and now.
            try replica.purgeZone(owner: ownerName, zoneName: zone)
            hub.emit(.zonePurged(owner: ownerName, zoneName: zone))
        }
    }

    /// Fetches a zone again from no token into the staging area and swaps it in.
    ///
    /// After the owner compacted its history, the token inside a refetch (after a page that ended on a
    /// record older than the compaction) is itself expired: the owner's store cannot page through
    /// records older than its horizon. The refetch is then tried once more in pages as large as the
    /// owner allows (`resultsLimit` nil), which succeeds for zones that fit in one page.
    private func replaceZone(_ connection: any OwnerDatabase, _ zone: String) async throws(ShareSyncError) {
        do {
            try await replaceZone(connection, zone, pageSize: configuration.pageSize)
        } catch where error.code == .changeTokenExpired && configuration.pageSize != nil {
            logger.info("refetch hit the owner's history horizon; refetching in one page", metadata: ["zone": "\(zone)"])
            try await replaceZone(connection, zone, pageSize: nil)
        }
    }

    private func replaceZone(_ connection: any OwnerDatabase, _ zone: String, pageSize: Int?) async throws(ShareSyncError) {
        try replica.beginZoneReplacement(owner: ownerName, zoneName: zone)
        do {
            var count = 0
            var token: ServerChangeToken?
            var pages = await ZonePageFetcher(connection, zoneName: zone, since: nil, pageSize: pageSize)
            while let page = try await pages.next() {
                // As in syncZone: an owner whose pages never move on made this stage the same page for ever.
                try checkProgress(moreComing: page.moreComing, token: page.changeToken, since: token, of: "changes of zone \(zone)")
                token = page.changeToken
                try await StoreThreads.run { [self] () throws(ShareSyncError) in try replica.stageZoneReplacement(page, owner: ownerName) }
                hub.countReceived(page.changes.count)
                count += page.changedCount
            }
            try replica.commitZoneReplacement(owner: ownerName, zoneName: zone)
            hub.emit(.zoneReplaced(owner: ownerName, zoneName: zone, records: count))
        } catch {
            try? replica.discardZoneReplacement(owner: ownerName, zoneName: zone)
            if error.code == .zoneNotFound {
                try replica.purgeZone(owner: ownerName, zoneName: zone)
                hub.emit(.zonePurged(owner: ownerName, zoneName: zone))
                return
            }
            if error.code == .changeTokenExpired {
                var error = error
                error.message = "zone \(zone) cannot be fetched again: \(error.message) (the owner's store cannot "
                    + "page through records older than its compaction horizon)"
                throw error
            }
            throw error
        }
    }
}

extension Task where Success == Never, Failure == Never {
    /// Throws `error` if the current task is cancelled.
    static func checkCancellation(or error: ShareSyncError) throws(ShareSyncError) {
        if Task.isCancelled { throw error }
    }
}

/// The outcome of one connection attempt, or that the link gave it up first: whichever comes first
/// is kept (``ParticipantOwnerLink/connectUnlessGivenUp(_:)``).
private final class ConnectRace: Sendable {
    enum Outcome: Sendable {
        case connected(any OwnerDatabase)
        case failed(ShareSyncError)
        case givenUp
    }

    private struct State {
        var outcome: Outcome?
        var waiter: CheckedContinuation<Outcome, Never>?
    }

    private let state = Mutex(State())

    /// Keeps `outcome` if none came before it (and hands it to the waiter); whether it was kept.
    func finish(_ outcome: Outcome) -> Bool {
        let (kept, waiter) = state.withLock { s -> (Bool, CheckedContinuation<Outcome, Never>?) in
            guard s.outcome == nil else { return (false, nil) }
            s.outcome = outcome
            defer { s.waiter = nil }
            return (true, s.waiter)
        }
        waiter?.resume(returning: outcome)
        return kept
    }

    /// Waits for the outcome kept.
    func outcome() async -> Outcome {
        await withCheckedContinuation { continuation in
            let now = state.withLock { s -> Outcome? in
                if let outcome = s.outcome { return outcome }
                s.waiter = continuation
                return nil
            }
            if let now { continuation.resume(returning: now) }
        }
    }
}

/// The pushes a link has received and not applied yet, at most ``capacity`` of them. An owner pushing
/// faster than the link applies (or a hostile one, streaming pushes while it never answers the
/// catch-up's fetches) grew the queue without bound, each push up to a frame of 16 MiB decoded. Past
/// the capacity the queue is emptied and marked: the link catches up from its stored tokens, which
/// covers every push dropped (protocol.md, "Pushes": pushes that arrived before a catch-up began may
/// be discarded).
struct PushQueue<Item> {
    static var capacity: Int { 32 }
    private var items: [Item] = []
    private var dropped = false

    init() {}

    /// Queues `item`, or drops everything queued (and `item`) if the queue is full.
    mutating func add(_ item: Item) {
        if items.count >= Self.capacity {
            items = []
            dropped = true
        } else {
            items.append(item)
        }
    }

    /// The items queued, and whether any were dropped since the last take; empties the queue.
    mutating func take() -> (items: [Item], dropped: Bool) {
        defer {
            items = []
            dropped = false
        }
        return (items, dropped)
    }
}
