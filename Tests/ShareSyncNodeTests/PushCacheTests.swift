import Foundation
import NIOPosix
import ShareSyncCore
import ShareSyncStore
import ShareSyncWire
import Testing
@testable import ShareSyncNode

/// A caller's connections (a person's devices) share one read of each push while the database does
/// not change; nobody else's read is ever handed to them.
@Suite("Pushes shared between a caller's connections")
struct PushCacheTests {
    final class Reads: @unchecked Sendable {
        var count = 0
    }

    static let token = ServerChangeToken(stringValue: "t1")

    @Test("a push is read once per caller and cursor while nothing is written, and again after a write")
    func reusedOnlyForTheSameCallerCursorAndState() throws {
        let database = try PrivateDatabase(inMemoryOwnerName: "_owner")
        let cache = PushCache()
        let reads = Reads()
        func push(_ caller: String, _ cursor: ServerChangeToken = PushCacheTests.token) throws {
            _ = try cache.push(for: Caller(userRecordName: caller), since: cursor, database: database) {
                reads.count += 1
                return nil
            }
        }
        try push("_b")
        try push("_b")
        #expect(reads.count == 1, "the same caller at the same cursor read again")
        try push("_c")
        #expect(reads.count == 2, "another caller was given _b's push")
        try push("_b", ServerChangeToken(stringValue: "t0"))
        #expect(reads.count == 3, "another cursor was given the push from t1")
        _ = try database.saveZone(RecordZone(zoneID: RecordZone.ID(zoneName: "Later")))
        try push("_b")
        #expect(reads.count == 4, "a push read before a write was reused after it")
        try push("_b")
        #expect(reads.count == 4)
        #expect(cache.counts.withLock { $0.shared } == 2)
    }

    @Test("empty pushes from ever more cursors are kept within the byte budget, not without bound")
    func emptyPushesAreCounted() throws {
        let database = try PrivateDatabase(inMemoryOwnerName: "_owner")
        let cache = PushCache()
        let caller = Caller(userRecordName: "_b")
        let cap = PushCache.retainedBytes / PushCache.entryOverhead
        for i in 0..<(cap + 5_000) {
            _ = try cache.push(for: caller, since: ServerChangeToken(stringValue: "t\(i)"), database: database) { nil }
        }
        #expect(cache.entries > 1_000, "empty pushes are kept for the caller's other connections")
        #expect(cache.entries <= cap, "\(cache.entries) entries kept, more than the byte budget allows")
    }

    @Test("a finished read is handed out without reading only to the same caller and cursor, and only until the next write")
    func finishedPushesAreTheSameRulesWithoutWaiting() throws {
        let database = try PrivateDatabase(inMemoryOwnerName: "_owner")
        let cache = PushCache()
        let b = Caller(userRecordName: "_b")
        let push = SplicedChangesPush(
            databaseChanges: DatabaseChangesResult(
                DatabaseChanges(changedZoneIDs: [], deletedZoneIDs: [], changeToken: Self.token, moreComing: false)),
            zoneChanges: [], token: Self.token, moreComing: false)
        let payload = try MessageCoding.encode(push)
        #expect(cache.finished(for: b, since: Self.token, database: database) == nil, "nothing was read yet")
        _ = try cache.push(for: b, since: Self.token, database: database) { (push, payload) }
        let shared = try #require(cache.finished(for: b, since: Self.token, database: database))
        #expect(shared?.payload == payload)
        #expect(cache.finished(for: Caller(userRecordName: "_c"), since: Self.token, database: database) == nil, "another caller")
        #expect(cache.finished(for: b, since: ServerChangeToken(stringValue: "t0"), database: database) == nil, "another cursor")
        // "No changes" is a finished read too, and is handed out as such.
        _ = try cache.push(for: b, since: ServerChangeToken(stringValue: "t2"), database: database) { nil }
        let none = try #require(cache.finished(for: b, since: ServerChangeToken(stringValue: "t2"), database: database))
        #expect(none == nil)
        _ = try database.saveZone(RecordZone(zoneID: RecordZone.ID(zoneName: "Later")))
        #expect(cache.finished(for: b, since: Self.token, database: database) == nil, "a push read before a write was handed out after it")
    }

    @Test("a failed read is not shared: the next connection reads for itself")
    func failuresAreNotShared() throws {
        let database = try PrivateDatabase(inMemoryOwnerName: "_owner")
        let cache = PushCache()
        let reads = Reads()
        #expect(throws: ShareSyncError.self) {
            _ = try cache.push(for: Caller(userRecordName: "_b"), since: Self.token, database: database) {
                reads.count += 1
                throw ShareSyncError(.changeTokenExpired, "expired")
            }
        }
        _ = try cache.push(for: Caller(userRecordName: "_b"), since: Self.token, database: database) {
            reads.count += 1
            return nil
        }
        #expect(reads.count == 2)
    }

    @Test("two devices of one participant get the same pushes, read once per commit; a third participant gets its own")
    func devicesShareReads() async throws {
        let owner = try await TestOwner.start()
        let b = NodeIdentity.generate()
        let c = NodeIdentity.generate()
        let (url, _) = try owner.shareTopic(invite: [(b, .readOnly), (c, .readOnly)])
        let phone = try await OwnerConnection.connect(url: url, identity: b)
        try await phone.acceptShare(url: url)
        let laptop = try await OwnerConnection.connect(url: url, identity: b)
        let other = try await OwnerConnection.connect(url: url, identity: c)
        try await other.acceptShare(url: url)
        let start = try await phone.fetchDatabaseChanges(since: nil).changeToken
        let streams = [
            try await phone.subscribe(since: start), try await laptop.subscribe(since: start), try await other.subscribe(since: start),
        ]
        let saves = 10
        for i in 0..<saves {
            try owner.saveNote("shared-\(i)", title: "Note \(i)")
            for stream in streams {
                // Each connection receives the note (with earlier ones, if pushes were coalesced).
                try await withTimeout(20) {
                    for await push in stream
                    where push.zoneChanges.contains(where: { $0.changedRecords.contains { $0.recordID.recordName == "shared-\(i)" } }) {
                        return
                    }
                    throw TimeoutError()
                }
            }
        }
        let counts = owner.server.pushes.counts.withLock { $0 }
        // Three connections, one of them the second device of a caller: at most two reads per save
        // when the devices share, three when they do not.
        #expect(counts.shared >= saves / 2, "the laptop read for itself: \(counts)")
        #expect(counts.computed + counts.shared >= 3 * saves)
        for connection in [phone, laptop, other] { await connection.close() }
        try await owner.stop()
    }
}

/// Pushes asked for while a read runs are read together, one transaction per batch, and never from
/// a snapshot older than the commit after which they were asked for.
@Suite("Pushes read in batches")
struct PushBatchTests {
    static let token = ServerChangeToken(stringValue: "t1")

    /// A push whose payload names what `read` saw, to tell the pushes apart.
    static func push(_ text: String) throws -> PushCache.Push {
        let push = SplicedChangesPush(
            databaseChanges: DatabaseChangesResult(
                DatabaseChanges(changedZoneIDs: [], deletedZoneIDs: [], changeToken: token, moreComing: false)),
            zoneChanges: [], token: ServerChangeToken(stringValue: text), moreComing: false)
        return (push, try MessageCoding.encode(push))
    }

    /// An owner database on disk (so a read transaction keeps its snapshot while another connection
    /// commits), holding one zone, in a directory of its own for the caller to remove.
    static func databaseWithAZone() throws -> (PrivateDatabase, URL) {
        let directory = FileManager.default.temporaryDirectory.appending(path: "push-batch-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let database = try PrivateDatabase(path: directory.appending(path: "owner.sqlite").path, ownerName: "_owner")
        _ = try database.saveZone(RecordZone(zoneID: RecordZone.ID(zoneName: "First")))
        return (database, directory)
    }

    /// Waits (at most 10 s) until `condition` holds.
    static func eventually(_ condition: () -> Bool) async throws {
        for _ in 0..<1_000 where !condition() { try await Task.sleep(for: .milliseconds(10)) }
        #expect(condition())
    }

    @Test(
        "callers that ask while the pool is busy are read together, at most maximumBatch per transaction, each getting its own push",
        arguments: [8, PushCache.maximumBatch * 2 + 3])
    func askedTogetherReadTogether(callerCount: Int) async throws {
        let database = try PrivateDatabase(inMemoryOwnerName: "_owner")
        let cache = PushCache()
        let pool = NIOThreadPool(numberOfThreads: 1)
        pool.start()
        // The pool's one thread is held until every caller has asked.
        let hold = DispatchSemaphore(value: 0)
        pool.submit { _ in hold.wait() }
        let callers = (0..<callerCount).map { "_u\($0)" }
        let tasks = callers.map { name in
            Task {
                try await cache.batchedPush(for: Caller(userRecordName: name), since: Self.token, database: database, threadPool: pool) {
                    try Self.push(name)
                }
            }
        }
        try await Self.eventually { cache.waiting == callers.count }
        hold.signal()
        for (name, task) in zip(callers, tasks) {
            let push = try #require(try await task.value)
            #expect(push.push.token.stringValue == name, "a caller was handed another's push")
        }
        let batches = cache.batches.withLock { $0 }
        let transactions = (callerCount + PushCache.maximumBatch - 1) / PushCache.maximumBatch
        #expect(batches.transactions == transactions && batches.pushes == callers.count, "\(batches)")
        try await pool.shutdownGracefully()
    }

    @Test("a push read in a transaction whose snapshot predates a commit is not handed to a connection woken by that commit")
    func aStaleSnapshotIsNotShared() async throws {
        let (database, directory) = try Self.databaseWithAZone()
        defer { try? FileManager.default.removeItem(at: directory) }
        let before = try database.fetchAllZones().count
        let cache = PushCache()
        let pool = NIOThreadPool(numberOfThreads: 1)
        pool.start()
        let hold = DispatchSemaphore(value: 0)
        pool.submit { _ in hold.wait() }
        let reading = DispatchSemaphore(value: 0)
        let go = DispatchSemaphore(value: 0)
        // Two callers in one batch: the first takes the transaction's snapshot and, while it waits, a
        // write commits; the second (a phone) then reads from that snapshot.
        let first = Task {
            try await cache.batchedPush(for: Caller(userRecordName: "_a"), since: Self.token, database: database, threadPool: pool) {
                _ = try database.fetchAllZones()  // the snapshot is taken here
                reading.signal()
                go.wait()
                return try Self.push("a")
            }
        }
        try await Self.eventually { cache.waiting == 1 }
        let phone = Task {
            try await cache.batchedPush(for: Caller(userRecordName: "_b"), since: Self.token, database: database, threadPool: pool) {
                try Self.push("\(try database.fetchAllZones().count)")
            }
        }
        try await Self.eventually { cache.waiting == 2 }
        hold.signal()
        #expect(await Task.detached { reading.wait(timeout: .now() + 10) == .success }.value)
        _ = try database.saveZone(RecordZone(zoneID: RecordZone.ID(zoneName: "Second")))  // commits; would wake _b's laptop
        go.signal()
        _ = try await first.value
        #expect(try await phone.value?.push.token.stringValue == "\(before)", "the phone reads the batch's snapshot")
        // The laptop of the same caller, woken by the commit, asks from the same cursor.
        let laptop = try await cache.batchedPush(
            for: Caller(userRecordName: "_b"), since: Self.token, database: database, threadPool: pool
        ) { try Self.push("\(try database.fetchAllZones().count)") }
        #expect(laptop?.push.token.stringValue == "\(before + 1)", "the laptop was handed a push read before the commit that woke it")
        try await pool.shutdownGracefully()
    }

    @Test("a push asked for after a commit is read from a snapshot that holds it, not in the transaction already reading")
    func askedAfterACommitReadsIt() async throws {
        let (database, directory) = try Self.databaseWithAZone()
        defer { try? FileManager.default.removeItem(at: directory) }
        let before = try database.fetchAllZones().count
        let cache = PushCache()
        let pool = NIOThreadPool(numberOfThreads: 1)
        pool.start()
        let reading = DispatchSemaphore(value: 0)
        let go = DispatchSemaphore(value: 0)
        let a = Task {
            try await cache.batchedPush(for: Caller(userRecordName: "_a"), since: Self.token, database: database, threadPool: pool) {
                let zones = try database.fetchAllZones().count  // in the batch's transaction: its snapshot
                reading.signal()
                go.wait()
                return try Self.push("\(zones)")
            }
        }
        #expect(await Task.detached { reading.wait(timeout: .now() + 10) == .success }.value)
        _ = try database.saveZone(RecordZone(zoneID: RecordZone.ID(zoneName: "Second")))  // commits while _a's read is open
        let b = Task {
            try await cache.batchedPush(for: Caller(userRecordName: "_b"), since: Self.token, database: database, threadPool: pool) {
                try Self.push("\(try database.fetchAllZones().count)")
            }
        }
        try await Self.eventually { cache.waiting == 1 }
        go.signal()
        #expect(try await a.value?.push.token.stringValue == "\(before)", "the first read's snapshot is from before the commit")
        #expect(try await b.value?.push.token.stringValue == "\(before + 1)", "a push asked for after a commit was read without it")
        #expect(cache.batches.withLock { $0.transactions } == 2)
        try await pool.shutdownGracefully()
    }
}
