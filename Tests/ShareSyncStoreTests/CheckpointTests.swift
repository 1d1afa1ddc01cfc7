import Foundation
import GRDB
import Testing

import ShareSyncCore
@testable import ShareSyncStore

/// WAL checkpoints run on a connection of their own, never inside a commit.
@Suite("Checkpoints away from commits")
struct CheckpointTests {
    private func fileSize(_ path: String) -> Int {
        ((try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? Int) ?? 0
    }

    @Test("a save is on the disk when it returns: the writer syncs the WAL in each commit, reopened too")
    func savesAreSynced() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path("private.sqlite")
        // GRDB turns WAL on with synchronous NORMAL (1), which syncs only at checkpoints; FULL is 2.
        for _ in 0..<2 {
            let db = try PrivateDatabase(path: path, ownerName: ownerName)
            #expect(try db.write { try Int.fetchOne($0, sql: "PRAGMA synchronous") } == 2)
            try db.saveZones([RecordZone(zoneID: topics)])
        }
    }

    @Test("a commit does not checkpoint; within a moment the background checkpoint has the records in the database file")
    func backgroundCheckpointCopiesTheWAL() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path("private.sqlite")
        let db = try PrivateDatabase(path: path, ownerName: ownerName)
        // SQLite's own automatic checkpoint is replaced by the checkpointer's WAL hook.
        #expect(try db.write { try Int.fetchOne($0, sql: "PRAGMA wal_autocheckpoint") } == 0)
        try db.saveZones([RecordZone(zoneID: topics)])
        let before = fileSize(path)
        // About 2 MB of records: under the 1,000 pages that would make SQLite checkpoint in a commit.
        let text = String(repeating: "x", count: 2_000)
        for batch in 0..<10 {
            _ = try db.save((0..<100).map { makeRecord("r\(batch)-\($0)", ["text": .string(text)]) })
        }
        #expect(fileSize(path + "-wal") > 2_000_000)
        var grown = fileSize(path)
        for _ in 0..<500 where grown < before + 2_000_000 {  // at most 10 s: a loaded machine runs the checkpoint late
            try await Task.sleep(for: .milliseconds(20))
            grown = fileSize(path)
        }
        #expect(grown >= before + 2_000_000, "the database file is \(grown) bytes, \(before) before")
        // Everything is still there, read through a fresh connection.
        let reopened = try PrivateDatabase(path: path, ownerName: ownerName)
        var token: ServerChangeToken?
        var count = 0
        for _ in 0..<100 {
            let page = try reopened.fetchZoneChanges(topics, since: token)
            count += page.changes.count
            token = page.changeToken
            if !page.moreComing { break }
        }
        #expect(count == 1_000)
    }

    @Test("a replica in a file checkpoints the same way")
    func replica() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path("shared.sqlite")
        let replica = try SharedDatabaseReplica(path: path)
        #expect(try replica.write { try Int.fetchOne($0, sql: "PRAGMA wal_autocheckpoint") } == 0)
        try replica.write { db in try db.execute(sql: "CREATE TABLE filler (x BLOB)") }
        let before = fileSize(path)
        for _ in 0..<4 { try replica.write { db in try db.execute(sql: "INSERT INTO filler VALUES (zeroblob(500000))") } }
        var grown = fileSize(path)
        for _ in 0..<500 where grown < before + 2_000_000 {  // at most 10 s: a loaded machine runs the checkpoint late
            try await Task.sleep(for: .milliseconds(20))
            grown = fileSize(path)
        }
        #expect(grown >= before + 2_000_000, "the replica file is \(grown) bytes, \(before) before")
    }

    @Test("a bulk commit that leaves the WAL past soonPages asks for a checkpoint at once; small commits do not")
    func bulkCommitsAskForACheckpointAtOnce() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path("shared.sqlite")
        let replica = try SharedDatabaseReplica(path: path)
        let checkpointer = try #require(replica.checkpointer)
        try replica.write { db in try db.execute(sql: "CREATE TABLE filler (x BLOB)") }
        // Small commits, even past soonPages: about 300 pages in all, a couple each.
        for _ in 0..<150 { try replica.write { db in try db.execute(sql: "INSERT INTO filler VALUES (zeroblob(5000))") } }
        #expect(checkpointer.soonRequests.load(ordering: .relaxed) == 0)
        // About 300 pages in one commit: past soonPages (256), under the backstop.
        try replica.write { db in try db.execute(sql: "INSERT INTO filler VALUES (zeroblob(1200000))") }
        #expect(checkpointer.soonRequests.load(ordering: .relaxed) >= 1)
    }

    @Test("a commit past the backstop is in the database file when it returns (the writer checkpoints it)")
    func backstopCheckpointsInTheCommit() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path("private.sqlite")
        let db = try PrivateDatabase(path: path, ownerName: ownerName)
        try db.write { db in try db.execute(sql: "CREATE TABLE filler (x BLOB)") }
        let before = fileSize(path)
        // A background checkpoint running at the moment of the commit (one scheduled by the commit
        // above, late under load) would make the writer's own one do nothing: it is held meanwhile.
        let checkpointer = try #require(db.checkpointer)
        try checkpointer.withBackgroundCheckpointsHeld {
            // About 1,500 pages in one commit.
            try db.write { db in try db.execute(sql: "INSERT INTO filler VALUES (zeroblob(6000000))") }
        }
        #expect(fileSize(path) >= before + 6_000_000, "the database file is \(fileSize(path)) bytes, \(before) before")
    }
}
