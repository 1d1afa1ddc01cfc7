import Foundation
import ShareSyncNode

/// Asking for access, and the node's outbox: the writes to shared zones its owners have not accepted.
///
/// A write to the shared database made while its owner is unreachable waits in the outbox (see
/// ``ModifyRecordsResults/queued``) and goes out when the owner is back. If the owner's record changed
/// meanwhile the write stays as a conflict, with the owner's version; if the owner refuses it, as
/// refused, with the error. Neither is sent again until the app chooses, with
/// ``resolveOutboxItem(withID:keeping:)`` or ``discardOutboxItem(withID:)``. (The ``SyncEngine`` keeps
/// its own pending changes and does not use the outbox.)
extension Container {
    /// Asks the owner of the share at `url` to let this node's user in. A share that does not allow
    /// access requests, or that blocked this user, answers as for a URL one is not invited to:
    /// `participantMayNeedVerification` (rule `notInvited`). The owner sees the request in `Share.requesters` and approves it
    /// with ``Database/approveAccessRequest(fromUserRecordName:permission:for:)``; this node then
    /// accepts the share with ``accept(_:timeout:)``. The URL must carry the owner's fingerprint.
    @discardableResult
    public func requestAccess(to url: String) async throws(ShareSyncError) -> AccessRequested {
        try await transport.call(.requestAccess(url: url))
    }

    /// Every write in the outbox, oldest first: pending, in conflict, or refused.
    public func outbox() async throws(ShareSyncError) -> [OutboxItem] {
        try await transport.call(.outboxList)
    }

    /// Resolves a write in conflict: `mine` sends the fields it changed again over
    /// the owner's version, whose other changes stay (it may conflict again) and waits a few seconds for the owner's answer;
    /// `theirs` drops it, keeping the owner's version. A write refused because records it saves were
    /// deleted on the owner's side (`unknownItem`) is resolved the same way: `mine` saves them again as
    /// new records, whole; `theirs` drops the write. Any other write that is not in conflict is
    /// `invalidArguments` (rule `notAConflict`; discard it). An unknown ID is `unknownItem`.
    @discardableResult
    public func resolveOutboxItem(withID id: Int64, keeping choice: OutboxConflictChoice) async throws(ShareSyncError)
        -> OutboxResolution
    {
        try await transport.call(.outboxResolve(id: id, keep: choice))
    }

    /// Drops a write from the outbox, whatever its state (typically a refused one). An unknown ID is
    /// `unknownItem`.
    public func discardOutboxItem(withID id: Int64) async throws(ShareSyncError) {
        let _: Done = try await transport.call(.outboxDiscard(id: id))
    }
}
