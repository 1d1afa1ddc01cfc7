import NIOCore
import ShareSyncCore
import ShareSyncStore
import ShareSyncWire

/// The seam between the participant's sync engine (``ParticipantSync``) and an owner's node: what the
/// engine asks of one connection to an owner. ``OwnerConnection`` is the network implementation (TLS,
/// the line protocol); ``InProcessOwner`` serves an owner's ``PrivateDatabase`` in the same process,
/// with failures injected on demand, so that the engine's behaviour can be tested deterministically
/// without sockets. Both give the same results for the same owner database: zone IDs carry the owner's
/// user record name, errors are ``ShareSyncError``s with the owner's codes and rules.
///
/// The pattern is that of sqlite-data's `SyncEngineProtocol` and `MockCloudDatabase`: the engine never
/// names the network, only this protocol and ``OwnerDatabaseConnector``.
public protocol OwnerDatabase: AnyObject, Sendable {
    /// The owner's user record name, as the owner proved it.
    var ownerName: String { get }
    /// The owner's limits (the client splits its writes by them).
    var limits: WireLimits { get }
    /// Whether the connection is still open; requests on a closed one fail with `networkFailure`.
    var isActive: Bool { get }
    /// The address the owner advertises, if it announced one (``OwnerConnection/announcedAddress``).
    var announcedAddress: WireAddress? { get }
    /// Calls `body` with each address the owner announces from now on; `nil` stops the calls.
    func onAddressAnnounced(_ body: (@Sendable (WireAddress) -> Void)?)

    /// What this identity may learn about a share before accepting it.
    func fetchShareMetadata(url: String, shouldFetchRootRecord: Bool) async throws(ShareSyncError) -> ShareMetadata
    /// Accepts a share; its zone then appears in this identity's shared database.
    func acceptShare(url: String) async throws(ShareSyncError) -> ShareMetadata
    /// Asks the owner to let this identity in (a share that allows access requests).
    func requestAccess(url: String) async throws(ShareSyncError)
    /// Leaves a share.
    func leaveShare(zoneName: String, shareRecordName: String) async throws(ShareSyncError)
    /// The zones shared with this identity that changed since a token.
    func fetchDatabaseChanges(since token: ServerChangeToken?, resultsLimit: Int?) async throws(ShareSyncError) -> DatabaseChanges
    /// Asks for a page of a shared zone's changes now and returns at once; the page is read from the
    /// result (so the next page can be asked for while one is stored).
    func startFetchZoneChanges(zoneName: String, since token: ServerChangeToken?, resultsLimit: Int?)
        async throws(ShareSyncError) -> PendingZoneChanges
    /// Fetches records of a shared zone by name; a record outside this identity's view is `unknownItem`.
    func fetchRecords(zoneName: String, recordNames: [String]) async throws(ShareSyncError)
        -> [Record.ID: Result<Record, ShareSyncError>]
    /// Saves and deletes records in a shared zone, split to fit the owner's limits, or as `progress`
    /// says (a write sent again under its `writeID` is cut as it was the first time, and the requests
    /// of it already answered are not sent again: ``WriteProgress``).
    func modifyRecords(
        zoneName: String, saving: [Record], deleting: [String], savePolicy: SavePolicy, atomically: Bool, writeID: String?,
        progress: WriteProgress?
    ) async throws(ShareSyncError) -> ModifyRecordsResult
    /// Subscribes to this identity's view: a push after every change since `token` (or since now), each
    /// handed to `receiver` as it is read, in order. The subscription ends (``PushReceiver/end``) when
    /// the connection closes, the token expires or another subscription replaces it.
    func subscribe(since token: ServerChangeToken?, receiver: PushReceiver) async throws(ShareSyncError)
    /// Closes the connection; requests in flight fail with `networkFailure`.
    func close() async
}

/// How far a write sent in several requests got, kept between its sends (the outbox keeps it on disk
/// with the write: ``OutboxOperation/parts`` and ``SharedDatabaseReplica/keptAnswers(operation:)``).
///
/// A write too large for one request goes as several, each under its own write ID (made from the
/// write's and the names it carries). Sent again after it was cut off part-way (a lost connection, a
/// crash), it goes cut the same way, so that each request has the ID it had, and the requests already
/// answered are not sent at all: their answers are taken from ``answers``. The owner answers a
/// request it applied with its first answer, but keeps only its newest answers (protocol.md, "Writes
/// applied once"): the first requests of a long write, sent again, would be applied again.
public struct WriteProgress: Sendable {
    /// How the write was cut when first sent: the number of items (saves in order, then deletions) in
    /// each request. `nil`: cut by the owner's limits now (a cut that does not fit the items is not used).
    public var parts: [Int]?
    /// The owner's answers to requests of this write already answered, by the request's write ID.
    public var answers: [String: ModifyRecordsWireResult]
    /// Told the write's new cut before a request the owner refused as too large goes as two halves.
    public var recut: @Sendable ([Int]) throws(ShareSyncError) -> Void
    /// Told each request's answer, with the request's write ID, before the next request goes (only for
    /// a write in several requests, with a write ID).
    public var answered: @Sendable (String, ModifyRecordsWireResult) throws(ShareSyncError) -> Void
    /// Told as each request of the write has gone to the owner, with its write ID (nil for a write
    /// without one): from then on the owner may apply it, whether or not its answer ever comes.
    public var sent: @Sendable (String?) -> Void

    /// A write's progress: its cut and the answers of its requests so far, and what to tell as it goes.
    public init(
        parts: [Int]?, answers: [String: ModifyRecordsWireResult] = [:],
        recut: @escaping @Sendable ([Int]) throws(ShareSyncError) -> Void = { _ in },
        answered: @escaping @Sendable (String, ModifyRecordsWireResult) throws(ShareSyncError) -> Void = { _, _ in },
        sent: @escaping @Sendable (String?) -> Void = { _ in }
    ) {
        self.parts = parts
        self.answers = answers
        self.recut = recut
        self.answered = answered
        self.sent = sent
    }
}

extension OwnerDatabase {
    /// A write cut to fit the owner's limits now.
    func modifyRecords(
        zoneName: String, saving: [Record], deleting: [String], savePolicy: SavePolicy, atomically: Bool, writeID: String?
    ) async throws(ShareSyncError) -> ModifyRecordsResult {
        try await modifyRecords(
            zoneName: zoneName, saving: saving, deleting: deleting, savePolicy: savePolicy, atomically: atomically, writeID: writeID,
            progress: nil)
    }

    /// How a write of `saving` and `deleting` is cut into requests by this owner's limits now: the number
    /// of items in each (``OutboxOperation/parts``).
    func parts(saving: [Record], deleting: [String]) -> [Int] {
        ModifyItem.batches(ModifyItem.items(saving: saving, deleting: deleting), limits: limits).map(\.count)
    }

    /// A write without a write ID: applied again if sent again.
    func modifyRecords(
        zoneName: String, saving: [Record], deleting: [String], savePolicy: SavePolicy, atomically: Bool
    ) async throws(ShareSyncError) -> ModifyRecordsResult {
        try await modifyRecords(
            zoneName: zoneName, saving: saving, deleting: deleting, savePolicy: savePolicy, atomically: atomically, writeID: nil,
            progress: nil)
    }

    /// Subscribes to this identity's view: the stream yields a push after every change since `token`
    /// (or since now, without one). The stream ends when the connection closes, the token expires or
    /// another subscription replaces this one.
    public func subscribe(since token: ServerChangeToken? = nil) async throws(ShareSyncError) -> AsyncStream<OwnerConnection.Push> {
        let (pushes, continuation) = AsyncStream<OwnerConnection.Push>.makeStream()
        try await subscribe(since: token, receiver: .stream(continuation))
        return pushes
    }

    /// A shared zone's changes since a token, in commit order.
    public func fetchZoneChanges(zoneName: String, since token: ServerChangeToken?, resultsLimit: Int? = nil)
        async throws(ShareSyncError) -> ZoneChanges
    {
        try await startFetchZoneChanges(zoneName: zoneName, since: token, resultsLimit: resultsLimit).page
    }
}

/// A page of zone changes asked for and not yet read (``OwnerDatabase/startFetchZoneChanges(zoneName:since:resultsLimit:)``).
public struct PendingZoneChanges: Sendable {
    private let wait: @Sendable () async throws(ShareSyncError) -> ArrivedZoneChanges

    /// Wraps the wait for the page.
    public init(_ wait: @escaping @Sendable () async throws(ShareSyncError) -> ZoneChanges) {
        self.wait = { () async throws(ShareSyncError) -> ArrivedZoneChanges in ArrivedZoneChanges(records: try await wait()) }
    }

    /// Wraps the wait for a page that arrived and is decoded on demand.
    package init(arrived wait: @escaping @Sendable () async throws(ShareSyncError) -> ArrivedZoneChanges) { self.wait = wait }

    /// Waits for the page.
    public var page: ZoneChanges {
        get async throws(ShareSyncError) { try await wait().records() }
    }

    /// Waits for the page to arrive, not yet decoded: what the sync engine reads, so that it can ask
    /// for the next page before it decodes this one.
    package var arrived: ArrivedZoneChanges {
        get async throws(ShareSyncError) { try await wait() }
    }
}

/// A page of zone changes that has arrived: the token and `moreComing` it ends with, when they could be
/// read without reading its records, and the page itself, its records as the bytes they came in,
/// decoded on demand.
package struct ArrivedZoneChanges: Sendable {
    /// The page's change token and `moreComing`, read ahead of its records (nil when the answer could
    /// not be read that way: an error, or JSON that the fast reader leaves to `JSONDecoder`).
    package let continuation: (token: ServerChangeToken, moreComing: Bool)?
    private let decode: @Sendable () throws(ShareSyncError) -> EncodedZoneChanges
    /// The page as records, when it came as records (an ``OwnerDatabase`` of the app's own).
    private let recordsPage: ZoneChanges?

    package init(
        continuation: (token: ServerChangeToken, moreComing: Bool)?,
        decode: @escaping @Sendable () throws(ShareSyncError) -> EncodedZoneChanges
    ) {
        self.continuation = continuation
        self.decode = decode
        recordsPage = nil
    }

    /// A page already decoded, its records as bytes.
    package init(page: EncodedZoneChanges) {
        self.init(continuation: (page.changeToken, page.moreComing)) { () throws(ShareSyncError) in page }
    }

    /// A page of records, encoded only if the sync engine stores it.
    package init(records: ZoneChanges) {
        continuation = (records.changeToken, records.moreComing)
        decode = { () throws(ShareSyncError) in try EncodedZoneChanges(records) }
        recordsPage = records
    }

    /// Decodes the page (the owner's error, if it answered with one).
    package func page() throws(ShareSyncError) -> EncodedZoneChanges { try decode() }

    /// The page as records: as they came, or decoded from their bytes.
    package func records() throws(ShareSyncError) -> ZoneChanges {
        if let recordsPage { return recordsPage }
        return try page().decoded()
    }
}

/// Opens connections to owners' nodes for the sync engine: over the network
/// (``NetworkOwnerConnector``, the default) or in process (``InProcessOwner``).
public protocol OwnerDatabaseConnector: Sendable {
    /// Connects to the owner at `host`:`port` as `identity`, checking that the owner proves the key
    /// whose fingerprint is `expectedOwnerFingerprint` (`notAuthenticated`, rule
    /// `ownerFingerprintMismatch`, if not); `networkUnavailable` if it cannot be reached.
    func connect(
        host: String, port: Int, identity: NodeIdentity, expectedOwnerFingerprint: String, displayName: String?
    ) async throws(ShareSyncError) -> any OwnerDatabase
}

/// Connects over TCP and TLS with ``OwnerConnection``.
public struct NetworkOwnerConnector: OwnerDatabaseConnector {
    public var configuration: ClientConfiguration
    public var timeout: TimeAmount
    public var pingInterval: OwnerConnection.PingInterval

    public init(
        configuration: ClientConfiguration = ClientConfiguration(), timeout: TimeAmount = .seconds(10),
        pingInterval: OwnerConnection.PingInterval = .automatic
    ) {
        self.configuration = configuration
        self.timeout = timeout
        self.pingInterval = pingInterval
    }

    public func connect(
        host: String, port: Int, identity: NodeIdentity, expectedOwnerFingerprint: String, displayName: String?
    ) async throws(ShareSyncError) -> any OwnerDatabase {
        try await OwnerConnection.connect(
            host: host, port: port, identity: identity, expectedOwnerFingerprint: expectedOwnerFingerprint,
            displayName: displayName, configuration: configuration, timeout: timeout, pingInterval: pingInterval)
    }
}

extension OwnerConnection: OwnerDatabase {}

/// Where a subscription's pushes go (``OwnerDatabase/subscribe(since:receiver:)``).
///
/// `receive` is called for each push, in order, on the connection's own task or queue: keep it short
/// (queue the push and wake whoever applies it). `end` is called once, after the last push. The sync
/// engine queues pushes straight into its link's state this way; taking them from an `AsyncStream`
/// instead costs a task of its own and one more task switch per push.
public struct PushReceiver: Sendable {
    /// Called with each push, in order.
    public let receive: @Sendable (OwnerConnection.Push) -> Void
    /// Called once when the subscription ends.
    public let end: @Sendable () -> Void

    /// A receiver calling `receive` for each push and `end` when the subscription ends.
    public init(receive: @escaping @Sendable (OwnerConnection.Push) -> Void, end: @escaping @Sendable () -> Void) {
        self.receive = receive
        self.end = end
    }

    /// A receiver that feeds an `AsyncStream`.
    public static func stream(_ continuation: AsyncStream<OwnerConnection.Push>.Continuation) -> PushReceiver {
        PushReceiver(receive: { continuation.yield($0) }, end: { continuation.finish() })
    }
}
