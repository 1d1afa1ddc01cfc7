import Foundation
import GRDB
import ShareSyncCore
import ShareSyncNode
@testable import ShareSyncStore
import ShareSyncWire
import Testing

/// What a participant is told of a failure of the owner's own store.
@Suite("The owner's store failing, as a participant hears it")
struct OwnerStoreFailureTests {
    @Test("the owner's full disk is quotaExceeded/diskFull without the owner's file path or its ask to free space")
    func fullDiskSaysNoPath() async throws {
        let owner = try await TestOwner.start()
        let (_, _, connection) = try await owner.acceptedParticipant()
        // The owner's database may not grow past its size now, as on a full disk (SQLITE_FULL).
        try await owner.db.writer.writeWithoutTransaction { db in
            let used = try Int.fetchOne(db, sql: "PRAGMA page_count") ?? 0
            _ = try Int.fetchOne(db, sql: "PRAGMA max_page_count = \(used)")
        }
        var big = Record(recordType: "Note", recordID: Record.ID(recordName: "big", zoneID: RecordZone.ID(zoneName: "Topics", ownerName: owner.identity.userRecordName)))
        big["body"] = .string(String(repeating: "x", count: 200_000))
        big.parent = Record.Reference(recordID: Record.ID(recordName: "topic", zoneID: big.recordID.zoneID), action: .none)
        let error = await expectShareSyncError { _ = try await connection.modifyRecords(zoneName: "Topics", saving: [big]) }
        #expect(error?.code == .quotaExceeded && error?.rule == .diskFull, "\(String(describing: error))")
        // Before: "the disk holding /…/private.sqlite is full: … free some space and it is retried".
        #expect(error?.message.contains("/") == false, "\(error?.message ?? "")")
        #expect(error?.message.contains("the owner's disk is full") == true, "\(error?.message ?? "")")
        await connection.close()
        try await owner.stop()
    }
}
