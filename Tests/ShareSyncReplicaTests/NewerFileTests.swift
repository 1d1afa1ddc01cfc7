import Foundation
import GRDB
import Testing

import ShareSyncCore
@testable import ShareSyncStore

/// A file a newer sharesync migrated is refused by name, and left as it was: an older build would
/// otherwise open it as its own (GRDB skips migrations it does not know).
@Suite("Database files from a newer sharesync")
struct NewerFileTests {
    /// Marks the file at `path` as migrated by a later version.
    private func markNewer(_ path: String) throws {
        let queue = try DatabaseQueue(path: path)
        try queue.write { try $0.execute(sql: "INSERT INTO grdb_migrations (identifier) VALUES ('v99-from-the-future')") }
    }

    @Test("a replica with a migration this build does not know is refused, naming the file and the migration")
    func replica() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path("shared.sqlite")
        _ = try SharedDatabaseReplica(path: path)
        try markNewer(path)
        let error = #expect(throws: ShareSyncError.self) { try SharedDatabaseReplica(path: path) }
        #expect(error?.code == .internalError)
        #expect(error?.message.contains("newer sharesync") == true && error?.message.contains("v99-from-the-future") == true)
        #expect(error?.message.contains(path) == true, "\(String(describing: error))")
    }

    @Test("a private database with a migration this build does not know is refused, and no migration runs")
    func privateDatabase() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path("private.sqlite")
        // A file of an older build (its first migration only), then migrated by a newer one: this
        // build must neither open it nor run its own later migrations on it.
        let queue = try DatabaseQueue(path: path)
        try Schema.migrator.migrate(queue, upTo: "v1-records")
        try markNewer(path)
        func migrations() throws -> [String] { try queue.read { try String.fetchAll($0, sql: "SELECT identifier FROM grdb_migrations ORDER BY identifier") } }
        let before = try migrations()
        let error = #expect(throws: ShareSyncError.self) { try PrivateDatabase(path: path, ownerName: "_owner1") }
        #expect(error?.code == .internalError && error?.message.contains("the private database") == true, "\(String(describing: error))")
        let after = try migrations()
        #expect(after == before && before.count == 2, "no migration ran: \(after)")
    }
}
