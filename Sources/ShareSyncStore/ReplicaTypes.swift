import Foundation
import ShareSyncCore

/// An owner whose shares a participant replicates, and where to reach the owner's node again.
///
/// The owner is named by the user record name (`_` followed by the fingerprint of the owner's key);
/// zone IDs of the owner's shared zones carry it as their ``RecordZone/ID/ownerName``.
public struct OwnerInfo: Sendable, Hashable, Codable {
    /// The owner's user record name, such as `_ab12…`.
    public var ownerName: String
    /// The owner node's host name or address.
    public var host: String
    /// The owner node's TCP port.
    public var port: Int
    /// The fingerprint of the owner's public key; a reconnect checks that the node proves this key.
    public var fingerprint: String

    /// Creates an owner entry.
    public init(ownerName: String, host: String, port: Int, fingerprint: String) {
        self.ownerName = ownerName
        self.host = host
        self.port = port
        self.fingerprint = fingerprint
    }
}

/// A write made on the participant and kept until the owner's node accepts it: the parameters of one
/// `modifyRecords` request, like a `CKModifyRecordsOperation` waiting to run.
///
/// Operations of an owner are sent in the order they were enqueued (see
/// ``SharedDatabaseReplica/pendingOperations(owner:)``). An operation the owner answered with a
/// conflict or a refusal stays in the outbox, no longer sent, until the user resolves it (see
/// ``State``; the rules are in `ParticipantSync`, "Writes").
public struct OutboxOperation: Sendable, Hashable, Codable {
    /// Where an operation stands in the outbox.
    public enum State: String, Sendable, Hashable, Codable, CaseIterable {
        /// Waiting to be sent (or sent, with no answer yet): sent on the next connection, in id order.
        case pending
        /// The owner answered `serverRecordChanged` for at least one save: the owner's record changed
        /// since the local copy was read. ``OutboxOperation/serverRecords`` holds the owner's versions.
        /// Not sent again until resolved.
        case conflict
        /// The owner refused it for another reason that retrying does not fix (such as
        /// `permissionFailure`); ``OutboxOperation/error`` says why. Not sent again.
        case refused
    }

    /// The operation's position in the outbox, assigned by ``SharedDatabaseReplica/enqueue(owner:operation:)``.
    public var id: Int64
    /// The zone the records live in, in the owner's database.
    public var zoneName: String
    /// The records to save, with their ``Record/changedKeys`` (kept for ``SavePolicy/changedKeys``).
    public var saving: [ShareSyncCore.Record]
    /// The names of the records to delete.
    public var deleting: [String]
    /// How the saves treat the records on the owner's node.
    public var savePolicy: SavePolicy
    /// Whether the whole operation fails if any item fails.
    public var atomically: Bool
    /// Where the operation stands; ``State/pending`` when enqueued.
    public var state: State = .pending
    /// Why the owner did not accept it (``State/conflict`` and ``State/refused``).
    public var error: ShareSyncError? = nil
    /// The owner's version of each save that conflicted (``State/conflict``).
    public var serverRecords: [ShareSyncCore.Record] = []
    /// What makes the owner apply it once (`modifyRecords`' `writeID`): sent again after its answer was
    /// lost, it gets the first answer. Set when it is enqueued (unless given: a write that was sent
    /// once already keeps its own), and anew when it changes after the owner answered it (a conflict
    /// resolved); kept through rebases. `nil` in a write queued by an older version (sent without one).
    /// A new write ID forgets ``parts``.
    public var writeID: String? = nil {
        didSet {
            if writeID != oldValue {
                parts = nil
                mergedParts = nil
                mergedRetry = nil
            }
        }
    }
    /// How the write was cut into requests when it was first sent under its ``writeID``: the number of
    /// items (saves in order, then deletions) in each request. Sent again, it is cut the same way, so
    /// each request goes with the write ID it had (a request's ID is made from the write's and the
    /// names it carries). Cut anew, after the owner's limits changed or a rebase changed the records'
    /// sizes, a request the owner had applied (its answer lost) went as other requests under other
    /// IDs, and was applied again. `nil` until the first send.
    public var parts: [Int]? = nil
    /// How the retry of this write's conflicting saves, merged by the merge hook (sent under
    /// ``writeID`` and `.merged`), was cut when first sent: as ``parts`` for the write itself. `nil`
    /// until that retry is first sent; a new write ID forgets it.
    public var mergedParts: [Int]? = nil
    /// That retry as the merge hook first built it, stored before it is first sent: sent again (its
    /// answer lost, the link cut), it goes as it was, under the same IDs, and the hook is not asked
    /// again. Before, the write's first request, sent again, met the retry's own save as the owner's
    /// record; the hook merged again, and the new retry, with other items and so another ID, was
    /// applied a second time (a counter moved twice). `nil` until that retry is built; a new write ID
    /// forgets it.
    public var mergedRetry: MergedRetry? = nil

    /// The merge hook's retry of a write's conflicting saves (``mergedRetry``).
    public struct MergedRetry: Sendable, Hashable, Codable {
        /// The merged saves, each with the server's change tag, and the saves that failed only because
        /// their batch did.
        public var saving: [ShareSyncCore.Record]
        /// The deletions that failed only because their batch did.
        public var deleting: [String]
        /// The conflicting saves the hook dropped (it returned `nil`: the server's record stays).
        public var dropped: [String]

        public init(saving: [ShareSyncCore.Record], deleting: [String], dropped: [String]) {
            self.saving = saving
            self.deleting = deleting
            self.dropped = dropped
        }
    }

    // The state, error and server records are stored in their own columns, not in the operation's JSON.
    private enum CodingKeys: String, CodingKey {
        case id, zoneName, saving, deleting, savePolicy, atomically, writeID, parts, mergedParts, mergedRetry
    }

    /// Creates an operation to enqueue; its ``id`` is assigned when it is enqueued.
    public init(
        zoneName: String, saving: [ShareSyncCore.Record] = [], deleting: [String] = [],
        savePolicy: SavePolicy = .ifServerRecordUnchanged, atomically: Bool = true, writeID: String? = nil, parts: [Int]? = nil
    ) {
        self.writeID = writeID
        self.parts = parts
        self.id = 0
        self.zoneName = zoneName
        self.saving = saving
        self.deleting = deleting
        self.savePolicy = savePolicy
        self.atomically = atomically
    }
}

extension OutboxOperation {
    /// A new write ID: `w-` and a random UUID.
    public static func newWriteID() -> String { "w-" + UUID().uuidString.lowercased() }
}
