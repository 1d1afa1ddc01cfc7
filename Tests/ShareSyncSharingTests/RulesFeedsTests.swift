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

    @Test("a zone shared again since a database token comes as changed, and the zone token held from before has expired")
    func zoneEnteredAgainSinceADatabaseToken() throws {
        let w = try world()
        let first = try w.share(root: "topic", invite: [("_b", .readOnly)])
        try w.accept(first, "_b")
        let view = w.view("_b")
        let before = try view.fetchDatabaseChanges(since: nil).changeToken
        let zoneToken = try view.fetchZoneChanges(w.sharedZone, since: nil).changeToken
        _ = try w.db.modifyRecords(deleting: [first.recordID]).get()
        try w.accept(try w.share(root: "topic", invite: [("_b", .readOnly)]), "_b")
        // As protocol.md says ("How access ends"): changed only, and the zone token tells the rest.
        let changes = try view.fetchDatabaseChanges(since: before)
        #expect(changes.changedZoneIDs.map(\.zoneName) == [w.sharedZone.zoneName])
        #expect(changes.deletedZoneIDs.isEmpty)
        let expired = failure { _ = try view.fetchZoneChanges(w.sharedZone, since: zoneToken) }
        #expect(expired?.code == .changeTokenExpired, "\(String(describing: expired))")
    }

    @Test("pendingChangeCount counts what a fetch of the zone's changes from the same token returns")
    func pendingChangeCountMatchesTheFeed() throws {
        let w = try world()
        try w.save(w.record("Topic", "other"))
        let share = try w.share(root: "topic", invite: [("_b", .readWrite)])
        try w.accept(share, "_b")
        let view = w.view("_b")
        // From nil: every record in the view (the topic, its 12 notes, the share).
        let all = try view.fetchZoneChanges(w.sharedZone, since: nil, resultsLimit: 400)
        #expect(!all.moreComing)
        #expect(try view.pendingChangeCount(inZone: w.sharedZone.zoneName, since: nil) == all.changes.count)
        let token = all.changeToken
        #expect(try view.pendingChangeCount(inZone: w.sharedZone.zoneName, since: token) == 0)
        // A change, an addition, a subtree leaving the view, a deletion, and changes outside the view.
        try w.save(w.record("Topic", "topic", title: "changed"))
        try w.save(w.record("Note", "late", parent: "n0"))
        try w.save(w.record("Folder", "out"))
        try w.reparent("n1", to: "out")
        _ = try view.modifyRecords(deleting: [w.sid("n2")]).get()
        try w.save(w.record("Topic", "other", title: "changed"), w.record("Note", "o1", parent: "other"))
        let since = try view.fetchZoneChanges(w.sharedZone, since: token, resultsLimit: 400)
        let names = Set(since.changes.map { change -> String in
            switch change {
            case .changed(let record): record.recordID.recordName
            case .deleted(let deleted): deleted.recordID.recordName
            }
        })
        // n7 leaves with its parent n1; n8 with its parent n2.
        #expect(names == ["topic", "late", "n1", "n7", "n2", "n8"], "\(since.changes)")
        #expect(try view.pendingChangeCount(inZone: w.sharedZone.zoneName, since: token) == since.changes.count)
        #expect(try view.pendingChangeCount(inZone: w.sharedZone.zoneName, since: since.changeToken) == 0)
        #expect(failure { _ = try w.view("_c").pendingChangeCount(inZone: w.sharedZone.zoneName, since: nil) }?.code == .zoneNotFound)
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
