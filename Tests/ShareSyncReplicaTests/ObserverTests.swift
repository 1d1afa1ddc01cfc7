import Foundation
import Testing

import ShareSyncCore
@testable import ShareSyncStore

@Suite("Change observers")
struct ObserverTests {
    @Test("observers are called after each committed write, not after rejected ones, and not once removed", arguments: Storage.allCases)
    func observers(storage: Storage) throws {
        try withReplica(storage) { replica in
            let calls = Box(0)
            let seen = Box<[Int]>([])
            let id = replica.addChangeObserver {
                calls.withLock { $0 += 1 }
            }
            // An observer sees the write already committed.
            let reader = replica.addChangeObserver {
                let count = (try? replica.recordCount(owner: alice.ownerName, zoneName: "Topics")) ?? -1
                seen.withLock { $0.append(count) }
            }
            try replica.apply(page(saving: [try fetchedRecord("milk")], token: token(1)), owner: alice.ownerName)
            #expect(calls.withLock { $0 } == 1)
            #expect(seen.withLock { $0 } == [1])

            try replica.apply(databaseChanges: DatabaseChanges(changedZoneIDs: [], deletedZoneIDs: [], changeToken: token(2), moreComing: false), owner: alice.ownerName)
            try replica.enqueue(owner: alice.ownerName, operation: OutboxOperation(zoneName: "Topics", deleting: ["milk"]))
            #expect(calls.withLock { $0 } == 3)

            try expectRejected(.invalidArguments, in: replica) {
                try replica.apply(page(zone(of: bob), token: token(3)), owner: alice.ownerName)
            }
            #expect(calls.withLock { $0 } == 3)

            replica.removeChangeObserver(id)
            replica.removeChangeObserver(reader)
            try replica.purgeZone(owner: alice.ownerName, zoneName: "Topics")
            #expect(calls.withLock { $0 } == 3)
            #expect(seen.withLock { $0 } == [1, 1, 1])
        }
    }
}
