import Foundation
import GRDB
import ShareSyncCore

// The outbox: writes made on the participant, kept on disk until the owner's node accepts them, so a
// restart or a lost connection never drops one. The sync engine sends an owner's pending operations in
// id order and removes each once the owner accepted it. An operation the owner answered with a
// conflict or a refusal stays, in state `conflict` or `refused`, until the user resolves it.

extension SharedDatabaseReplica {
    /// Adds a write to the end of the owner's outbox, pending, and returns it with its assigned
    /// ``OutboxOperation/id``. Saved records keep their ``Record/changedKeys``. `answers` are the
    /// owner's answers to requests of it already sent, by request ID, kept with it in the same
    /// transaction (``keepAnswer(_:request:operation:)``): a write sent at once, cut off part-way.
    @discardableResult
    public func enqueue(owner: String, operation: OutboxOperation, answers: [String: Data] = [:]) throws(ShareSyncError)
        -> OutboxOperation
    {
        var operation = operation
        operation.id = 0
        operation.state = .pending
        operation.error = nil
        operation.serverRecords = []
        if operation.writeID == nil { operation.writeID = OutboxOperation.newWriteID() }
        let json = try Self.encode(operation)
        operation.id = try write { db in
            try requireOwner(db, owner)
            try db.executeCached("INSERT INTO replicaOutbox (owner, json) VALUES (?, ?)", [owner, json])
            let id = db.lastInsertedRowID
            for (request, answer) in answers {
                try db.executeCached(
                    "INSERT OR REPLACE INTO replicaOutboxAnswer (operation, request, answer) VALUES (?, ?, ?)", [id, request, answer])
            }
            return id
        }
        return operation
    }

    /// Keeps the owner's answer to one request of write `id` (a write sent in several requests, each
    /// under its own write ID `request`), on disk before the next request goes: sent again, the write
    /// skips the requests answered and takes their answers from here (``keptAnswers(operation:)``).
    /// The owner keeps only its newest answers (protocol.md, "Writes applied once"), so the first
    /// requests of a long write, sent again after it was cut off part-way, would be applied again.
    /// Throws `unknownItem` if the write is no longer in the outbox.
    public func keepAnswer(_ answer: Data, request: String, operation id: Int64) throws(ShareSyncError) {
        let kept = try write { db in
            try db.executeCached(
                """
                INSERT OR REPLACE INTO replicaOutboxAnswer (operation, request, answer)
                SELECT id, ?, ? FROM replicaOutbox WHERE id = ?
                """, [request, answer, id])
            return db.changesCount
        }
        guard kept == 1 else {
            throw ShareSyncError(.unknownItem, "no write \(id) in the outbox; see `sharesync outbox`")
        }
    }

    /// The answers kept for requests of write `id`, by request ID (``keepAnswer(_:request:operation:)``);
    /// only those under its current ``OutboxOperation/writeID`` are kept (``updateOperation(_:)``).
    public func keptAnswers(operation id: Int64) throws(ShareSyncError) -> [String: Data] {
        try read { db in
            var answers: [String: Data] = [:]
            for row in try Row.fetchAll(
                db.cachedStatement(sql: "SELECT request, answer FROM replicaOutboxAnswer WHERE operation = ?"), arguments: [id])
            {
                answers[row[0]] = row[1]
            }
            return answers
        }
    }

    /// The owner's pending writes (the ones to send), oldest first.
    public func pendingOperations(owner: String) throws(ShareSyncError) -> [OutboxOperation] {
        try outboxOperations(owner: owner).map(\.operation).filter { $0.state == .pending }
    }

    /// Whether `owner` was added (``setOwner(_:)``), and whether any of its writes wait in the outbox to
    /// be sent (``pendingOperations(owner:)`` not empty), in one read that decodes nothing: what a write
    /// checks before it goes to the owner at once.
    ///
    /// The answer is kept until the next write that may change it (``syncedWrites``), which goes
    /// through this replica like every write of its file (a node home has one daemon, which holds
    /// the one replica). Measured reason: a participant's write checks it every time, and the read
    /// took 52-56 µs at p50 of the write's 0.9 ms round trip (`sharesync-bench suite --only
    /// latency`), where the same read repeated in a loop takes 10 µs.
    package func writeReadiness(owner: String) throws(ShareSyncError) -> (known: Bool, writesWaiting: Bool) {
        let generation = syncedWrites.load(ordering: .sequentiallyConsistent)
        if generation % 2 == 0, let kept = readiness.withLock({ $0[owner] }), kept.generation == generation {
            return (kept.known, kept.writesWaiting)
        }
        let answer = try read { db in
            let row = try Row.fetchOne(
                db.cachedStatement(sql: """
                    SELECT EXISTS (SELECT 1 FROM replicaOwner WHERE owner = ?1),
                           EXISTS (SELECT 1 FROM replicaOutbox WHERE owner = ?1 AND state = 'pending')
                    """),
                arguments: [owner])!
            return (known: row[0] as Bool, writesWaiting: row[1] as Bool)
        }
        // Kept only if no synced write ran or started during the read (an odd count: one was running),
        // and only for owners the replica knows: names asked about at random do not pile up here.
        if answer.known, generation % 2 == 0, syncedWrites.load(ordering: .sequentiallyConsistent) == generation {
            readiness.withLock { $0[owner] = (generation, answer.known, answer.writesWaiting) }
        }
        return answer
    }

    /// Every write in the outbox, of one owner or of all, in every state, oldest first.
    public func outboxOperations(owner: String? = nil) throws(ShareSyncError) -> [(owner: String, operation: OutboxOperation)] {
        try read { db in
            let rows: [Row]
            if let owner {
                rows = try Row.fetchAll(
                    db.cachedStatement(sql: "SELECT * FROM replicaOutbox WHERE owner = ? ORDER BY id"), arguments: [owner])
            } else {
                rows = try Row.fetchAll(db.cachedStatement(sql: "SELECT * FROM replicaOutbox ORDER BY id"))
            }
            return try rows.map { row in (owner: row["owner"] as String, operation: try Self.operation(row)) }
        }
    }

    /// One write of the outbox, with its owner; `nil` if no operation has that ID.
    public func outboxOperation(id: Int64) throws(ShareSyncError) -> (owner: String, operation: OutboxOperation)? {
        try read { db in
            guard let row = try Row.fetchOne(db.cachedStatement(sql: "SELECT * FROM replicaOutbox WHERE id = ?"), arguments: [id]) else {
                return nil
            }
            return (owner: row["owner"] as String, operation: try Self.operation(row))
        }
    }

    /// How many writes are in each state, over every owner.
    public func outboxCounts() throws(ShareSyncError) -> [OutboxOperation.State: Int] {
        try read { db in
            var counts: [OutboxOperation.State: Int] = [:]
            for state in OutboxOperation.State.allCases { counts[state] = 0 }
            for row in try Row.fetchAll(db.cachedStatement(sql: "SELECT state, COUNT(*) AS n FROM replicaOutbox GROUP BY state")) {
                if let state = OutboxOperation.State(rawValue: row["state"]) { counts[state] = row["n"] }
            }
            return counts
        }
    }

    /// Stores an operation in place of the one with its ``OutboxOperation/id``: its records, state,
    /// error and server records. Keeps its place in the outbox. Throws `unknownItem` if it is not there.
    /// Its ``OutboxOperation/writeID`` is stored as given: a caller whose write changed after the
    /// owner answered it (a conflict resolved, the items its batch failed) gives it a new one (and the
    /// answers kept for its requests, ``keepAnswer(_:request:operation:)``, go). A rebase keeps it:
    /// the write's first send may have been applied, its answer lost, and the owner must answer the
    /// next send with that answer, not apply the write again.
    public func updateOperation(_ operation: OutboxOperation) throws(ShareSyncError) {
        let json = try Self.encode(operation)
        var error: Data?
        if let failure = operation.error { error = try Self.encode(StoredError(failure)) }
        var servers: Data?
        if !operation.serverRecords.isEmpty { servers = try Self.encode(operation.serverRecords) }
        // Answers kept for requests under another write ID belong to a write that is no longer this one.
        let requestPrefix = operation.writeID.map { $0 + "." } ?? ""
        let changed = try write { db in
            try db.executeCached(
                "UPDATE replicaOutbox SET json = ?, state = ?, error = ?, serverRecords = ? WHERE id = ?",
                [json, operation.state.rawValue, error, servers, operation.id])
            let changed = db.changesCount
            try db.executeCached(
                "DELETE FROM replicaOutboxAnswer WHERE operation = ? AND (? = '' OR substr(request, 1, ?) != ?)",
                [operation.id, requestPrefix, requestPrefix.unicodeScalars.count, requestPrefix])
            return changed
        }
        guard changed == 1 else {
            throw ShareSyncError(.unknownItem, "no write \(operation.id) in the outbox; see `sharesync outbox`")
        }
    }

    /// Removes a write from the outbox (once the owner's node answered it, or the user dropped it).
    /// Removing an ID that is not there does nothing.
    public func removeOperation(id: Int64) throws(ShareSyncError) {
        try write { db in
            try db.executeCached("DELETE FROM replicaOutbox WHERE id = ?", [id])
        }
    }

    /// After the owner saved `recordID` and gave it `newTag`, the owner's pending saves of that record
    /// that were based on `oldTag` are based on `newTag`: a later local edit of a record builds on the
    /// earlier one instead of conflicting with it.
    public func rebaseQueuedSaves(
        owner: String, recordID: ShareSyncCore.Record.ID, from oldTag: String?, to newTag: String?
    ) throws(ShareSyncError) {
        for var operation in try pendingOperations(owner: owner) {
            var changed = false
            for i in operation.saving.indices
            where operation.saving[i].recordID == recordID && operation.saving[i].recordChangeTag == oldTag {
                operation.saving[i].recordChangeTag = newTag
                changed = true
            }
            if changed { try updateOperation(operation) }
        }
    }

    /// An outbox row as an operation with its state.
    private static func operation(_ row: Row) throws(ShareSyncError) -> OutboxOperation {
        var operation: OutboxOperation = try decode(row["json"])
        operation.id = row["id"]
        let state: String = row["state"]
        operation.state = OutboxOperation.State(rawValue: state) ?? .refused
        if let data: Data = row["error"] {
            let stored: StoredError = try decode(data)
            operation.error = stored.error(zoneName: operation.zoneName, owner: row["owner"])
        }
        if OutboxOperation.State(rawValue: state) == nil {
            // Written by a newer sharesync: not sent by this one, which cannot know what the state means.
            // (It was read as pending, and sent.)
            operation.error = ShareSyncError(
                .internalError, "this write is in a state this sharesync does not know (\(state)): a newer version kept it; "
                    + "it is not sent (discard it, or run the newer version)")
        }
        if let data: Data = row["serverRecords"] {
            operation.serverRecords = try decode(data)
        }
        return operation
    }

    /// An error as the outbox stores it, with each item's error of a `partialFailure` (one level: what
    /// resolving a write refused as deleted reads, ``ParticipantSync`` `savesRefusedAsDeleted`). Rows
    /// written before these were kept have none.
    private struct StoredError: Codable {
        var code: ShareSyncError.Code
        var message: String
        var rule: String?
        var recordName: String?
        var partialErrors: [String: StoredError]?

        init(_ error: ShareSyncError, withItems: Bool = true) {
            code = error.code
            message = error.message
            rule = error.rule?.rawValue
            recordName = error.recordID?.recordName
            partialErrors = withItems ? error.partialErrors?.mapValues { StoredError($0, withItems: false) } : nil
        }

        func error(zoneName: String, owner: String) -> ShareSyncError {
            let zoneID = RecordZone.ID(zoneName: zoneName, ownerName: owner)
            let items = partialErrors?.mapValues { $0.error(zoneName: zoneName, owner: owner) }
            return ShareSyncError(
                code, message, recordID: recordName.map { ShareSyncCore.Record.ID(recordName: $0, zoneID: zoneID) },
                zoneID: zoneID, rule: rule.map(Rule.init(rawValue:)), partialErrors: items)
        }
    }

    static func encode<T: Encodable>(_ value: T) throws(ShareSyncError) -> Data {
        do {
            return try JSONCoding.encoder(includingChangedKeys: true).encode(value)
        } catch {
            throw ShareSyncError(.invalidArguments, "the operation cannot be encoded as JSON: \(error)", rule: .recordJSON)
        }
    }

    static func decode<T: Decodable>(_ data: Data) throws(ShareSyncError) -> T {
        do {
            return try JSONCoding.decoder().decode(T.self, from: data)
        } catch {
            throw ShareSyncError(.internalError, "a stored outbox operation is unreadable: \(JSONErrors.describe(error))")
        }
    }
}
