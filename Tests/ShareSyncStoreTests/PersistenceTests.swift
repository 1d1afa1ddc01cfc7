import Foundation
import Testing

import ShareSyncCore
@testable import ShareSyncStore

@Suite("An on-disk database")
struct PersistenceTests {
    @Test("a database restored from an older copy and written again refuses the lost history's tokens, and its tags differ from the lost ones")
    func restoredFromACopy() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path("private.sqlite")
        let files = ["", "-wal", "-shm"]
        func edit(_ db: PrivateDatabase, _ title: String) throws -> Record {
            var a = try db.fetchRecord(recordID("a"))
            a["title"] = .string(title)
            return try db.save(a)
        }
        do {
            let db = try PrivateDatabase(path: path, ownerName: ownerName)
            try db.saveZones([RecordZone(zoneID: topics)])
            try db.save(makeRecord("a", ["title": "first"]))
            try db.close()
        }
        // The copy, taken while the database is closed.
        let fm = FileManager.default
        for suffix in files where fm.fileExists(atPath: path + suffix) { try fm.copyItem(atPath: path + suffix, toPath: path + suffix + ".copy") }
        // The history the restore loses: three edits of a, a token and a's tag after them.
        let (lostToken, lostTag): (ServerChangeToken, String?) = try {
            let db = try PrivateDatabase(path: path, ownerName: ownerName)
            for title in ["lost 1", "lost 2", "lost 3"] { _ = try edit(db, title) }
            defer { try? db.close() }
            return (try db.currentChangeToken(), try db.fetchRecord(recordID("a")).recordChangeTag)
        }()
        for suffix in files {
            try? fm.removeItem(atPath: path + suffix)
            if fm.fileExists(atPath: path + suffix + ".copy") { try fm.moveItem(atPath: path + suffix + ".copy", toPath: path + suffix) }
        }
        let db = try PrivateDatabase(path: path, ownerName: ownerName)
        // At once: ahead of the restored history.
        #expect(throws: ShareSyncError.self) { try db.fetchDatabaseChanges(since: lostToken) }
        // The same number of changes again, other contents: the lost token's position is reached again.
        var restored = try db.fetchRecord(recordID("a"))
        for title in ["kept 1", "kept 2", "kept 3"] { restored = try edit(db, title) }
        // Before, the lost token was taken as this history's (nothing since it) and the lost tag was
        // a's tag again: a save made from the lost version overwrote "kept 3" without a conflict.
        let expired = #expect(throws: ShareSyncError.self) { try db.fetchZoneChanges(topics, since: lostToken) }
        #expect(expired?.code == .changeTokenExpired, "\(String(describing: expired))")
        #expect(expired?.message.contains("restored") == true, "\(expired?.message ?? "")")
        #expect(restored.recordChangeTag != lostTag)
        var fromLost = restored
        fromLost.recordChangeTag = lostTag
        fromLost["title"] = "edited from the lost version"
        #expect(try db.modifyRecords(saving: [fromLost]).errors["a"]?.code == .serverRecordChanged)
        #expect(try db.fetchRecord(recordID("a"))["title"] == "kept 3")
        // Tokens of this history, from before the restore and after, still work.
        #expect(try db.fetchZoneChanges(topics, since: try db.currentChangeToken()).changes.isEmpty)
    }

    @Test("a copy made with backup(to:) while the database is in use, once restored, refuses the tokens handed out after it, even in the middle of a fetch")
    func backupWhileInUse() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path("private.sqlite"), copy = dir.path("copy.sqlite")
        let live = try PrivateDatabase(path: path, ownerName: ownerName)
        try live.saveZones([RecordZone(zoneID: topics)])
        try live.save((0..<9).map { makeRecord("r\($0)", ["n": .int64(Int64($0))]) })
        let current = try live.currentChangeToken()
        // A fetch from no token in pages of 3: the first page before the copy.
        let first = try live.fetchZoneChanges(topics, since: nil, resultsLimit: 3)
        #expect(first.moreComing && first.changedRecords.map(\.recordID.recordName) == ["r0", "r1", "r2"])
        let size = try live.backup(to: copy)
        #expect(size > 0)
        #expect(try FileManager.default.attributesOfItem(atPath: copy)[.posixPermissions] as? Int == 0o600)
        // An existing file is not replaced, nor is a file of the database itself named.
        let exists = #expect(throws: ShareSyncError.self) { try live.backup(to: copy) }
        #expect(exists?.code == .invalidArguments && exists?.message.contains(copy) == true, "\(String(describing: exists))")
        let own = #expect(throws: ShareSyncError.self) { try live.backup(to: path + "-journal") }
        #expect(own?.code == .invalidArguments && own?.message.contains("-journal is SQLite's") == true, "\(String(describing: own))")
        // Another database's journal name (the replica's, beside it): SQLite would delete the copy.
        let other = #expect(throws: ShareSyncError.self) { try live.backup(to: dir.path("replica.sqlite-journal")) }
        #expect(other?.code == .invalidArguments, "\(String(describing: other))")
        #expect(!FileManager.default.fileExists(atPath: dir.path("replica.sqlite-journal")))
        // One whole file, in rollback-journal mode, with nothing left beside it.
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.url.path).filter { $0.hasPrefix("copy") } == ["copy.sqlite"])
        let header = try #require(FileManager.default.contents(atPath: copy)?.prefix(20))
        #expect(Array(header.suffix(2)) == [1, 1], "file format bytes 18-19: 1 for a rollback journal, 2 for WAL")
        // A second backup with no write since adds no epoch; the next write adds one.
        func epochCount() throws -> Int {
            try live.writer.read { try String.fetchOne($0, sql: "SELECT value FROM meta WHERE key = 'positionEpochs'") }?
                .split(separator: ",").count ?? 0
        }
        let epochsBefore = try epochCount()
        _ = try live.backup(to: dir.path("copy-2.sqlite"))
        #expect(try epochCount() == epochsBefore)
        // After the copy: r4, not yet fetched, changes (it moves past the fetch's snapshot), then the
        // second page, without it.
        var r4 = try live.fetchRecord(recordID("r4"))
        r4["n"] = 40
        r4 = try live.save(r4)
        #expect(try epochCount() == epochsBefore + 1)
        let second = try live.fetchZoneChanges(topics, since: first.changeToken, resultsLimit: 3)
        #expect(second.changedRecords.map(\.recordID.recordName) == ["r3", "r5", "r6"])
        let lostTag = r4.recordChangeTag
        try live.close()

        // Restored from the copy (the node stopped, the file put in place).
        for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
        try FileManager.default.copyItem(atPath: copy, toPath: path)
        let restored = try PrivateDatabase(path: path, ownerName: ownerName)
        defer { try? restored.close() }
        #expect(try restored.fetchRecord(recordID("r4"))["n"] == 4)
        // The second page's token: the copy has r4 before it, so with it the fetch would never give r4.
        let expired = #expect(throws: ShareSyncError.self) { try restored.fetchZoneChanges(topics, since: second.changeToken) }
        #expect(expired?.code == .changeTokenExpired && expired?.message.contains("restored") == true, "\(String(describing: expired))")
        // Tokens from before the copy go on: the first page's gives every record after it, r4 at 4.
        var rest: [Record] = []
        var token = first.changeToken
        for _ in 0..<10 {
            let page = try restored.fetchZoneChanges(topics, since: token, resultsLimit: 3)
            rest += page.changedRecords
            token = page.changeToken
            if !page.moreComing { break }
        }
        #expect(rest.map(\.recordID.recordName) == ["r3", "r4", "r5", "r6", "r7", "r8"])
        #expect(rest.first { $0.recordID.recordName == "r4" }?["n"] == 4)
        #expect(try restored.fetchZoneChanges(topics, since: current).changes.isEmpty)
        // A save from the version written after the copy conflicts.
        var fromLost = try restored.fetchRecord(recordID("r4"))
        fromLost.recordChangeTag = lostTag
        fromLost["n"] = 41
        #expect(try restored.modifyRecords(saving: [fromLost]).errors["r4"]?.code == .serverRecordChanged)
    }

    @Test("backups taken while writes go on: every write after a copy is in an epoch the copy does not have")
    func backupsAmidWrites() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let live = try PrivateDatabase(path: dir.path("private.sqlite"), ownerName: ownerName)
        defer { try? live.close() }
        try live.saveZones([RecordZone(zoneID: topics)])
        let writes = Thread {
            for i in 0..<300 { _ = try? live.save(makeRecord("w\(i)", ["n": .int64(Int64(i))])) }
        }
        writes.start()
        var copies: [String] = []
        for i in 0..<25 {
            let copy = dir.path("copy-\(i).sqlite")
            _ = try live.backup(to: copy)
            copies.append(copy)
        }
        while !writes.isFinished { Thread.sleep(forTimeInterval: 0.01) }
        _ = try live.save(makeRecord("last", [:]))
        let all = live.epochs.entries
        let liveSeq = try live.writer.read { try PrivateDatabase.currentSeq($0) }
        for copy in copies {
            let restored = try PrivateDatabase(path: copy, ownerName: ownerName)
            let kept = restored.epochs.entries
            let copySeq = try restored.writer.read { try PrivateDatabase.currentSeq($0) }
            try restored.close()
            // The copy's epochs are the live list's first ones; the next began where the copy ends.
            #expect(kept.map(\.epoch) == all.prefix(kept.count).map(\.epoch), "\(copy)")
            guard liveSeq > copySeq else { continue }
            #expect(all.count > kept.count && all[kept.count].start == copySeq, "\(copy): copy at \(copySeq), epochs \(all)")
        }
    }

    @Test("an opening records an epoch of its own at its first write only, and a write whose epoch cannot be recorded fails")
    func epochAtFirstWrite() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path("private.sqlite")
        func recorded(_ db: PrivateDatabase) throws -> String? {
            try db.writer.read { try String.fetchOne($0, sql: "SELECT value FROM meta WHERE key = 'positionEpochs'") }
        }
        let (first, token) = try {
            let db = try PrivateDatabase(path: path, ownerName: ownerName)
            try db.saveZones([RecordZone(zoneID: topics)])
            try db.close()
            let first = try PrivateDatabase(path: path, ownerName: ownerName)
            defer { try? first.close() }
            return (try recorded(first), try first.currentChangeToken())
        }()
        #expect(first?.split(separator: ",").count == 1, "\(first ?? "nil")")
        // Openings that write nothing (a node in a restart loop) record nothing, and keep the token.
        for _ in 0..<3 {
            let db = try PrivateDatabase(path: path, ownerName: ownerName)
            #expect(try recorded(db) == first)
            #expect(try db.currentChangeToken() == token)
            try db.close()
        }
        let db = try PrivateDatabase(path: path, ownerName: ownerName)
        // The epoch cannot be recorded (as on a full disk; here a trigger refuses that row only): the
        // write fails and nothing is written.
        try db.writer.writeWithoutTransaction {
            try $0.execute(sql: """
                CREATE TEMP TRIGGER noEpoch BEFORE INSERT ON main.meta WHEN NEW.key = 'positionEpochs'
                BEGIN SELECT RAISE(ABORT, 'no room for the epoch'); END
                """)
        }
        let refused = #expect(throws: ShareSyncError.self) { try db.save(makeRecord("a", ["title": "A"])) }
        #expect(refused?.message.contains("no room for the epoch") == true, "\(String(describing: refused))")
        #expect(try recorded(db) == first)
        #expect((try? db.fetchRecord(recordID("a"))) == nil)
        // Once it can: the epoch is recorded first, at the position the write builds on, then the write.
        try db.writer.writeWithoutTransaction { try $0.execute(sql: "DROP TRIGGER temp.noEpoch") }
        let seq = try db.writer.read { try PrivateDatabase.currentSeq($0) }
        try db.save(makeRecord("a", ["title": "A"]))
        try db.save(makeRecord("b", ["title": "B"]))
        let now = try #require(try recorded(db)).split(separator: ",")
        #expect(now.count == 2 && now.first.map(String.init) == first, "\(now)")
        #expect(now.last?.hasSuffix(":\(seq)") == true, "\(now) from \(seq)")
        // The token from before the epoch still holds, and sees both records.
        let changes = try db.fetchZoneChanges(topics, since: token)
        #expect(Set(changes.changedRecords.map(\.recordID.recordName)) == ["a", "b"])
        try db.close()
    }

    @Test("zones, records and change tokens survive closing and reopening the database")
    func survivesReopen() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path("private.sqlite")

        let (records, snapshotBefore, token, databaseID) = try {
            let db = try PrivateDatabase(path: path, ownerName: ownerName)
            try db.saveZones([RecordZone(zoneID: topics), RecordZone(zoneName: "Gone")])
            try db.deleteZone(RecordZone.ID(zoneName: "Gone"))
            var saved = try db.save([
                makeRecord("a", ["title": "A", "when": .date(Date(timeIntervalSince1970: 1_700_000_000.5))]),
                makeRecord("b", ["owner": deleteSelf("a")]), makeRecord("c", ["bytes": .bytes(Data([1, 2, 3]))]),
            ])
            saved["d"] = try db.save(makeRecord("d", in: .default, ["n": 4]))
            return (saved, try snapshot(db), try db.currentChangeToken(), db.databaseID)
        }()

        let db = try PrivateDatabase(path: path, ownerName: ownerName)
        #expect(db.databaseID == databaseID)
        // The same history, and the same current token: an opening begins an epoch of its own at its
        // first write only. The token from before still works after writes (below).
        #expect(try snapshot(db) == snapshotBefore)
        let ids = records.values.map(\.recordID)
        let fetched = try db.fetchRecords(ids)
        for id in ids { #expect(try fetched[id]?.get() == records[id.recordName]) }
        #expect(try db.fetchAllZones().map(\.zoneID.zoneName) == ["_defaultZone", "Topics"])

        // The token from before still works: nothing new, then exactly what changed since.
        #expect(try db.fetchZoneChanges(topics, since: token).changes.isEmpty)
        #expect(try db.fetchDatabaseChanges(since: token).changedZoneIDs.isEmpty)
        try db.delete([recordID("a")])
        let changes = try db.fetchZoneChanges(topics, since: token)
        #expect(Set(changes.deletedRecords.map(\.recordID.recordName)) == ["a", "b"])

        // Change tags keep working: a stale copy still conflicts, the current one saves.
        var c = try #require(records["c"])
        c["title"] = "C"
        try db.save(c)
        let stale = try #require(records["c"])
        #expect(failure(try db.modifyRecords(saving: [stale]).saveResults[stale.recordID])?.code == .serverRecordChanged)
    }

    @Test("the database file is created with mode 0600 before SQLite opens it")
    func createdPrivately() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path("created.sqlite")
        try createPrivateFile(path, what: "a test file")
        let attributes = try FileManager.default.attributesOfItem(atPath: path)
        #expect(attributes[.posixPermissions] as? Int == 0o600)
        #expect(attributes[.size] as? Int == 0)
        _ = try PrivateDatabase(path: path, ownerName: ownerName)
        #expect(try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int == 0o600)
    }

    @Test("the database file is readable and writable by its user only")
    func fileMode() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path("private.sqlite")
        func mode(_ path: String) throws -> Int? {
            guard FileManager.default.fileExists(atPath: path) else { return nil }
            return try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int
        }
        do {
            let db = try PrivateDatabase(path: path, ownerName: ownerName)
            try db.saveZone(RecordZone(zoneID: topics))
            try db.save(makeRecord("a", ["title": "A"]))
            #expect(try mode(path) == 0o600)
            for suffix in ["-wal", "-shm"] {
                if let m = try mode(path + suffix) { #expect(m == 0o600, "\(suffix) has mode \(String(m, radix: 8))") }
            }
        }
        // Reopening keeps it so.
        let db = try PrivateDatabase(path: path, ownerName: ownerName)
        #expect(try db.exists(recordID("a")))
        #expect(try mode(path) == 0o600)
    }

    @Test("two databases in two files are independent and issue different tokens")
    func twoDatabases() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let one = try PrivateDatabase(path: dir.path("one.sqlite"), ownerName: ownerName)
        let two = try PrivateDatabase(path: dir.path("two.sqlite"), ownerName: ownerName)
        #expect(one.databaseID != two.databaseID)
        try one.saveZone(RecordZone(zoneID: topics))
        try one.save(makeRecord("a"))
        #expect(try two.fetchAllZones().map(\.zoneID) == [.default])
        expectError(.changeTokenExpired) { try two.fetchDatabaseChanges(since: try one.currentChangeToken()) }
    }
}
