import Foundation
import NIOCore
import NIOPosix
import NIOSSL
import ShareSyncCore
import ShareSyncWire

/// A participant's connection to an owner node: TLS 1.3 with both nodes' certificates (the owner's
/// key checked against the share URL's fingerprint), authenticated both ways, then the owner's
/// shared database for this identity, with CloudKit-like calls.
///
/// ```swift
/// let owner = try await OwnerConnection.connect(url: shareURL, identity: me)
/// let metadata = try await owner.acceptShare(url: shareURL)
/// let changes = try await owner.fetchDatabaseChanges(since: nil)
/// ```
///
/// Every error is a ``ShareSyncError``; when the connection is lost, requests in flight fail with
/// ``ShareSyncError/Code/networkFailure``.
public final class OwnerConnection: Sendable {
    /// A push from the owner: the changes in this identity's view since the subscription's cursor.
    public struct Push: Sendable {
        /// The zones changed or deleted.
        public var databaseChanges: DatabaseChanges
        /// Each changed zone's changes, complete.
        public var zoneChanges: [ZoneChanges]
        /// The token after these changes.
        public var changeToken: ServerChangeToken
        /// Whether the push was cut by the owner's response size: after applying it, fetch every zone
        /// from its token before applying another push.
        public var moreComing: Bool
    }

    /// When the connection sends a `ping` (`protocol.md`, "Idle connections and ping"): whenever it has
    /// sent nothing for this long, so that a quiet connection (a subscription waiting for pushes) is
    /// never idle in either direction.
    public enum PingInterval: Sendable, Hashable {
        /// A third of the client configuration's idle timeout (40 s with the default 120 s), which is
        /// also the owner's by default; no pings if the configuration has no idle timeout.
        case automatic
        /// After this long without sending anything (a zero or negative interval means never).
        case every(TimeAmount)
        /// Never (the owner cuts the connection after its idle timeout unless requests or pushes flow).
        case never

        /// The interval for a connection with these limits, or `nil` for no pings.
        func interval(idleTimeout: TimeAmount?) -> TimeAmount? {
            switch self {
            case .automatic: idleTimeout.map { .nanoseconds($0.nanoseconds / 3) }
            case .every(let interval): interval > .zero ? interval : nil
            case .never: nil
            }
        }
    }

    /// Who this node is to the owner (`_` + its fingerprint).
    public let userRecordName: String
    /// The owner's user record name; zone IDs of results carry it.
    public let ownerName: String
    /// The limits the owner announced (the documented defaults for an owner that announced none).
    public let limits: WireLimits

    private let session: ClientSession
    private let outbound: ClientSession.Outbound
    /// The connection's task (``ClientSession/run(ready:)``).
    private let task: Task<Void, Never>

    private init(session: ClientSession, ready: ClientSession.Ready, task: Task<Void, Never>) {
        self.session = session
        self.outbound = ready.outbound
        self.task = task
        self.userRecordName = ready.welcome.userRecordName
        self.ownerName = ready.welcome.ownerName
        self.limits = (ready.welcome.limits ?? WireLimits()).withinReason
    }

    /// Connects to the owner of a share URL and checks that it proves the key the URL names. A URL
    /// without the owner's fingerprint (`?owner=`) is refused before anything connects:
    /// `invalidArguments`, rule `ownerFingerprintMissing`.
    public static func connect(
        url: String, identity: NodeIdentity, displayName: String? = nil,
        configuration: ClientConfiguration = ClientConfiguration(), timeout: TimeAmount = .seconds(10),
        security: TransportSecurity.Mode = .tls, pingInterval: PingInterval = .automatic
    ) async throws(ShareSyncError) -> OwnerConnection {
        let (parsed, fingerprint) = try ShareURL.pinned(url)
        return try await connect(
            host: parsed.host, port: parsed.port, identity: identity, expectedOwnerFingerprint: fingerprint,
            displayName: displayName, configuration: configuration, timeout: timeout, security: security,
            pingInterval: pingInterval)
    }

    /// Connects to an owner, runs TLS, the handshake and the authentication. An owner whose certificate
    /// (or proof) has a key whose fingerprint is not `expectedOwnerFingerprint` is
    /// ``ShareSyncError/Code/notAuthenticated`` (rule `ownerFingerprintMismatch`); a TLS handshake the
    /// owner refuses is `notAuthenticated` too (rule `tlsHandshakeFailed`, `alpnMismatch`, `tlsRequired`).
    /// `security` ``TransportSecurity/Mode/cleartextOnLoopback`` skips TLS, for loopback hosts only
    /// (else `invalidArguments`, rule `cleartextNotLoopback`). The connection pings the owner as
    /// `pingInterval` says.
    public static func connect(
        host: String, port: Int, identity: NodeIdentity, expectedOwnerFingerprint: String, displayName: String? = nil,
        configuration: ClientConfiguration = ClientConfiguration(), timeout: TimeAmount = .seconds(10),
        group: (any EventLoopGroup)? = nil, security: TransportSecurity.Mode = .tls, pingInterval: PingInterval = .automatic
    ) async throws(ShareSyncError) -> OwnerConnection {
        let tls: NIOSSLContext?
        switch security {
        case .tls:
            tls = try TransportSecurity.clientContext(try identity.tlsCredentials())
        case .cleartextOnLoopback:
            guard TransportSecurity.isLoopback(host: host) else {
                throw ShareSyncError(
                    .invalidArguments, "cleartext is only for loopback hosts; \(host) must be reached over TLS",
                    rule: .cleartextNotLoopback)
            }
            tls = nil
        }
        let eventLoop = (group ?? MultiThreadedEventLoopGroup.singleton).next()
        let settings = ClientSession.Settings(
            identity: identity, expectedOwnerFingerprint: expectedOwnerFingerprint, displayName: displayName, requiresTLS: tls != nil,
            pingInterval: pingInterval.interval(idleTimeout: configuration.limits.idleTimeout), authenticationTimeout: timeout,
            // A request unanswered for as long as a silent connection may last (5 s at least) ends the connection.
            answerTimeout: configuration.limits.idleTimeout.map { max($0, .seconds(5)) })
        let bootstrap = ClientBootstrap(group: eventLoop)
            .connectTimeout(timeout)
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
        let started: ClientSession.Started
        do {
            started = try await bootstrap.connect(host: host, port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try ClientSession.install(on: channel, tls: tls, configuration: configuration, settings: settings).start()
                }
            }
        } catch {
            throw ShareSyncError(.networkUnavailable, "cannot connect to \(host):\(port): \(Self.connectFailure(error))")
        }
        return try await open(started)
    }

    /// Why a connection could not be made, in words (`connection refused`, `no answer within 10000 ms`):
    /// before, SwiftNIO's own description reached the user (`Connection errors:
    /// SingleConnectionFailure(target: [IPv4]…, error: connection reset (error set): …)`).
    static func connectFailure(_ error: any Error) -> String {
        func reason(_ error: any Error) -> String {
            if let io = error as? IOError { return String(cString: strerror(io.errnoCode)).lowercased() }
            return "\(error)"
        }
        switch error {
        case let error as NIOConnectionError:
            if !error.connectionErrors.isEmpty {
                var reasons: [String] = []
                for failure in error.connectionErrors where !reasons.contains(reason(failure.error)) { reasons.append(reason(failure.error)) }
                return reasons.joined(separator: "; ")
            }
            if error.dnsAError != nil || error.dnsAAAAError != nil { return "the name could not be resolved" }
            return "no address to connect to"
        case ChannelError.connectTimeout(let timeout):
            return "no answer within \(timeout.nanoseconds / 1_000_000) ms"
        default:
            return reason(error)
        }
    }

    /// Waits until a started session authenticated, and returns the connection over it.
    static func open(_ started: ClientSession.Started) async throws(ShareSyncError) -> OwnerConnection {
        do {
            // Cancelling the caller closes the connection, which ends the wait with the task's reason.
            let ready = try await withTaskCancellationHandler {
                try await started.ready.get()
            } onCancel: {
                started.session.channel.channel.close(promise: nil)
            }
            return OwnerConnection(session: started.session, ready: ready, task: started.task)
        } catch {
            await started.task.value
            if Task.isCancelled { throw ShareSyncError(.operationCancelled, "connecting to the owner was cancelled") }
            throw error as? ShareSyncError ?? ClientSession.describe(error)
        }
    }

    /// The address the owner advertises, as its `welcome` or a later `ownerAddress` push said; `nil`
    /// if it announced none.
    public var announcedAddress: WireAddress? { session.announcements.latest }

    /// Calls `body` (on the connection's event loop) with each address the owner announces from now on
    /// (`ownerAddress` pushes: the owner is moving). `nil` stops the calls.
    public func onAddressAnnounced(_ body: (@Sendable (WireAddress) -> Void)?) {
        session.announcements.setListener(body)
    }

    /// Closes the connection; requests in flight fail with ``ShareSyncError/Code/networkFailure``.
    public func close() async {
        try? await session.channel.channel.close()
        await task.value
    }

    /// Whether the connection is open.
    public var isActive: Bool { session.channel.channel.isActive }

    // MARK: Requests

    /// A request already sent, whose response is read with ``value``. Requests go out in the order
    /// they were started; each response finds its request by id, whatever order the responses come in.
    struct PendingResponse<T: Codable & Sendable>: Sendable {
        fileprivate let frame: EventLoopFuture<ByteBuffer>
        /// Stops waiting for the response (it is dropped when it comes).
        fileprivate let abandon: @Sendable () -> Void
        let ownerName: String

        /// Waits for the response and decodes it; the owner's error, `networkFailure` if the
        /// connection closed first, or `operationCancelled` as soon as the waiting task is cancelled.
        var value: T {
            get async throws(ShareSyncError) { try decode(try await arrivedFrame) }
        }

        /// Waits for the response's frame, not yet decoded (``decode(_:)``); fails as ``value`` does.
        var arrivedFrame: ByteBuffer {
            get async throws(ShareSyncError) {
                do {
                    return try await withTaskCancellationHandler {
                        try await self.frame.get()
                    } onCancel: {
                        abandon()
                    }
                } catch {
                    throw error as? ShareSyncError ?? ShareSyncError(.networkFailure, "\(error)")
                }
            }
        }

        /// The response in `frame`, decoded: the result, or the owner's error.
        func decode(_ frame: ByteBuffer) throws(ShareSyncError) -> T {
            try MessageCoding.decode(Response<T>.self, from: frame).result(ownerName: ownerName)
        }
    }

    /// Sends a request now (waiting only while the owner does not read), without waiting for its
    /// response (see ``PendingResponse``).
    func start<T: Codable & Sendable>(_ body: RequestBody, expecting: T.Type) async throws(ShareSyncError) -> PendingResponse<T> {
        let id = session.nextID()
        let payload = try MessageCoding.encode(
            Request(id: id, body: body), includingChangedKeys: true, allocator: session.channel.channel.allocator)
        let frame = try await session.send(payload, id: id, outbound: outbound)
        let session = self.session
        return PendingResponse(frame: frame, abandon: { session.abandon(id: id) }, ownerName: ownerName)
    }

    /// Sends a request and waits for its response.
    func send<T: Codable & Sendable>(_ body: RequestBody, expecting: T.Type) async throws(ShareSyncError) -> T {
        try await start(body, expecting: expecting).value
    }

    /// What this identity may learn about a share before accepting it.
    public func fetchShareMetadata(url: String, shouldFetchRootRecord: Bool = false) async throws(ShareSyncError) -> ShareMetadata {
        try await send(.fetchShareMetadata(url: url, shouldFetchRootRecord: shouldFetchRootRecord), expecting: ShareMetadataResult.self)
            .metadata()
    }

    /// Accepts a share; its zone then appears in this identity's shared database.
    @discardableResult
    public func acceptShare(url: String) async throws(ShareSyncError) -> ShareMetadata {
        try await send(.acceptShare(url: url), expecting: ShareMetadataResult.self).metadata()
    }

    /// Asks the owner for access to a share that takes access requests.
    public func requestAccess(url: String) async throws(ShareSyncError) {
        _ = try await send(.requestAccess(url: url), expecting: EmptyResult.self)
    }

    /// The zones shared with this identity that changed since a token.
    public func fetchDatabaseChanges(since token: ServerChangeToken?, resultsLimit: Int? = nil) async throws(ShareSyncError)
        -> DatabaseChanges
    {
        try await send(.fetchDatabaseChanges(token: token, resultsLimit: resultsLimit), expecting: DatabaseChangesResult.self)
            .databaseChanges(ownerName: ownerName)
    }

    /// Sends a `fetchZoneChanges` request now and returns at once; the page is read from the result's
    /// ``PendingZoneChanges/page``. Lets a caller ask for the next page while it stores the last one.
    public func startFetchZoneChanges(zoneName: String, since token: ServerChangeToken?, resultsLimit: Int? = nil)
        async throws(ShareSyncError) -> PendingZoneChanges
    {
        let response = try await start(
            .fetchZoneChanges(zoneName: zoneName, token: token, resultsLimit: resultsLimit), expecting: ReceivedZoneChanges.self)
        return PendingZoneChanges(arrived: { () async throws(ShareSyncError) -> ArrivedZoneChanges in
            let frame = try await response.arrivedFrame
            return ArrivedZoneChanges(continuation: ReceivedZoneChanges.continuation(of: frame)) { () throws(ShareSyncError) in
                try response.decode(frame).zoneChanges(ownerName: response.ownerName)
            }
        })
    }

    /// Fetches records of a shared zone; a record outside this identity's view is `unknownItem`.
    /// Asks in requests of at most ``maximumItemsPerRequest`` names; a request whose records would not
    /// fit in one answer (`limitExceeded`, rule `maximumResponseSize`) is split in two and asked again.
    public func fetchRecords(zoneName: String, recordNames: [String]) async throws(ShareSyncError)
        -> [Record.ID: Result<Record, ShareSyncError>]
    {
        var results: [Record.ID: Result<Record, ShareSyncError>] = [:]
        for chunk in recordNames.chunked(maximumItemsPerRequest) {
            try await fetchRecords(zoneName: zoneName, Array(chunk), into: &results)
        }
        return results
    }

    private func fetchRecords(zoneName: String, _ names: [String], into results: inout [Record.ID: Result<Record, ShareSyncError>])
        async throws(ShareSyncError)
    {
        let zoneID = RecordZone.ID(zoneName: zoneName, ownerName: ownerName)
        let page: FetchRecordsResult
        do {
            page = try await send(.fetchRecords(zoneName: zoneName, recordNames: names), expecting: FetchRecordsResult.self)
        } catch where error.code == .limitExceeded && error.rule == .maximumResponseSize && names.count > 1 {
            let half = names.count / 2
            try await fetchRecords(zoneName: zoneName, Array(names[..<half]), into: &results)
            try await fetchRecords(zoneName: zoneName, Array(names[half...]), into: &results)
            return
        }
        for record in page.records { results[record.recordID] = .success(record) }
        for (name, error) in page.errors {
            results[Record.ID(recordName: name, zoneID: zoneID)] = .failure(error.shareSyncError(ownerName: ownerName))
        }
    }

    /// At most this many records and names go in one `modifyRecords` request: the owner's limit.
    public var maximumItemsPerRequest: Int { limits.maximumItemsPerRequest }

    /// Saves and deletes records in a shared zone. Records carry the zone ID as fetched (owner name
    /// ``ownerName``). The items go as several requests, in order (saves first), when they are more than
    /// ``maximumItemsPerRequest`` or more bytes than the owner's response size (``WireLimits/maximumResponseSize``):
    /// each request atomic on its own when `atomically`; the results are merged.
    ///
    /// With a `writeID` (1 to 100 characters of letters, digits, `.`, `_`, `:` and `-`, unique to this
    /// write) the owner applies the write once: the same write sent again with the same `writeID`
    /// after its answer was lost gets the first answer and changes nothing. Each request of a write
    /// in several requests has its own, made from it and the names it carries. `progress` (how the
    /// write was cut when first sent, and the answers of its requests so far: ``WriteProgress``) makes
    /// a write sent again go as the same requests under the same IDs, whatever the owner's limits are
    /// now, and skips the requests already answered (their kept answers are merged into the result);
    /// without it the write is cut by the limits. Each request's answer is told to `progress` before
    /// the next request goes. A request the owner then refuses as too large (which it does only if it
    /// did not apply it under its ID) goes as two halves, each with its own ID; `progress` is told the
    /// write's cut with those halves before they are sent (the outbox stores it: sent again, the write
    /// goes as the halves, under their IDs, even if the owner's limits were raised meanwhile; sent
    /// whole under the request's ID, a half the owner had applied, its answer lost, was applied again).
    public func modifyRecords(
        zoneName: String, saving: [Record] = [], deleting: [String] = [],
        savePolicy: SavePolicy = .ifServerRecordUnchanged, atomically: Bool = true, writeID: String? = nil,
        progress: WriteProgress? = nil
    ) async throws(ShareSyncError) -> ModifyRecordsResult {
        let items = ModifyItem.items(saving: saving, deleting: deleting)
        let zoneID = RecordZone.ID(zoneName: zoneName, ownerName: ownerName)
        var result = ModifyRecordsResult()
        var cut: [Int]
        if let parts = progress?.parts, parts.allSatisfy({ $0 > 0 }), parts.reduce(0, +) == items.count {
            cut = parts
        } else {
            cut = ModifyItem.batches(items, limits: limits).map(\.count)
        }
        var index = 0
        var start = 0
        while index < cut.count {
            let chunk = Array(items[start..<(start + cut[index])])
            let (saves, deletes) = ModifyItem.split(chunk)
            // A write in one request goes under the write's own ID; cut in several, each request under
            // an ID made from the write's and the request's items.
            let chunkID = writeID.map { cut.count == 1 ? $0 : Self.partWriteID($0, chunk) }
            if cut.count > 1, let chunkID, let kept = progress?.answers[chunkID] {
                // Answered on an earlier send: not sent again (the owner may no longer keep its answer).
                kept.merge(saving: saves, deleting: deletes, zoneID: zoneID, into: &result)
            } else {
                let page: ModifyRecordsWireResult
                do {
                    let pending = try await self.start(
                        .modifyRecords(
                            zoneName: zoneName, saving: saves, deleting: deletes, savePolicy: savePolicy, atomically: atomically,
                            writeID: chunkID),
                        expecting: ModifyRecordsWireResult.self)
                    progress?.sent(chunkID)
                    page = try await pending.value
                } catch where error.code == .limitExceeded && Self.refusesSize(error) && chunk.count > 1 {
                    // The owner counted more bytes than this side did, or a request cut as it was first
                    // sent is over limits the owner lowered since: ask in two halves. Refused whole, so it
                    // was not applied under its ID (the owner answers a request it applied with its first
                    // answer before it checks the limits). The new cut is told first (stored by the outbox).
                    cut.replaceSubrange(index...index, with: [chunk.count / 2, chunk.count - chunk.count / 2])
                    try progress?.recut(cut)
                    continue
                }
                if cut.count > 1, let chunkID { try progress?.answered(chunkID, page) }
                page.merge(saving: saves, deleting: deletes, zoneID: zoneID, into: &result)
            }
            start += cut[index]
            index += 1
        }
        return result
    }

    /// Whether a `limitExceeded` refusal of a `modifyRecords` request is about its size (bytes or item
    /// count), which two halves fix.
    static func refusesSize(_ error: ShareSyncError) -> Bool {
        [.maximumResponseSize, .maximumItemsPerRequest, .itemsPerRequest].contains(error.rule)
    }

    /// The write ID of one request of a write sent in several: the write's, `.`, and a digest (64-bit
    /// FNV-1a, hex) of the names the request saves and deletes.
    static func partWriteID(_ root: String, _ items: [ModifyItem]) -> String {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for item in items {
            let name: String
            switch item {
            case .save(let record, _): name = "s:" + record.recordID.recordName
            case .delete(let recordName): name = "d:" + recordName
            }
            for byte in name.utf8 {
                hash ^= UInt64(byte)
                hash = hash &* 0x100_0000_01b3
            }
            hash = hash &* 0x100_0000_01b3  // a 0 byte between names (xor 0 changes nothing)
        }
        let hex = String(hash, radix: 16)
        return root + "." + String(repeating: "0", count: 16 - hex.count) + hex
    }

    /// Sends a `ping` and waits for the owner's answer. The connection pings by itself when it has been
    /// quiet (``PingInterval``); this is for checking that the owner still answers.
    public func ping() async throws(ShareSyncError) {
        _ = try await send(.ping, expecting: EmptyResult.self)
    }

    /// Leaves a share: this identity's status becomes removed and the share's records leave its view.
    public func leaveShare(zoneName: String, shareRecordName: String) async throws(ShareSyncError) {
        _ = try await send(.leaveShare(zoneName: zoneName, shareRecordName: shareRecordName), expecting: EmptyResult.self)
    }

    /// Subscribes to this identity's view, handing each push to `receiver` on the connection's reading
    /// task (``OwnerDatabase/subscribe(since:)`` gives them as an `AsyncStream`).
    public func subscribe(since token: ServerChangeToken?, receiver: PushReceiver) async throws(ShareSyncError) {
        session.setPushes(receiver)
        do {
            _ = try await send(.subscribe(token: token), expecting: SubscribeResult.self)
        } catch {
            receiver.end()
            throw error
        }
    }
}

extension ModifyRecordsWireResult {
    /// Adds this answer's outcome of each record saved and each name deleted to `result` (records
    /// matched by name; an error's records carry the zone's owner). An item the answer does not name
    /// gets no outcome.
    func merge(saving saves: [Record], deleting deletes: [String], zoneID: RecordZone.ID, into result: inout ModifyRecordsResult) {
        let ownerName = zoneID.ownerName
        let saved = Dictionary(self.saved.map { ($0.recordID.recordName, $0) }, uniquingKeysWith: { a, _ in a })
        for record in saves {
            let name = record.recordID.recordName
            if let error = errors[name] {
                result.saveResults[record.recordID] = .failure(error.shareSyncError(ownerName: ownerName))
            } else if let savedRecord = saved[name] {
                result.saveResults[record.recordID] = .success(savedRecord)
            }
        }
        let deleted = Set(self.deleted)
        for name in deletes {
            let id = Record.ID(recordName: name, zoneID: zoneID)
            if let error = errors[name] {
                result.deleteResults[id] = .failure(error.shareSyncError(ownerName: ownerName))
            } else if deleted.contains(name) {
                result.deleteResults[id] = .success(())
            }
        }
    }
}

extension ModifyRecordsResult {
    /// The outcomes `answers` (of some requests of a write) give the items of `saving` and `deleting`.
    static func answered(
        _ answers: [ModifyRecordsWireResult], saving: [Record], deleting: [String], zoneID: RecordZone.ID
    ) -> ModifyRecordsResult {
        var result = ModifyRecordsResult()
        for answer in answers { answer.merge(saving: saving, deleting: deleting, zoneID: zoneID, into: &result) }
        return result
    }

    /// `answered` (the outcomes of the requests the owner answered) completed for a write in several
    /// requests, cut as `parts`, of which a later request was refused as a whole with `refusal`: the
    /// items of that request (the first one no answer names) fail with `refusal`, and the items of
    /// the requests after it, never sent, with `batchRequestFailed` (they may go again). So the items
    /// the owner applied are not reported refused with the rest. Without a cut that fits the items,
    /// every item no answer names fails with `refusal`.
    func completed(
        refusedWith refusal: ShareSyncError, saving: [Record], deleting: [String], zoneID: RecordZone.ID, parts: [Int]?
    ) -> ModifyRecordsResult {
        var result = self
        let items = ModifyItem.items(saving: saving, deleting: deleting)
        let cut = parts.flatMap { $0.reduce(0, +) == items.count ? $0 : nil } ?? [items.count]
        let notSent = ShareSyncError(
            .batchRequestFailed, "not sent: an earlier request of this write was refused as a whole (\(refusal.message))")
        var start = 0
        var refusedFound = false
        for count in cut {
            let chunk = items[start..<(start + count)]
            start += count
            var unnamed = false
            for item in chunk {
                let error = refusedFound ? notSent : refusal
                switch item {
                case .save(let record, _) where result.saveResults[record.recordID] == nil:
                    result.saveResults[record.recordID] = .failure(error)
                    unnamed = true
                case .delete(let name):
                    let id = Record.ID(recordName: name, zoneID: zoneID)
                    guard result.deleteResults[id] == nil else { continue }
                    result.deleteResults[id] = .failure(error)
                    unnamed = true
                default:
                    break
                }
            }
            if unnamed { refusedFound = true }
        }
        return result
    }
}

/// One item of a `modifyRecords`, with the bytes it adds to a request.
enum ModifyItem {
    case save(Record, bytes: Int)
    case delete(String)

    /// The items of a write, in the order they are sent: saves first, each record a `deleteSelf`
    /// reference names before the record that refers to it (the owner refuses a reference to a record
    /// not saved yet, and a write cut into requests must not put it in a later one), then deletions.
    static func items(saving: [Record], deleting: [String]) -> [ModifyItem] {
        Record.orderedForDeleteSelfTargets(saving).map { ModifyItem.saving($0) } + deleting.map { ModifyItem.delete($0) }
    }

    /// The records saved and the names deleted by `items`, in order.
    static func split(_ items: [ModifyItem]) -> (saving: [Record], deleting: [String]) {
        var saves: [Record] = []
        var deletes: [String] = []
        for item in items {
            switch item {
            case .save(let record, _): saves.append(record)
            case .delete(let name): deletes.append(name)
            }
        }
        return (saves, deletes)
    }

    static func saving(_ record: Record) -> ModifyItem {
        .save(record, bytes: ((try? record.jsonData().count) ?? 0) + Limits.responseOverheadPerItem)
    }

    var bytes: Int {
        switch self {
        case .save(_, let bytes): bytes
        case .delete(let name): name.utf8.count + 16
        }
    }

    /// The items in order, in batches of at most the owner's item count and (but for a single item)
    /// 64 KiB under its response size.
    static func batches(_ items: [ModifyItem], limits: WireLimits) -> [[ModifyItem]] {
        items.batched(
            maximumCount: limits.maximumItemsPerRequest, maximumBytes: max(1, limits.maximumResponseSize - 64 * 1024),
            size: \.bytes)
    }
}

extension Array {
    func chunked(_ size: Int) -> [ArraySlice<Element>] {
        stride(from: 0, to: count, by: size).map { self[$0..<Swift.min($0 + size, count)] }
    }
}
