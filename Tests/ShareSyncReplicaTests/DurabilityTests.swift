import Foundation
import GRDB
import Testing

import ShareSyncCore
@testable import ShareSyncStore

/// What is on the disk when a replica write returns. SQLite's `synchronous` level of the writing
/// connection, read inside each write: 2 (FULL) syncs the WAL before the commit returns, 1 (NORMAL)
/// leaves it to the next sync or checkpoint.
@Suite("Replica durability")
struct DurabilityTests {
    /// Runs `body` on a replica in a file, recording the level each write transaction ran at.
    func levels(_ body: (SharedDatabaseReplica) throws -> Void) throws -> [Int] {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let replica = try SharedDatabaseReplica(path: dir.path("shared.sqlite"))
        try replica.setOwner(alice)
        let seen = Box<[Int]>([])
        replica.writeProbe.withLock { probe in
            probe = { db in
                let level = try Int.fetchOne(db, sql: "PRAGMA synchronous") ?? -1
                seen.withLock { $0.append(level) }
            }
        }
        try body(replica)
        return seen.withLock { $0 }
    }

    @Test("what only this node knows is synced before the write returns: outbox, leaves, owners")
    func localIntentIsSynced() throws {
        let seen = try levels { replica in
            try replica.enqueue(owner: alice.ownerName, operation: OutboxOperation(zoneName: "Topics", deleting: ["x"]))
            try replica.leaveLocally(PendingLeave(owner: alice.ownerName, zoneName: "Garden", shareName: "share-1"))
            try replica.setOwner(bob)
        }
        #expect(seen == [2, 2, 2])
    }

    @Test("pages and pushes from the owner are committed without a sync of their own, and writes after them sync again")
    func refetchableChangesAreNotSyncedEach() throws {
        let seen = try levels { replica in
            try replica.apply(page(saving: [try fetchedRecord("milk")], token: token(1)), owner: alice.ownerName)
            try replica.apply(
                databaseChanges: DatabaseChanges(changedZoneIDs: [zone()], deletedZoneIDs: [], changeToken: token(2), moreComing: false),
                owner: alice.ownerName)
            let push = DatabaseChanges(changedZoneIDs: [zone()], deletedZoneIDs: [], changeToken: token(3), moreComing: false)
            try replica.apply(
                databaseChanges: push, zoneChanges: [page(saving: [try fetchedRecord("bread")], token: token(3))], token: token(3),
                owner: alice.ownerName)
            try replica.enqueue(owner: alice.ownerName, operation: OutboxOperation(zoneName: "Topics", deleting: ["milk"]))
        }
        #expect(seen == [1, 1, 1, 2])
    }

    @Test("a page that fails leaves the connection synced for the next write")
    func failedPageRestoresTheLevel() throws {
        let seen = try levels { replica in
            let stray = try fetchedRecord("stray", in: zone("Garden"))
            #expect(throws: ShareSyncError.self) {
                try replica.apply(page(saving: [stray], token: token(1)), owner: alice.ownerName)
            }
            try replica.enqueue(owner: alice.ownerName, operation: OutboxOperation(zoneName: "Topics", deleting: ["x"]))
        }
        #expect(seen.last == 2)
    }

    @Test("a write of what only this node knows after a page whose return to FULL failed sets FULL again first")
    func failedReturnToFullIsMadeGoodByTheNextSyncedWrite() throws {
        let seen = try levels { replica in
            replica.levelRestoreFailures.store(1, ordering: .relaxed)
            try replica.apply(page(saving: [try fetchedRecord("milk")], token: token(1)), owner: alice.ownerName)
            let flagged = replica.levelNeedsRestore.load(ordering: .relaxed)
            #expect(flagged)
            try replica.enqueue(owner: alice.ownerName, operation: OutboxOperation(zoneName: "Topics", deleting: ["x"]))
            let stillFlagged = replica.levelNeedsRestore.load(ordering: .relaxed)
            #expect(!stillFlagged)
            try replica.apply(page(saving: [try fetchedRecord("bread")], token: token(2)), owner: alice.ownerName)
            try replica.enqueue(owner: alice.ownerName, operation: OutboxOperation(zoneName: "Topics", deleting: ["y"]))
        }
        // Before, the outbox write after the failed return committed at NORMAL (1), without its sync.
        #expect(seen == [1, 2, 1, 2])
    }

    @Test("syncToDisk syncs the WAL of a replica in a file and does nothing in memory")
    func syncToDisk() throws {
        _ = try levels { replica in
            try replica.apply(page(saving: [try fetchedRecord("milk")], token: token(1)), owner: alice.ownerName)
            try replica.syncToDisk()
            #expect(replica.diskSyncs.load(ordering: .relaxed) == 1)
        }
        let memory = try SharedDatabaseReplica(inMemory: ())
        try memory.syncToDisk()
        #expect(memory.diskSyncs.load(ordering: .relaxed) == 0)
    }
}
