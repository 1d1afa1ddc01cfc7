import Foundation
import ShareSyncCore
import ShareSyncStore
import ShareSyncWire
import Synchronization

// Sending the outbox: the owner's pending writes, oldest first. A write the owner accepted leaves the
// outbox; one answered with a conflict or a refusal stays in it, as `conflict` or `refused`, until the
// user resolves it. Conflicts go through the merge hook first when there is one. See `ParticipantSync`,
// "Writes".

extension ParticipantOwnerLink {
    /// Sends every pending write of this owner in order. A network failure (or the engine stopping)
    /// stops here and keeps the write (and the later ones) pending for the next connection; the owner's
    /// disk being full stops here too, keeps them pending and tries again after a pause, while the
    /// link goes on reading (``holdsBackWrite(_:)``); a conflict or any other failure keeps the write
    /// as `conflict` or `refused` (``ParticipantSync/Event/operationKept(owner:operation:)``) and the
    /// later writes still go.
    func flushOutbox(_ connection: any OwnerDatabase) async throws(ShareSyncError) {
        // A write settled with items to send again (``settle(_:_:dropped:)``: failed only because their
        // batch did) goes in another pass, a few at most: before, it waited for a poke that may never
        // come while connected (another write, a reconnect).
        for _ in 0..<Self.flushPasses {
            let pass = try await flushPass(connection)
            if pass == .heldBack { return }
            if pass == .done { break }
        }
        // Every pending write was answered: nothing is held back any more.
        clearHeldBack()
    }

    /// Passes of ``flushOutbox(_:)`` over the pending writes: each one that sends some again sends fewer.
    static let flushPasses = 4

    /// How a pass of ``flushOutbox(_:)`` ended.
    private enum FlushPass {
        /// Every pending write was answered.
        case done
        /// One was settled with items to send again.
        case sendAgain
        /// The owner cannot take writes now (``holdBack(_:what:)``): the rest stays pending.
        case heldBack
    }

    /// Sends each pending write once.
    private func flushPass(_ connection: any OwnerDatabase) async throws(ShareSyncError) -> FlushPass {
        var again = false
        for id in try replica.pendingOperations(owner: ownerName).map(\.id) {
            // Read again: an earlier save may have rebased it, the user may have discarded it.
            guard var operation = try replica.outboxOperation(id: id)?.operation, operation.state == .pending else { continue }
            if operation.writeID == nil || operation.parts == nil {
                // Cut into requests once, on disk before the first send: sent again (after a crash, to
                // an owner whose limits changed), it goes as the same requests under the same IDs. A
                // write queued by a version without write IDs gets one now, so that from here on it
                // is applied once too (it may have been sent before, without one: that send cannot
                // be told apart, as before).
                if operation.writeID == nil { operation.writeID = OutboxOperation.newWriteID() }
                operation.parts = connection.parts(saving: operation.saving, deleting: operation.deleting)
                do {
                    try replica.updateOperation(operation)
                } catch where error.code == .unknownItem {
                    continue  // the user discarded it meanwhile
                }
            }
            let answer: (ModifyRecordsResult, dropped: Set<Record.ID>)
            // The answer to each request of a write in several is stored as it comes: sent again, the
            // write skips those requests.
            let answers = AnswerLog()
            let progress = try writeProgress(of: operation, in: replica, parts: operation.parts, merged: false, log: answers)
            do {
                // With its write ID: if an answer was lost (a cut connection, a crash), the owner answers
                // this send with the first answer instead of applying the write again.
                // A request the owner refuses as too large goes as two halves: the new cut is stored
                // before they are sent, so that a resend goes as those halves under their IDs.
                let first = try await connection.modifyRecords(
                    zoneName: operation.zoneName, saving: operation.saving, deleting: operation.deleting,
                    savePolicy: operation.savePolicy, atomically: operation.atomically, writeID: operation.writeID,
                    progress: progress)
                answer = try await resolveConflicts(operation, Self.landedAlready(operation, first), connection, log: answers)
            } catch where error.code == .operationCancelled && isDiscarded(operation.id) {
                // Discarded while it was being sent (``writeProgress``): what the owner applied stays,
                // and later edits of those records build on it, as after a write answered whole.
                try rebase(operation, on: answers)
                continue
            } catch where Self.keepsPending(error) {
                throw error
            } catch where Self.holdsBackWrite(error) {
                holdBack(error, what: "queued writes")
                return .heldBack
            } catch let refusal where !answers.answers.withLock(\.isEmpty) {
                // A later request of a write in several refused as a whole, after earlier ones were
                // applied: that request's items are kept refused with those never sent after it, the
                // applied items are done (later edits of what was saved build on it), and conflicts in
                // what was answered go through the merge hook as usual. Before, the whole write was
                // kept refused, the applied items with it.
                let zoneID = RecordZone.ID(zoneName: operation.zoneName, ownerName: ownerName)
                let answered = Self.landedAlready(
                    operation,
                    ModifyRecordsResult.answered(
                        answers.answers.withLock { $0 }, saving: operation.saving, deleting: operation.deleting, zoneID: zoneID))
                // The merge hook's retry is built from what was answered only, so that it never carries
                // items of the requests never sent; and only for a non-atomic write (an atomic one that
                // could not be applied whole keeps its conflicts with the refusal, as ever).
                var resolved: (ModifyRecordsResult, dropped: Set<Record.ID>) = (answered, [])
                if !operation.atomically {
                    do {
                        resolved = try await resolveConflicts(operation, answered, connection, log: answers)
                    } catch where Self.holdsBackWrite(error) {
                        holdBack(error, what: "queued writes")
                        return .heldBack
                    }
                }
                let cut = (try? replica.outboxOperation(id: operation.id))??.operation.parts ?? operation.parts
                let result = resolved.0.completed(
                    refusedWith: refusal, saving: operation.saving, deleting: operation.deleting, zoneID: zoneID, parts: cut)
                if try settle(operation, result, dropped: resolved.dropped) { again = true }
                continue
            } catch {
                var refused = operation
                refused.state = .refused
                refused.error = error
                try keep(refused)
                continue
            }
            if try settle(operation, answer.0, dropped: answer.dropped) { again = true }
        }
        return again ? .sendAgain : .done
    }

    /// How far outbox write `operation` (or, `merged`, its merged retry) got (``WriteProgress``): its
    /// cut `parts` and the answers kept for its requests; the progress stores a new cut and each
    /// answer with the write as they come. A write discarded meanwhile stops at its next answer: its
    /// other requests are not sent (what the owner applied of it stays).
    func writeProgress(of operation: OutboxOperation, in replica: SharedDatabaseReplica, parts: [Int]?, merged: Bool, log: AnswerLog)
        throws(ShareSyncError) -> WriteProgress
    {
        var answers: [String: ModifyRecordsWireResult] = [:]
        for (request, data) in try replica.keptAnswers(operation: operation.id) {
            // An answer that cannot be read is not used: that request goes again, under its ID.
            do {
                let answer = try JSONCoding.decoder().decode(ModifyRecordsWireResult.self, from: data)
                answers[request] = answer
                log.answers.withLock { $0.append(answer) }
            } catch {
                logger.warning("a kept answer is unreadable; its request is sent again", metadata: ["id": "\(operation.id)", "request": "\(request)"])
            }
        }
        let id = operation.id
        return WriteProgress(
            parts: parts, answers: answers,
            recut: { parts throws(ShareSyncError) in try Self.storeCut(parts, merged: merged, of: id, in: replica) },
            answered: { request, answer throws(ShareSyncError) in
                log.answers.withLock { $0.append(answer) }
                do throws(ShareSyncError) {
                    try replica.keepAnswer(try Self.encodedAnswer(answer), request: request, operation: id)
                } catch where error.code == .unknownItem {
                    // Discarded while it was being sent: its other requests do not go (``flushOutbox(_:)``
                    // goes on with the next write).
                    throw ShareSyncError(.operationCancelled, "write \(id) was discarded while it was being sent; its other requests are not sent")
                }
            })
    }

    /// The answers a write's requests got so far (kept from earlier sends, and new), for a write
    /// discarded on its way (``rebase(_:on:)``).
    final class AnswerLog: Sendable {
        let answers = Mutex<[ModifyRecordsWireResult]>([])
    }

    /// Bases the later queued edits of the records `operation` saved, as `log` has the owner's
    /// answers, on those saves (as ``settle(_:_:dropped:)`` does for a write answered whole).
    private func rebase(_ operation: OutboxOperation, on log: AnswerLog) throws(ShareSyncError) {
        let originals = Dictionary(operation.saving.map { ($0.recordID.recordName, $0) }, uniquingKeysWith: { a, _ in a })
        var rebased: Set<String> = []
        for answer in log.answers.withLock({ $0 }) {
            // Saved, or answered as a conflict with a server record that holds exactly this save (it
            // landed on an earlier try: ``landedAlready(_:_:)``).
            let landed = answer.errors.compactMap { name, error -> Record? in
                guard error.code == ShareSyncError.Code.serverRecordChanged.rawValue, let server = error.serverRecord,
                    let original = originals[name], server.holdsSameContent(as: original)
                else { return nil }
                return server
            }
            for saved in answer.saved + landed where rebased.insert(saved.recordID.recordName).inserted {
                guard let original = originals[saved.recordID.recordName] else { continue }
                try rebaseIfSame(original, on: saved)
            }
        }
    }

    /// Moves the later queued saves of `sent`'s record that were based on the same copy (its change tag)
    /// onto `saved`, the owner's answer, but only if the owner now holds exactly what was sent. A save
    /// with `changedKeys`, or one the merge hook rebuilt, keeps the owner's other fields, perhaps
    /// someone else's newer values: a later save of the whole record made from this node's copy would
    /// put the old ones back without a word. Not moved, it is answered `serverRecordChanged` and kept
    /// as a conflict (or merged by the hook), as any save from a stale copy is.
    private func rebaseIfSame(_ sent: Record, on saved: Record) throws(ShareSyncError) {
        guard saved.holdsSameContent(as: sent) else { return }
        try replica.rebaseQueuedSaves(owner: ownerName, recordID: sent.recordID, from: sent.recordChangeTag, to: saved.recordChangeTag)
    }

    /// Whether write `id` is no longer in the outbox (read without error, and not there).
    private func isDiscarded(_ id: Int64) -> Bool {
        if case .some(.none) = try? replica.outboxOperation(id: id) { true } else { false }
    }

    /// Stores the cut of write `id` (or, `merged`, of its merged retry), read again first: another
    /// part of the write may have changed since the send began. A write no longer there is left so.
    static func storeCut(_ parts: [Int], merged: Bool, of id: Int64, in replica: SharedDatabaseReplica) throws(ShareSyncError) {
        guard var current = try replica.outboxOperation(id: id)?.operation else { return }
        if merged { current.mergedParts = parts } else { current.parts = parts }
        do {
            try replica.updateOperation(current)
        } catch where error.code == .unknownItem {}
    }

    /// A request's answer as the outbox keeps it (``SharedDatabaseReplica/keepAnswer(_:request:operation:)``).
    static func encodedAnswer(_ answer: ModifyRecordsWireResult) throws(ShareSyncError) -> Data {
        do {
            return try JSONCoding.encoder().encode(answer)
        } catch {
            throw ShareSyncError(.internalError, "the owner's answer cannot be kept: \(error)")
        }
    }

    /// Removes an answered write, or keeps what of it the owner did not accept, as a conflict or a refusal.
    /// Returns whether it kept items to send again.
    @discardableResult
    private func settle(_ operation: OutboxOperation, _ result: ModifyRecordsResult, dropped: Set<Record.ID>)
        throws(ShareSyncError) -> Bool
    {
        let zoneID = RecordZone.ID(zoneName: operation.zoneName, ownerName: ownerName)
        var kept = operation
        kept.saving = []
        kept.deleting = []
        var conflicts: [ShareSyncError] = []
        var refusals: [ShareSyncError] = []
        for record in operation.saving {
            switch result.saveResults[record.recordID] {
            case .success(let saved)?:
                // Later local edits of this record were based on the same copy: base them on this save,
                // if the owner now holds exactly what was sent (``rebaseIfSame(_:on:)``).
                try rebaseIfSame(record, on: saved)
            case .failure(let error)? where !dropped.contains(record.recordID):
                kept.saving.append(record)
                if error.code == .serverRecordChanged {
                    conflicts.append(error)
                    if configuration.mergeConflict == nil {
                        ShareSyncMetrics.conflicts(side: "participant")
                        hub.emit(.conflict(owner: ownerName, recordID: record.recordID, resolved: false))
                    }
                } else if error.code != .batchRequestFailed {
                    refusals.append(error)
                }
            case nil:
                // The answer does not name it (an answer kept for another write under the same ID):
                // not sent, as far as this side knows; it goes again, as another write.
                kept.saving.append(record)
            default:
                break
            }
        }
        for name in operation.deleting {
            switch result.deleteResults[Record.ID(recordName: name, zoneID: zoneID)] {
            case .failure(let error)?:
                kept.deleting.append(name)
                if error.code != .batchRequestFailed { refusals.append(error) }
            case nil:
                kept.deleting.append(name)
            default:
                break
            }
        }
        if conflicts.isEmpty && refusals.isEmpty && !(kept.saving.isEmpty && kept.deleting.isEmpty) {
            // Only items that failed because their batch did, or that the answer did not name: not refused,
            // not sent; send them again, as another write (under the old ID the owner would answer with this answer).
            kept.state = .pending
            kept.writeID = OutboxOperation.newWriteID()
            do {
                try replica.updateOperation(kept)
            } catch where error.code == .unknownItem {
                return false  // the user discarded it while it was on its way
            }
            return true
        } else if let refusal = refusals.first {
            kept.state = .refused
            // One refusal, or one request's refusal failing each of its items
            // (``ModifyRecordsResult/completed(refusedWith:saving:deleting:zoneID:parts:)``): said once.
            let single = refusals.allSatisfy { $0.code == refusal.code && $0.message == refusal.message && $0.recordID == refusal.recordID }
            kept.error = single ? refusal : ShareSyncError(
                .partialFailure, "\(refusals.count) items refused (first: \(refusal.message))",
                recordID: refusal.recordID, rule: refusal.rule, partialErrors: result.errors)
            kept.serverRecords = conflicts.compactMap(\.serverRecord)
            try keep(kept)
        } else if let conflict = conflicts.first {
            kept.state = .conflict
            kept.error = conflict
            kept.serverRecords = conflicts.compactMap(\.serverRecord)
            try keep(kept)
        } else {
            try replica.removeOperation(id: operation.id)
            hub.emit(.operationSent(owner: ownerName, operationID: operation.id, result: result))
        }
        return false
    }

    /// A save answered `serverRecordChanged` whose server record already holds exactly what the save
    /// wrote (same type, fields and parent) landed on an earlier try whose answer was lost (the
    /// connection was cut after the owner committed it): it counts as saved, not as a conflict.
    /// Likewise a deletion answered `unknownItem`: the record is gone, which is what it asked.
    static func landedAlready(_ operation: OutboxOperation, _ result: ModifyRecordsResult) -> ModifyRecordsResult {
        var result = result
        for name in operation.deleting {
            for (id, outcome) in result.deleteResults where id.recordName == name && id.zoneID.zoneName == operation.zoneName {
                if case .failure(let error) = outcome, error.code == .unknownItem { result.deleteResults[id] = .success(()) }
            }
        }
        for record in operation.saving {
            guard case .failure(let error)? = result.saveResults[record.recordID], error.code == .serverRecordChanged,
                let server = error.serverRecord, server.holdsSameContent(as: record)
            else { continue }
            result.saveResults[record.recordID] = .success(server)
        }
        return result
    }

    /// Stores a write the owner did not accept, in its new state, and reports it.
    private func keep(_ operation: OutboxOperation) throws(ShareSyncError) {
        logger.warning(
            "outbox write kept",
            metadata: [
                "id": "\(operation.id)", "state": "\(operation.state.rawValue)",
                "error": "\(operation.error.map(\.description) ?? "-")",
            ])
        do {
            try replica.updateOperation(operation)
        } catch where error.code == .unknownItem {
            return  // the user discarded it while it was on its way
        }
        hub.emit(.operationKept(owner: ownerName, operation: operation))
        if operation.state == .refused, let error = operation.error { hub.emit(.error(owner: ownerName, error)) }
    }

    /// With a merge hook: retries once the saves refused with `serverRecordChanged`, merged by the hook
    /// and carrying the server's change tag, together with the items that failed only because the batch
    /// did (`batchRequestFailed`). Returns the first result updated with the retry's, and the conflicting
    /// saves the hook dropped (it returned `nil`: the server's record stays). Without a hook, returns
    /// the result as it is. The retry is stored before it is first sent and, sent again, goes as it
    /// was (``OutboxOperation/mergedRetry``); one the owner never applied that meets a newer change is
    /// merged again, once.
    private func resolveConflicts(
        _ operation: OutboxOperation, _ result: ModifyRecordsResult, _ connection: any OwnerDatabase, log: AnswerLog
    ) async throws(ShareSyncError) -> (ModifyRecordsResult, dropped: Set<Record.ID>) {
        guard let mergeConflict = configuration.mergeConflict else { return (result, []) }
        // An atomic write with an item refused for its own reason cannot be applied whole: no retry, and
        // it is kept refused with its conflicts (``settle(_:_:dropped:)``). Before, the retry took the
        // merged saves and the batch's other items without it, and the write was half applied.
        if operation.atomically, result.errors.values.contains(where: {
            $0.code != .serverRecordChanged && $0.code != .batchRequestFailed
        }) {
            return (result, [])
        }
        let zoneID = RecordZone.ID(zoneName: operation.zoneName, ownerName: ownerName)
        // Only a conflict calls for a retry.
        guard operation.saving.contains(where: {
            if case .failure(let error) = result.saveResults[$0.recordID] { error.code == .serverRecordChanged } else { false }
        }) else { return (result, []) }
        // The answer the hook merges with: the write's, or, in a second round, the stored retry's.
        var basis = result
        var useStored = true
        for _ in 0..<2 {
            var saves: [Record] = []
            var deletes: [String] = []
            var dropped: Set<Record.ID> = []
            var fromStore = false
            if useStored, let built = try replica.outboxOperation(id: operation.id)?.operation.mergedRetry {
                // Built and sent before (its answer lost, the link cut): sent again as it was, the hook
                // not asked again (``OutboxOperation/mergedRetry``).
                saves = built.saving
                deletes = built.deleting
                dropped = Set(built.dropped.map { Record.ID(recordName: $0, zoneID: zoneID) })
                fromStore = true
            } else {
                for record in operation.saving {
                    guard case .failure(let error) = basis.saveResults[record.recordID] else { continue }
                    if error.code == .serverRecordChanged, let server = error.serverRecord {
                        ShareSyncMetrics.conflicts(side: "participant")
                        let merged = mergeConflict(record, server)
                        hub.emit(.conflict(owner: ownerName, recordID: record.recordID, resolved: merged != nil))
                        if var merged {
                            merged.recordChangeTag = server.recordChangeTag
                            saves.append(merged)
                        } else {
                            dropped.insert(record.recordID)
                        }
                    } else if error.code == .batchRequestFailed {
                        saves.append(record)
                    }
                }
                for name in operation.deleting {
                    if case .failure(let error) = basis.deleteResults[Record.ID(recordName: name, zoneID: zoneID)],
                        error.code == .batchRequestFailed
                    {
                        deletes.append(name)
                    }
                }
                guard !saves.isEmpty || !deletes.isEmpty else { return (basis, dropped) }
                // On disk before its first send.
                guard var current = try replica.outboxOperation(id: operation.id)?.operation else { return (basis, dropped) }
                current.mergedRetry = OutboxOperation.MergedRetry(
                    saving: saves, deleting: deletes, dropped: dropped.map(\.recordName).sorted())
                do {
                    try replica.updateOperation(current)
                } catch where error.code == .unknownItem {
                    return (basis, dropped)  // the user discarded it meanwhile
                }
            }
            guard !saves.isEmpty || !deletes.isEmpty else { return (basis, dropped) }
            let retry = try await sendRetry(operation, saves: saves, deletes: deletes, connection, log: log)
            var merged = basis
            for (id, outcome) in retry.saveResults { merged.saveResults[id] = outcome }
            for (id, outcome) in retry.deleteResults { merged.deleteResults[id] = outcome }
            // A stored retry answered with a conflict was not applied (an applied one is answered with the
            // answer the owner kept for its ID): the owner changed the record since it was built. Merged
            // again, with the owner's record of this answer, once.
            if fromStore, retry.saveResults.values.contains(where: {
                if case .failure(let error) = $0 { error.code == .serverRecordChanged } else { false }
            }) {
                basis = merged
                useStored = false
                continue
            }
            return (merged, dropped)
        }
        return (basis, [])
    }

    /// Sends the merge hook's retry of `operation` (``resolveConflicts(_:_:_:log:)``) and returns its
    /// answer; a refusal of the retry as a whole fails each of its items so.
    private func sendRetry(
        _ operation: OutboxOperation, saves: [Record], deletes: [String], _ connection: any OwnerDatabase, log: AnswerLog
    ) async throws(ShareSyncError) -> ModifyRecordsResult {
        let zoneID = RecordZone.ID(zoneName: operation.zoneName, ownerName: ownerName)
        var retry = ModifyRecordsResult()
        // Cut once, on disk before its first send, and its answers kept as they come, as for the write
        // itself: sent again (its answer lost, the owner's limits changed), each request goes under
        // the ID it had, and those answered are not sent again.
        var cut = try replica.outboxOperation(id: operation.id)?.operation.mergedParts
        if cut == nil || cut?.reduce(0, +) != saves.count + deletes.count {
            cut = connection.parts(saving: saves, deleting: deletes)
            try Self.storeCut(cut!, merged: true, of: operation.id, in: replica)
        }
        let progress = try writeProgress(of: operation, in: replica, parts: cut, merged: true, log: log)
        // Named by the records it carries, as a request of a write in several is: sent again with other
        // items (the hook merging again), it is another write, not answered with the first retry's
        // answer (which would not name the new items).
        let mergedID = operation.writeID.map {
            OwnerConnection.partWriteID($0 + ".merged", saves.map { ModifyItem.save($0, bytes: 0) } + deletes.map { ModifyItem.delete($0) })
        }
        do {
            retry = try await connection.modifyRecords(
                zoneName: operation.zoneName, saving: saves, deleting: deletes, savePolicy: operation.savePolicy,
                atomically: operation.atomically, writeID: mergedID, progress: progress)
        } catch where Self.keepsPending(error) || Self.holdsBackWrite(error) {
            throw error
        } catch {
            // The retry refused as a whole: each of its items failed so. What the first request
            // saved stays saved; before, the whole write was kept as refused, saved items included.
            for record in saves { retry.saveResults[record.recordID] = .failure(error) }
            for name in deletes { retry.deleteResults[Record.ID(recordName: name, zoneID: zoneID)] = .failure(error) }
        }
        return retry
    }
}
