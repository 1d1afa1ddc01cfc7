import Foundation
import Synchronization
import ShareSyncCore
import Testing

@testable import ShareSyncStore

@Suite("Rules: permissions")
struct RulesPermissionsTests {
    /// topic (shared with _b as given, _c read-write) ← note; other ← other-note (unshared hierarchy);
    /// plus a second zone "Private" with a record.
    func world(_ permission: Participant.Permission) throws -> (World, Share) {
        let w = try World()
        try w.save(
            w.record("Topic", "topic"), w.record("Note", "note", parent: "topic", title: "n"),
            w.record("Topic", "other"), w.record("Note", "other-note", parent: "other", title: "o"))
        try w.db.saveZone(RecordZone(zoneID: RecordZone.ID(zoneName: "Private")))
        _ = try w.db.modifyRecords(saving: [
            Record(recordType: "Secret", recordID: Record.ID(recordName: "secret", zoneID: RecordZone.ID(zoneName: "Private")))
        ]).get()
        let share = try w.share(root: "topic", invite: [("_b", permission), ("_c", .readWrite)])
        try w.accept(share, "_b")
        try w.accept(share, "_c")
        return (w, share)
    }

    @Test("a readWrite participant creates (parent inside), modifies and deletes inside a hierarchy share; owner and others see it")
    func readWriteHierarchy() throws {
        let (w, _) = try world(.readWrite)
        var owner = try w.db.fetchZoneChanges(w.zone, since: nil)
        var ownerToken = owner.changeToken
        var c = Replica("_c")
        try c.sync(w.db)
        let b = w.view("_b")

        // Create.
        _ = try b.modifyRecords(saving: [w.sharedRecord("Note", "by-b", parent: "topic", title: "hello")]).get()
        let created = try w.db.fetchRecord(w.id("by-b"))
        #expect(created["title"] == .string("hello"))
        #expect(created.creatorUserRecordID?.recordName == "_b")
        owner = try w.db.fetchZoneChanges(w.zone, since: ownerToken)
        #expect(owner.changedRecords.map(\.recordID.recordName).contains("by-b"))
        ownerToken = owner.changeToken
        try c.sync(w.db)
        #expect(c.records["Topics"]?["by-b"]?["title"] == .string("hello"))

        // Modify (a record the owner made).
        var note = try b.fetchRecords([w.sid("note")])[w.sid("note")]!.get()
        note["title"] = .string("edited")
        _ = try b.modifyRecords(saving: [note]).get()
        #expect(try w.db.fetchRecord(w.id("note"))["title"] == .string("edited"))
        #expect(try w.db.fetchRecord(w.id("note")).lastModifiedUserRecordID?.recordName == "_b")
        owner = try w.db.fetchZoneChanges(w.zone, since: ownerToken)
        #expect(owner.changedRecords.first { $0.recordID.recordName == "note" }?["title"] == .string("edited"))
        ownerToken = owner.changeToken
        try c.sync(w.db)
        #expect(c.records["Topics"]?["note"]?["title"] == .string("edited"))

        // Delete.
        _ = try b.modifyRecords(deleting: [w.sid("by-b")]).get()
        #expect(failure { _ = try w.db.fetchRecord(w.id("by-b")) }?.code == .unknownItem)
        owner = try w.db.fetchZoneChanges(w.zone, since: ownerToken)
        #expect(owner.deletedRecords.map(\.recordID.recordName) == ["by-b"])
        try c.sync(w.db)
        #expect(c.records["Topics"]?["by-b"] == nil)
    }

    @Test("a readWrite participant of a zone-wide share creates anywhere in the zone")
    func readWriteZoneWide() throws {
        let w = try World()
        try w.save(w.record("Topic", "topic"))
        let share = try w.shareZone(invite: [("_b", .readWrite), ("_c", .readOnly)])
        try w.accept(share, "_b")
        try w.accept(share, "_c")
        let b = w.view("_b")
        _ = try b.modifyRecords(saving: [w.sharedRecord("Topic", "top-level", title: "x")]).get()
        _ = try b.modifyRecords(saving: [w.sharedRecord("Note", "child", parent: "topic")]).get()
        #expect(try w.db.fetchRecord(w.id("top-level"))["title"] == .string("x"))
        #expect(try w.visible("_c", ["top-level", "child", "topic"]) == ["top-level", "child", "topic"])
        _ = try b.modifyRecords(deleting: [w.sid("topic")]).get()
        #expect(failure { _ = try w.db.fetchRecord(w.id("topic")) }?.code == .unknownItem)
    }

    @Test("a readOnly participant gets permissionFailure on create, modify and delete")
    func readOnlyRefused() throws {
        let (w, _) = try world(.readOnly)
        let b = w.view("_b")
        let create = try b.modifyRecords(saving: [w.sharedRecord("Note", "new", parent: "topic")])
        #expect(create.error("new")?.code == .permissionFailure)
        #expect(failure { _ = try w.db.fetchRecord(w.id("new")) }?.code == .unknownItem)
        var note = try b.fetchRecords([w.sid("note")])[w.sid("note")]!.get()
        note["title"] = .string("changed")
        #expect(try b.modifyRecords(saving: [note]).error("note")?.code == .permissionFailure)
        #expect(try b.modifyRecords(saving: [note], savePolicy: .allKeys).error("note")?.code == .permissionFailure)
        #expect(try w.db.fetchRecord(w.id("note"))["title"] == .string("n"))
        #expect(try b.modifyRecords(deleting: [w.sid("note")]).error("note")?.code == .permissionFailure)
        #expect(try w.db.fetchRecord(w.id("note"))["title"] == .string("n"))
        // A stale copy is refused as read-only, not answered as a conflict: a conflict invites the
        // participant to keep theirs, which could never be saved.
        var changed = try w.db.fetchRecord(w.id("note"))
        changed["title"] = .string("the owner's")
        _ = try w.db.modifyRecords(saving: [changed]).get()
        let stale = try b.modifyRecords(saving: [note]).error("note")
        #expect(stale?.code == .permissionFailure && stale?.rule == .readOnlyParticipant, "\(String(describing: stale))")
        #expect(stale?.serverRecord == nil)
    }

    @Test("a write that changes nothing commits nothing and wakes no subscription: a stranger's, a refused one, an empty one")
    func writesThatChangeNothingWakeNobody() throws {
        let (w, _) = try world(.readOnly)
        let wakes = Mutex(0)
        let observer = w.db.addCommitObserver { wakes.withLock { $0 += 1 } }
        defer { w.db.removeCommitObserver(observer) }
        let before = try w.db.currentChangeToken()
        var note = try w.view("_b").fetchRecords([w.sid("note")])[w.sid("note")]!.get()
        note["title"] = "mine"
        // Anyone with a key (no share at all), a read-only participant, an empty request.
        #expect(try w.view("_stranger").modifyRecords(saving: [note]).error("note") != nil)
        #expect(try w.view("_stranger").modifyRecords(saving: [note], atomically: false).error("note") != nil)
        #expect(try w.view("_b").modifyRecords(saving: [note]).error("note")?.code == .permissionFailure)
        _ = try w.view("_stranger").modifyRecords()
        // Before, each committed the sequence again and woke every subscription of the owner.
        #expect(wakes.withLock { $0 } == 0)
        #expect(try w.db.currentChangeToken() == before)
        #expect(try w.db.fetchRecord(w.id("note"))["title"] != "mine")
        // A write that changes something does.
        try w.save(w.record("Note", "another", parent: "topic"))
        #expect(wakes.withLock { $0 } == 1)
        #expect(try w.db.currentChangeToken() != before)
    }

    @Test("leaving a share one is not in is refused with the rule broken, not a partialFailure around it")
    func leavingAShareOneIsNotInIsRefusedPlainly() throws {
        let (w, share) = try world(.readOnly)
        let error = failure { try w.view("_stranger").leaveShare(w.sid(share.recordID.recordName)) }
        #expect(error?.code == .permissionFailure && error?.partialErrors == nil, "\(String(describing: error))")
        #expect(error?.rule != nil, "\(String(describing: error))")
    }

    @Test("only the owner deletes a hierarchy's root")
    func rootDeleteOwnerOnly() throws {
        let (w, share) = try world(.readWrite)
        let result = try w.view("_b").modifyRecords(deleting: [w.sid("topic")])
        #expect(result.error("topic")?.code == .permissionFailure)
        #expect(try w.db.fetchRecord(w.id("topic")).share != nil)
        #expect(try w.visible("_c", ["topic", "note"]) == ["topic", "note"])
        #expect(try w.currentShare(share.recordID).rootRecordID?.recordName == "topic")
    }

    @Test("a participant's delete cascades through deleteSelf only to records they may delete themselves")
    func deleteSelfCascadeStaysInside() throws {
        let (w, _) = try world(.readWrite)
        let otherShare = try w.share(root: "other", invite: [("_c", .readOnly)])
        try w.save(w.record("Note", "private"))
        func setReference(_ name: String, _ on: Bool) throws {
            var r = try w.db.fetchRecord(w.id(name))
            r["on"] = on ? .reference(Record.Reference(recordID: w.id("note"), action: .deleteSelf)) : nil
            _ = try w.db.modifyRecords(saving: [r]).get()
        }
        // Each of these, once it refers to `note` with deleteSelf, is outside what _b may delete: an
        // unshared record, the root of the other share, and the root of _b's own share.
        for name in ["private", "other", "topic"] {
            try setReference(name, true)
            let error = try w.view("_b").modifyRecords(deleting: [w.sid("note")]).error("note")
            #expect(error?.code == .permissionFailure && error?.rule == .outsideView, "\(name): \(String(describing: error))")
            #expect(error?.message.contains(name) != true, "the answer names \(name), which _b may not see")
            #expect(try w.db.fetchRecord(w.id("note")).recordID.recordName == "note")
            #expect(try w.db.fetchRecord(w.id(name)).recordID.recordName == name)
            try setReference(name, false)
        }
        #expect(try w.currentShare(otherShare.recordID).rootRecordID?.recordName == "other")
        // Inside the share the cascade goes on: a note of _b's share referring to `note` goes with it.
        var inside = w.record("Note", "inside", parent: "topic")
        inside["on"] = .reference(Record.Reference(recordID: w.id("note"), action: .deleteSelf))
        try w.save(inside)
        #expect(try w.view("_b").modifyRecords(deleting: [w.sid("note")]).errors.isEmpty)
        #expect(try w.visible("_c", ["topic", "note", "inside"]) == ["topic"])
    }

    @Test("a share root deleted because it referred to another share's record (deleteSelf) takes its share with it")
    func aRootDeletedWithAnotherShareTakesItsShare() throws {
        let (w, share) = try world(.readWrite)
        let otherShare = try w.share(root: "other", invite: [("_c", .readOnly)])
        // _b (readWrite) cannot make its share's root refer to the other share's record with deleteSelf:
        // outside _b's view, that record does not exist for _b (referenceViolation, as for a name
        // that exists nowhere). The owner can.
        var topic = try w.view("_b").fetchRecords([w.sid("topic")])[w.sid("topic")]!.get()
        topic["on"] = .reference(Record.Reference(recordID: w.sid(otherShare.recordID.recordName), action: .deleteSelf))
        let refused = try w.view("_b").modifyRecords(saving: [topic]).errors["topic"]
        var nowhere = topic
        nowhere["on"] = .reference(Record.Reference(recordID: w.sid("no-such-record"), action: .deleteSelf))
        let missing = try w.view("_b").modifyRecords(saving: [nowhere]).errors["topic"]
        #expect(refused?.code == .referenceViolation && missing?.code == .referenceViolation)
        #expect(refused?.rule == .deleteSelfTargetMissing && missing?.rule == .deleteSelfTargetMissing)
        #expect(refused?.message.replacingOccurrences(of: otherShare.recordID.recordName, with: "?")
            == missing?.message.replacingOccurrences(of: "no-such-record", with: "?"))
        var owners = try w.db.fetchRecord(w.id("topic"))
        owners["on"] = .reference(Record.Reference(recordID: w.id(otherShare.recordID.recordName), action: .deleteSelf))
        _ = try w.db.modifyRecords(saving: [owners]).get()
        // The owner stops sharing `other`: its share record goes, and `topic` with it.
        _ = try w.db.modifyRecords(deleting: [otherShare.recordID]).get()
        #expect(failure { _ = try w.db.fetchRecord(w.id("topic")) }?.code == .unknownItem)
        // Before, topic's share stayed, its root gone, and `note` stayed shared with _b.
        #expect(failure { _ = try w.db.fetchRecord(share.recordID) }?.code == .unknownItem)
        #expect(try w.visible("_b", ["note", "topic"]).isEmpty)
        #expect(try w.db.fetchRecord(w.id("note")).recordID.recordName == "note")
    }

    @Test("a participant cannot take records into their share by creating the parent they name")
    func creatingAMissingParentDoesNotShareItsChildren() throws {
        let (w, _) = try world(.readWrite)
        // The owner's records under a parent that no longer exists (deleting a parent leaves them).
        try w.save(w.record("Folder", "folder"), w.record("Note", "orphan", parent: "folder"))
        _ = try w.db.modifyRecords(deleting: [w.id("folder")]).get()
        let result = try w.view("_b").modifyRecords(saving: [w.sharedRecord("Folder", "folder", parent: "topic")])
        #expect(result.error("folder")?.code == .permissionFailure && result.error("folder")?.rule == .outsideView)
        #expect(try w.visible("_b", ["folder", "orphan"]).isEmpty)
        // A new record that nothing names as its parent is created as before; the owner may adopt.
        #expect(try w.view("_b").modifyRecords(saving: [w.sharedRecord("Folder", "fresh", parent: "topic")]).errors.isEmpty)
        try w.save(w.record("Folder", "folder", parent: "topic"))
        #expect(try w.visible("_b", ["folder", "orphan"]) == ["folder", "orphan"])
    }

    @Test("a participant cannot move a record outside their share")
    func noMoveOutside() throws {
        let (w, _) = try world(.readWrite)
        let b = w.view("_b")
        var note = try b.fetchRecords([w.sid("note")])[w.sid("note")]!.get()
        note.setParent(nil)
        #expect(try b.modifyRecords(saving: [note], savePolicy: .allKeys).error("note")?.code == .permissionFailure)
        note.setParent(w.sid("other"))
        #expect(try b.modifyRecords(saving: [note], savePolicy: .allKeys).error("note")?.code == .permissionFailure)
        #expect(try w.db.fetchRecord(w.id("note")).parent?.recordID.recordName == "topic")
        // Nor move the root.
        var topic = try b.fetchRecords([w.sid("topic")])[w.sid("topic")]!.get()
        topic.setParent(w.sid("other"))
        #expect(try b.modifyRecords(saving: [topic], savePolicy: .allKeys).error("topic")?.code == .permissionFailure)
        #expect(try w.db.fetchRecord(w.id("topic")).parent == nil)
    }

    /// The message of an error with the record name abstracted away.
    func shape(_ e: ShareSyncError?, _ name: String) -> String? {
        e.map { "\($0.code.rawValue): \($0.message.replacingOccurrences(of: name, with: "NAME"))" }
    }

    @Test("nobody reads outside their view: unknownItem with the same message as a nonexistent record")
    func noReadOutsideView() throws {
        let (w, _) = try world(.readWrite)
        try w.save(w.record("Folder", "elsewhere"))
        try w.reparent("note", to: "elsewhere")  // re-parented out
        let b = w.view("_b")
        let privateZone = RecordZone.ID(zoneName: "Private", ownerName: "_owner")
        let targets: [Record.ID] = [
            Record.ID(recordName: "secret", zoneID: privateZone), w.sid("other"), w.sid("other-note"), w.sid("note"),
        ]
        let ghost = try b.fetchRecords([w.sid("ghost")])[w.sid("ghost")]!
        let expected = shape(failure { _ = try ghost.get() }, "ghost")
        #expect(expected?.hasPrefix("unknownItem") == true)
        for id in targets {
            let r = try b.fetchRecords([id])[id]!
            #expect(shape(failure { _ = try r.get() }, id.recordName) == expected, "\(id.recordName)")
        }
    }

    @Test("nobody writes outside their view: permissionFailure with the same message as a nonexistent record, database unchanged")
    func noWriteOutsideView() throws {
        let (w, _) = try world(.readWrite)
        try w.save(w.record("Folder", "elsewhere"), w.record("Note", "moved", parent: "topic"))
        try w.reparent("moved", to: "elsewhere")
        let b = w.view("_b")
        let privateZone = RecordZone.ID(zoneName: "Private", ownerName: "_owner")

        // Creating a nonexistent record outside the view: the reference answer.
        let ghost = try b.modifyRecords(saving: [w.sharedRecord("Note", "ghost", parent: "other")], savePolicy: .allKeys)
        let expected = shape(ghost.error("ghost"), "ghost")
        #expect(expected?.hasPrefix("permissionFailure") == true)

        let before = try w.db.fetchZoneChanges(w.zone, since: nil).changeToken
        let beforePrivate = try w.db.fetchZoneChanges(RecordZone.ID(zoneName: "Private"), since: nil).changeToken
        for (zone, name) in [(privateZone, "secret"), (w.sharedZone, "other"), (w.sharedZone, "other-note"), (w.sharedZone, "moved")] {
            let type = ["secret": "Secret", "other": "Topic"][name] ?? "Note"
            var r = Record(recordType: type, recordID: Record.ID(recordName: name, zoneID: zone))
            r["title"] = .string("overwritten")
            let save = try b.modifyRecords(saving: [r], savePolicy: .allKeys)
            #expect(shape(save.error(name), name) == expected, "save \(name)")
        }
        #expect(try w.db.fetchZoneChanges(w.zone, since: before).changes.isEmpty)
        #expect(try w.db.fetchZoneChanges(RecordZone.ID(zoneName: "Private"), since: beforePrivate).changes.isEmpty)
        #expect(try w.db.fetchRecord(w.id("other"))["title"] == .string(""))
    }

    @Test("nobody deletes outside their view: permissionFailure, same as for a nonexistent record; database unchanged")
    func noDeleteOutsideView() throws {
        let (w, _) = try world(.readWrite)
        try w.save(w.record("Folder", "elsewhere"), w.record("Note", "moved", parent: "topic"))
        try w.reparent("moved", to: "elsewhere")
        let b = w.view("_b")
        let privateZone = RecordZone.ID(zoneName: "Private", ownerName: "_owner")
        let before = try w.db.fetchZoneChanges(w.zone, since: nil).changeToken
        var shapes: [String: String?] = [:]
        for id in [Record.ID(recordName: "secret", zoneID: privateZone), w.sid("other"), w.sid("other-note"), w.sid("moved")] {
            let del = try b.modifyRecords(deleting: [id])
            #expect(del.error(id.recordName)?.code == .permissionFailure, "delete \(id.recordName)")
            shapes[id.recordName] = shape(del.error(id.recordName), id.recordName)
        }
        #expect(try w.db.fetchZoneChanges(w.zone, since: before).changes.isEmpty)
        #expect(try w.db.fetchRecord(Record.ID(recordName: "secret", zoneID: RecordZone.ID(zoneName: "Private"))).recordType == "Secret")
        #expect(Set(shapes.values).count == 1)
    }

    @Test(
        "deleting a nonexistent record answers a participant exactly as deleting a record outside their view")
    func deleteNonexistentSameAsOutside() throws {
        let (w, _) = try world(.readWrite)
        let b = w.view("_b")
        let outside = try b.modifyRecords(deleting: [w.sid("other")])
        let ghost = try b.modifyRecords(deleting: [w.sid("ghost")])
        #expect(shape(ghost.error("ghost"), "ghost") == shape(outside.error("other"), "other"))
        #expect(ghost.error("ghost")?.code == .permissionFailure)
    }

    @Test(
        "writing to a nonexistent zone answers a participant exactly as writing to an unshared zone")
    func nonexistentZoneSameAsUnsharedZone() throws {
        let (w, _) = try world(.readWrite)
        let b = w.view("_b")
        let existing = try b.modifyRecords(
            saving: [Record(recordType: "N", recordID: Record.ID(recordName: "x", zoneID: RecordZone.ID(zoneName: "Private", ownerName: "_owner")))])
        let missing = try b.modifyRecords(
            saving: [Record(recordType: "N", recordID: Record.ID(recordName: "x", zoneID: RecordZone.ID(zoneName: "Nowhere", ownerName: "_owner")))])
        #expect(existing.error("x")?.code == missing.error("x")?.code)
        #expect(shape(existing.error("x"), "Private") == shape(missing.error("x"), "Nowhere"))
    }

    @Test(
        "saving a record outside the view with the wrong type reveals nothing (permissionFailure, same message)")
    func wrongTypeOutsideView() throws {
        let (w, _) = try world(.readWrite)
        let b = w.view("_b")
        let ghost = try b.modifyRecords(saving: [w.sharedRecord("Note", "ghost", parent: "other")], savePolicy: .allKeys)
        let outside = try b.modifyRecords(saving: [w.sharedRecord("Note", "other")], savePolicy: .allKeys)
        #expect(shape(outside.error("other"), "other") == shape(ghost.error("ghost"), "ghost"))
    }

    @Test(
        "saving over a record outside the view with the default save policy reveals nothing (no serverRecord)")
    func conflictOutsideViewLeaksNothing() throws {
        let (w, _) = try world(.readWrite)
        let b = w.view("_b")
        let ghost = try b.modifyRecords(saving: [w.sharedRecord("Note", "ghost", parent: "other")])
        let outside = try b.modifyRecords(saving: [w.sharedRecord("Note", "other-note", parent: "other")])
        let e = outside.error("other-note")
        #expect(e?.serverRecord == nil)
        #expect(e?.code == .permissionFailure)
        #expect(shape(e, "other-note") == shape(ghost.error("ghost"), "ghost"))
    }

    /// A save of `record` by `user`, one item; its error.
    func saveError(_ w: World, _ user: String, _ record: Record) throws -> ShareSyncError? {
        try w.view(user).modifyRecords(saving: [record]).error(record.recordID.recordName)
    }

    @Test("a save tells nobody whether a record or zone exists outside their view: tag, share type and content errors alike")
    func saveRevealsNoExistence() throws {
        let (w, _) = try world(.readWrite)
        let privateZone = RecordZone.ID(zoneName: "Private", ownerName: "_owner")
        let missingZone = RecordZone.ID(zoneName: "Nope", ownerName: "_owner")
        /// Variants of a save of `name` in `zone` that used to be told apart: with a change tag; as a
        /// share record; with content refused (its parent is itself).
        func probes(_ name: String, in zone: RecordZone.ID) -> [Record] {
            let id = Record.ID(recordName: name, zoneID: zone)
            var tagged = Record(recordType: "Note", recordID: id)
            tagged.recordChangeTag = "1"
            var cycle = Record(recordType: "Note", recordID: id)
            cycle.setParent(id)
            return [tagged, Record(recordType: Record.shareRecordType, recordID: id), cycle]
        }
        func answers(_ user: String, _ name: String, in zone: RecordZone.ID) throws -> [String?] {
            try probes(name, in: zone).map { shape(try saveError(w, user, $0), name) }
        }
        // A stranger (no share at all): a zone and record that exist, a record that does not, a zone that does not.
        let stranger = try answers("_x", "secret", in: privateZone)
        #expect(stranger.allSatisfy { $0 != nil })
        #expect(try answers("_x", "ghost", in: privateZone) == stranger)
        #expect(try answers("_x", "ghost", in: missingZone) == stranger)
        #expect(try answers("_x", "note", in: w.sharedZone) == stranger)
        // A participant, in the zone they share: a record outside their view and one that never existed.
        let outside = try answers("_b", "other-note", in: w.sharedZone)
        #expect(outside.allSatisfy { $0 != nil })
        #expect(try answers("_b", "ghost", in: w.sharedZone) == outside)
        // ... and in a zone of the owner's they share nothing of.
        #expect(try answers("_b", "secret", in: privateZone) == stranger)
        #expect(try answers("_b", "ghost", in: missingZone) == stranger)
        #expect(try w.db.fetchRecords([w.id("ghost")])[w.id("ghost")].map { (try? $0.get()) == nil } ?? true)
    }

    @Test("a tagged save of a record deleted after the participant saw it is still unknownItem; a new child is still created")
    func seenDeletedRecordStillUnknownItem() throws {
        let (w, _) = try world(.readWrite)
        let b = w.view("_b")
        var note = try b.fetchRecords([w.sid("note")])[w.sid("note")]!.get()
        _ = try w.db.modifyRecords(deleting: [w.id("note")]).get()
        note["title"] = .string("edited offline")
        #expect(try b.modifyRecords(saving: [note]).error("note")?.code == .unknownItem)
        _ = try b.modifyRecords(saving: [w.sharedRecord("Note", "new-child", parent: "topic", title: "n")]).get()
        #expect(try w.db.fetchRecord(w.id("new-child"))["title"] == .string("n"))
        // A participant cannot create a share, existing name or not (the clear refusal stays).
        let share = Record(recordType: Record.shareRecordType, recordID: w.sid("fresh"))
        #expect(try saveError(w, "_b", share)?.rule == .shareCreateOwnerOnly)
    }

    @Test("a read-only participant cannot tell an existing record outside their view from a missing one either")
    func readOnlySaveRevealsNoExistence() throws {
        let (w, _) = try world(.readOnly)
        /// A new record under their share's root, without a tag: what a read-only participant would try.
        func underRoot(_ name: String) -> Record { w.sharedRecord("Note", name, parent: "topic") }
        let outside = try saveError(w, "_b", underRoot("other-note"))
        #expect(outside?.rule == .readOnlyParticipant)
        #expect(shape(try saveError(w, "_b", underRoot("ghost")), "ghost") == shape(outside, "other-note"))
        // And an edit of a record in their view says read-only too.
        var note = try w.view("_b").fetchRecords([w.sid("note")])[w.sid("note")]!.get()
        note["title"] = .string("x")
        #expect(try saveError(w, "_b", note)?.rule == .readOnlyParticipant)
    }

    @Test("in a zone-wide share, where the whole zone is in view, a record that is its own parent is parentCycle")
    func zoneWideSelfParentIsParentCycle() throws {
        let w = try World()
        try w.save(w.record("Topic", "topic"))
        let share = try w.shareZone(invite: [("_b", .readWrite)])
        try w.accept(share, "_b")
        var cycle = w.sharedRecord("Note", "loop")
        cycle.setParent(w.sid("loop"))
        #expect(try saveError(w, "_b", cycle)?.rule == .parentCycle)
    }
}
