import Foundation
import ShareSyncCore
@testable import ShareSyncNode
import ShareSyncStore
import ShareSyncWire
import Testing

/// A participant's write sent again after its answer was lost is applied once (`modifyRecords`'
/// `writeID`): the owner answers the repeat with the first answer and changes nothing.
@Suite("Writes applied once")
struct WriteOnceTests {
    @Test("the same writeID again gets the first answer and changes nothing; without one the write is applied again")
    func aRepeatIsAnsweredNotApplied() async throws {
        let owner = try await TestOwner.start()
        try owner.saveNotes("n", count: 1)
        let b = NodeIdentity.generate()
        let (url, _) = try owner.shareTopic(invite: [(b, .readWrite)])
        let connection = try await OwnerConnection.connect(url: url, identity: b)
        _ = try await connection.acceptShare(url: url)
        let zone = RecordZone.ID(zoneName: "Topics", ownerName: owner.identity.userRecordName)
        var mine = Record(recordType: "Note", recordID: Record.ID(recordName: "n0", zoneID: zone))
        mine["title"] = .string("participant")
        let first = try await connection.modifyRecords(zoneName: "Topics", saving: [mine], savePolicy: .changedKeys, writeID: "w-test.1")
        let firstSaved = try #require(try first.saveResults[mine.recordID]?.get())
        #expect(try owner.db.fetchRecord(owner.id("n0"))["title"] == "participant")

        // The owner changes it meanwhile; the same write comes again (its answer lost, say).
        var theirs = try owner.db.fetchRecord(owner.id("n0"))
        theirs["title"] = .string("owner")
        _ = try owner.db.modifyRecords(saving: [theirs], savePolicy: .allKeys).get()
        let repeated = try await connection.modifyRecords(zoneName: "Topics", saving: [mine], savePolicy: .changedKeys, writeID: "w-test.1")
        #expect(try repeated.saveResults[mine.recordID]?.get().recordChangeTag == firstSaved.recordChangeTag)
        #expect(try owner.db.fetchRecord(owner.id("n0"))["title"] == "owner")

        // Another write ID is another write; none at all is applied every time.
        _ = try await connection.modifyRecords(zoneName: "Topics", saving: [mine], savePolicy: .changedKeys, writeID: "w-test.2")
        #expect(try owner.db.fetchRecord(owner.id("n0"))["title"] == "participant")

        // A malformed write ID is refused, and nothing is applied.
        _ = try owner.db.modifyRecords(saving: [theirs], savePolicy: .allKeys).get()
        let refused = await expectShareSyncError {
            _ = try await connection.modifyRecords(zoneName: "Topics", saving: [mine], savePolicy: .changedKeys, writeID: "not valid!")
        }
        #expect(refused?.code == .invalidArguments && refused?.rule == .malformedRequest, "\(String(describing: refused))")
        #expect(try owner.db.fetchRecord(owner.id("n0"))["title"] == "owner")
        await connection.close()
        try await owner.stop()
    }

    @Test("a write whose answer is lost after the owner applied it is queued and sent again, and applied once")
    func aLostAnswerIsNotAppliedTwice() async throws {
        let owner = try await TestOwner.start()
        try owner.saveNotes("n", count: 1)
        let b = try TestParticipant()
        defer { b.remove() }
        let (url, _) = try owner.shareTopic(invite: [(b.identity, .readWrite)])
        let sync = try b.makeSync()
        try sync.start()
        try await sync.accept(url: url)
        let ownerName = owner.identity.userRecordName
        var mine = try #require(try sync.replica.fetchRecord(Record.ID(recordName: "n0", zoneID: RecordZone.ID(zoneName: "Topics", ownerName: ownerName))))
        mine["title"] = .string("participant")
        // The first send is applied and its answer lost (the connection closes); sends after it are
        // held back (a full disk, injected) until the owner has changed the record.
        owner.server.registry.droppedAnswers.store(1, ordering: .relaxed)
        owner.server.registry.injectedRefusals.withLock {
            $0["modifyRecords"] = ShareSyncError(.quotaExceeded, "the disk is full (injected)", rule: .diskFull)
        }
        let outcome = try await sync.modifyRecords(owner: ownerName, zoneName: "Topics", saving: [mine], savePolicy: .changedKeys)
        guard case .queued = outcome else { Issue.record("expected the write to be queued, got \(outcome)"); return }
        #expect(try owner.db.fetchRecord(owner.id("n0"))["title"] == "participant")
        var theirs = try owner.db.fetchRecord(owner.id("n0"))
        theirs["title"] = .string("owner")
        _ = try owner.db.modifyRecords(saving: [theirs], savePolicy: .allKeys).get()
        owner.server.registry.injectedRefusals.withLock { $0 = [:] }
        try await expectEventually(sync, "the outbox to empty") { try sync.replica.outboxOperations().isEmpty }
        // Before, the write was applied again: the owner's change was lost under it.
        #expect(try owner.db.fetchRecord(owner.id("n0"))["title"] == "owner")
        try await expectEventually(sync, "the replica to hold the owner's title") {
            try sync.replica.fetchRecord(mine.recordID)?["title"] == "owner"
        }
        await sync.stop()
        try await owner.stop()
    }

    @Test("a write in several requests gives each an ID from the names it carries: cut differently, a request is another write")
    func partsAreNamedByTheirItems() {
        let zone = RecordZone.ID(zoneName: "Topics")
        func save(_ name: String) -> ModifyItem { .save(Record(recordType: "Note", recordID: Record.ID(recordName: name, zoneID: zone)), bytes: 10) }
        let ab = OwnerConnection.partWriteID("w-1", [save("a"), save("b")])
        #expect(ab == OwnerConnection.partWriteID("w-1", [save("a"), save("b")]))
        #expect(ab.hasPrefix("w-1.") && ab.count == "w-1.".count + 16)
        #expect(ab != OwnerConnection.partWriteID("w-1", [save("a")]))
        #expect(ab != OwnerConnection.partWriteID("w-1", [save("a"), .delete("b")]))
        #expect(ab != OwnerConnection.partWriteID("w-2", [save("a"), save("b")]))
        #expect(RequestExecutor.isValidWriteID(ab))
    }

}
