import Foundation
import ShareSyncCore
@testable import ShareSyncNode
@testable import ShareSyncStore
import Synchronization
import Testing

private final class Arrived: Sendable {
    let flag = Atomic<Bool>(false)
}

private final class Counter: Sendable {
    let count = Atomic<Int>(0)
}

/// A write in several requests that stops part-way: its caller gives up while a request is with the
/// owner, or the owner refuses a later request as a whole.
@Suite("Writes in several requests stopped part-way")
struct PartlySentWriteTests {
    @Test("a write in several requests, cancelled while its first request is with the owner, is queued and finished, not left half applied")
    func cancelledWhileTheFirstRequestIsInFlight() async throws {
        let b = try TestParticipant()
        defer { b.remove() }
        let (owner, sync, notes) = try await WriteOnceTests.ownerWithNotesInRequestsOf4(count: 12, b)
        let ownerName = owner.identity.userRecordName

        // The owner's writer is held, so the first request (4 deletions) reaches the owner and waits there.
        let arrived = Arrived()
        owner.server.registry.onWriteRequest.withLock { $0 = { arrived.flag.store(true, ordering: .relaxed) } }
        let release = DispatchSemaphore(value: 0)
        let holding = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            _ = try? owner.db.write { _ in
                holding.signal()
                release.wait()
            }
        }
        holding.wait()
        defer { release.signal() }

        let write = Task {
            try await sync.modifyRecords(
                owner: ownerName, zoneName: "Topics", deleting: notes.map(\.recordID.recordName), atomically: false)
        }
        var waited = 0
        while !arrived.flag.load(ordering: .relaxed), waited < 1_000 {
            try await Task.sleep(for: .milliseconds(10))
            waited += 1
        }
        let reached = arrived.flag.load(ordering: .relaxed)
        #expect(reached, "the first request never reached the owner")
        write.cancel()
        let outcome = await write.result
        // Before, the caller's cancel dropped the write: the owner then applied the first request
        // (d0-d3 deleted) and the other 8 deletions were never sent.
        guard case .success(.queued) = outcome else { Issue.record("expected the write to be queued, got \(outcome)"); return }
        owner.server.registry.onWriteRequest.withLock { $0 = nil }
        release.signal()

        try await expectEventually(sync, "the outbox to empty", timeout: 30) { try sync.replica.outboxOperations().isEmpty }
        for note in notes {
            #expect(throws: ShareSyncError.self, "\(note.recordID.recordName) deleted") { try owner.db.fetchRecord(note.recordID) }
        }
        #expect(try owner.db.fetchRecord(owner.id("topic")).recordID.recordName == "topic")
        await sync.stop()
        try await owner.stop()
    }

    @Test("a write in several requests whose caller gave up before the first request went is not sent and not queued")
    func cancelledBeforeTheFirstRequest() async throws {
        let b = try TestParticipant()
        defer { b.remove() }
        let (owner, sync, notes) = try await WriteOnceTests.ownerWithNotesInRequestsOf4(count: 12, b)
        let ownerName = owner.identity.userRecordName
        let write = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return try await sync.modifyRecords(
                owner: ownerName, zoneName: "Topics", deleting: notes.map(\.recordID.recordName), atomically: false)
        }
        let outcome = await write.result
        guard case .failure(let error) = outcome else { Issue.record("expected the cancel, got \(outcome)"); return }
        #expect((error as? ShareSyncError)?.code == .operationCancelled, "\(error)")
        #expect(try sync.replica.outboxOperations().isEmpty)
        for note in notes { #expect(try owner.db.fetchRecord(note.recordID).recordID == note.recordID) }
        await sync.stop()
        try await owner.stop()
    }

    /// The refusal injected for the third request of a write (requests of 4 items).
    static let refusal = ShareSyncError(.permissionFailure, "refused as a whole (injected)", rule: .readOnlyParticipant)

    @Test("a direct write whose third request is refused as a whole reports the first two as done, the third refused, the fourth not sent")
    func aDirectWriteRefusedPartWay() async throws {
        let b = try TestParticipant()
        defer { b.remove() }
        let (owner, sync, notes) = try await WriteOnceTests.ownerWithNotesInRequestsOf4(count: 16, b)
        owner.server.registry.injectedRefusalsHeldFor.store(2, ordering: .relaxed)
        owner.server.registry.injectedRefusals.withLock { $0["modifyRecords"] = Self.refusal }
        let outcome = try await sync.modifyRecords(
            owner: owner.identity.userRecordName, zoneName: "Topics", deleting: notes.map(\.recordID.recordName), atomically: false)
        // Before, the caller got the refusal alone, as if nothing had been deleted.
        guard case .sent(let result) = outcome else { Issue.record("expected an answer, got \(outcome)"); return }
        let done = result.deleteResults.filter { if case .success = $0.value { true } else { false } }.keys.map(\.recordName).sorted()
        #expect(done == (0..<8).map { "d\($0)" }.sorted())
        for i in 8..<12 {
            let failure = result.errors["d\(i)"]
            #expect(failure?.code == .permissionFailure && failure?.message == Self.refusal.message, "d\(i): \(String(describing: failure))")
        }
        // The fourth request was never sent: its items may go again.
        for i in 12..<16 {
            let failure = result.errors["d\(i)"]
            #expect(failure?.code == .batchRequestFailed && failure?.message.hasPrefix("not sent") == true, "d\(i): \(String(describing: failure))")
        }
        #expect(throws: ShareSyncError.self) { try owner.db.fetchRecord(owner.id("d7")) }
        #expect(try owner.db.fetchRecord(owner.id("d8")).recordID.recordName == "d8")
        #expect(try owner.db.fetchRecord(owner.id("d15")).recordID.recordName == "d15")
        #expect(try sync.replica.outboxOperations().isEmpty)
        await sync.stop()
        try await owner.stop()
    }

    @Test("a direct write whose later request meets a plain internalError is answered with what was applied, when it may be queued")
    func aDirectWriteMeetingAnInternalErrorPartWayIsAnswered() async throws {
        let b = try TestParticipant()
        defer { b.remove() }
        let (owner, sync, notes) = try await WriteOnceTests.ownerWithNotesInRequestsOf4(count: 12, b)
        owner.server.registry.injectedRefusalsHeldFor.store(1, ordering: .relaxed)
        owner.server.registry.injectedRefusals.withLock { $0["modifyRecords"] = ShareSyncError(.internalError, "something failed (injected)") }
        let outcome = try await sync.modifyRecords(
            owner: owner.identity.userRecordName, zoneName: "Topics", deleting: notes.map(\.recordID.recordName), atomically: false)
        // Thrown, the caller would not learn that d0-d3 were deleted.
        guard case .sent(let result) = outcome else { Issue.record("expected an answer, got \(outcome)"); return }
        #expect(result.errors["d0"] == nil && result.errors["d4"]?.code == .internalError && result.errors["d8"]?.code == .batchRequestFailed)
        await sync.stop()
        try await owner.stop()
    }

    @Test("with a merge hook, a queued write refused part-way merges the answered conflicts; the items never sent are kept, not sent")
    func aQueuedWriteRefusedPartWayMergesOnlyWhatWasAnswered() async throws {
        let b = try TestParticipant()
        defer { b.remove() }
        let (owner, sync, _) = try await WriteOnceTests.ownerWithNotesInRequestsOf4(count: 12, b, merge: { mine, theirs in
            var merged = theirs
            merged["title"] = mine["title"]
            return merged
        })
        let ownerName = owner.identity.userRecordName
        let zone = RecordZone.ID(zoneName: "Topics", ownerName: ownerName)
        var copies: [Record] = []
        for i in 0..<12 {
            var copy = try #require(try sync.replica.fetchRecord(Record.ID(recordName: "d\(i)", zoneID: zone)))
            copy["title"] = .string("mine \(i)")
            copies.append(copy)
        }
        // The owner changes d0 meanwhile: the first request answers it with a conflict.
        var theirs = try owner.db.fetchRecord(owner.id("d0"))
        theirs["label"] = "the owner's"
        _ = try owner.db.modifyRecords(saving: [theirs]).get()
        // The second request is refused as a whole; from the third request on (the merge retry) nothing is.
        let registry = owner.server.registry
        let requests = Counter()
        registry.injectedRefusalsHeldFor.store(1, ordering: .relaxed)
        registry.injectedRefusals.withLock { $0["modifyRecords"] = Self.refusal }
        registry.onWriteRequest.withLock {
            $0 = { if requests.count.wrappingAdd(1, ordering: .relaxed).newValue == 3 { registry.injectedRefusals.withLock { $0 = [:] } } }
        }
        let queued = try sync.replica.enqueue(owner: ownerName, operation: OutboxOperation(zoneName: "Topics", saving: copies, atomically: false))
        try #require(sync.existingLink(ownerName)).pokeOutbox()
        try await expectEventually(sync, "the write kept refused", timeout: 30) {
            try sync.replica.outboxOperation(id: queued.id)?.operation.state == .refused
        }
        let kept = try #require(try sync.replica.outboxOperation(id: queued.id)?.operation)
        #expect(kept.saving.map(\.recordID.recordName) == (4..<12).map { "d\($0)" })
        // d0 merged (mine over the owner's, its label kept); d8-d11 never sent: the retry did not carry them.
        #expect(try owner.db.fetchRecord(owner.id("d0"))["title"] == "mine 0")
        #expect(try owner.db.fetchRecord(owner.id("d0"))["label"] == "the owner's")
        #expect(try owner.db.fetchRecord(owner.id("d1"))["title"] == "mine 1")
        #expect(try owner.db.fetchRecord(owner.id("d8"))["title"] == "note 8")
        #expect(requests.count.load(ordering: .relaxed) == 3)
        registry.onWriteRequest.withLock { $0 = nil }
        await sync.stop()
        try await owner.stop()
    }

    @Test("a direct write whose later request meets a failure of the owner's store still throws it (the request may pass later)")
    func aDirectWriteMeetingAStoreFailurePartWayThrows() async throws {
        let b = try TestParticipant()
        defer { b.remove() }
        let (owner, sync, notes) = try await WriteOnceTests.ownerWithNotesInRequestsOf4(count: 12, b)
        owner.server.registry.injectedRefusalsHeldFor.store(1, ordering: .relaxed)
        owner.server.registry.injectedRefusals.withLock { $0["modifyRecords"] = ShareSyncError(.internalError, "the store failed (injected)") }
        let error = await expectShareSyncError {
            _ = try await sync.modifyRecords(
                owner: owner.identity.userRecordName, zoneName: "Topics", deleting: notes.map(\.recordID.recordName), atomically: false,
                queueWhenUnreachable: false)
        }
        #expect(error?.code == .internalError, "\(String(describing: error))")
        await sync.stop()
        try await owner.stop()
    }

    @Test("a queued write whose third request is refused as a whole keeps only the rest refused; a later edit of a saved record builds on its save")
    func aQueuedWriteRefusedPartWay() async throws {
        let b = try TestParticipant()
        defer { b.remove() }
        let (owner, sync, _) = try await WriteOnceTests.ownerWithNotesInRequestsOf4(count: 16, b)
        let ownerName = owner.identity.userRecordName
        let zone = RecordZone.ID(zoneName: "Topics", ownerName: ownerName)
        var copies: [Record] = []
        for i in 0..<16 {
            var copy = try #require(try sync.replica.fetchRecord(Record.ID(recordName: "d\(i)", zoneID: zone)))
            copy["title"] = .string("edited \(i)")
            copies.append(copy)
        }
        // A second edit of d0 from the same copy, queued after the first write.
        var later = copies[0]
        later["title"] = "edited again"
        // The third request is refused; from the fourth request on (the second write) nothing is.
        let registry = owner.server.registry
        let requests = Counter()
        registry.injectedRefusalsHeldFor.store(2, ordering: .relaxed)
        registry.injectedRefusals.withLock { $0["modifyRecords"] = Self.refusal }
        registry.onWriteRequest.withLock {
            $0 = { if requests.count.wrappingAdd(1, ordering: .relaxed).newValue == 4 { registry.injectedRefusals.withLock { $0 = [:] } } }
        }
        let first = try sync.replica.enqueue(owner: ownerName, operation: OutboxOperation(zoneName: "Topics", saving: copies, atomically: false))
        _ = try sync.replica.enqueue(owner: ownerName, operation: OutboxOperation(zoneName: "Topics", saving: [later]))
        try #require(sync.existingLink(ownerName)).pokeOutbox()
        try await expectEventually(sync, "the first write kept refused and the second sent", timeout: 30) {
            try sync.replica.outboxOperations().map(\.operation.id) == [first.id]
                && sync.replica.outboxOperation(id: first.id)?.operation.state == .refused
        }
        let kept = try #require(try sync.replica.outboxOperation(id: first.id)?.operation)
        // Before, the whole write was kept refused, its 8 saved records with it, and the later edit of
        // d0 met the first edit's save as a conflict.
        // The refused request's saves and those of the fourth request, never sent.
        #expect(kept.saving.map(\.recordID.recordName) == (8..<16).map { "d\($0)" })
        #expect(kept.error?.code == .permissionFailure && kept.error?.message == Self.refusal.message, "\(String(describing: kept.error))")
        #expect(try owner.db.fetchRecord(owner.id("d0"))["title"] == "edited again")
        #expect(try owner.db.fetchRecord(owner.id("d7"))["title"] == "edited 7")
        #expect(try owner.db.fetchRecord(owner.id("d8"))["title"] == "note 8")
        #expect(try owner.db.fetchRecord(owner.id("d15"))["title"] == "note 15")
        registry.onWriteRequest.withLock { $0 = nil }
        await sync.stop()
        try await owner.stop()
    }
}
