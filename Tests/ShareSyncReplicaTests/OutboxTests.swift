import Foundation
import Testing

import ShareSyncCore
@testable import ShareSyncStore

@Suite("The outbox of pending writes")
struct OutboxTests {
    /// A local edit: a record with changed keys, as the app made it.
    func edit(_ name: String, title: String) -> Record {
        var record = Record(recordType: "Note", recordID: Record.ID(recordName: name, zoneID: zone()))
        record["title"] = .string(title)
        return record
    }

    @Test("operations come back in the order they were enqueued, with their parameters", arguments: Storage.allCases)
    func order(storage: Storage) throws {
        try withReplica(storage) { replica in
            let first = try replica.enqueue(
                owner: alice.ownerName,
                operation: OutboxOperation(zoneName: "Topics", saving: [edit("milk", title: "Milk")], savePolicy: .changedKeys, atomically: false))
            let second = try replica.enqueue(
                owner: alice.ownerName, operation: OutboxOperation(zoneName: "Garden", deleting: ["rose", "tulip"]))
            try replica.enqueue(owner: bob.ownerName, operation: OutboxOperation(zoneName: "Topics", deleting: ["x"]))
            let third = try replica.enqueue(
                owner: alice.ownerName, operation: OutboxOperation(zoneName: "Topics", saving: [edit("eggs", title: "Eggs")]))

            let pending = try replica.pendingOperations(owner: alice.ownerName)
            #expect(pending.map(\.id) == [first.id, second.id, third.id])
            #expect(first.id < second.id && second.id < third.id)
            #expect(pending[0].zoneName == "Topics")
            #expect(pending[0].savePolicy == .changedKeys)
            #expect(pending[0].atomically == false)
            #expect(pending[0].saving.first?["title"] == "Milk")
            #expect(pending[0].saving.first?.changedKeys == ["title"])
            #expect(pending[0].saving.first?.recordID == Record.ID(recordName: "milk", zoneID: zone()))
            #expect(pending[1].deleting == ["rose", "tulip"])
            #expect(pending[1].savePolicy == .ifServerRecordUnchanged)
            #expect(pending[1].atomically == true)
            #expect(try replica.pendingOperations(owner: bob.ownerName).map(\.deleting) == [["x"]])
        }
    }

    @Test("removed operations leave the others in order", arguments: Storage.allCases)
    func remove(storage: Storage) throws {
        try withReplica(storage) { replica in
            let ops = try (1...3).map { n in
                try replica.enqueue(owner: alice.ownerName, operation: OutboxOperation(zoneName: "Topics", deleting: ["r\(n)"]))
            }
            try replica.removeOperation(id: ops[0].id)
            try replica.removeOperation(id: 9_999)  // not there: nothing happens
            #expect(try replica.pendingOperations(owner: alice.ownerName).map(\.deleting) == [["r2"], ["r3"]])
            try replica.removeOperation(id: ops[2].id)
            #expect(try replica.pendingOperations(owner: alice.ownerName).map(\.id) == [ops[1].id])
        }
    }

    @Test("removing an owner drops its pending writes; unknown owners cannot enqueue", arguments: Storage.allCases)
    func ownerRemoval(storage: Storage) throws {
        try withReplica(storage) { replica in
            try replica.enqueue(owner: alice.ownerName, operation: OutboxOperation(zoneName: "Topics", deleting: ["a"]))
            try replica.enqueue(owner: bob.ownerName, operation: OutboxOperation(zoneName: "Topics", deleting: ["b"]))
            try replica.removeOwner(alice.ownerName)
            #expect(try replica.pendingOperations(owner: alice.ownerName).isEmpty)
            #expect(try replica.pendingOperations(owner: bob.ownerName).count == 1)
            try expectRejected(.unknownItem, in: replica) {
                try replica.enqueue(owner: alice.ownerName, operation: OutboxOperation(zoneName: "Topics", deleting: ["a"]))
            }
        }
    }
}
