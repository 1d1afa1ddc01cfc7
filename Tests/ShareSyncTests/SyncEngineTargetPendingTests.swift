import Foundation
import GRDB
@testable import ShareSync
@testable import ShareSyncStore
import ShareSyncCore
import Testing

/// GRDB has a `Record` too.
private typealias Record = ShareSyncCore.Record

/// A save that waits for its `deleteSelf` target, when the target's own request failed in a way that
/// passes later (the owner's disk full), stays pending with it: the engine's `stayOn` case.
@Suite struct SyncEngineTargetPendingTests {
    static let zoneID = RecordZone.ID(zoneName: "Topics")

    /// Limits the private database of an embedded node to its current size plus `extraPages` pages
    /// (4 KiB each), as a full disk would (SQLITE_FULL); nil lifts the limit.
    static func limitSize(_ node: TestNode, extraPages: Int?) throws {
        guard case .embedded(let running) = node.container.transport else {
            Issue.record("not an embedded node")
            return
        }
        try running.database.writer.writeWithoutTransaction { db in
            let used = try Int.fetchOne(db, sql: "PRAGMA page_count") ?? 0
            _ = try Int.fetchOne(db, sql: "PRAGMA max_page_count = \(extraPages.map { used + $0 } ?? 1_073_741_823)")
        }
    }

    @Test("a save whose deleteSelf target's request found the disk full stays pending with its target, and both go once there is space")
    func aReferrerStaysPendingWithItsTargetWhoseRequestMayPassLater() async throws {
        try await withNode(.embedded) { node in
            let db = node.container.privateDatabase
            try await db.save(RecordZone(zoneID: Self.zoneID))
            let store = AppStore()
            let (engine, events) = store.startEngine(db, automatic: false)
            func id(_ name: String) -> Record.ID { Record.ID(recordName: name, zoneID: Self.zoneID) }
            // Requests are cut at 3 MiB, in the order of the changes: the first holds big0-2 and the
            // target, the second big3 and the comment that refers to the target.
            for i in 0..<4 {
                var big = Record(recordType: "Attachment", recordID: id("big\(i)"))
                big["body"] = .string(String(repeating: Character(UnicodeScalar(UInt8(97 + i))), count: 900_000))
                store.edit(big)
            }
            store.edit(Record(recordType: "Note", recordID: id("note")))
            var comment = Record(recordType: "Comment", recordID: id("comment"))
            comment["note"] = .reference(Record.Reference(recordID: id("note"), action: .deleteSelf))
            store.edit(comment)
            let order = ["big0", "big1", "big2", "note", "big3", "comment"]
            engine.state.add(pendingRecordZoneChanges: order.map { .saveRecord(id($0)) })
            // Room for the second request (about 0.9 MB), not for the first (about 2.7 MB).
            try Self.limitSize(node, extraPages: 400)
            try await engine.sendChanges()
            // The first request failed as a whole for the full disk: its saves stay pending. The
            // comment, refused because its target is not there, waited for the target, then stayed
            // pending with it. Before (without the stayOn case) it would have been reported failed
            // and dropped from the pending changes, for good.
            let pending = Set(engine.state.pendingRecordZoneChanges)
            #expect(pending == Set(["big0", "big1", "big2", "note", "comment"].map { SyncEngine.PendingRecordZoneChange.saveRecord(id($0)) }))
            #expect(try await db.record(for: id("big3")).recordID == id("big3"))
            #expect(store.sentRecordZoneChanges.flatMap(\.failedRecordSaves).isEmpty)
            // With space again, everything goes.
            try Self.limitSize(node, extraPages: nil)
            try await engine.sendChanges()
            #expect(engine.state.pendingRecordZoneChanges.isEmpty)
            let saved = try await db.record(for: id("comment"))
            #expect(saved["note"] == .reference(Record.Reference(recordID: id("note"), action: .deleteSelf)))
            await engine.stop()
            await events.value
            #expect(store.sentRecordZoneChanges.flatMap(\.failedRecordSaves).isEmpty)
            #expect(Set(store.sentRecordZoneChanges.flatMap(\.savedRecords).map(\.recordID.recordName)) == Set(order))
        }
    }
}
