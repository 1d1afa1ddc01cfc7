import ShareSyncCore
import ShareSyncStore

// The outbox as the user sees it: writes waiting, and writes the owner answered with a conflict or a
// refusal, which stay until the user resolves them. See `ParticipantSync`, "Writes".

extension ParticipantSync {
    /// Which version wins when a conflict is resolved.
    public enum ConflictChoice: String, Sendable, Hashable, Codable, CaseIterable {
        /// Send the local write again over the owner's record: the owner's version with the fields this
        /// node changed (``Record/changedKeys``, and the parent if it changed) set to this node's
        /// values, under the owner's change tag. The owner's changes to other fields stay. A record
        /// that does not say which fields changed is sent whole. It may conflict again if the owner's
        /// record changed once more. A record the owner deleted meanwhile is saved again, whole, as a
        /// new record.
        case mine
        /// Drop the local write: the owner's version (or its deletion) stays (the replica holds it).
        case theirs
    }

    /// A local write not yet accepted by the owner, as reads see it (read your own writes).
    public struct LocalEdit: Sendable, Hashable {
        /// The outbox operation it comes from.
        public var operationID: Int64
        /// ``OutboxOperation/State/pending`` or ``OutboxOperation/State/conflict``.
        public var state: OutboxOperation.State
        /// The record as this node last wrote it; `nil` for a deletion.
        public var record: Record?
    }

    /// The latest local write of each record of a zone that is pending or in conflict, by record name.
    /// Refused writes are left out: the owner will not take them (they are listed by the outbox).
    public func localEdits(owner: String, zoneName: String) throws(ShareSyncError) -> [String: LocalEdit] {
        var edits: [String: LocalEdit] = [:]
        for (_, operation) in try replica.outboxOperations(owner: owner)
        where operation.zoneName == zoneName && operation.state != .refused {
            for record in operation.saving {
                edits[record.recordID.recordName] = LocalEdit(operationID: operation.id, state: operation.state, record: record)
            }
            for name in operation.deleting {
                edits[name] = LocalEdit(operationID: operation.id, state: operation.state, record: nil)
            }
        }
        return edits
    }

    /// Resolves a write kept as a conflict. ``ConflictChoice/mine`` makes it pending again over the
    /// owner's change tags and, if the owner is connected, waits (up to `timeout`) for its answer;
    /// ``ConflictChoice/theirs`` removes it. Returns the operation as it stands afterwards, or `nil` if
    /// it left the outbox (sent and accepted, or dropped). Throws `unknownItem` for an ID not in the
    /// outbox and `invalidArguments` (rule `notAConflict`) for a write that is not in conflict.
    ///
    /// A write refused because records it saves were deleted on the owner's side meanwhile (each of its
    /// refusals `unknownItem`) is a conflict with a deletion, and resolved the same way: ``ConflictChoice/mine``
    /// saves those records again as new records (no change tag: the whole record as this node wrote
    /// it), ``ConflictChoice/theirs`` drops the write (the deletion stays). Before, such a write could only
    /// be discarded, and the edit was lost.
    @discardableResult
    public func resolveConflict(id: Int64, keep choice: ConflictChoice, timeout: Duration = .seconds(10))
        async throws(ShareSyncError) -> OutboxOperation?
    {
        guard let found = try replica.outboxOperation(id: id) else {
            throw ShareSyncError(.unknownItem, "no write \(id) in the outbox; see `sharesync outbox`")
        }
        let (owner, operation) = found
        let deletedMeanwhile = Self.savesRefusedAsDeleted(operation)
        guard operation.state == .conflict || !deletedMeanwhile.isEmpty else {
            throw ShareSyncError(
                .invalidArguments,
                "write \(id) is \(operation.state.rawValue), not in conflict; "
                    + (operation.state == .refused ? "discard it" : "it is sent when the owner is connected"),
                rule: .notAConflict)
        }
        switch choice {
        case .theirs:
            try replica.removeOperation(id: id)
            logger.info("conflict resolved: theirs", metadata: ["owner": "\(owner)", "operation": "\(id)"])
            _ = try? forgetIfNothingLeft(owner: owner)  // a failure leaves the owner as it is
            return nil
        case .mine:
            var resend = operation
            let servers = Dictionary(operation.serverRecords.map { ($0.recordID, $0) }, uniquingKeysWith: { $1 })
            for i in resend.saving.indices {
                if let server = servers[resend.saving[i].recordID] {
                    resend.saving[i] = Self.keepingMine(resend.saving[i], over: server)
                } else if deletedMeanwhile.contains(resend.saving[i].recordID.recordName) {
                    // Created again: a save with no change tag creates a record that does not exist (and
                    // conflicts, with the owner's record, if someone created it again meanwhile).
                    resend.saving[i].recordChangeTag = nil
                }
            }
            resend.state = .pending
            resend.error = nil
            resend.serverRecords = []
            // Another write, after the owner answered the first: under the old ID it would get that answer.
            resend.writeID = OutboxOperation.newWriteID()
            try replica.updateOperation(resend)
            logger.info("conflict resolved: mine, sent again", metadata: ["owner": "\(owner)", "operation": "\(id)"])
            guard let link = existingLink(owner) else { return resend }
            link.pokeOutbox()
            guard link.activeConnection != nil else { return resend }
            _ = await hub.waitUntil(timeout: timeout) {
                (try? replica.outboxOperation(id: id))?.operation.state != .pending
            }
            return try replica.outboxOperation(id: id)?.operation
        }
    }

    /// The names of the records a refused write saves that the owner said no longer exist, if every
    /// refusal of the write is that (or an item failed only because its atomic batch did, or is a
    /// conflict, resolved as conflicts are); empty otherwise (a write refused for anything else is
    /// discarded, not resolved).
    static func savesRefusedAsDeleted(_ operation: OutboxOperation) -> Set<String> {
        guard operation.state == .refused, let error = operation.error else { return [] }
        let refusals = error.code == .partialFailure ? error.partialErrors ?? [:] : [error.recordID?.recordName ?? "": error]
        let saved = Set(operation.saving.map(\.recordID.recordName))
        var gone: Set<String> = []
        for (name, refusal) in refusals {
            switch refusal.code {
            case .unknownItem where saved.contains(name): gone.insert(name)
            case .batchRequestFailed, .serverRecordChanged: continue
            default: return []
            }
        }
        return gone
    }

    /// `local`'s changes over the owner's version `server` (``ConflictChoice/mine``): the fields it
    /// changed, and its parent if that changed, set on the owner's record, which keeps its change tag
    /// and every other field. Before, the whole local copy was sent: an edit of one field, made on a
    /// stale copy, took back the owner's changes to the others. A record with no changed fields noted
    /// (built whole, or written by an older version) is sent whole, under the owner's change tag.
    static func keepingMine(_ local: Record, over server: Record) -> Record {
        guard !local.changedKeys.isEmpty || local.parentChanged, local.recordType == server.recordType else {
            var whole = local
            whole.recordChangeTag = server.recordChangeTag
            return whole
        }
        var merged = server
        for key in local.changedKeys { merged[key] = local[key] }
        if local.parentChanged { merged.parent = local.parent }
        return merged
    }

    /// Drops a write from the outbox, whatever its state (a pending one may already be on its way if
    /// the owner is connected). Throws `unknownItem` for an ID not in the outbox.
    public func discardOperation(id: Int64) throws(ShareSyncError) {
        guard let found = try replica.outboxOperation(id: id) else {
            throw ShareSyncError(.unknownItem, "no write \(id) in the outbox; see `sharesync outbox`")
        }
        let (owner, operation) = found
        try replica.removeOperation(id: id)
        logger.info(
            "outbox write discarded", metadata: ["owner": "\(owner)", "operation": "\(id)", "state": "\(operation.state.rawValue)"])
        _ = try? forgetIfNothingLeft(owner: owner)  // a failure leaves the owner as it is
        hub.notifyWatchers()
    }
}
