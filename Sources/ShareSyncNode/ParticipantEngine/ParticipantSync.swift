import Foundation
import Logging
import NIOCore
import ShareSyncCore
import ShareSyncStore
import ShareSyncWire
import Synchronization

/// The participant's sync engine: keeps a ``SharedDatabaseReplica`` (local SQLite) in step with the
/// shared databases of one or more owners, and sends this node's writes to them.
///
/// ```swift
/// let replica = try SharedDatabaseReplica(path: home + "/shared.sqlite")
/// let sync = ParticipantSync(replica: replica, identity: me)
/// try sync.start()                                  // reconnects to every owner already in the replica
/// let metadata = try await sync.accept(url: shareURL) // returns once the new share is in the replica
/// for await event in sync.events() { … }
/// ```
///
/// ## How an owner is followed
/// Each owner has its own link (one TCP connection, one task). A link repeats:
/// 1. **Connect** to the address stored with the owner (``OwnerInfo``), checking that the node proves the
///    owner's key.
/// 2. **Send the outbox**, oldest first (see "Writes" below).
/// 3. **Catch up** from the stored tokens: `fetchDatabaseChanges` from the database token, page by page
///    (deleted zones are purged), then `fetchZoneChanges` for every changed zone and every zone already in
///    the replica, from its token, page by page. Each page is applied with its token in one transaction
///    (``SharedDatabaseReplica/apply(_:owner:)``), so a crash loses or repeats nothing: the next catch-up
///    resumes from the last page stored. A zone's next page is requested (with the token of the page just
///    received) while that page is stored, and the owner's node reads it ahead too; pages are still stored
///    one after another, in order. Fetching every known zone (not only the ones listed as changed)
///    also covers a crash between storing a database page and fetching its zones.
///    - `changeTokenExpired` on a zone token: the zone is fetched again from no token into the staging area
///      and swapped in at once (``SharedDatabaseReplica/beginZoneReplacement(owner:zoneName:)``); readers
///      see the old zone until then. (The owner's store expires every token older than its compaction
///      horizon, including the tokens between the pages of a fetch from no token; such a refetch is retried
///      in one page of the owner's maximum size, so a zone larger than that cannot be refetched after a
///      compaction: the link reports it and retries with backoff.)
///    - `changeTokenExpired` on the database token (or no token yet): the zone list is fetched from no token
///      and zones of the owner that are no longer listed are purged.
///    - A zone purged by a local leave the owner has since taken (``SharedDatabaseReplica/zonesToRefetch(owner:)``:
///      another share of it may still be this node's) is fetched again from no token and swapped in the
///      same way, whatever the replica holds of it by then.
/// 4. **Follow**: `subscribe(since:)` the database token; each push is applied with its token in one
///    transaction. A push with `moreComing` triggers a catch-up; a subscription that ends while the
///    connection stays open (its token expired) starts over at step 3. While nothing is sent, the
///    connection pings the owner (``Configuration/pingInterval``) so that neither side cuts it as idle.
/// 5. On **disconnect**, wait (``Configuration/initialBackoff`` doubling up to
///    ``Configuration/maximumBackoff``, or the owner's `retryAfterSeconds` if longer) and go to 1. The
///    replica stays readable throughout; a sync request or a new write cuts the wait short.
///
/// ## Revocation
/// When the owner stops a share, deletes its zone, or removes, blocks or lets go of this participant,
/// the zone leaves this identity's view and arrives as a deleted zone: the replica purges it with its
/// records and token (``Event/zonePurged(owner:zoneName:)``).
///
/// A catch-up or push that leaves nothing of an owner in the replica (no zone, no queued write, no leave
/// to tell it, as after leaving, or losing, the last of its shares) forgets the owner: its link stops and
/// it is no longer connected to, even after a restart (``Event/ownerForgotten(owner:)``). Accepting one
/// of its shares again brings it back. (Before, the node connected to such an owner for good, and
/// reported every failure to reach it, though it followed nothing there.) So a zone that comes back
/// into this identity's view without an accept (the owner restored a backup from before the leave)
/// is not seen until one of the owner's shares is accepted again.
///
/// ## Writes
/// ``modifyRecords(owner:zoneName:saving:deleting:savePolicy:atomically:)`` sends a write at once when
/// the owner is connected and nothing older is pending in the outbox; the owner's answer goes back to
/// the caller (a conflict comes back at once as a `serverRecordChanged` failure with the owner's record). Otherwise (offline, or the send failed on the network) the write goes to the persistent outbox
/// and is sent on the next connection. The replica is not changed optimistically: the saved records
/// arrive with the owner's push (or the next catch-up), with their new change tags; reads that want
/// the local writes too use ``localEdits(owner:zoneName:)``.
///
/// ### The outbox and its states
/// Every queued write is an ``OutboxOperation`` in one of three states (``OutboxOperation/State``):
/// - **pending**: waiting to be sent; sent on each connection, in id order. Network failures
///   (`networkFailure`, `networkUnavailable`, `serviceUnavailable`, `requestRateLimited`) and the engine
///   stopping (`operationCancelled`) keep it pending. So does the owner's disk being full
///   (`quotaExceeded`): the link goes on following the owner, shows the error in
///   ``lastFailure(owner:)`` and sends the outbox again after ``Configuration/maximumBackoff``. (A
///   share left locally waits the same way, and also after `internalError` from the owner.) A write whose answer was lost on the network is sent again and then usually meets its own
///   earlier save as a conflict. When a pending save is accepted, later pending saves of the same record
///   based on the same change tag are rebased on the new tag, so successive offline edits of a record
///   do not conflict with each other.
/// - **conflict**: a save under ``SavePolicy/ifServerRecordUnchanged`` (the default) met a record whose
///   change tag is not the one the write was based on: someone saved it on the owner's node after this
///   node's copy was read (`serverRecordChanged`). The operation keeps the items the owner did not accept,
///   the error and the owner's version of each conflicting record (``OutboxOperation/serverRecords``).
///   Saves under `changedKeys` or `allKeys`, and deletions, never conflict.
/// - **refused**: the owner answered any other error, which sending again does not fix: the participant
///   was made read-only (`permissionFailure`, rule `readOnlyParticipant`) or lost the share, the record
///   is outside the share (`permissionFailure`), no longer exists (`unknownItem`, a save with a change
///   tag), a field or name is invalid (`invalidArguments`), and so on. A deletion answered `unknownItem`
///   is not refused but done: the record is gone, as it asked. A write the replica already shows to be
///   refused is not queued at all: a change of records in a zone where every share the replica holds
///   gives this node read-only permission throws `permissionFailure`, rule `readOnlyParticipant`, as the
///   owner would (what the replica holds is what the owner last said).
///
/// A conflict or a refusal is never dropped and never sent again on its own: it stays in the outbox
/// (``Event/operationKept(owner:operation:)``, and ``Event/error(owner:_:)`` for a refusal) until the
/// user resolves it with ``resolveConflict(id:keep:timeout:)`` (`mine`: send it again over the owner's
/// change tags; `theirs`: drop it) or ``discardOperation(id:)``. A write refused only because records
/// it saves were deleted on the owner's side (`unknownItem`) is resolved the same way (`mine` saves
/// them again as new records); any other refusal is only discarded. Later pending writes still go out.
///
/// With a ``Configuration/mergeConflict`` hook, a conflict first goes through it: `(local, server) ->
/// Record?`. A record returned is saved once more in place of the local one, with the server's change
/// tag; `nil` drops the local change and keeps the server's record (``Event/conflict(owner:recordID:resolved:)``).
/// Only a conflict the retry meets again stays in the outbox. Without a hook (the CLI daemon), every
/// conflict stays for the user. The CLI shows all this as `sharesync outbox` and counts it in
/// `sharesync status`; `record get --shared` shows a pending or conflicting local write in place of
/// the replica's record (read your own writes).
public final class ParticipantSync: Sendable {
    /// How the engine connects, pages, backs off and merges.
    public struct Configuration: Sendable {
        /// The display name sent to owners in `hello`.
        public var displayName: String?
        /// The `resultsLimit` of each fetch (`nil`: the owner's maximum).
        public var pageSize: Int?
        /// The first wait after a lost connection. Default 50 ms.
        public var initialBackoff: Duration
        /// The longest wait between attempts. Default 5 s.
        public var maximumBackoff: Duration
        /// How long a connection attempt (TCP and authentication) may take. Default 10 s.
        public var connectTimeout: TimeAmount
        /// Transport versions, encodings and limits.
        public var client: ClientConfiguration
        /// When a connection to an owner that has sent nothing for a while pings it, so that a quiet
        /// subscription is not cut as idle. Default ``OwnerConnection/PingInterval/automatic``: a third of
        /// `client.limits.idleTimeout` (40 s by default).
        public var pingInterval: OwnerConnection.PingInterval
        /// Resolves a queued save refused with `serverRecordChanged`: given the local record and the
        /// owner's, returns the record to save instead, or `nil` to drop the local change. Default: no
        /// hook: every conflict stays in the outbox as ``OutboxOperation/State/conflict`` for the user to
        /// resolve (``ParticipantSync/resolveConflict(id:keep:timeout:)``).
        public var mergeConflict: (@Sendable (_ local: Record, _ server: Record) -> Record?)?
        /// How the engine reaches owners. Default `nil`: over the network (``NetworkOwnerConnector`` with
        /// ``client``, ``connectTimeout`` and ``pingInterval``); an ``InProcessOwner`` in tests.
        public var connector: (any OwnerDatabaseConnector)?

        /// The connector used: ``connector``, or the network one.
        var effectiveConnector: any OwnerDatabaseConnector {
            connector ?? NetworkOwnerConnector(configuration: client, timeout: connectTimeout, pingInterval: pingInterval)
        }

        public init(
            displayName: String? = nil, pageSize: Int? = nil, initialBackoff: Duration = .milliseconds(50),
            maximumBackoff: Duration = .seconds(5), connectTimeout: TimeAmount = .seconds(10),
            client: ClientConfiguration = ClientConfiguration(), pingInterval: OwnerConnection.PingInterval = .automatic,
            mergeConflict: (@Sendable (_ local: Record, _ server: Record) -> Record?)? = nil,
            connector: (any OwnerDatabaseConnector)? = nil
        ) {
            self.connector = connector
            self.displayName = displayName
            self.pageSize = pageSize
            self.initialBackoff = initialBackoff
            self.maximumBackoff = maximumBackoff
            self.connectTimeout = connectTimeout
            self.client = client
            self.pingInterval = pingInterval
            self.mergeConflict = mergeConflict
        }
    }

    /// What became of a write.
    public enum WriteOutcome: Sendable {
        /// The owner answered: per-record results (conflicts come back as `serverRecordChanged`
        /// failures carrying the server's record).
        case sent(ModifyRecordsResult)
        /// The owner was not reachable: the write waits in the outbox and is sent on reconnect.
        case queued(OutboxOperation)
    }

    /// The local replica the engine keeps up to date; read it at any time.
    public let replica: SharedDatabaseReplica
    /// This node's identity, proved to every owner.
    public let identity: NodeIdentity
    /// The configuration the engine runs with.
    public let configuration: Configuration

    let logger: Logger
    let hub = ParticipantEventHub()
    private let state = Mutex(State())

    private struct State {
        var links: [String: ParticipantOwnerLink] = [:]
        var started = false
        var stopped = false
        /// Accepts under way, by owner: their owner is not forgotten, though the replica holds
        /// nothing of it until their first sync.
        var accepting: [String: Int] = [:]
        /// Owners a forget was put off for while an accept was under way: the last accept to end
        /// checks again (they may all have failed, leaving nothing of the owner).
        var forgetPutOff: Set<String> = []
        /// Owners that took one of the accepts under way: none checks again then (the share is coming,
        /// its first sync maybe not done yet; the link's catch-ups check from then on).
        var acceptTaken: Set<String> = []
    }

    /// Creates an engine for a replica; nothing connects until ``start()`` or ``accept(url:timeout:)``.
    public init(
        replica: SharedDatabaseReplica, identity: NodeIdentity, configuration: Configuration = Configuration(),
        logger: Logger = Logger(label: "sharesync.participant")
    ) {
        self.replica = replica
        self.identity = identity
        self.configuration = configuration
        self.logger = logger
    }

    /// Starts following every owner already in the replica (a restarted node resumes from its tokens).
    public func start() throws(ShareSyncError) {
        let owners = try replica.owners()
        state.withLock { $0.started = true }
        for owner in owners { link(for: owner.ownerName) }
    }

    /// Stops every link, closes the connections and ends the event streams. The replica stays open.
    public func stop() async {
        let links = state.withLock { s in
            s.stopped = true
            defer { s.links = [:] }
            return Array(s.links.values)
        }
        for link in links { await link.stop() }
        hub.finish()
    }

    // MARK: Shares

    /// Accepts a share: connects to the URL's owner (checking its key against the URL's fingerprint;
    /// a URL without one is refused with `invalidArguments`, rule `ownerFingerprintMissing`; a share
    /// this node owns itself, with rule `ownShare`), accepts,
    /// records the owner in the replica, and returns once the owner's link has caught up (the share's
    /// records are in the replica), or throws `networkFailure` after `timeout`, or the error that stopped
    /// the sync (see ``waitUntilSynced(owner:timeout:)``; the share stays accepted and the sync resumes).
    @discardableResult
    public func accept(url: String, timeout: Duration = .seconds(30)) async throws(ShareSyncError) -> ShareMetadata {
        let (parsed, fingerprint) = try ShareURL.pinned(url)
        // Its own share: the owner answered with the metadata and changed nothing, and this node then
        // followed itself as an owner, connecting to itself at every start, for good.
        guard fingerprint.lowercased() != identity.fingerprint.lowercased() else {
            throw ShareSyncError(
                .invalidArguments, "this node owns the share at this URL: its records are in this node's private database",
                rule: .ownShare)
        }
        let connection = try await configuration.effectiveConnector.connect(
            host: parsed.host, port: parsed.port, identity: identity, expectedOwnerFingerprint: fingerprint,
            displayName: configuration.displayName)
        // Until the first sync is done, the owner's link does not forget the owner: the replica holds
        // nothing of it until then.
        state.withLock { $0.accepting[connection.ownerName, default: 0] += 1 }
        defer {
            let checkAgain = state.withLock { s in
                s.accepting[connection.ownerName, default: 1] -= 1
                guard s.accepting[connection.ownerName] == 0 else { return false }
                s.accepting[connection.ownerName] = nil
                let taken = s.acceptTaken.remove(connection.ownerName) != nil
                return s.forgetPutOff.remove(connection.ownerName) != nil && !taken
            }
            // A forget put off while accepts of the owner's shares were under way is done when the last
            // ends, if the owner took none of them (refused, or never answered): the replica may hold
            // nothing of the owner. Before, the owner stayed, connected to, until its link's next
            // catch-up found nothing. An accept the owner took is left to the link, whose first sync
            // brings the share (it may not be done yet).
            if checkAgain { _ = try? forgetIfNothingLeft(owner: connection.ownerName) }
        }
        let metadata: ShareMetadata
        do {
            try await tellPendingLeave(of: url, on: connection)
            metadata = try await connection.acceptShare(url: url)
            state.withLock { _ = $0.acceptTaken.insert(connection.ownerName) }
        } catch {
            await connection.close()
            throw error
        }
        await connection.close()
        let ownerName = connection.ownerName
        let replica = self.replica
        let owner = OwnerInfo(ownerName: ownerName, host: parsed.host, port: parsed.port, fingerprint: fingerprint)
        do {
            try await StoreThreads.run { () throws(ShareSyncError) in try replica.setOwner(owner) }
        } catch {
            // The owner took the accept: saying only the local error read as if nothing had happened.
            var failure = error
            failure.message = "the owner accepted the share, but this node could not store it (\(error.message)); accept "
                + "the same URL again once that is fixed (accepting twice changes nothing on the owner)"
            throw failure
        }
        do {
            try await waitUntilSynced(owner: ownerName, timeout: timeout)
        } catch {
            // Said as it is: the share is accepted, only its first sync is not done, whatever stopped it
            // (the network, a full disk, a refusal); its code and rule are kept. Before, the message
            // read as if the accept had failed.
            var failure = error
            failure.message = error.code == .networkFailure
                ? "the share is accepted, but its first sync did not finish within \(timeout) (\(error.message)); it goes on in the "
                    + "background: see `sharesync status`"
                : "the share is accepted, but its first sync failed (\(error.message)); it is retried in the background: see "
                    + "`sharesync status`"
            throw failure
        }
        return metadata
    }

    /// Tells the owner of the share at `url` that this node left it, if it did so locally and the
    /// owner has not heard yet. A leave is a leave, as in CloudKit where it is immediate: the owner then
    /// refuses the accept of a private share (`permissionFailure`, rule `leftShare`: the owner must
    /// invite this node again), and takes that of a public one. Before, the accept went first, and the
    /// owner's link sent the old leave afterwards: the accept said it succeeded, and was undone in
    /// silence.
    private func tellPendingLeave(of url: String, on connection: any OwnerDatabase) async throws(ShareSyncError) {
        let pending = try replica.pendingLeaves(owner: connection.ownerName)
        guard !pending.isEmpty else { return }
        let share = try await connection.fetchShareMetadata(url: url, shouldFetchRootRecord: false).share.recordID
        for leave in pending where leave.zoneName == share.zoneID.zoneName && leave.shareName == share.recordName {
            do {
                try await connection.leaveShare(zoneName: leave.zoneName, shareRecordName: leave.shareName)
            } catch where ParticipantOwnerLink.keepsPending(error) || ParticipantOwnerLink.holdsBackLeave(error) {
                throw error
            } catch {
                // Already gone on the owner: told as much as it can be.
            }
            try replica.resolvePendingLeave(leave)
            // The zone is now to be fetched again from the start (another share of it may be this
            // node's), which only a catch-up does: asked for now, whatever the accept's outcome.
            _ = existingLink(connection.ownerName)?.requestSync()
        }
    }

    /// Points an owner known to the replica at a new address (the owner moved while this node could
    /// not hear it announce so): its zones, records, tokens and outbox stay, and the engine connects
    /// there at once, ending any connection it has to the owner, or an attempt to connect (the backoff
    /// is skipped). The owner's
    /// key is still checked on every connection. The address the owner last announced is forgotten:
    /// the one set by hand is the only one tried (a mistyped one fails visibly) until a connection
    /// hears the owner announce again. Accepting any share URL of that owner also stores its address,
    /// for the next connection. An owner the replica does not know is
    /// `unknownItem` (rule `ownerUnknown`); a port outside 1...65535 or an empty host is
    /// `invalidArguments` (rule `ownerAddress`).
    public func setOwnerAddress(owner: String, host: String, port: Int) throws(ShareSyncError) {
        guard HostName.isValid(host), (1...65535).contains(port) else {
            throw ShareSyncError(
                .invalidArguments,
                "\(HostName.isValid(host) ? "port \(port)" : "host \(host.prefix(80).debugDescription)") is not an address an owner "
                    + "can be reached at (a DNS name or an IP address, port 1-65535)",
                rule: .ownerAddress)
        }
        // Announcements heard over the connection about to end are not noted after the one set by hand
        // clears them (an announced address would cover up a mistyped one again).
        existingLink(owner)?.ignoreEarlierAnnouncements()
        guard try replica.setOwnerAddressByHand(owner: owner, host: host, port: port) else {
            throw ShareSyncError(
                .unknownItem, "no owner \(owner) shares anything with this node (see the owners of `zone list --shared`)",
                rule: .ownerUnknown)
        }
        hub.emit(.ownerAddressChanged(owner: owner, host: host, port: port, announced: false))
        link(for: owner)?.reconnect()
    }

    /// Asks the owner what the share at `url` is, without accepting it (fingerprint required and checked).
    public func fetchShareMetadata(url: String) async throws(ShareSyncError) -> ShareMetadata {
        let (parsed, fingerprint) = try ShareURL.pinned(url)
        let connection = try await configuration.effectiveConnector.connect(
            host: parsed.host, port: parsed.port, identity: identity, expectedOwnerFingerprint: fingerprint,
            displayName: configuration.displayName)
        let metadata: ShareMetadata
        do {
            metadata = try await connection.fetchShareMetadata(url: url, shouldFetchRootRecord: false)
        } catch {
            await connection.close()
            throw error
        }
        await connection.close()
        return metadata
    }

    /// Asks the owner of the share at `url` to let this node in (the share must allow access
    /// requests; the owner then sees this node among its requesters). Connects with the node's identity
    /// and pins the URL's fingerprint, as ``fetchShareMetadata(url:)`` does; nothing is stored.
    public func requestAccess(url: String) async throws(ShareSyncError) {
        try await Self.requestAccess(url: url, identity: identity, configuration: configuration)
    }

    /// The same, for `identity`, without an engine: no replica, nothing started (`sharesync
    /// request-access` when no daemon runs). `configuration` gives the display name the owner sees
    /// and how to connect.
    public static func requestAccess(url: String, identity: NodeIdentity, configuration: Configuration) async throws(ShareSyncError) {
        let (parsed, fingerprint) = try ShareURL.pinned(url)
        let connection = try await configuration.effectiveConnector.connect(
            host: parsed.host, port: parsed.port, identity: identity, expectedOwnerFingerprint: fingerprint,
            displayName: configuration.displayName)
        do {
            try await connection.requestAccess(url: url)
        } catch {
            await connection.close()
            throw error
        }
        await connection.close()
    }

    /// Leaves a share on the owner's node, then waits (up to `timeout`) for the catch-up that purges what
    /// left this identity's view: the zone, or only the share's records if the zone holds another share
    /// of this participant. Needs the owner to be connected (`networkUnavailable` otherwise).
    public func leaveShare(owner: String, zoneName: String, shareRecordName: String, timeout: Duration = .seconds(30))
        async throws(ShareSyncError)
    {
        guard let connection = existingLink(owner)?.activeConnection else {
            throw ShareSyncError(
                .networkUnavailable,
                "owner \(owner) is not connected; leave the share when it is, or leave it locally now (`sharesync leave --local`: "
                    + "its records go at once and the owner is told when it is back)")
        }
        do {
            try await connection.leaveShare(zoneName: zoneName, shareRecordName: shareRecordName)
        } catch where ParticipantOwnerLink.isTransient(error)
            && (try? replica.fetchAllZones(owner: owner).contains { $0.zoneID.zoneName == zoneName }) == false
        {
            // The owner's push of the leave came before its answer, and purged the zone (the last of the
            // owner's here: the owner was forgotten, and its connection closed before the answer was
            // read). The leave was taken.
        }
        do {
            try await waitUntilSynced(owner: owner, timeout: timeout)
        } catch where error.code == .unknownItem && (try? replica.owner(named: owner)) == nil {
            // The owner's push of the leave purged the last of its zones here, and the owner was
            // forgotten before the wait began: caught up.
        } catch {
            throw error.afterOwnerCommitted("the owner took the leave")
        }
    }

    /// Leaves a share without waiting for its owner (which may be gone for good): the zone leaves the
    /// replica at once and stays out; the owner is told when its node is next reached (at once if it is
    /// connected), and then marks this participant as having left.
    public func leaveShareLocally(owner: String, zoneName: String, shareRecordName: String) throws(ShareSyncError) {
        try replica.leaveLocally(PendingLeave(owner: owner, zoneName: zoneName, shareName: shareRecordName))
        hub.emit(.zonePurged(owner: owner, zoneName: zoneName))
        existingLink(owner)?.pokeOutbox()
    }

    // MARK: Writes

    /// Saves and deletes records in an owner's shared zone, as `OwnerConnection.modifyRecords` does,
    /// when the owner is connected; otherwise queues the write in the replica's outbox. See "Writes" above.
    /// A write sent at once in several requests that fails part-way is queued too, with the answers
    /// it got, and finished from the outbox: it is not left half applied. That is, after some of its
    /// requests were applied, the network or the owner's store failing (or full); and after one of its
    /// requests was sent, answered or not, its caller's task cancelled. One whose later request the
    /// owner refuses as a whole, after earlier ones were applied, is answered (`.sent`): the items the
    /// owner applied with their outcomes, the refused request's items failed with that refusal, and the
    /// items of the requests after it, never sent, with `batchRequestFailed` (with `queueWhenUnreachable`
    /// false, a failure of the owner's store is thrown instead, as for a write in one request). (A
    /// caller that gave up, such as an interrupted CLI command, may not see the `.queued` outcome;
    /// `sharesync outbox` and the events do.)
    ///
    /// With `queueWhenUnreachable` false nothing is queued: a write the owner cannot take now (not
    /// connected, a network failure, or earlier writes still waiting in the outbox) throws
    /// ``ShareSyncError/Code/networkUnavailable`` (or the network error), for a caller that keeps its own
    /// pending changes and retries, as a sync engine does.
    public func modifyRecords(
        owner: String, zoneName: String, saving: [Record] = [], deleting: [String] = [],
        savePolicy: SavePolicy = .ifServerRecordUnchanged, atomically: Bool = true, queueWhenUnreachable: Bool = true
    ) async throws(ShareSyncError) -> WriteOutcome {
        let readiness = try replica.writeReadiness(owner: owner)
        guard readiness.known else {
            throw ShareSyncError(.unknownItem, "owner \(owner) is not in the replica; accept one of its shares first")
        }
        let link = existingLink(owner)
        let outboxEmpty = !readiness.writesWaiting
        // Parents and deleteSelf targets before the records that need them, sent and queued in that
        // order: a write cut into several requests has a new child's parent in the same or an earlier one.
        let saving = Record.orderedForTargets(saving)
        // One write ID from the first send on: a write sent at once whose answer is lost, queued, and
        // sent again, is applied once.
        // Queued after such a send, it keeps how that send was cut (``OutboxOperation/parts``).
        let writeID = OutboxOperation.newWriteID()
        var parts: [Int]?
        var answers: [String: Data] = [:]
        if let connection = link?.activeConnection, outboxEmpty {
            // The cut the send ends up with, halves included (a request the owner refused as too large),
            // and the answers of its requests: queued after a failure, the write keeps both, so that a
            // half the owner applied, its answer lost, goes again under its own ID and is not applied
            // twice, and the requests answered are not sent again.
            let sentCut = Mutex<[Int]?>(nil)
            let sentAnswers = Mutex<[String: ModifyRecordsWireResult]>([:])
            // Whether a request of a write in several went (its ID is not the write's): the owner may
            // apply it even if its caller gives up before the answer, and the rest must follow.
            let sentPart = Atomic<Bool>(false)
            do {
                let result = try await connection.modifyRecords(
                    zoneName: zoneName, saving: saving, deleting: deleting, savePolicy: savePolicy, atomically: atomically,
                    writeID: writeID,
                    progress: WriteProgress(
                        parts: nil, recut: { cut in sentCut.withLock { $0 = cut } },
                        answered: { request, answer in sentAnswers.withLock { $0[request] = answer } },
                        sent: { request in if request != writeID { sentPart.store(true, ordering: .relaxed) } }))
                return Self.answeredAtOnce(result)
            } catch where ParticipantOwnerLink.isTransient(error)
                || (!sentAnswers.withLock(\.isEmpty) && ParticipantOwnerLink.holdsBackWrite(error))
                || (sentPart.load(ordering: .relaxed) && error.code == .operationCancelled)
            {
                // A network failure; with some requests of the write applied, the owner's store
                // failing; or, with a request of a write in several sent (answered or not: the owner
                // may apply it), the caller giving up: queued, the write is finished later (its
                // answered requests not sent again), instead of being left half applied.
                if !queueWhenUnreachable { throw error }
                // The same cut as the send's: the same records, and the connection's limits (or the
                // halves it went as).
                parts = sentCut.withLock { $0 } ?? connection.parts(saving: saving, deleting: deleting)
                for (request, answer) in sentAnswers.withLock({ $0 }) {
                    answers[request] = try ParticipantOwnerLink.encodedAnswer(answer)
                }
                logger.debug("write queued after a network failure", metadata: ["owner": "\(owner)", "error": "\(error)"])
            } catch where !sentAnswers.withLock(\.isEmpty) && !ParticipantOwnerLink.keepsPending(error)
                && (queueWhenUnreachable || !ParticipantOwnerLink.holdsBackLeave(error))
            {
                // A later request refused as a whole, after earlier ones were applied: what the owner
                // applied is reported so, that request's items refused, and the items of the requests
                // after it, never sent, `batchRequestFailed` (not the whole write refused, as before).
                // For a caller that keeps its own changes (`queueWhenUnreachable` false: the sync
                // engine), a failure of the owner's store (`internalError`, a full disk) is still
                // thrown: the request may go through later, and it sends them all again.
                let zoneID = RecordZone.ID(zoneName: zoneName, ownerName: owner)
                let result = ModifyRecordsResult.answered(
                    Array(sentAnswers.withLock(\.values)), saving: saving, deleting: deleting, zoneID: zoneID
                ).completed(
                    refusedWith: error, saving: saving, deleting: deleting, zoneID: zoneID,
                    parts: sentCut.withLock { $0 } ?? connection.parts(saving: saving, deleting: deleting))
                return Self.answeredAtOnce(result)
            }
        }
        if !queueWhenUnreachable {
            throw ShareSyncError(
                .networkUnavailable,
                outboxEmpty
                    ? "owner \(owner) is not connected now; try again later"
                    : "earlier writes to owner \(owner) wait in the outbox; try again once they are sent")
        }
        // Not after a direct send that failed on the network: the owner may have applied it (its
        // answer lost), and the write, with its ID, is queued to learn how it ended.
        if parts == nil { try checkNotReadOnly(owner: owner, zoneName: zoneName, saving: saving, deleting: deleting) }
        let queued: OutboxOperation
        do {
            queued = try replica.enqueue(
                owner: owner,
                operation: OutboxOperation(
                    zoneName: zoneName, saving: saving, deleting: deleting, savePolicy: savePolicy, atomically: atomically,
                    writeID: writeID, parts: parts),
                answers: answers)
        } catch where error.rule == .replicaUnknownOwner {
            // Forgotten since the check above (its last zone here went): said in the engine's terms,
            // not the store's ("add it with setOwner first").
            throw ShareSyncError(
                .unknownItem, "owner \(owner) is no longer in the replica (nothing of its shares is left here); the write was not queued",
                rule: .replicaUnknownOwner)
        }
        hub.emit(.queued(owner: owner, operationID: queued.id))
        link?.pokeOutbox()
        return .queued(queued)
    }

    /// A write answered at once: not kept in the outbox and not an event, so its conflicts are counted here.
    private static func answeredAtOnce(_ result: ModifyRecordsResult) -> WriteOutcome {
        ShareSyncMetrics.conflicts(side: "participant", result.errors.values.count { $0.code == .serverRecordChanged })
        return .sent(result)
    }

    /// Refuses a write to be queued that the owner is known to refuse: one that changes only records
    /// (no share record) in a zone where every share this replica holds gives this node read-only
    /// permission. As the owner would: `permissionFailure`, rule `readOnlyParticipant`, and nothing
    /// queued. Before, such a write waited in the outbox until the owner was back, and only then
    /// came back refused. The replica holds what the owner last sent: a permission raised since,
    /// or a second share of the zone accepted whose share record has not come yet, is seen once the
    /// node is back in touch, and the write can be made then. A zone with no share in the replica,
    /// or one share giving read-write, and a write that also saves or deletes a share record (an
    /// administrator's edit, a leave), are left to the owner to decide.
    private func checkNotReadOnly(owner: String, zoneName: String, saving: [Record], deleting: [String]) throws(ShareSyncError) {
        let zoneID = RecordZone.ID(zoneName: zoneName, ownerName: owner)
        let touchesShare =
            saving.contains { $0.recordType == Record.shareRecordType }
            || deleting.contains { name in
                (try? replica.fetchRecord(Record.ID(recordName: name, zoneID: zoneID)))??.recordType == Record.shareRecordType
            }
        guard !touchesShare, !saving.isEmpty || !deleting.isEmpty else { return }
        let shares = try replica.records(owner: owner, zoneName: zoneName, ofType: Record.shareRecordType).compactMap(Share.init)
        let me = identity.userRecordName
        let permissions = shares.compactMap { share in
            AccessPolicy.acceptedParticipant(me, in: share).map { AccessPolicy.effectivePermission(of: $0, in: share) }
        }
        guard !permissions.isEmpty, !permissions.contains(.readWrite) else { return }
        throw ShareSyncError(
            .permissionFailure,
            "you have read-only permission in every share of zone \(zoneName) (as owner \(owner) last said); the write was not queued",
            recordID: saving.first?.recordID ?? deleting.first.map { Record.ID(recordName: $0, zoneID: zoneID) },
            rule: .readOnlyParticipant)
    }

    // MARK: Observing

    /// A new stream of the engine's events from now on; it ends at ``stop()``.
    public func events() -> AsyncStream<Event> { hub.stream() }

    /// Waits until `condition` holds, checking it now and after every event or status change, for at most
    /// `timeout`. Returns whether it held. Use it to wait for the replica to reach a state without sleeping.
    public func waitUntil(timeout: Duration, _ condition: () throws -> Bool) async rethrows -> Bool {
        try await hub.waitUntil(timeout: timeout, condition)
    }

    /// Asks the owner's link for a catch-up and waits until one that started after this call completed
    /// (the replica then holds everything the owner's view held when it started). Throws
    /// `networkFailure` if that does not happen within `timeout`, `unknownItem` for an unknown owner
    /// (one forgotten before the call: ``Event/ownerForgotten(owner:)``), `networkUnavailable` once the
    /// engine is stopped, and at once the error that ended a sync if it is not the network's: for
    /// example `quotaExceeded` (rule `diskFull`) naming the replica's file when its disk is full. The
    /// owner's link keeps retrying with backoff either way, and resumes from its tokens once the cause
    /// is gone. An owner forgotten during the wait returns: the replica holds what its view holds
    /// for this node, nothing.
    public func waitUntilSynced(owner: String, timeout: Duration = .seconds(30)) async throws(ShareSyncError) {
        guard try replica.owner(named: owner) != nil else {
            throw ShareSyncError(.unknownItem, "owner \(owner) is not in the replica")
        }
        guard let link = link(for: owner) else {
            guard state.withLock({ $0.stopped }) else { return }  // forgotten since the check above: nothing to wait for
            throw ShareSyncError(.networkUnavailable, "the sync engine is stopped")
        }
        let failuresBefore = link.failureCount
        let target = link.requestSync()
        var failure: ShareSyncError?
        let done = await hub.waitUntil(timeout: timeout) {
            // Forgotten: a catch-up found nothing of the owner's left, which is what the replica holds.
            if link.completedSync >= target || link.forgotten { return true }
            failure = link.lastingFailure(after: failuresBefore)
            return failure != nil || link.status == .stopped
        }
        // A failure that is not the network's (a full disk, a refusal) is said at once; the link keeps
        // retrying, and a later wait succeeds once the cause is gone.
        if let failure, link.completedSync < target { throw failure }
        if link.status == .stopped, link.completedSync < target, !link.forgotten {
            // The owner left the replica after this link started (which then stopped): nothing of it
            // is left to wait for. Else the engine stopped.
            guard try replica.owner(named: owner) == nil else {
                throw ShareSyncError(.networkUnavailable, "the sync engine is stopped")
            }
            return
        }
        guard done else {
            throw ShareSyncError(
                .networkFailure, "owner \(owner) did not finish a sync within \(timeout) (status \(link.status))")
        }
    }

    /// Where each owner's link stands.
    public func status(owner: String) -> LinkStatus? { existingLink(owner)?.status }

    /// Why the link to an owner is not following it, when a connection or an attempt to connect ended
    /// in a failure (a wrong key pinned, a refusal, a full disk, the network); nil while it follows.
    public func lastFailure(owner: String) -> ShareSyncError? { existingLink(owner)?.currentFailure }

    /// How far behind an owner the replica may be: zero while its link follows the owner's pushes, else
    /// the time since it last did (`nil` for an owner this engine has no link to).
    public func syncLag(owner: String) -> Duration? { existingLink(owner)?.lag }

    /// When the replica last was caught up with an owner (now, while following).
    public func lastSynced(owner: String) -> Date? { existingLink(owner)?.lastSynced }

    /// The number of record changes (saves and deletions) received from owners, in fetched pages and
    /// pushes, since this engine was created: a resumed engine receives only what changed since its tokens.
    public var recordsReceived: Int { hub.recordsReceived }

    // MARK: Links

    func existingLink(_ owner: String) -> ParticipantOwnerLink? {
        state.withLock { $0.links[owner] }
    }

    /// The owner's link, started if needed; `nil` once the engine stopped, or for an owner the replica
    /// does not hold (forgotten: ``forgetIfNothingLeft(owner:)`` runs under the same lock, so no link
    /// is made for an owner just forgotten, to stop at once and stay).
    @discardableResult
    private func link(for owner: String) -> ParticipantOwnerLink? {
        let replica = self.replica
        let (link, isNew) = state.withLock { s -> (ParticipantOwnerLink?, Bool) in
            guard !s.stopped else { return (nil, false) }
            // A stopped link found its owner gone from the replica: replaced, so that an owner stored
            // again (an accept) is followed again.
            if let link = s.links[owner], link.status != .stopped { return (link, false) }
            // A replica that cannot be read now: the link is made, and its loop retries the read.
            if case .success(false) = Result(catching: { () throws(ShareSyncError) in try replica.owner(named: owner) != nil }) {
                s.links[owner] = nil
                return (nil, false)
            }
            let link = ParticipantOwnerLink(
                ownerName: owner, replica: replica, identity: identity, configuration: configuration, hub: hub,
                logger: logger, forget: { [weak self] () throws(ShareSyncError) in
                    try self?.forgetIfNothingLeft(owner: owner) ?? false
                })
            s.links[owner] = link
            return (link, true)
        }
        if isNew { link?.start() }
        return link
    }

    /// Forgets `owner`, and drops and stops its link, if the replica holds nothing of the owner and no
    /// accept of its shares is under way (``SharedDatabaseReplica/removeOwnerIfNothingLeft(_:)``,
    /// which tells no change observer: none runs under the lock); returns whether it did. Called by the
    /// owner's link after a catch-up or a push that left no zone of the owner, and when a write leaves
    /// the outbox (discarded, or a conflict resolved with theirs), connected or not: the last thing
    /// kept of an owner whose zones had gone (a write refused after a leave). Checked and done under
    /// the engine's lock, which an accept takes before it stores the owner: an accept that begins
    /// meanwhile stores the owner again and starts a new link, and one under way keeps the owner (the
    /// last accept under way checks again when it ends, succeeded or not).
    @discardableResult
    func forgetIfNothingLeft(owner: String) throws(ShareSyncError) -> Bool {
        let replica = self.replica
        let (forgot, link) = try state.withLock { s throws(ShareSyncError) -> (Bool, ParticipantOwnerLink?) in
            guard !s.stopped else { return (false, nil) }
            guard s.accepting[owner] == nil else {
                s.forgetPutOff.insert(owner)
                return (false, nil)
            }
            guard try replica.removeOwnerIfNothingLeft(owner) else { return (false, nil) }
            // Emitted before the lock is released: an accept of this owner, which takes the lock before it
            // stores the owner again, emits its events after this one. (Emitted after the release, it could
            // come after the new accept's, and an app saw the owner forgotten once it was back.) Emitting
            // only yields to the event streams: no subscriber code runs under the lock.
            hub.emit(.ownerForgotten(owner: owner))
            return (true, s.links.removeValue(forKey: owner))
        }
        guard forgot else { return false }
        logger.info(
            "nothing of the owner's is left in the replica: the owner is forgotten, and no longer connected to",
            metadata: ["owner": "\(owner)"])
        link?.forgottenByEngine()
        return true
    }

    /// Whether a forget of `owner` was put off because an accept of its share is under way (checked
    /// again when the last such accept ends).
    func forgetIsPutOff(owner: String) -> Bool { state.withLock { $0.forgetPutOff.contains(owner) } }
}
