import ShareSyncCore
import ShareSyncStore

// Sending the outbox: the owner's pending writes, oldest first, each removed once the owner answered.
// Conflicts (`serverRecordChanged`) go through the merge hook and are retried once; see
// `ParticipantSync`, "Writes".

extension ParticipantOwnerLink {
    /// Sends every pending write of this owner in order. A network failure stops here and keeps the
    /// write (and the later ones) for the next connection; any other failure drops the write and is
    /// reported as an ``ParticipantSync/Event/error(owner:_:)``.
    func flushOutbox(_ connection: OwnerConnection) async throws(ShareSyncError) {
        for operation in try replica.pendingOperations(owner: ownerName) {
            let result: ModifyRecordsResult
            do {
                let first = try await connection.modifyRecords(
                    zoneName: operation.zoneName, saving: operation.saving, deleting: operation.deleting,
                    savePolicy: operation.savePolicy, atomically: operation.atomically)
                result = try await resolveConflicts(operation, first, connection)
            } catch where Self.isTransient(error) {
                throw error
            } catch {
                logger.warning("outbox write refused; dropped", metadata: ["id": "\(operation.id)", "error": "\(error)"])
                try replica.removeOperation(id: operation.id)
                hub.emit(.error(owner: ownerName, error))
                continue
            }
            try replica.removeOperation(id: operation.id)
            hub.emit(.operationSent(owner: ownerName, operationID: operation.id, result: result))
            let errors = result.errors.filter { $0.value.code != .serverRecordChanged }
            if !errors.isEmpty {
                hub.emit(
                    .error(
                        owner: ownerName,
                        ShareSyncError(
                            .partialFailure, "outbox write \(operation.id): \(errors.count) items refused",
                            partialErrors: errors)))
            }
        }
    }

    /// Retries once the saves refused with `serverRecordChanged`, merged by the hook and carrying the
    /// server's change tag, together with the items that failed only because the batch did
    /// (`batchRequestFailed`). Returns the first result updated with the retry's.
    private func resolveConflicts(
        _ operation: OutboxOperation, _ result: ModifyRecordsResult, _ connection: OwnerConnection
    ) async throws(ShareSyncError) -> ModifyRecordsResult {
        var saves: [Record] = []
        var deletes: [String] = []
        var conflicts = 0
        for record in operation.saving {
            guard case .failure(let error) = result.saveResults[record.recordID] else { continue }
            if error.code == .serverRecordChanged, let server = error.serverRecord {
                conflicts += 1
                let merged = configuration.mergeConflict?(record, server)
                hub.emit(.conflict(owner: ownerName, recordID: record.recordID, resolved: merged != nil))
                if var merged {
                    merged.recordChangeTag = server.recordChangeTag
                    saves.append(merged)
                }
            } else if error.code == .batchRequestFailed {
                saves.append(record)
            }
        }
        guard conflicts > 0 else { return result }
        let zoneID = RecordZone.ID(zoneName: operation.zoneName, ownerName: ownerName)
        for name in operation.deleting {
            if case .failure(let error) = result.deleteResults[Record.ID(recordName: name, zoneID: zoneID)],
                error.code == .batchRequestFailed
            {
                deletes.append(name)
            }
        }
        guard !saves.isEmpty || !deletes.isEmpty else { return result }
        let retry = try await connection.modifyRecords(
            zoneName: operation.zoneName, saving: saves, deleting: deletes, savePolicy: operation.savePolicy,
            atomically: operation.atomically)
        var merged = result
        for (id, outcome) in retry.saveResults { merged.saveResults[id] = outcome }
        for (id, outcome) in retry.deleteResults { merged.deleteResults[id] = outcome }
        return merged
    }
}
