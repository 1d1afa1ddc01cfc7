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

    @Test("a write in a state a newer version wrote is not sent: it reads as refused, saying why, and later writes are not held behind it", arguments: Storage.allCases)
    func unknownStateIsNotSent(storage: Storage) throws {
        try withReplica(storage) { replica in
            let future = try replica.enqueue(owner: alice.ownerName, operation: OutboxOperation(zoneName: "Topics", deleting: ["x"]))
            try replica.writer.write { db in
                try db.execute(sql: "UPDATE replicaOutbox SET state = 'postponed' WHERE id = ?", arguments: [future.id])
            }
            #expect(try replica.pendingOperations(owner: alice.ownerName).isEmpty)
            let kept = try #require(try replica.outboxOperation(id: future.id)?.operation)
            #expect(kept.state == .refused)
            #expect(kept.error?.message.contains("postponed") == true, "\(String(describing: kept.error))")
            #expect(try replica.writeReadiness(owner: alice.ownerName).writesWaiting == false)
        }
    }

    @Test("a queued write keeps its write ID through a rebase: its first send may have been applied", arguments: Storage.allCases)
    func rebaseKeepsTheWriteID(storage: Storage) throws {
        try withReplica(storage) { replica in
            var record = edit("milk", title: "Milk")
            record.recordChangeTag = "t1"
            let queued = try replica.enqueue(owner: alice.ownerName, operation: OutboxOperation(zoneName: "Topics", saving: [record]))
            let id = try #require(queued.writeID)
            #expect(id.hasPrefix("w-"))
            try replica.rebaseQueuedSaves(owner: alice.ownerName, recordID: record.recordID, from: "t1", to: "t2")
            let rebased = try #require(try replica.outboxOperation(id: queued.id)?.operation)
            #expect(rebased.saving.first?.recordChangeTag == "t2")
            #expect(rebased.writeID == id)
            // Another enqueued write gets another ID; one given is kept.
            let other = try replica.enqueue(owner: alice.ownerName, operation: OutboxOperation(zoneName: "Topics", deleting: ["x"]))
            #expect(other.writeID != id)
            let given = try replica.enqueue(owner: alice.ownerName, operation: OutboxOperation(zoneName: "Topics", deleting: ["y"], writeID: "w-given"))
            #expect(try replica.outboxOperation(id: given.id)?.operation.writeID == "w-given")
        }
    }

    @Test("the answers to a write's requests are kept with it: under its write ID only, and they go with it", arguments: Storage.allCases)
    func answersAreKeptWithTheWrite(storage: Storage) throws {
        try withReplica(storage) { replica in
            let one = Data("answer 1".utf8)
            let two = Data("answer 2".utf8)
            let queued = try replica.enqueue(
                owner: alice.ownerName, operation: OutboxOperation(zoneName: "Topics", deleting: ["a", "b"], writeID: "w-1", parts: [1, 1]),
                answers: ["w-1.0000000000000001": one])
            let other = try replica.enqueue(owner: alice.ownerName, operation: OutboxOperation(zoneName: "Topics", deleting: ["c"]))
            try replica.keepAnswer(two, request: "w-1.0000000000000002", operation: queued.id)
            #expect(try replica.keptAnswers(operation: queued.id) == ["w-1.0000000000000001": one, "w-1.0000000000000002": two])
            #expect(try replica.keptAnswers(operation: other.id).isEmpty)
            // A write no longer in the outbox keeps nothing.
            let gone = #expect(throws: ShareSyncError.self) {
                try replica.keepAnswer(one, request: "w-9.0000000000000001", operation: 9_999)
            }
            #expect(gone?.code == .unknownItem)

            // A rebase (same write ID) keeps them; a new write ID (a changed write) drops them.
            var stored = try #require(try replica.outboxOperation(id: queued.id)?.operation)
            stored.parts = [1, 1]
            try replica.updateOperation(stored)
            #expect(try replica.keptAnswers(operation: queued.id).count == 2)
            stored.writeID = "w-10"  // the old requests' "w-1." is not its prefix "w-10."
            try replica.updateOperation(stored)
            #expect(try replica.keptAnswers(operation: queued.id).isEmpty)

            try replica.keepAnswer(one, request: "w-10.0000000000000001", operation: queued.id)
            try replica.removeOperation(id: queued.id)
            #expect(try replica.keptAnswers(operation: queued.id).isEmpty)
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

    /// The answer is kept between writes: each step asks once before the write that changes it and
    /// once after, so an answer kept past that write fails here.
    @Test("a write's readiness says whether the owner is known and whether writes wait to be sent, after every change of either",
          arguments: Storage.allCases)
    func writeReadiness(storage: Storage) throws {
        try withReplica(storage) { replica in
            #expect(try replica.writeReadiness(owner: "_stranger") == (known: false, writesWaiting: false))
            #expect(try replica.writeReadiness(owner: alice.ownerName) == (known: true, writesWaiting: false))
            let ops = try (1...2).map { n in
                try replica.enqueue(owner: alice.ownerName, operation: OutboxOperation(zoneName: "Topics", deleting: ["r\(n)"]))
            }
            #expect(try replica.writeReadiness(owner: alice.ownerName) == (known: true, writesWaiting: true))
            #expect(try replica.writeReadiness(owner: bob.ownerName) == (known: true, writesWaiting: false))
            // Conflicts and refusals wait for the user, not to be sent: they do not hold a write back.
            for (op, state) in zip(ops, [OutboxOperation.State.conflict, .refused]) {
                var kept = op
                kept.state = state
                try replica.updateOperation(kept)
            }
            #expect(try replica.writeReadiness(owner: alice.ownerName) == (known: true, writesWaiting: false))
            #expect(try replica.pendingOperations(owner: alice.ownerName).isEmpty)
            var retried = ops[0]
            retried.state = .pending
            try replica.updateOperation(retried)
            #expect(try replica.writeReadiness(owner: alice.ownerName) == (known: true, writesWaiting: true))
            try replica.removeOperation(id: retried.id)
            #expect(try replica.writeReadiness(owner: alice.ownerName) == (known: true, writesWaiting: false))
            try replica.removeOwner(alice.ownerName)
            #expect(try replica.writeReadiness(owner: alice.ownerName) == (known: false, writesWaiting: false))
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

@Suite("The outbox's states: conflicts and refusals are kept")
struct OutboxStateTests {
    func edit(_ name: String, title: String, tag: String? = nil) -> Record {
        var record = Record(recordType: "Note", recordID: Record.ID(recordName: name, zoneID: zone()))
        record["title"] = .string(title)
        record.recordChangeTag = tag
        return record
    }

    @Test("states, errors and the owner's records survive a reopen; only pending writes are to send")
    func statesPersistAcrossReopen() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path("shared.sqlite")
        var ids: [Int64] = []
        do {
            let replica = try SharedDatabaseReplica(path: path)
            try replica.setOwner(alice)
            for name in ["a", "b", "c"] {
                ids.append(
                    try replica.enqueue(
                        owner: alice.ownerName, operation: OutboxOperation(zoneName: "Topics", saving: [edit(name, title: "mine", tag: "1")])
                    ).id)
            }
            var conflict = try #require(try replica.outboxOperation(id: ids[0])?.operation)
            conflict.state = .conflict
            let server = edit("a", title: "theirs", tag: "2")
            conflict.error = ShareSyncError(
                .serverRecordChanged, "record a changed", recordID: server.recordID, serverRecord: server)
            conflict.serverRecords = [server]
            try replica.updateOperation(conflict)
            var refused = try #require(try replica.outboxOperation(id: ids[1])?.operation)
            refused.state = .refused
            refused.error = ShareSyncError(.permissionFailure, "read-only", rule: .readOnlyParticipant)
            try replica.updateOperation(refused)
        }
        let replica = try SharedDatabaseReplica(path: path)
        let all = try replica.outboxOperations()
        #expect(all.map(\.operation.id) == ids)
        #expect(all.map(\.owner) == [alice.ownerName, alice.ownerName, alice.ownerName])
        #expect(all.map(\.operation.state) == [.conflict, .refused, .pending])
        let conflict = all[0].operation
        #expect(conflict.error?.code == .serverRecordChanged)
        #expect(conflict.error?.recordID?.recordName == "a")
        #expect(conflict.serverRecords.map { $0["title"] } == [.string("theirs")])
        #expect(conflict.serverRecords.first?.recordChangeTag == "2")
        #expect(conflict.saving.first?["title"] == "mine")
        #expect(conflict.saving.first?.changedKeys == ["title"])
        #expect(all[1].operation.error?.code == .permissionFailure)
        #expect(all[1].operation.error?.rule == .readOnlyParticipant)
        #expect(all[2].operation.error == nil && all[2].operation.serverRecords.isEmpty)
        #expect(try replica.pendingOperations(owner: alice.ownerName).map(\.id) == [ids[2]])
        #expect(try replica.outboxCounts() == [.pending: 1, .conflict: 1, .refused: 1])

        // Back to pending (a conflict resolved as mine): error and server records are cleared.
        var resend = conflict
        resend.state = .pending
        resend.error = nil
        resend.serverRecords = []
        try replica.updateOperation(resend)
        #expect(try replica.pendingOperations(owner: alice.ownerName).map(\.id) == [ids[0], ids[2]])
        #expect(try replica.outboxOperation(id: ids[0])?.operation.error == nil)
        _ = try expectRejected(.unknownItem, in: replica) {
            var gone = resend
            gone.id = 9_999
            try replica.updateOperation(gone)
        }
    }

    @Test("a replica from before the states migration keeps its queued writes, as pending")
    func migrationFromVersion1() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path("shared.sqlite")
        let operation = String(decoding: try SharedDatabaseReplica.encode(
            OutboxOperation(zoneName: "Topics", saving: [edit("a", title: "queued before")])), as: UTF8.self)
        try ReplicaSchema.createOlderFile(
            path: path, upTo: "replica-v1",
            sql: """
                INSERT INTO replicaOwner (owner, host, port, fingerprint) VALUES ('\(alice.ownerName)', 'alice.example', 7420, 'f');
                INSERT INTO replicaOutbox (owner, json) VALUES ('\(alice.ownerName)', '\(operation)');
                """)
        let replica = try SharedDatabaseReplica(path: path)
        let pending = try replica.pendingOperations(owner: alice.ownerName)
        #expect(pending.count == 1)
        #expect(pending.first?.state == .pending)
        #expect(pending.first?.saving.first?["title"] == "queued before")
        #expect(try replica.outboxCounts() == [.pending: 1, .conflict: 0, .refused: 0])
    }

    @Test("pending saves of a record based on the tag a save replaced are based on the new tag")
    func rebase() throws {
        try withReplica(.inMemory) { replica in
            let first = try replica.enqueue(
                owner: alice.ownerName, operation: OutboxOperation(zoneName: "Topics", saving: [edit("a", title: "1", tag: "t1")]))
            let second = try replica.enqueue(
                owner: alice.ownerName, operation: OutboxOperation(zoneName: "Topics", saving: [edit("a", title: "2", tag: "t1")]))
            let other = try replica.enqueue(
                owner: alice.ownerName, operation: OutboxOperation(zoneName: "Topics", saving: [edit("a", title: "3", tag: "t0")]))
            try replica.removeOperation(id: first.id)
            try replica.rebaseQueuedSaves(owner: alice.ownerName, recordID: edit("a", title: "").recordID, from: "t1", to: "t2")
            #expect(try replica.outboxOperation(id: second.id)?.operation.saving.first?.recordChangeTag == "t2")
            #expect(try replica.outboxOperation(id: other.id)?.operation.saving.first?.recordChangeTag == "t0")
        }
    }
}
