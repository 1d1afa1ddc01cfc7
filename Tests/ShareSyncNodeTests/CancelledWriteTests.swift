import Foundation
import ShareSyncCore
@testable import ShareSyncNode
@testable import ShareSyncStore
import Synchronization
import Testing

private final class Arrived: Sendable {
    let flag = Atomic<Bool>(false)
}

/// A direct write in several requests whose caller gives up while a request is with the owner.
@Suite("Cancelled writes")
struct CancelledWriteTests {
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
}
