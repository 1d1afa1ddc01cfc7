import Foundation
import ShareSyncCore
import Synchronization

/// What an owner server knows of one participant's sync since it started: when it last served them
/// changes, and how far into each zone's feed (``OwnerServer/syncState(of:)``).
///
/// It is kept in memory: after the owner's node restarts, a participant's state is empty until their
/// node connects again and asks for changes.
public struct ParticipantSyncState: Sendable, Hashable {
    /// When the owner last served them changes: a page of a zone's changes, the list of changed zones,
    /// or a push. `nil` if it has not since it started.
    public var lastSync: Date?
    /// Per zone name, the position in their feed of the zone they have: the token of the last page or
    /// push of the zone served to them. (Only what was served: a token a node merely sends, for a zone
    /// it may not see, is not kept, so no caller can grow this map with names of its choosing.)
    public var zoneTokens: [String: ServerChangeToken]

    /// A state: when the owner last served changes, and each zone's last token.
    public init(lastSync: Date? = nil, zoneTokens: [String: ServerChangeToken] = [:]) {
        self.lastSync = lastSync
        self.zoneTokens = zoneTokens
    }
}

/// Every participant's ``ParticipantSyncState``, updated by the connections as they serve requests and pushes.
final class ParticipantSyncStates: Sendable {
    private let states = Mutex<[String: ParticipantSyncState]>([:])

    /// Changes of `zoneName` up to `token` were served to `userRecordName` (a page, or a push's part).
    func served(_ userRecordName: String, zoneName: String, token: ServerChangeToken, at date: Date = Date()) {
        states.withLock { states in
            states[userRecordName, default: ParticipantSyncState()].zoneTokens[zoneName] = token
            states[userRecordName]?.lastSync = date
        }
    }

    /// The list of changed zones was served to `userRecordName` (no zone's position moves).
    func servedDatabaseChanges(_ userRecordName: String, at date: Date = Date()) {
        states.withLock { $0[userRecordName, default: ParticipantSyncState()].lastSync = date }
    }

    /// The state of one participant, if the server has served or heard from them since it started.
    func state(of userRecordName: String) -> ParticipantSyncState? {
        states.withLock { $0[userRecordName] }
    }
}
