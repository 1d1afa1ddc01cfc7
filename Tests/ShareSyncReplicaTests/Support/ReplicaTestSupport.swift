import Foundation
import Synchronization
import Testing

import ShareSyncCore
@testable import ShareSyncStore

/// Where a test replica lives: behaviours are checked on both.
enum Storage: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case inMemory
    case onDisk

    var testDescription: String { rawValue }
}

/// Two owners that share zones with the same names.
let alice = OwnerInfo(ownerName: "_a1", host: "alice.example", port: 7420, fingerprint: String(repeating: "a", count: 32))
let bob = OwnerInfo(ownerName: "_b2", host: "10.0.0.2", port: 7421, fingerprint: String(repeating: "b", count: 32))

/// An owner's zone ID, as a shared database reports it.
func zone(_ name: String = "Topics", of owner: OwnerInfo = alice) -> RecordZone.ID {
    RecordZone.ID(zoneName: name, ownerName: owner.ownerName)
}

/// A record as fetched from an owner (no changed keys), in `zoneID`, with change tag `tag`.
func fetchedRecord(
    _ name: String, in zoneID: RecordZone.ID = zone(), _ fields: [String: FieldValue] = [:], tag: String? = nil
) throws -> Record {
    var record = Record(recordType: "Note", recordID: Record.ID(recordName: name, zoneID: zoneID))
    for (key, value) in fields.sorted(by: { $0.key < $1.key }) { record[key] = value }
    record.recordChangeTag = tag
    return try Record(jsonData: record.jsonData())
}

/// A record's JSON as an SQL blob literal's hex digits, for the rows of an older replica file.
func hexJSON(_ record: Record) throws -> String {
    try record.jsonData().map { String(format: "%02x", $0) }.joined()
}

/// A change token of the owner's database.
func token(_ n: Int64, of owner: OwnerInfo = alice) -> ServerChangeToken {
    ServerChangeToken(stringValue: "1.\(owner.fingerprint.prefix(8)).\(n)")
}

/// The first rows of an older replica file (``ReplicaSchema/createOlderFile(path:upTo:sql:)``): ``alice``
/// as an owner, her zone Topics, and `record` stored in it.
func olderFileRows(holding record: Record) throws -> String {
    let hex = try hexJSON(record)
    let o = alice.ownerName
    return """
        INSERT INTO replicaOwner (owner, host, port, fingerprint) VALUES ('\(o)', 'h', 1, '\(alice.fingerprint)');
        INSERT INTO replicaZone (owner, zone) VALUES ('\(o)', 'Topics');
        INSERT INTO replicaRecord (owner, zone, name, type, json)
            VALUES ('\(o)', 'Topics', '\(record.recordID.recordName)', '\(record.recordType)', X'\(hex)');
        """
}

/// A complete page of a zone's changes.
func page(
    _ zoneID: RecordZone.ID = zone(), saving: [Record] = [], deleting: [String] = [], token: ServerChangeToken,
    moreComing: Bool = false
) -> ZoneChanges {
    ZoneChanges(
        zoneID: zoneID,
        changes: saving.map { .changed($0) }
            + deleting.map { .deleted(DeletedRecord(recordID: Record.ID(recordName: $0, zoneID: zoneID), recordType: "Note")) },
        changeToken: token, moreComing: moreComing)
}

/// A directory under the system's temporary directory, removed by ``remove()``.
struct TemporaryDirectory {
    let url: URL

    init() throws {
        url = FileManager.default.temporaryDirectory.appending(path: "ShareSyncReplicaTests-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }

    /// The path of a file in the directory.
    func path(_ name: String) -> String { url.appending(path: name).path }

    func remove() { try? FileManager.default.removeItem(at: url) }
}

/// Runs `body` with a new replica that knows ``alice`` and ``bob``; an on-disk one is removed afterwards.
@discardableResult
func withReplica<T>(_ storage: Storage, _ body: (SharedDatabaseReplica) throws -> T) throws -> T {
    switch storage {
    case .inMemory:
        let replica = try SharedDatabaseReplica(inMemory: ())
        try replica.setOwner(alice)
        try replica.setOwner(bob)
        return try body(replica)
    case .onDisk:
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let replica = try SharedDatabaseReplica(path: dir.path("shared.sqlite"))
        try replica.setOwner(alice)
        try replica.setOwner(bob)
        return try body(replica)
    }
}

/// Everything a user could read from a replica, to check that a failed write changed nothing.
struct ReplicaSnapshot: Equatable {
    var owners: [OwnerInfo]
    var databaseTokens: [ServerChangeToken?]
    var zones: [RecordZone.ID]
    var zoneTokens: [ServerChangeToken?]
    var records: [[Record]]

    init(_ replica: SharedDatabaseReplica) throws {
        owners = try replica.owners()
        databaseTokens = try owners.map { try replica.databaseChangeToken(owner: $0.ownerName) }
        zones = try replica.allZones()
        zoneTokens = try zones.map { try replica.zoneChangeToken(owner: $0.ownerName, zoneName: $0.zoneName) }
        records = try zones.map { try replica.records(owner: $0.ownerName, zoneName: $0.zoneName) }
    }
}

/// Runs `body`, expects it to throw a ``ShareSyncError`` with `code`, and expects the replica unchanged.
@discardableResult
func expectRejected(
    _ code: ShareSyncError.Code, in replica: SharedDatabaseReplica, sourceLocation: SourceLocation = #_sourceLocation,
    _ body: () throws -> Void
) throws -> ShareSyncError? {
    let before = try ReplicaSnapshot(replica)
    var caught: ShareSyncError?
    do {
        try body()
        Issue.record("expected \(code), but nothing was thrown", sourceLocation: sourceLocation)
    } catch let error as ShareSyncError {
        caught = error
        #expect(error.code == code, sourceLocation: sourceLocation)
    }
    #expect(try ReplicaSnapshot(replica) == before, "a rejected write changed the replica", sourceLocation: sourceLocation)
    return caught
}

/// A value shared with callbacks and other threads.
final class Box<Value: Sendable>: Sendable {
    private let mutex: Mutex<Value>
    init(_ value: Value) { mutex = Mutex(value) }
    func withLock<T: Sendable>(_ body: (inout Value) -> T) -> T { mutex.withLock { body(&$0) } }
}
