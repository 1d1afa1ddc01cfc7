import Foundation
import ShareSyncCore
import ShareSyncNode
import ShareSyncStore
import ShareSyncWire
import Synchronization
import Testing

// Helpers for the ParticipantSync tests: a participant node with an on-disk replica, the owner's view
// of a participant's shared database, and owner restarts on the same port.

/// A participant: an identity and a replica file in a fresh temporary folder.
struct TestParticipant {
    let identity = NodeIdentity.generate()
    let folder: URL

    init() throws {
        folder = FileManager.default.temporaryDirectory.appending(path: "participant-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
    }

    var replicaPath: String { folder.appending(path: "shared.sqlite").path }

    /// Opens the replica file (again) and makes an engine on it. Small page size and backoff for tests.
    func makeSync(pageSize: Int? = 50, merge: (@Sendable (Record, Record) -> Record?)? = nil) throws -> ParticipantSync {
        let replica = try SharedDatabaseReplica(path: replicaPath)
        return ParticipantSync(
            replica: replica, identity: identity,
            configuration: .init(
                pageSize: pageSize, initialBackoff: .milliseconds(20), maximumBackoff: .milliseconds(200),
                // Generous: under a loaded parallel test run a TLS handshake may wait seconds for a thread.
                connectTimeout: .seconds(60), mergeConflict: merge))
    }

    /// Invites this participant to `owner`'s topic share (read-write), makes an engine (``makeSync(pageSize:merge:)``),
    /// starts it and accepts the share, then waits until the engine follows the owner.
    func startFollowing(_ owner: TestOwner, sourceLocation: SourceLocation = #_sourceLocation) async throws -> ParticipantSync {
        let (url, _) = try owner.shareTopic(invite: [(identity, .readWrite)])
        let sync = try makeSync()
        try sync.start()
        try await sync.accept(url: url)
        let ownerName = owner.identity.userRecordName
        try await expectEventually(sync, "following", sourceLocation: sourceLocation) { sync.status(owner: ownerName) == .following }
        return sync
    }

    /// Accepts `url` with an engine of its own, then stops it: the replica holds the share and its
    /// tokens, as a node that went away.
    func acceptAndStop(url: String) async throws {
        let first = try makeSync()
        try first.start()
        try await first.accept(url: url)
        await first.stop()
    }

    /// Starts an engine on the replica again and waits (15 s at most) until it has caught up with
    /// `owner`, recording the events in the issue if it does not.
    func restartAndCatchUp(with owner: TestOwner, sourceLocation: SourceLocation = #_sourceLocation) async throws
        -> (ParticipantSync, EventLog)
    {
        let sync = try makeSync()
        let log = EventLog(sync)
        try sync.start()
        do {
            try await sync.waitUntilSynced(owner: owner.identity.userRecordName, timeout: .seconds(15))
        } catch {
            Issue.record("\(error); events: \(log.all)", sourceLocation: sourceLocation)
        }
        return (sync, log)
    }

    func remove() { try? FileManager.default.removeItem(at: folder) }
}

extension TestOwner {
    /// The records of every zone in `participant`'s view, by zone name, each zone's records by name:
    /// what the owner's node would send that participant from no token.
    func sharedView(for participant: NodeIdentity) throws -> [String: [String]] {
        let view = db.sharedDatabase(for: Caller(userRecordName: participant.userRecordName))
        var result: [String: [String]] = [:]
        for zone in try view.fetchAllZones() {
            var records: [Record] = []
            var token: ServerChangeToken?
            while true {
                let page = try view.fetchZoneChanges(zone.zoneID, since: token, resultsLimit: 100)
                records += page.changedRecords
                token = page.changeToken
                if !page.moreComing { break }
            }
            result[zone.zoneID.zoneName] = try canonical(records)
        }
        return result
    }

    /// Saves `count` notes named `prefix0`, `prefix1`, … under the topic, in batches.
    func saveNotes(_ prefix: String, count: Int) throws {
        let notes = (0..<count).map { i in
            var note = Record(recordType: "Note", recordID: id("\(prefix)\(i)"))
            note["title"] = .string("note \(i)")
            note.setParent(id("topic"))
            return note
        }
        for start in stride(from: 0, to: notes.count, by: 100) {
            _ = try db.modifyRecords(saving: Array(notes[start..<min(start + 100, notes.count)]), savePolicy: .allKeys).get()
        }
    }

    /// Starts a new server for the same database and identity on `port` (the old server is stopped).
    func restartServer(port: Int) async throws -> OwnerServer {
        var configuration = OwnerServer.Configuration(port: port)
        configuration.transport.limits.handshakeTimeout = .seconds(60)
        return try await OwnerServer.start(database: db, identity: identity, configuration: configuration)
    }
}

/// The replica's records of an owner, in the same form as ``TestOwner/sharedView(for:)``.
func replicaView(_ replica: SharedDatabaseReplica, owner: String) throws -> [String: [String]] {
    var result: [String: [String]] = [:]
    for zone in try replica.fetchAllZones(owner: owner) {
        result[zone.zoneID.zoneName] = try canonical(replica.records(owner: owner, zoneName: zone.zoneID.zoneName))
    }
    return result
}

/// Records as sorted JSON strings, so whole views compare with `==` and print readably.
func canonical(_ records: [Record]) throws -> [String] {
    try records.sorted { $0.recordID.recordName < $1.recordID.recordName }
        .map { String(decoding: try $0.jsonData(), as: UTF8.self) }
}

/// Waits (at most `seconds`, woken by the engine's events) until the replica holds exactly the owner's
/// view for the participant; records an issue with both views if it does not.
func expectReplicaMatches(
    _ sync: ParticipantSync, _ owner: TestOwner, timeout seconds: Double = 15, sourceLocation: SourceLocation = #_sourceLocation
) async throws {
    let ownerName = owner.identity.userRecordName
    let matched = try await sync.waitUntil(timeout: .seconds(seconds)) {
        try replicaView(sync.replica, owner: ownerName) == owner.sharedView(for: sync.identity)
    }
    if !matched {
        let replica = try replicaView(sync.replica, owner: ownerName).mapValues(\.count)
        let view = try owner.sharedView(for: sync.identity).mapValues(\.count)
        Issue.record("replica \(replica) does not match the owner's view \(view)", sourceLocation: sourceLocation)
    }
}

/// Waits (at most `seconds`, woken by events) for `condition`; records an issue if it never holds.
func expectEventually(
    _ sync: ParticipantSync, _ what: String, timeout seconds: Double = 15,
    sourceLocation: SourceLocation = #_sourceLocation, _ condition: () throws -> Bool
) async throws {
    let held = try await sync.waitUntil(timeout: .seconds(seconds), condition)
    if !held { Issue.record("timed out waiting for: \(what)", sourceLocation: sourceLocation) }
}

/// Collects an engine's events in the background, for counting after the fact.
final class EventLog: Sendable {
    private final class Storage: Sendable {
        let events = Mutex<[ParticipantSync.Event]>([])
    }

    private let storage = Storage()
    private let task: Task<Void, Never>

    init(_ sync: ParticipantSync) {
        let stream = sync.events()
        let storage = self.storage
        task = Task {
            for await event in stream { storage.events.withLock { $0.append(event) } }
        }
    }

    var all: [ParticipantSync.Event] { storage.events.withLock { $0 } }

    func count(where predicate: (ParticipantSync.Event) -> Bool) -> Int { all.filter(predicate).count }

    deinit { task.cancel() }
}
