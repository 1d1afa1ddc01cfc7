import Foundation
import ShareSyncCore
import ShareSyncStore
import ShareSyncWire
import Synchronization

/// An owner's ``PrivateDatabase`` served in the same process, as an ``OwnerDatabaseConnector`` for
/// the sync engine: the in-process side of the ``OwnerDatabase`` seam, like sqlite-data's
/// `MockCloudDatabase`. Every request runs against the caller's shared-database view with the owner
/// server's own code (``OwnerServer`` and this type share the request and push logic), without
/// sockets, TLS or frames, so engine tests are deterministic. Failures are injected on demand:
///
/// ```swift
/// let owner = InProcessOwner(database: db)
/// let sync = ParticipantSync(replica: replica, identity: me, configuration: .init(connector: owner))
/// owner.fail(.fetchZoneChanges, with: ShareSyncError(.limitExceeded, "too big"))   // the next one fails
/// owner.dropConnection(onRequest: 2, of: .fetchZoneChanges)                          // cut mid-page
/// owner.isReachable = false                                                          // owner offline
/// ```
public final class InProcessOwner: OwnerDatabaseConnector, Sendable {
    /// The requests a connection makes, for injecting failures and counting.
    public enum Operation: String, Sendable, Hashable, CaseIterable {
        case connect, fetchShareMetadata, acceptShare, requestAccess, leaveShare, fetchDatabaseChanges, fetchZoneChanges,
            fetchRecords, modifyRecords, subscribe
    }

    private struct State {
        var reachable = true
        var failures: [Operation: [ShareSyncError]] = [:]
        var drops: [Operation: Int] = [:]
        var actions: [Operation: (countdown: Int, body: @Sendable () -> Void)] = [:]
        var counts: [Operation: Int] = [:]
        var connections: [ObjectIdentifier: InProcessConnection] = [:]
    }

    /// The owner's database.
    public let database: PrivateDatabase
    private let state = Mutex(State())

    /// Serves `database` (its owner name is the owner's user record name).
    public init(database: PrivateDatabase) {
        self.database = database
    }

    /// Whether connections can be opened; `false` fails them with `networkUnavailable` and closes the
    /// open ones (the owner went offline).
    public var isReachable: Bool {
        get { state.withLock { $0.reachable } }
        set {
            let open = state.withLock { s in
                s.reachable = newValue
                return newValue ? [] : Array(s.connections.values)
            }
            for connection in open { connection.cut() }
        }
    }

    /// Makes the next `times` requests of `operation` (on any connection) fail with `error`.
    public func fail(_ operation: Operation, with error: ShareSyncError, times: Int = 1) {
        state.withLock { $0.failures[operation, default: []] += Array(repeating: error, count: times) }
    }

    /// Cuts the connection that makes the `n`th request of `operation` from now on (counting from 1),
    /// before that request is answered: it fails with `networkFailure`, as a lost connection does.
    public func dropConnection(onRequest n: Int, of operation: Operation) {
        state.withLock { $0.drops[operation] = n }
    }

    /// Runs `body` on the task that makes the `n`th request of `operation` from now on (counting from
    /// 1), before that request is served: for making something happen at an exact point of a sync
    /// (a local leave resolved while a zone's pages are being fetched, for example).
    public func onRequest(_ n: Int, of operation: Operation, run body: @escaping @Sendable () -> Void) {
        state.withLock { $0.actions[operation] = (max(n, 1), body) }
    }

    /// Closes every open connection (their pushes end; requests fail with `networkFailure`).
    public func dropAllConnections() {
        let open = state.withLock { Array($0.connections.values) }
        for connection in open { connection.cut() }
    }

    /// How many requests of `operation` were made so far.
    public func requestCount(_ operation: Operation) -> Int { state.withLock { $0.counts[operation, default: 0] } }

    /// How many connections are open.
    public var openConnections: Int { state.withLock { $0.connections.count } }

    public func connect(
        host: String, port: Int, identity: NodeIdentity, expectedOwnerFingerprint: String, displayName: String?
    ) async throws(ShareSyncError) -> any OwnerDatabase {
        try check(.connect, connection: nil)
        guard database.ownerName == "_" + expectedOwnerFingerprint.lowercased() else {
            throw ShareSyncError(
                .notAuthenticated, "the owner proved key \(database.ownerName.dropFirst()), but the share URL names \(expectedOwnerFingerprint)",
                rule: .ownerFingerprintMismatch)
        }
        let connection = InProcessConnection(
            owner: self, executor: RequestExecutor(
                database: database, caller: Caller(userRecordName: identity.userRecordName, displayName: displayName)))
        state.withLock { $0.connections[ObjectIdentifier(connection)] = connection }
        return connection
    }

    /// Counts a request and throws what was injected for it (a cut connection is closed first).
    fileprivate func check(_ operation: Operation, connection: InProcessConnection?) throws(ShareSyncError) {
        let (reachable, failure, drop, action) = state.withLock { s -> (Bool, ShareSyncError?, Bool, (@Sendable () -> Void)?) in
            s.counts[operation, default: 0] += 1
            var drop = false
            if let n = s.drops[operation] {
                if n <= 1 { s.drops[operation] = nil; drop = true } else { s.drops[operation] = n - 1 }
            }
            var action: (@Sendable () -> Void)?
            if let (n, body) = s.actions[operation] {
                if n <= 1 { s.actions[operation] = nil; action = body } else { s.actions[operation] = (n - 1, body) }
            }
            let failure = s.failures[operation]?.isEmpty == false ? s.failures[operation]!.removeFirst() : nil
            return (s.reachable, failure, drop, action)
        }
        action?()
        guard reachable else { throw ShareSyncError(.networkUnavailable, "the owner is not reachable (in process)") }
        if drop, let connection {
            connection.cut()
            throw ShareSyncError(.networkFailure, "the connection to the owner was cut (injected)")
        }
        if let failure { throw failure }
    }

    fileprivate func closed(_ connection: InProcessConnection) {
        _ = state.withLock { $0.connections.removeValue(forKey: ObjectIdentifier(connection)) }
    }
}

/// One in-process connection: the caller's requests run on the owner's database at once.
final class InProcessConnection: OwnerDatabase {
    private struct State {
        var active = true
        var pushes: PushReceiver?
        var observer: UInt64?
        var cursor: ServerChangeToken?
    }

    private let owner: InProcessOwner
    private let executor: RequestExecutor
    private let state = Mutex(State())
    /// Runs push passes one after another, off the committing thread: a commit observer may run while
    /// the database's writer is held, and a pass reads the database.
    private let passes = DispatchQueue(label: "sharesync.in-process-owner.pushes")

    init(owner: InProcessOwner, executor: RequestExecutor) {
        self.owner = owner
        self.executor = executor
    }

    var ownerName: String { executor.database.ownerName }
    var limits: WireLimits {
        let l = executor.database.limits
        return WireLimits(
            maximumItemsPerRequest: l.maximumItemsPerRequest, maximumRecordSize: l.maximumRecordSize,
            maximumResponseSize: l.maximumResponseSize)
    }
    var isActive: Bool { state.withLock { $0.active } }
    var announcedAddress: WireAddress? { nil }
    func onAddressAnnounced(_ body: (@Sendable (WireAddress) -> Void)?) {}

    private func request(_ operation: InProcessOwner.Operation) throws(ShareSyncError) {
        guard isActive else { throw ShareSyncError(.networkFailure, "the connection to the owner is closed") }
        try owner.check(operation, connection: self)
    }

    func fetchShareMetadata(url: String, shouldFetchRootRecord: Bool) async throws(ShareSyncError) -> ShareMetadata {
        try request(.fetchShareMetadata)
        return try executor.database.fetchShareMetadata(url: url, for: executor.caller, shouldFetchRootRecord: shouldFetchRootRecord)
    }

    func acceptShare(url: String) async throws(ShareSyncError) -> ShareMetadata {
        try request(.acceptShare)
        return try executor.database.acceptShare(url: url, as: executor.caller)
    }

    func requestAccess(url: String) async throws(ShareSyncError) {
        try request(.requestAccess)
        try executor.database.requestAccess(url: url, as: executor.caller)
    }

    func leaveShare(zoneName: String, shareRecordName: String) async throws(ShareSyncError) {
        try request(.leaveShare)
        try executor.view.leaveShare(Record.ID(recordName: shareRecordName, zoneID: executor.zoneID(zoneName)))
    }

    func fetchDatabaseChanges(since token: ServerChangeToken?, resultsLimit: Int?) async throws(ShareSyncError) -> DatabaseChanges {
        try request(.fetchDatabaseChanges)
        return try executor.view.fetchDatabaseChanges(since: token, resultsLimit: resultsLimit)
    }

    func startFetchZoneChanges(zoneName: String, since token: ServerChangeToken?, resultsLimit: Int?)
        async throws(ShareSyncError) -> PendingZoneChanges
    {
        let result: Result<EncodedZoneChanges, ShareSyncError>
        do throws(ShareSyncError) {
            try request(.fetchZoneChanges)
            result = .success(
                try executor.view.fetchEncodedZoneChanges(executor.zoneID(zoneName), since: token, resultsLimit: resultsLimit))
        } catch {
            result = .failure(error)
        }
        return PendingZoneChanges(arrived: { () async throws(ShareSyncError) -> ArrivedZoneChanges in
            ArrivedZoneChanges(page: try result.get())
        })
    }

    func fetchRecords(zoneName: String, recordNames: [String]) async throws(ShareSyncError)
        -> [Record.ID: Result<Record, ShareSyncError>]
    {
        try request(.fetchRecords)
        let ids = recordNames.map { Record.ID(recordName: $0, zoneID: executor.zoneID(zoneName)) }
        var results = try executor.view.fetchRecords(ids)
        for id in ids where results[id] == nil {
            results[id] = .failure(ShareSyncError(.unknownItem, "record \(id.recordName) does not exist", recordID: id))
        }
        return results
    }

    /// With a `writeID`, applied once, as the owner's server does (an answer in process is never lost
    /// on its way, but a participant killed after the owner applied its write sends it again).
    /// `progress` is not needed: the write goes as one request.
    func modifyRecords(
        zoneName: String, saving: [Record], deleting: [String], savePolicy: SavePolicy, atomically: Bool, writeID: String?,
        progress: WriteProgress?
    ) async throws(ShareSyncError) -> ModifyRecordsResult {
        try request(.modifyRecords)
        let zone = executor.zoneID(zoneName)
        for record in saving where record.recordID.zoneID != zone {
            throw ShareSyncError(
                .invalidArguments, "record \(record.recordID.recordName) is in zone \(record.recordID.zoneID), not in \(zone)",
                recordID: record.recordID, rule: .zoneMismatch)
        }
        try RequestExecutor.checkReferenceZones(saving)
        let ids = deleting.map { Record.ID(recordName: $0, zoneID: zone) }
        guard let writeID else {
            return try executor.view.modifyRecords(saving: saving, deleting: ids, savePolicy: savePolicy, atomically: atomically)
        }
        // The answer kept with the write is the result itself, as JSON (the wire form's codec).
        let (answer, _) = try executor.view.modifyRecordsOnce(
            writeID: writeID, saving: saving, deleting: ids, savePolicy: savePolicy, atomically: atomically
        ) { result in try MessageCoding.encodeData(ModifyRecordsWireResult(result)) }
        var result = ModifyRecordsResult()
        try MessageCoding.decode(ModifyRecordsWireResult.self, from: answer).merge(
            saving: saving, deleting: deleting, zoneID: RecordZone.ID(zoneName: zoneName, ownerName: ownerName), into: &result)
        return result
    }

    func subscribe(since token: ServerChangeToken?, receiver: PushReceiver) async throws(ShareSyncError) {
        try request(.subscribe)
        let start = try executor.subscriptionStart(token)
        let observer = executor.database.addCommitObserver { [weak self] in self?.schedulePushPass() }
        let previous = state.withLock { s in
            defer {
                s.pushes = receiver
                s.observer = observer
                s.cursor = start
            }
            return (s.pushes, s.observer)
        }
        previous.0?.end()
        if let id = previous.1 { executor.database.removeCommitObserver(id) }
        schedulePushPass()
    }

    private func schedulePushPass() {
        passes.async { [weak self] in self?.pushPass() }
    }

    /// Pushes what changed since the cursor, as the owner server does (``RequestExecutor/changes(since:)``).
    private func pushPass() {
        guard let (cursor, receiver) = state.withLock({ s in s.active ? s.cursor.flatMap { c in s.pushes.map { (c, $0) } } : nil })
        else { return }
        do throws(ShareSyncError) {
            guard let push = try executor.changes(since: cursor) else { return }
            let zones = try push.zoneChanges.map { z throws(ShareSyncError) in try z.zoneChanges(ownerName: ownerName) }
            receiver.receive(
                OwnerConnection.Push(
                    databaseChanges: push.databaseChanges.databaseChanges(ownerName: ownerName), zoneChanges: zones,
                    changeToken: push.token, moreComing: push.moreComing ?? false))
            state.withLock { $0.cursor = push.token }
        } catch {
            // An expired cursor ends the subscription, as the owner server's error frame does.
            if error.code == .changeTokenExpired { endPushes() }
        }
    }

    private func endPushes() {
        let (receiver, observer) = state.withLock { s in
            defer {
                s.pushes = nil
                s.observer = nil
            }
            return (s.pushes, s.observer)
        }
        if let observer { executor.database.removeCommitObserver(observer) }
        receiver?.end()
    }

    /// Closes the connection from the owner's side.
    func cut() {
        state.withLock { $0.active = false }
        endPushes()
        owner.closed(self)
    }

    func close() async { cut() }
}
