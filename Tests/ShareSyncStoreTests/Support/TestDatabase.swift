import Foundation
import Testing

import ShareSyncCore
@testable import ShareSyncStore

/// Where a test database lives: every behaviour is checked on both.
enum Storage: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case inMemory
    case onDisk

    var testDescription: String { rawValue }
}

/// The owner of every test database.
let ownerName = "_owner1"

/// The custom zone most tests use.
let topics = RecordZone.ID(zoneName: "Topics")

/// A directory under the system's temporary directory, removed by ``remove()``.
struct TemporaryDirectory {
    let url: URL

    init() throws {
        url = FileManager.default.temporaryDirectory.appending(path: "ShareSyncStoreTests-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }

    /// The path of a file in the directory.
    func path(_ name: String) -> String { url.appending(path: name).path }

    func remove() { try? FileManager.default.removeItem(at: url) }
}

/// A clock the test moves by hand.
final class TestClock: @unchecked Sendable {
    private let lock = NSLock()
    private var current: Date

    init(_ start: Date = Date(timeIntervalSince1970: 1_800_000_000.250)) { current = start }

    var now: Date { lock.withLock { current } }

    func advance(by seconds: TimeInterval) { lock.withLock { current += seconds } }

    var function: @Sendable () -> Date { { self.now } }
}

/// Runs `body` with a new database of the given storage; an on-disk one is removed afterwards.
@discardableResult
func withDatabase<T>(
    _ storage: Storage, limits: Limits = Limits(), clock: TestClock = TestClock(),
    _ body: (PrivateDatabase) throws -> T
) throws -> T {
    switch storage {
    case .inMemory:
        let db = try PrivateDatabase(inMemoryOwnerName: ownerName, limits: limits, clock: clock.function)
        return try body(db)
    case .onDisk:
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let db = try PrivateDatabase(
            path: dir.path("private.sqlite"), ownerName: ownerName, limits: limits, clock: clock.function)
        return try body(db)
    }
}

/// A new record with fields, never saved.
func makeRecord(
    _ name: String, type: String = "Note", in zone: RecordZone.ID = topics, _ fields: [String: FieldValue] = [:]
) -> Record {
    var record = Record(recordType: type, recordID: Record.ID(recordName: name, zoneID: zone))
    for (key, value) in fields.sorted(by: { $0.key < $1.key }) { record[key] = value }
    return record
}

/// A record ID in the test zone.
func recordID(_ name: String, in zone: RecordZone.ID = topics) -> Record.ID {
    Record.ID(recordName: name, zoneID: zone)
}

/// A `deleteSelf` reference to a record in the test zone.
func deleteSelf(_ name: String, in zone: RecordZone.ID = topics) -> FieldValue {
    .reference(Record.Reference(recordID: recordID(name, in: zone), action: .deleteSelf))
}

extension PrivateDatabase {
    /// Saves records and expects every one to succeed; returns them as stored, by name.
    @discardableResult
    func save(
        _ records: [Record], policy: SavePolicy = .ifServerRecordUnchanged,
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws -> [String: Record] {
        let result = try modifyRecords(saving: records, savePolicy: policy)
        #expect(result.errors.isEmpty, "unexpected errors: \(result.errors)", sourceLocation: sourceLocation)
        return Dictionary(uniqueKeysWithValues: try result.get().map { ($0.recordID.recordName, $0) })
    }

    /// Saves one record and expects it to succeed.
    @discardableResult
    func save(_ record: Record, policy: SavePolicy = .ifServerRecordUnchanged, sourceLocation: SourceLocation = #_sourceLocation)
        throws -> Record
    {
        let saved = try save([record], policy: policy, sourceLocation: sourceLocation)
        return try #require(saved[record.recordID.recordName], sourceLocation: sourceLocation)
    }

    /// Deletes records and expects every deletion to succeed.
    func delete(_ ids: [Record.ID], sourceLocation: SourceLocation = #_sourceLocation) throws {
        let result = try modifyRecords(deleting: ids)
        #expect(result.errors.isEmpty, "unexpected errors: \(result.errors)", sourceLocation: sourceLocation)
    }

    /// Fetches a zone's changes page by page until `moreComing` is false.
    func allZoneChanges(
        _ zoneID: RecordZone.ID, since token: ServerChangeToken?, resultsLimit: Int? = nil
    ) throws -> (changes: [RecordChange], changeToken: ServerChangeToken, pages: Int) {
        var changes: [RecordChange] = []
        var token = token
        var pages = 0
        while true {
            let page = try fetchZoneChanges(zoneID, since: token, resultsLimit: resultsLimit)
            changes += page.changes
            token = page.changeToken
            pages += 1
            if !page.moreComing { return (changes, page.changeToken, pages) }
        }
    }

    /// Whether a record exists (fetchRecords reports it rather than unknownItem).
    func exists(_ id: Record.ID) throws -> Bool {
        switch try fetchRecords([id])[id] {
        case .success: return true
        case .failure(let error) where error.code == .unknownItem: return false
        case .failure(let error): throw error
        case nil: Issue.record("no result for \(id)"); return false
        }
    }
}

/// Everything a user can see of a database: its zones, every record of every zone, and the current token.
struct Snapshot: Equatable, CustomStringConvertible {
    var zones: [RecordZone]
    var databaseZoneIDs: [RecordZone.ID]
    var records: [RecordZone.ID: [Record]]
    var token: ServerChangeToken

    var description: String {
        "zones \(zones.map(\.zoneID.zoneName)), records \(records.mapValues { $0.map(\.recordID.recordName) }), token \(token)"
    }
}

/// Takes a ``Snapshot`` of the database through its public API.
func snapshot(_ db: PrivateDatabase) throws -> Snapshot {
    let zones = try db.fetchAllZones()
    var records: [RecordZone.ID: [Record]] = [:]
    for zone in zones {
        records[zone.zoneID] = try db.allZoneChanges(zone.zoneID, since: nil).changes.map { change in
            switch change {
            case .changed(let record): return record
            case .deleted(let deleted):
                Issue.record("a nil-token fetch returned the deletion of \(deleted.recordID)")
                return Record(recordType: deleted.recordType, recordID: deleted.recordID)
            }
        }
    }
    return Snapshot(
        zones: zones, databaseZoneIDs: try db.fetchDatabaseChanges(since: nil).changedZoneIDs, records: records,
        token: try db.currentChangeToken())
}

/// Runs `body` (bad input) and expects the database to look exactly as before.
@discardableResult
func expectNothingChanges<T>(
    in db: PrivateDatabase, sourceLocation: SourceLocation = #_sourceLocation, _ body: () throws -> T
) throws -> T {
    let before = try snapshot(db)
    let result = try body()
    let after = try snapshot(db)
    #expect(before == after, "the database changed: before \(before), after \(after)", sourceLocation: sourceLocation)
    return result
}

/// Expects `body` to throw a ``ShareSyncError`` with this code (and rule, if given); returns it.
@discardableResult
func expectError<T>(
    _ code: ShareSyncError.Code, rule: Rule? = nil, sourceLocation: SourceLocation = #_sourceLocation,
    _ body: () throws -> T
) -> ShareSyncError? {
    let error = #expect(throws: ShareSyncError.self, sourceLocation: sourceLocation) { _ = try body() }
    guard let error else { return nil }
    #expect(error.code == code, "\(error)", sourceLocation: sourceLocation)
    if let rule { #expect(error.rule == rule, "\(error)", sourceLocation: sourceLocation) }
    return error
}

/// The error of a failed result, or nil (and an issue) if it succeeded or is missing.
func failure<T>(_ result: Result<T, ShareSyncError>?, sourceLocation: SourceLocation = #_sourceLocation) -> ShareSyncError? {
    switch result {
    case .failure(let error): return error
    case .success: Issue.record("expected a failure, got a success", sourceLocation: sourceLocation)
    case nil: Issue.record("expected a failure, got no result", sourceLocation: sourceLocation)
    }
    return nil
}

extension RecordChange {
    /// The name of the record this change is about.
    var recordName: String {
        switch self {
        case .changed(let record): record.recordID.recordName
        case .deleted(let deleted): deleted.recordID.recordName
        }
    }

    var isDeletion: Bool { if case .deleted = self { true } else { false } }
}
