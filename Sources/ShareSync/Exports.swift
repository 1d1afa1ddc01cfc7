import ShareSyncNode

// The node types the API hands out, under the names an app uses (the app imports `ShareSync` only).

/// A host and port, such as where a node listens.
public typealias HostAndPort = ShareSyncNode.HostAndPort
/// Who a node is and where it listens (``Container/status()``).
public typealias NodeStatus = ShareSyncNode.NodeStatus
/// What ``Database/backup(to:)`` wrote.
public typealias BackupResult = ShareSyncNode.BackupResult
/// What a share URL offers, read without accepting it (``Container/shareMetadata(for:)``).
public typealias ShareMetadataInfo = ShareSyncNode.ShareMetadataInfo
/// A share accepted by ``Container/accept(_:timeout:)``: its owner and zones.
public typealias AcceptedShare = ShareSyncNode.AcceptedShare
/// What ``Container/requestAccess(to:)`` did.
public typealias AccessRequested = ShareSyncNode.AccessRequested
/// A write in the node's outbox (``Container/outbox()``).
public typealias OutboxItem = ShareSyncNode.OutboxItem
/// What ``Container/resolveOutboxItem(withID:keeping:)`` did.
public typealias OutboxResolution = ShareSyncNode.OutboxResolution
/// Which version of a record in conflict to keep (``Container/resolveOutboxItem(withID:keeping:)``).
public typealias OutboxConflictChoice = ShareSyncNode.ParticipantSync.ConflictChoice
