import Foundation
import ShareSyncCore
import Testing

@testable import ShareSyncStore

@Suite("Rules: shared database feeds")
struct RulesFeedsTests {
    func world() throws -> World {
        let w = try World()
        try w.save(w.record("Topic", "topic"))
        var notes: [Record] = []
        for i in 0..<12 { notes.append(w.record("Note", "n\(i)", parent: i < 6 ? "topic" : "n\(i - 6)")) }
        _ = try w.db.modifyRecords(saving: notes).get()
        return w
    }

    @Test("a pending (not yet accepted) participant's shared database is empty")
    func pendingSeesNothing() throws {
        let w = try world()
        _ = try w.share(root: "topic", invite: [("_b", .readOnly)])
        let changes = try w.view("_b").fetchDatabaseChanges(since: nil)
        #expect(changes.changedZoneIDs.isEmpty && changes.deletedZoneIDs.isEmpty && !changes.moreComing)
        #expect(try w.view("_b").fetchAllZones().isEmpty)
        #expect(failure { _ = try w.view("_b").fetchZoneChanges(w.sharedZone, since: nil) }?.code == .zoneNotFound)
    }

    @Test("a replica converges to the same records whatever the page size")
    func pageSizeIndependent() throws {
        let w = try world()
        let share = try w.share(root: "topic", invite: [("_b", .readWrite)])
        try w.accept(share, "_b")
        var small = Replica("_b")
        var large = Replica("_b")
        try small.sync(w.db, pageSize: 1)
        try large.sync(w.db, pageSize: 400)
        #expect(small.names() == large.names())
        #expect(small.names().count == 14)
        try w.save(w.record("Folder", "out"))
        try w.reparent("n1", to: "out")
        try w.save(w.record("Note", "late", parent: "n0"))
        _ = try w.view("_b").modifyRecords(deleting: [w.sid("n2")]).get()
        try small.sync(w.db, pageSize: 1)
        try large.sync(w.db, pageSize: 400)
        #expect(small.names() == large.names())
        #expect(small.names().contains("late"))
        #expect(!small.names().contains("n1") && !small.names().contains("n7") && !small.names().contains("n2"))
    }

    @Test("a zone token from before the zone was shared again is refused (changeTokenExpired)")
    func tokenFromEarlierShare() throws {
        let w = try world()
        let first = try w.share(root: "topic", invite: [("_b", .readOnly)])
        try w.accept(first, "_b")
        let old = try w.view("_b").fetchZoneChanges(w.sharedZone, since: nil).changeToken
        _ = try w.db.modifyRecords(deleting: [first.recordID]).get()
        let again = try w.share(root: "topic", invite: [("_b", .readOnly)])
        try w.accept(again, "_b")
        #expect(failure { _ = try w.view("_b").fetchZoneChanges(w.sharedZone, since: old) }?.code == .changeTokenExpired)
        let fresh = try w.view("_b").fetchZoneChanges(w.sharedZone, since: nil)
        #expect(fresh.changedRecords.count == 14)
    }

    @Test("records outside the view never appear in the participant's feed, even when changed")
    func outsideChangesInvisible() throws {
        let w = try world()
        try w.save(w.record("Topic", "other"))
        let share = try w.share(root: "topic", invite: [("_b", .readOnly)])
        try w.accept(share, "_b")
        let token = try w.view("_b").fetchZoneChanges(w.sharedZone, since: nil).changeToken
        try w.save(w.record("Topic", "other", title: "changed"), w.record("Note", "o1", parent: "other"))
        _ = try w.db.modifyRecords(deleting: [w.id("other")]).get()
        let page = try w.view("_b").fetchZoneChanges(w.sharedZone, since: token)
        #expect(page.changes.isEmpty)
    }

    @Test("a database feed token moves on: nothing is reported twice")
    func databaseFeedOnce() throws {
        let w = try world()
        let share = try w.share(root: "topic", invite: [("_b", .readOnly)])
        try w.accept(share, "_b")
        let first = try w.view("_b").fetchDatabaseChanges(since: nil)
        #expect(first.changedZoneIDs.map(\.zoneName) == ["Topics"])
        let second = try w.view("_b").fetchDatabaseChanges(since: first.changeToken)
        #expect(second.changedZoneIDs.isEmpty && second.deletedZoneIDs.isEmpty)
        try w.save(w.record("Note", "new", parent: "topic"))
        let third = try w.view("_b").fetchDatabaseChanges(since: second.changeToken)
        #expect(third.changedZoneIDs.map(\.zoneName) == ["Topics"])
    }
}
