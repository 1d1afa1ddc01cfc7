import Foundation
import ShareSyncCore

extension ParticipantSync {
    /// Changes a share this identity takes part in, as an administrator does in CloudKit: fetches the
    /// owner's current share record, applies `edit` to it, and saves it back with `modifyRecords` under
    /// `ifServerRecordUnchanged` (a share changed on the owner's side in between is fetched again and
    /// the edit applied again, up to three times). The owner decides with the access policy: only
    /// administrators may change a share, within the limits of SharingRules.md ("Administrators");
    /// anyone else gets `permissionFailure`. Needs the owner to be connected (`networkUnavailable`
    /// otherwise): a share edit is never queued. Returns the share as the owner saved it, once the
    /// replica has caught up with it.
    public func editShare(
        owner: String, zoneName: String, shareRecordName: String, timeout: Duration = .seconds(30),
        _ edit: (inout Share) throws(ShareSyncError) -> Void
    ) async throws(ShareSyncError) -> Share {
        guard let connection = existingLink(owner)?.activeConnection else {
            throw ShareSyncError(.networkUnavailable, "owner \(owner) is not connected; change the share when it is")
        }
        let id = Record.ID(recordName: shareRecordName, zoneID: RecordZone.ID(zoneName: zoneName, ownerName: owner))
        var attempt = 0
        while true {
            attempt += 1
            let fetched = try await connection.fetchRecords(zoneName: zoneName, recordNames: [shareRecordName])
            guard case .success(let record)? = fetched[id] else {
                if case .failure(let error)? = fetched[id] { throw error }
                throw ShareSyncError(.unknownItem, "share \(shareRecordName) is not in shared zone \(zoneName)", recordID: id)
            }
            guard var share = Share(record) else {
                throw ShareSyncError(
                    .invalidArguments, "record \(shareRecordName) is a \(record.recordType), not a share", recordID: id,
                    rule: .notAShare)
            }
            try edit(&share)
            let result = try await connection.modifyRecords(
                zoneName: zoneName, saving: [share.record], deleting: [], savePolicy: .ifServerRecordUnchanged, atomically: true)
            switch result.saveResults[id] {
            case .success(let saved)?:
                do {
                    try await waitUntilSynced(owner: owner, timeout: timeout)
                } catch {
                    throw error.afterOwnerCommitted("the owner saved the share")
                }
                guard let savedShare = Share(saved) else {
                    throw ShareSyncError(.internalError, "the owner answered a share save with a \(saved.recordType)", recordID: id)
                }
                return savedShare
            case .failure(let error)? where error.code == .serverRecordChanged && attempt < 3:
                continue
            case .failure(let error)?:
                throw error
            case nil:
                throw ShareSyncError(.internalError, "the owner did not answer for share \(shareRecordName)", recordID: id)
            }
        }
    }
}

extension ShareSyncError {
    /// This error, said as what it is when it comes after the owner committed a request: the wait for
    /// the replica to catch up failed, not the request. Its code and rule are kept. Before, a `leave`
    /// or an administrator's share edit whose catch-up failed read as if the owner had refused it, and
    /// running the command again made a second invitation.
    func afterOwnerCommitted(_ what: String) -> ShareSyncError {
        var failure = self
        failure.message = "\(what), but this node's replica has not caught up with it yet (\(message)); it does in the "
            + "background (see `sharesync status`): do not run the command again"
        return failure
    }
}
