import Foundation
import NIOCore
import ShareSyncCore
import ShareSyncStore
import ShareSyncWire

/// Runs one authenticated caller's requests against the owner's database (on a thread-pool
/// thread: the database calls block). Every request goes through the caller's shared database view
/// or the sharing entry points, so the store's access policy decides.
struct RequestExecutor: Sendable {
    let database: PrivateDatabase
    let caller: Caller
    /// Where the changes served to the caller are noted (the owner server's; none in process).
    var syncStates: ParticipantSyncStates? = nil
    /// The size of the request's frame, for the limit on a `modifyRecords` request with a write ID
    /// (checked only if it is not a repeat; see ``OwnerServer/oversizedWrite(bytes:limit:)``).
    var requestBytes = 0

    var view: SharedDatabaseView { database.sharedDatabase(for: caller) }

    func zoneID(_ zoneName: String) -> RecordZone.ID { RecordZone.ID(zoneName: zoneName, ownerName: database.ownerName) }

    /// The response frame for a request: `{"id", "ok"}` or `{"id", "error"}`.
    func execute(_ request: Request) -> ByteBuffer { answer(request).payload }

    /// The response frame for a request, and the error it answers if it was refused.
    func answer(_ request: Request) -> (payload: ByteBuffer, error: ShareSyncError?) {
        do {
            return (try run(request), nil)
        } catch {
            return (errorResponse(id: request.id, error), error)
        }
    }

    /// The response frame `{"id", "error"}`.
    func errorResponse(id: Int, _ error: ShareSyncError) -> ByteBuffer {
        ShareSyncMetrics.countError(channel: "owner", error.code)
        return (try? MessageCoding.encode(ErrorResponse(id: id, Self.forParticipant(error))))
            ?? ByteBuffer(string: #"{"id":null,"error":{"code":"internalError","message":"cannot encode an error"}}"#)
    }

    private func ok<T: Codable & Sendable>(_ id: Int, _ result: T) throws(ShareSyncError) -> ByteBuffer {
        try MessageCoding.encode(Response(id: id, ok: result))
    }

    private func run(_ request: Request) throws(ShareSyncError) -> ByteBuffer {
        let id = request.id
        switch request.body {
        case .fetchShareMetadata(let url, let root):
            let metadata = try database.fetchShareMetadata(url: url, for: caller, shouldFetchRootRecord: root)
            return try ok(id, ShareMetadataResult(metadata))
        case .acceptShare(let url):
            return try ok(id, ShareMetadataResult(try database.acceptShare(url: url, as: caller)))
        case .requestAccess(let url):
            try database.requestAccess(url: url, as: caller)
            return try ok(id, EmptyResult())
        case .fetchDatabaseChanges(let token, let limit):
            let changes = try view.fetchDatabaseChanges(since: token, resultsLimit: limit)
            let answer = try ok(id, DatabaseChangesResult(changes))
            // Noted for those who see something, or were noted before: any key can connect and ask,
            // and noting every one grew the owner's memory with each new key until it restarted.
            if !changes.changedZoneIDs.isEmpty || !changes.deletedZoneIDs.isEmpty || syncStates?.state(of: caller.userRecordName) != nil {
                syncStates?.servedDatabaseChanges(caller.userRecordName)
            }
            return answer
        case .fetchZoneChanges(let zoneName, let token, let limit):
            let changes = try view.fetchZoneChanges(zoneID(zoneName), since: token, resultsLimit: limit)
            let answer = try ok(id, ZoneChangesResult(changes))
            syncStates?.served(caller.userRecordName, zoneName: zoneName, token: changes.changeToken)
            return answer
        case .fetchRecords(let zoneName, let names):
            try checkCount(names.count)
            let ids = names.map { Record.ID(recordName: $0, zoneID: zoneID(zoneName)) }
            let results = try view.fetchRecords(ids)
            var records: [Record] = []
            var errors: [String: WireError] = [:]
            for recordID in ids {
                switch results[recordID] {
                case .success(let record): records.append(record)
                case .failure(let error): errors[recordID.recordName] = WireError(error)
                case nil: errors[recordID.recordName] = WireError(ShareSyncError(.unknownItem, "record \(recordID.recordName) does not exist", recordID: recordID))
                }
            }
            return try ok(id, FetchRecordsResult(records: records, errors: errors))
        case .modifyRecords(let zoneName, let saving, let deleting, let policy, let atomically, let writeID):
            let zone = zoneID(zoneName)
            for record in saving where record.recordID.zoneID != zone {
                throw ShareSyncError(
                    .invalidArguments,
                    "record \(record.recordID.recordName) is in zone \(record.recordID.zoneID), not in \(zone) named by the request",
                    recordID: record.recordID, rule: .zoneMismatch)
            }
            if let writeID {
                guard Self.isValidWriteID(writeID) else {
                    throw ShareSyncError(
                        .invalidArguments, "a writeID is 1 to 128 characters of letters, digits, '.', '_', ':' and '-'",
                        rule: .malformedRequest)
                }
                // Applied once: a repeat (sent again after its answer was lost) gets the first answer,
                // even over limits lowered since. A request over the limits is answered only if it is
                // a repeat, found with one read and no write transaction (anyone with a key can send
                // one); within them, the write's own transaction looks for the repeat first.
                do throws(ShareSyncError) {
                    try checkCount(saving.count + deleting.count)
                    let limit = database.limits.maximumResponseSize
                    if requestBytes > limit { throw OwnerServer.oversizedWrite(bytes: requestBytes, limit: limit) }
                    // After the repeat lookup too: a write an earlier owner applied gets its kept answer.
                    try Self.checkReferenceZones(saving)
                } catch {
                    if let kept = try view.keptAnswer(writeID: writeID) { return answerFrame(id, kept) }
                    throw error
                }
                let (answer, _) = try view.modifyRecordsOnce(
                    writeID: writeID, saving: saving, deleting: deleting.map { Record.ID(recordName: $0, zoneID: zone) },
                    savePolicy: policy, atomically: atomically
                ) { result in
                    ShareSyncMetrics.conflicts(side: "owner", result.errors.values.count { $0.code == .serverRecordChanged })
                    return try MessageCoding.encodeData(ModifyRecordsWireResult(result))
                }
                return answerFrame(id, answer)
            }
            try checkCount(saving.count + deleting.count)
            try Self.checkReferenceZones(saving)
            let result = try view.modifyRecords(
                saving: saving, deleting: deleting.map { Record.ID(recordName: $0, zoneID: zone) }, savePolicy: policy,
                atomically: atomically)
            ShareSyncMetrics.conflicts(side: "owner", result.errors.values.count { $0.code == .serverRecordChanged })
            return try ok(id, ModifyRecordsWireResult(result))
        case .leaveShare(let zoneName, let shareRecordName):
            try view.leaveShare(Record.ID(recordName: shareRecordName, zoneID: zoneID(zoneName)))
            return try ok(id, EmptyResult())
        case .subscribe:
            throw ShareSyncError(.internalError, "subscribe is handled by the connection")
        case .ping:
            return try ok(id, EmptyResult())  // the connection answers pings itself, at once
        }
    }

    /// The response frame `{"id", "ok"}` around an answer already encoded (a kept write answer).
    private func answerFrame(_ id: Int, _ answer: Data) -> ByteBuffer {
        var buffer = ByteBuffer(string: #"{"id":\#(id),"ok":"#)
        buffer.writeBytes(answer)
        buffer.writeString("}")
        return buffer
    }

    /// A `modifyRecords` write ID: 1 to 128 characters of ASCII letters, digits, `.`, `_`, `:` and `-`.
    static func isValidWriteID(_ id: String) -> Bool {
        (1...128).contains(id.utf8.count)
            && id.utf8.allSatisfy { byte in
                switch byte {
                case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                    UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: ":"), UInt8(ascii: "-"):
                    true
                default: false
                }
            }
    }

    private func checkCount(_ n: Int) throws(ShareSyncError) {
        let limit = database.limits.maximumItemsPerRequest
        guard n <= limit else {
            throw ShareSyncError(
                .limitExceeded, "\(n) items in one request; at most \(limit) are allowed (split the request)",
                rule: .maximumItemsPerRequest)
        }
    }

    /// A failure of the owner's own store as a participant is told it: what happened and what to do.
    /// The store's words are written for the owner (its CLI, its log): they name the database file, or
    /// quote SQLite and the statement that failed, and a full disk's ask to free space there.
    static func forParticipant(_ error: ShareSyncError) -> ShareSyncError {
        switch error.rule {
        case .diskFull?:
            ShareSyncError(.quotaExceeded, "the owner's disk is full: nothing of the request was saved; send it again later", rule: .diskFull)
        case .storeFailure?:
            ShareSyncError(.internalError, "the owner's database failed: nothing of the request was saved; send it again later", rule: .storeFailure)
        default:
            error
        }
    }

    /// Refuses a participant's save whose reference names a zone in the owner's own form
    /// (`__defaultOwner__`, or a zoneID without ownerRecordName): for a participant that is another
    /// zone, as for a record's zoneID (`invalidArguments`, rule `zoneMismatch`; protocol.md, "Records
    /// in JSON"). Before, it was taken as the record's zone and rewritten without a word.
    static func checkReferenceZones(_ saving: [Record]) throws(ShareSyncError) {
        for record in saving {
            if let parent = record.parent, parent.recordID.zoneID.ownerName == RecordZone.ID.currentUserDefaultName {
                throw ShareSyncError(
                    .invalidArguments,
                    "record \(record.recordID.recordName): its parent \(parent.recordID.recordName) is in zone \(parent.recordID.zoneID), "
                        + "the owner's own form; leave zoneID out (a parent is in the record's zone)",
                    recordID: record.recordID, rule: .zoneMismatch)
            }
            for (key, value) in record.fields {
                guard let reference = value.references.first(where: { $0.recordID.zoneID.ownerName == RecordZone.ID.currentUserDefaultName })
                else { continue }
                throw ShareSyncError(
                    .invalidArguments,
                    "record \(record.recordID.recordName): field \(key) refers to \(reference.recordID.recordName) in zone "
                        + "\(reference.recordID.zoneID), the owner's own form; name the owner's user record name, or leave zoneID out "
                        + "for the record's zone",
                    recordID: record.recordID, rule: .zoneMismatch)
            }
        }
    }

    /// The token a subscription starts from: the one given (checked), or the current position.
    func subscriptionStart(_ token: ServerChangeToken?) throws(ShareSyncError) -> ServerChangeToken {
        guard let token else { return try database.currentChangeToken() }
        try view.checkSubscriptionToken(token)
        return token
    }

    /// Everything in the caller's view since `cursor`: the database changes (one page), each changed
    /// zone's changes complete, and the token after them; nil if nothing changed.
    ///
    /// A push carries at most ``Limits/maximumResponseSize`` bytes of records (the first change always
    /// comes, so every push makes progress). Where the budget runs out, the zone being read ends with
    /// `moreComing` and the token of its last change, later zones are left out, and the push says
    /// `moreComing`: the client fetches the rest from its stored zone tokens.
    ///
    /// Subscriptions push ``splicedChanges(since:)``, the same bytes built without decoding the
    /// records; this is the path it is checked against.
    func changes(since cursor: ServerChangeToken) throws(ShareSyncError) -> ChangesPush? {
        let view = self.view
        guard
            let (databaseChanges, zones, cut) = try collectChanges(
                since: cursor,
                page: { zone, token, budget, allowEmpty throws(ShareSyncError) in
                    try view.fetchZoneChangesPage(zone, since: token, byteBudget: budget, allowEmpty: allowEmpty)
                })
        else { return nil }
        let result = DatabaseChangesResult(databaseChanges)
        return ChangesPush(databaseChanges: result, zoneChanges: zones.map(ZoneChangesResult.init), token: result.token, moreComing: cut)
    }

    /// ``changes(since:)`` with each record as the JSON the caller sees, spliced from the stored bytes
    /// (``SharedDatabaseView/fetchZoneChangesPageJSON(_:since:resultsLimit:byteBudget:allowEmpty:)``)
    /// rather than decoded, presented and encoded again: what subscriptions push. The same JSON on
    /// the wire (`PushEquivalenceTests`).
    func splicedChanges(since cursor: ServerChangeToken) throws(ShareSyncError) -> SplicedChangesPush? {
        let view = self.view
        // The database changes and the zones' pages in one read: one snapshot, one transaction.
        guard
            let (databaseChanges, zones, cut) = try database.readTogether({
                try collectChanges(
                    since: cursor,
                    page: { zone, token, budget, allowEmpty throws(ShareSyncError) in
                        try view.fetchZoneChangesPageJSON(zone, since: token, byteBudget: budget, allowEmpty: allowEmpty).map { ($0, $0.bytes) }
                    })
            })
        else { return nil }
        let result = DatabaseChangesResult(databaseChanges)
        return SplicedChangesPush(
            databaseChanges: result, zoneChanges: zones.map(ZoneChangesPage.init), token: result.token, moreComing: cut)
    }

    /// The database changes since `cursor` and each changed zone's changes complete, read with
    /// `page`, within ``Limits/maximumResponseSize``; and whether the budget cut them.
    private func collectChanges<Page: PushZonePage>(
        since cursor: ServerChangeToken,
        page read: (RecordZone.ID, ServerChangeToken?, _ budget: Int, _ allowEmpty: Bool) throws(ShareSyncError) -> (Page, Int)?
    ) throws(ShareSyncError) -> (DatabaseChanges, [Page], cut: Bool)? {
        var databaseChanges = try view.fetchDatabaseChanges(since: cursor)
        guard !databaseChanges.changedZoneIDs.isEmpty || !databaseChanges.deletedZoneIDs.isEmpty else {
            return nil
        }
        let budget = database.limits.maximumResponseSize
        var used = 0
        var cut = false
        var zones: [Page] = []
        zoneLoop: for zone in databaseChanges.changedZoneIDs {
            var token: ServerChangeToken? = cursor
            var merged: Page?
            var zoneBytes = 0
            while true {
                let fetched: (Page, Int)?
                do {
                    fetched = try read(zone, token, budget - used - zoneBytes, used + zoneBytes > 0)
                } catch let error where error.code == .changeTokenExpired && token != nil {
                    // The zone entered the view after the cursor: all of it is new. If the caller had
                    // it before (lost it, then was given it again), their copy may hold records and
                    // deletions they missed meanwhile: the zone is listed as deleted too, and a client
                    // applies deletions first (protocol.md, "Pushes"), so its copy goes and this page,
                    // complete from nil, rebuilds it.
                    if !databaseChanges.deletedZoneIDs.contains(zone) { databaseChanges.deletedZoneIDs.append(zone) }
                    token = nil
                    merged = nil
                    zoneBytes = 0
                    continue
                }
                guard let (page, bytes) = fetched else {
                    // Not even one more change fits: stop here.
                    cut = true
                    if var merged {
                        merged.moreComing = true
                        zones.append(merged)
                    }
                    break zoneLoop
                }
                zoneBytes += bytes
                if merged == nil { merged = page } else { merged!.append(page) }
                merged!.moreComing = false
                token = page.changeToken
                if !page.moreComing { break }
            }
            used += zoneBytes
            if let merged { zones.append(merged) }
        }
        return (databaseChanges, zones, cut)
    }
}

/// A page of one zone's changes, as a push gathers them: pages read one after another are merged
/// into one (their changes in order, the later page's token).
protocol PushZonePage {
    var changeToken: ServerChangeToken { get }
    var moreComing: Bool { get set }
    /// Appends a later page: its changes, its token and its `moreComing`.
    mutating func append(_ later: Self)
}

extension ZoneChanges: PushZonePage {
    mutating func append(_ later: ZoneChanges) {
        changes += later.changes
        changeToken = later.changeToken
        moreComing = later.moreComing
    }
}

extension FeedPage: PushZonePage {
    mutating func append(_ later: FeedPage) {
        changes += later.changes
        changeToken = later.changeToken
        moreComing = later.moreComing
        bytes += later.bytes
    }
}

extension OwnerServer {
    /// The refusal of a `modifyRecords` request of more than `limit` bytes: its answer carries the
    /// saved records back, and an answer cannot be cut into pages.
    static func oversizedWrite(bytes: Int, limit: Int) -> ShareSyncError {
        ShareSyncError(
            .limitExceeded,
            "this modifyRecords request is \(bytes) bytes; at most \(limit) bytes are allowed in one (split it into several requests)",
            rule: .maximumResponseSize)
    }
}
