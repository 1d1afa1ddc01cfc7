import Foundation
import ShareSyncCore
@testable import ShareSyncNode
import ShareSyncStore
import ShareSyncWire
import Synchronization
import Testing

// The participant sync engine over the in-process seam (issue 15, "A seam for the sync engine"): an
// owner's database served by `InProcessOwner`, failures injected on demand, no sockets.

/// An owner database with a zone Topics and a topic record, its share URLs naming an unreachable host
/// (nothing connects to it: the engine goes through the in-process connector).
private struct InProcessFixture {
    let identity = NodeIdentity.generate()
    let db: PrivateDatabase
    let owner: InProcessOwner
    let zone = RecordZone.ID(zoneName: "Topics")

    init() throws {
        db = try PrivateDatabase(inMemoryOwnerName: identity.userRecordName)
        try db.saveZone(RecordZone(zoneID: zone))
        var topic = Record(recordType: "Topic", recordID: Record.ID(recordName: "topic", zoneID: zone))
        topic["title"] = "Groceries"
        _ = try db.modifyRecords(saving: [topic]).get()
        db.setShareURLBase(ShareURLBase(host: "owner.invalid", port: 7420, ownerFingerprint: identity.fingerprint))
        owner = InProcessOwner(database: db)
    }

    func id(_ name: String) -> Record.ID { Record.ID(recordName: name, zoneID: zone) }

    /// Shares the topic's hierarchy with `participant`; returns the invitation URL.
    func share(with participant: NodeIdentity, _ permission: Participant.Permission = .readWrite) throws -> String {
        var share = Share(rootRecord: try db.fetchRecord(id("topic")))
        try share.addParticipant(Participant(lookupInfo: .init(userRecordName: participant.userRecordName), permission: permission))
        let saved = try db.modifyRecords(saving: [share.record]).get()
        return Share(saved.first { $0.recordType == Record.shareRecordType }!)!.url!
    }

    func saveNotes(_ prefix: String, count: Int) throws {
        let notes = (0..<count).map { i in
            var note = Record(recordType: "Note", recordID: id("\(prefix)\(i)"))
            note["title"] = .string("\(prefix) \(i)")
            note.setParent(id("topic"))
            return note
        }
        _ = try db.modifyRecords(saving: notes, savePolicy: .allKeys).get()
    }

    /// What the owner would send `participant` from no token, in the form of ``replicaView(_:owner:)``.
    func view(for participant: NodeIdentity) throws -> [String: [String]] {
        let view = db.sharedDatabase(for: Caller(userRecordName: participant.userRecordName))
        var result: [String: [String]] = [:]
        for zone in try view.fetchAllZones() {
            result[zone.zoneID.zoneName] = try canonical(view.fetchZoneChanges(zone.zoneID, since: nil, resultsLimit: 400).changedRecords)
        }
        return result
    }

    /// A participant engine on a fresh replica that reaches this owner in process.
    func participant(
        pageSize: Int? = 10, mergeConflict: (@Sendable (Record, Record) -> Record?)? = nil
    ) throws -> (ParticipantSync, TestParticipant) {
        let p = try TestParticipant()
        let sync = ParticipantSync(
            replica: try SharedDatabaseReplica(path: p.replicaPath), identity: p.identity,
            configuration: .init(
                pageSize: pageSize, initialBackoff: .milliseconds(10), maximumBackoff: .milliseconds(50), mergeConflict: mergeConflict,
                connector: owner))
        return (sync, p)
    }
}

/// Waits (woken by the engine's events) until the replica equals the owner's view; records an issue if not.
private func expectConverged(
    _ sync: ParticipantSync, _ fixture: InProcessFixture, sourceLocation: SourceLocation = #_sourceLocation
) async throws {
    let owner = fixture.identity.userRecordName
    // Generous: in a full parallel test run a task may wait many seconds for one of the two threads.
    let matched = try await sync.waitUntil(timeout: .seconds(90)) {
        try replicaView(sync.replica, owner: owner) == fixture.view(for: sync.identity)
    }
    if !matched {
        let replica = try replicaView(sync.replica, owner: owner).mapValues(\.count)
        let view = try fixture.view(for: sync.identity).mapValues(\.count)
        Issue.record("replica \(replica) is not the owner's view \(view)", sourceLocation: sourceLocation)
    }
}

/// Shares a second hierarchy of the zone ("second", with a note "kept") with `p` too, and accepts both
/// shares; returns the owner's name once the replica holds both.
private func acceptTwoSharesOfTopics(_ sync: ParticipantSync, _ p: TestParticipant, _ fixture: InProcessFixture) async throws -> String {
    var second = Record(recordType: "Topic", recordID: fixture.id("second"))
    second["title"] = "Second"
    var kept = Record(recordType: "Note", recordID: fixture.id("kept"))
    kept.setParent(fixture.id("second"))
    _ = try fixture.db.modifyRecords(saving: [second, kept]).get()
    var share2 = Share(rootRecord: try fixture.db.fetchRecord(fixture.id("second")))
    try share2.addParticipant(Participant(lookupInfo: .init(userRecordName: p.identity.userRecordName), permission: .readOnly))
    let url2 = Share(try fixture.db.modifyRecords(saving: [share2.record]).get().first { $0.recordType == Record.shareRecordType }!)!.url!
    try await sync.accept(url: try fixture.share(with: p.identity), timeout: .seconds(120))
    try await sync.accept(url: url2, timeout: .seconds(120))
    try await expectConverged(sync, fixture)
    return fixture.identity.userRecordName
}

/// The owner removes `p` from the first of the two shares of ``acceptTwoSharesOfTopics(_:_:_:)``, and
/// the replica follows; returns that share's record name.
private func removeFromTheFirstShare(_ sync: ParticipantSync, _ p: TestParticipant, _ fixture: InProcessFixture) async throws -> String {
    let firstName = try #require(try fixture.db.fetchRecord(fixture.id("topic")).share?.recordID.recordName)
    var first = try #require(Share(try fixture.db.fetchRecord(Record.ID(recordName: firstName, zoneID: fixture.zone))))
    try first.removeParticipant(try #require(first.participants.first { $0.userIdentity.userRecordName == p.identity.userRecordName }))
    _ = try fixture.db.modifyRecords(saving: [first.record]).get()
    try await expectConverged(sync, fixture)
    return firstName
}

/// Starts the engine, accepts the fixture's share and waits for the replica to hold it, then takes the
/// owner offline and waits until the engine has noticed; returns the owner's name.
private func acceptThenTakeTheOwnerOffline(_ sync: ParticipantSync, _ p: TestParticipant, _ fixture: InProcessFixture) async throws -> String {
    try sync.start()
    try await sync.accept(url: try fixture.share(with: p.identity), timeout: .seconds(120))
    try await expectConverged(sync, fixture)
    let ownerName = fixture.identity.userRecordName
    fixture.owner.isReachable = false
    try await expectEventually(sync, "disconnected", timeout: 90) { sync.status(owner: ownerName) != .following }
    return ownerName
}

/// Accepts the fixture's share, then takes the owner offline and queues an edit of the topic's title
/// to "mine" under `savePolicy`; returns the owner's name, or nil (an issue recorded) if the edit was
/// not queued.
private func queueAnOfflineTopicEdit(
    _ sync: ParticipantSync, _ p: TestParticipant, _ fixture: InProcessFixture, savePolicy: SavePolicy = .ifServerRecordUnchanged
) async throws -> String? {
    let ownerName = try await acceptThenTakeTheOwnerOffline(sync, p, fixture)
    var mine = try #require(try sync.replica.fetchRecord(Record.ID(recordName: "topic", zoneID: RecordZone.ID(zoneName: "Topics", ownerName: ownerName))))
    mine["title"] = "mine"
    let outcome = try await sync.modifyRecords(owner: ownerName, zoneName: "Topics", saving: [mine], savePolicy: savePolicy)
    guard case .queued = outcome else {
        Issue.record("expected queued, got \(outcome)")
        return nil
    }
    return ownerName
}

@Suite("The sync engine over the in-process seam, with injected failures")
struct InProcessEngineTests {
    @Test func acceptSyncsInPagesAndLaterWritesArriveAsPushesWithoutASocket() async throws {
        let fixture = try InProcessFixture()
        let (sync, p) = try fixture.participant()
        defer { p.remove() }
        try fixture.saveNotes("n", count: 35)
        try sync.start()
        try await sync.accept(url: try fixture.share(with: p.identity), timeout: .seconds(120))
        try await expectConverged(sync, fixture)
        #expect(fixture.owner.requestCount(.fetchZoneChanges) >= 4, "36 records in pages of 10")
        try fixture.saveNotes("later", count: 3)
        try await expectConverged(sync, fixture)
        #expect(fixture.owner.requestCount(.subscribe) >= 1)
        await sync.stop()
    }

    @Test func anAcceptAndAWaitUntilSyncedReturnOnceWhatTheyAppliedIsOnTheDisk() async throws {
        // Pages and pushes commit without an fsync each (they are fetched again after a power
        // loss); the end of a catch-up syncs the replica's WAL.
        let fixture = try InProcessFixture()
        let (sync, p) = try fixture.participant()
        defer { p.remove() }
        try fixture.saveNotes("n", count: 35)
        let syncsAtCommits = Box<[Int]>([])
        let replica = sync.replica
        _ = replica.addChangeObserver { syncsAtCommits.value.withLock { $0.append(replica.diskSyncs.load(ordering: .relaxed)) } }
        try sync.start()
        try await sync.accept(url: try fixture.share(with: p.identity), timeout: .seconds(120))
        let afterAccept = replica.diskSyncs.load(ordering: .relaxed)
        let lastCommit = try #require(syncsAtCommits.value.withLock { $0.last })
        #expect(afterAccept > lastCommit, "the accept's last commit was not followed by a sync to the disk")
        try await sync.waitUntilSynced(owner: fixture.identity.userRecordName)
        #expect(replica.diskSyncs.load(ordering: .relaxed) > afterAccept)
        await sync.stop()
    }

    @Test func aConnectionLostMidPageResumesFromTheLastStoredPageNotFromScratch() async throws {
        let fixture = try InProcessFixture()
        let (sync, p) = try fixture.participant(pageSize: 10)
        defer { p.remove() }
        try fixture.saveNotes("n", count: 59)  // 60 records with the topic, 6 pages
        let url = try fixture.share(with: p.identity)
        // The fourth page request cuts the connection: three pages are stored with their tokens.
        fixture.owner.dropConnection(onRequest: 4, of: .fetchZoneChanges)
        try sync.start()
        try await sync.accept(url: url, timeout: .seconds(120))
        try await expectConverged(sync, fixture)
        #expect(fixture.owner.requestCount(.connect) >= 3, "accept, the cut connection, the one that resumed")
        // 60 records plus the share record arrive once each: nothing was fetched again from no token.
        #expect(sync.recordsReceived <= 61 + 10, "\(sync.recordsReceived) records received for 61")
        await sync.stop()
    }

    @Test func aRefusedPageFailsTheAcceptWithTheOwnersErrorThenTheEngineRetriesAndConverges() async throws {
        let fixture = try InProcessFixture()
        let (sync, p) = try fixture.participant()
        defer { p.remove() }
        try fixture.saveNotes("n", count: 15)
        let url = try fixture.share(with: p.identity)
        let log = EventLog(sync)
        fixture.owner.fail(.fetchZoneChanges, with: ShareSyncError(.limitExceeded, "injected", rule: .maximumResponseSize))
        try sync.start()
        // The caller waiting for the sync is told at once, with the owner's error, not a timeout...
        let error = await expectShareSyncError { try await sync.accept(url: url, timeout: .seconds(120)) }
        #expect(error?.code == .limitExceeded && error?.rule == .maximumResponseSize, "\(String(describing: error))")
        // ...the share stays accepted, and the engine's next attempt completes the sync.
        try await expectConverged(sync, fixture)
        let reported = log.count {
            if case .disconnected(_, let error?, _) = $0 { error.code == .limitExceeded } else { false }
        }
        #expect(reported == 1, "the refused page was not reported: \(log.all)")
        await sync.stop()
    }

    @Test func anOfflineEditThatMeetsANewerOwnerEditIsKeptAsAConflictWithTheOwnersRecord() async throws {
        let fixture = try InProcessFixture()
        let (sync, p) = try fixture.participant()
        defer { p.remove() }
        // The owner goes away; the participant edits its copy of the topic (queued).
        guard let ownerName = try await queueAnOfflineTopicEdit(sync, p, fixture) else { return }

        // Meanwhile the owner changes the same record; then it comes back.
        var theirs = try fixture.db.fetchRecord(fixture.id("topic"))
        theirs["title"] = "theirs"
        _ = try fixture.db.modifyRecords(saving: [theirs]).get()
        fixture.owner.isReachable = true

        try await expectEventually(sync, "the conflict kept in the outbox", timeout: 90) {
            try sync.replica.outboxOperations(owner: ownerName).contains { $0.operation.state == .conflict }
        }
        let kept = try #require(try sync.replica.outboxOperations(owner: ownerName).first?.operation)
        #expect(kept.serverRecords.first?["title"]?.stringValue == "theirs")
        #expect(try fixture.db.fetchRecord(fixture.id("topic"))["title"]?.stringValue == "theirs", "the owner's edit was overwritten")
        try await expectConverged(sync, fixture)
        await sync.stop()
    }

    @Test(arguments: [ParticipantSync.ConflictChoice.mine, .theirs])
    func anOfflineWriteOfRecordsTheOwnerDeletedIsRefusedAndResolvedLikeAConflict(keep choice: ParticipantSync.ConflictChoice) async throws {
        let fixture = try InProcessFixture()
        let (sync, p) = try fixture.participant()
        defer { p.remove() }
        try fixture.saveNotes("n", count: 3)
        // Offline, the participant edits the topic and notes n0 and n1 in one write; meanwhile the owner
        // changes another field of the topic and deletes both notes.
        let ownerName = try await acceptThenTakeTheOwnerOffline(sync, p, fixture)
        let sharedZone = RecordZone.ID(zoneName: "Topics", ownerName: ownerName)
        func copy(_ name: String) throws -> Record {
            try #require(try sync.replica.fetchRecord(Record.ID(recordName: name, zoneID: sharedZone)))
        }
        var topic = try copy("topic")
        topic["title"] = "mine"
        var n0 = try copy("n0")
        n0["title"] = "mine 0"
        n0["extra"] = "kept too"
        var n1 = try copy("n1")
        n1["title"] = "mine 1"
        let outcome = try await sync.modifyRecords(owner: ownerName, zoneName: "Topics", saving: [topic, n0, n1])
        guard case .queued = outcome else {
            Issue.record("expected queued, got \(outcome)")
            return
        }
        var theirs = try fixture.db.fetchRecord(fixture.id("topic"))
        theirs["color"] = "green"
        _ = try fixture.db.modifyRecords(saving: [theirs], deleting: [fixture.id("n0"), fixture.id("n1")]).get()
        fixture.owner.isReachable = true

        // The owner refuses the write (two records gone, one changed); it stays in the outbox as
        // refused, its items' errors with it (kept in the replica: read back from there below).
        try await expectEventually(sync, "the write kept as refused", timeout: 90) {
            try sync.replica.outboxOperations(owner: ownerName).contains { $0.operation.state == .refused }
        }
        let kept = try #require(try sync.replica.outboxOperations(owner: ownerName).first?.operation)
        #expect(kept.error?.code == .partialFailure, "\(String(describing: kept.error))")
        #expect(kept.error?.partialErrors?["n0"]?.code == .unknownItem, "\(String(describing: kept.error))")
        #expect(kept.error?.partialErrors?["topic"]?.code == .serverRecordChanged, "\(String(describing: kept.error))")
        #expect(ParticipantSync.savesRefusedAsDeleted(kept) == ["n0", "n1"])
        try await expectConverged(sync, fixture)

        let after = try await sync.resolveConflict(id: kept.id, keep: choice, timeout: .seconds(60))
        #expect(after == nil, "\(String(describing: after))")
        let ownersTopic = try fixture.db.fetchRecord(fixture.id("topic"))
        #expect(ownersTopic["color"]?.stringValue == "green")
        switch choice {
        case .mine:
            // The notes created again as this node wrote them (every field, the parent); the topic's
            // change saved over the owner's, whose own change stays.
            #expect(ownersTopic["title"]?.stringValue == "mine")
            let again = try fixture.db.fetchRecord(fixture.id("n0"))
            #expect(again["title"]?.stringValue == "mine 0")
            #expect(again["extra"]?.stringValue == "kept too")
            #expect(again.parent?.recordID.recordName == "topic")
            #expect(try fixture.db.fetchRecord(fixture.id("n1"))["title"]?.stringValue == "mine 1")
        case .theirs:
            #expect(ownersTopic["title"]?.stringValue == "Groceries")
            #expect(throws: ShareSyncError.self) { try fixture.db.fetchRecord(fixture.id("n0")) }
        }
        #expect(try fixture.db.fetchRecord(fixture.id("n2"))["title"]?.stringValue == "n 2", "the owner's other note changed")
        #expect(try sync.replica.outboxOperations(owner: ownerName).isEmpty)
        try await expectConverged(sync, fixture)
        await sync.stop()
    }

    @Test func aWriteRefusedForAnythingElseThanADeletionIsNotResolvedButDiscarded() async throws {
        var refused = OutboxOperation(zoneName: "Topics")
        let zone = RecordZone.ID(zoneName: "Topics", ownerName: "_o")
        let a = Record(recordType: "Note", recordID: Record.ID(recordName: "a", zoneID: zone))
        let b = Record(recordType: "Note", recordID: Record.ID(recordName: "b", zoneID: zone))
        refused.saving = [a, b]
        refused.state = .refused
        refused.error = ShareSyncError(.unknownItem, "gone", recordID: a.recordID)
        #expect(ParticipantSync.savesRefusedAsDeleted(refused) == ["a"])
        refused.error = ShareSyncError(
            .partialFailure, "2 items refused", partialErrors: [
                "a": ShareSyncError(.unknownItem, "gone", recordID: a.recordID),
                "b": ShareSyncError(.batchRequestFailed, "not saved", recordID: b.recordID),
            ])
        #expect(ParticipantSync.savesRefusedAsDeleted(refused) == ["a"])
        // A conflict among them is resolved as conflicts are.
        refused.error = ShareSyncError(
            .partialFailure, "2 items refused", partialErrors: [
                "a": ShareSyncError(.unknownItem, "gone", recordID: a.recordID),
                "b": ShareSyncError(.serverRecordChanged, "changed", recordID: b.recordID),
            ])
        #expect(ParticipantSync.savesRefusedAsDeleted(refused) == ["a"])
        refused.error = ShareSyncError(
            .partialFailure, "2 items refused", partialErrors: [
                "a": ShareSyncError(.unknownItem, "gone", recordID: a.recordID),
                "b": ShareSyncError(.permissionFailure, "read-only", recordID: b.recordID),
            ])
        #expect(ParticipantSync.savesRefusedAsDeleted(refused).isEmpty)
        refused.error = ShareSyncError(.permissionFailure, "read-only", recordID: a.recordID)
        #expect(ParticipantSync.savesRefusedAsDeleted(refused).isEmpty)
        refused.error = ShareSyncError(.unknownItem, "no zone")
        #expect(ParticipantSync.savesRefusedAsDeleted(refused).isEmpty)
        refused.state = .conflict
        refused.error = ShareSyncError(.unknownItem, "gone", recordID: a.recordID)
        #expect(ParticipantSync.savesRefusedAsDeleted(refused).isEmpty)
    }

    @Test func aQueuedWriteAndALeaveWhoseRequestsWereGivenUpStayPendingAndReachTheOwnerLater() async throws {
        let fixture = try InProcessFixture()
        let (sync, p) = try fixture.participant()
        defer { p.remove() }
        guard let ownerName = try await queueAnOfflineTopicEdit(sync, p, fixture, savePolicy: .allKeys) else { return }
        // The first flush's request is given up, as when the engine stops in the middle of it.
        fixture.owner.fail(.modifyRecords, with: ShareSyncError(.operationCancelled, "the request was given up"))
        fixture.owner.isReachable = true
        try await expectEventually(sync, "the queued write reached the owner", timeout: 90) {
            try fixture.db.fetchRecord(fixture.id("topic"))["title"]?.stringValue == "mine"
        }
        // The write leaves the outbox once its answer is settled, just after the owner has it.
        try await expectEventually(sync, "the write to leave the outbox", timeout: 30) {
            try sync.replica.outboxOperations(owner: ownerName).isEmpty
        }

        // The same for a share left locally: the owner is told once its request goes through.
        let shareName = try #require(try fixture.db.fetchRecord(fixture.id("topic")).share?.recordID.recordName)
        fixture.owner.fail(.leaveShare, with: ShareSyncError(.operationCancelled, "the request was given up"))
        try sync.leaveShareLocally(owner: ownerName, zoneName: "Topics", shareRecordName: shareName)
        try await expectEventually(sync, "the owner told of the leave", timeout: 90) {
            let share = try #require(Share(try fixture.db.fetchRecord(Record.ID(recordName: shareName, zoneID: fixture.zone))))
            return share.participants.first { $0.userIdentity.userRecordName == p.identity.userRecordName }?.acceptanceStatus == .removed
        }
        await sync.stop()
    }

    @Test func leavingOneShareLocallyKeepsTheOtherShareOfTheSameZone() async throws {
        let fixture = try InProcessFixture()
        let (sync, p) = try fixture.participant()
        defer { p.remove() }
        try sync.start()
        try fixture.saveNotes("a", count: 3)
        let ownerName = try await acceptTwoSharesOfTopics(sync, p, fixture)
        #expect(try sync.replica.fetchRecord(Record.ID(recordName: "kept", zoneID: RecordZone.ID(zoneName: "Topics", ownerName: ownerName))) != nil)

        // Connected and following: leave the first share locally. Once the owner is told, the replica
        // holds the second share's records (and nothing of the first).
        let first = try #require(try fixture.db.fetchRecord(fixture.id("topic")).share?.recordID.recordName)
        try sync.leaveShareLocally(owner: ownerName, zoneName: "Topics", shareRecordName: first)
        try await expectEventually(sync, "the owner told of the leave", timeout: 90) {
            try sync.replica.pendingLeaves(owner: ownerName).isEmpty
        }
        try await expectConverged(sync, fixture)
        #expect(try fixture.view(for: p.identity)["Topics"]?.contains { $0.contains("kept") } == true)
        await sync.stop()
    }

    @Test func aLocalLeaveTheOwnerAlreadyHadKeepsTheOtherShareOfTheSameZone() async throws {
        let fixture = try InProcessFixture()
        let (sync, p) = try fixture.participant()
        defer { p.remove() }
        try sync.start()
        let ownerName = try await acceptTwoSharesOfTopics(sync, p, fixture)

        // The owner removes the participant from the first share, and the replica follows (its
        // database token moves past the zone's change). Then the participant leaves that share locally:
        // the owner answers that it is already gone, and the zone is emptied. Before, the catch-up then
        // skipped the zone (not changed since the token, not known any more): the second share's
        // records were missing for good.
        let firstName = try await removeFromTheFirstShare(sync, p, fixture)
        try sync.leaveShareLocally(owner: ownerName, zoneName: "Topics", shareRecordName: firstName)
        try await expectEventually(sync, "the leave resolved", timeout: 90) { try sync.replica.pendingLeaves(owner: ownerName).isEmpty }
        try await expectConverged(sync, fixture)
        #expect(try sync.replica.fetchRecord(Record.ID(recordName: "kept", zoneID: RecordZone.ID(zoneName: "Topics", ownerName: ownerName))) != nil)
        await sync.stop()
    }

    @Test func aLeaveResolvedWhileTheCatchUpPagesThroughTheZoneStillBringsTheWholeZoneBack() async throws {
        let fixture = try InProcessFixture()
        let (sync, p) = try fixture.participant(pageSize: 10)
        defer { p.remove() }
        try sync.start()
        let ownerName = try await acceptTwoSharesOfTopics(sync, p, fixture)
        let firstName = try await removeFromTheFirstShare(sync, p, fixture)

        // While the owner is away it adds 30 notes under the second share: the catch-up after it comes
        // back fetches the zone in four pages.
        fixture.owner.isReachable = false
        try await expectEventually(sync, "disconnected", timeout: 90) { sync.status(owner: ownerName) != .following }
        let notes = (0..<30).map { i -> Record in
            var note = Record(recordType: "Note", recordID: fixture.id("late-\(i)"))
            note.setParent(fixture.id("second"))
            return note
        }
        _ = try fixture.db.modifyRecords(saving: notes).get()
        // As the second page is asked for, the participant leaves the first share locally and the leave
        // is resolved at once (as an accept that tells the owner does): the zone is purged and marked
        // to be fetched again from the start. The catch-up goes on storing its later pages into it.
        // Before, the next catch-up synced the zone from the token of that last page, and the records
        // before it ("second", "kept", the first notes) were missing for good.
        let leave = PendingLeave(owner: ownerName, zoneName: "Topics", shareName: firstName)
        let resolved = Mutex(false)
        fixture.owner.onRequest(2, of: .fetchZoneChanges) {
            do {
                try sync.replica.leaveLocally(leave)
                try sync.replica.resolvePendingLeave(leave)
                resolved.withLock { $0 = true }
            } catch {
                Issue.record("the leave could not be resolved: \(error)")
            }
        }
        fixture.owner.isReachable = true
        try await expectEventually(sync, "the leave resolved during the catch-up", timeout: 90) { resolved.withLock { $0 } }
        try await sync.waitUntilSynced(owner: ownerName, timeout: .seconds(90))
        try await expectConverged(sync, fixture)
        #expect(try sync.replica.zonesToRefetch(owner: ownerName).isEmpty)
        let names = Set(try sync.replica.records(owner: ownerName, zoneName: "Topics").map(\.recordID.recordName))
        #expect(names.isSuperset(of: ["second", "kept"] + notes.map(\.recordID.recordName)), "\(names.sorted())")
        await sync.stop()
    }

    @Test func acceptingAgainAShareLeftLocallyTellsTheOwnerOfTheLeaveFirstAndIsRefusedOutLoud() async throws {
        let fixture = try InProcessFixture()
        let p = try TestParticipant()
        defer { p.remove() }
        // A link that, once cut, waits long before it reconnects: only the accept reaches the owner.
        let sync = ParticipantSync(
            replica: try SharedDatabaseReplica(path: p.replicaPath), identity: p.identity,
            configuration: .init(pageSize: 10, initialBackoff: .seconds(600), maximumBackoff: .seconds(600), connector: fixture.owner))
        try sync.start()
        let url = try fixture.share(with: p.identity)
        try await sync.accept(url: url, timeout: .seconds(120))
        try await expectConverged(sync, fixture)
        let ownerName = fixture.identity.userRecordName
        fixture.owner.isReachable = false
        try await expectEventually(sync, "disconnected", timeout: 90) { sync.status(owner: ownerName) != .following }
        let shareName = try #require(try fixture.db.fetchRecord(fixture.id("topic")).share?.recordID.recordName)
        try sync.leaveShareLocally(owner: ownerName, zoneName: "Topics", shareRecordName: shareName)
        fixture.owner.isReachable = true
        // Before, the owner (not told yet) took the accept, which said it succeeded; the link then sent
        // the old leave, and the share was gone again in silence.
        // (Under load the link, woken by the leave, may tell the owner first: the accept is then
        // refused as not invited. Either way it is refused, and the owner has the leave.)
        let error = await expectShareSyncError { try await sync.accept(url: url, timeout: .seconds(60)) }
        #expect(error?.rule == .leftShare || error?.rule == .notInvited, "\(String(describing: error))")
        let share = try #require(Share(try fixture.db.fetchRecord(Record.ID(recordName: shareName, zoneID: fixture.zone))))
        #expect(share.participants.first { $0.userIdentity.userRecordName == p.identity.userRecordName }?.acceptanceStatus == .removed)
        await sync.stop()
    }

    @Test func theInProcessOwnerAppliesAWriteWithAWriteIDOnce() async throws {
        let fixture = try InProcessFixture()
        let p = try TestParticipant()
        defer { p.remove() }
        let url = try fixture.share(with: p.identity)
        let connection = try await fixture.owner.connect(
            host: "owner.invalid", port: 1, identity: p.identity, expectedOwnerFingerprint: fixture.identity.fingerprint, displayName: nil)
        _ = try await connection.acceptShare(url: url)
        let zone = RecordZone.ID(zoneName: "Topics", ownerName: fixture.identity.userRecordName)
        var mine = try #require(try await connection.fetchRecords(zoneName: "Topics", recordNames: ["topic"])[Record.ID(recordName: "topic", zoneID: zone)]?.get())
        mine["title"] = "mine"
        let first = try await connection.modifyRecords(
            zoneName: "Topics", saving: [mine], deleting: [], savePolicy: .allKeys, atomically: true, writeID: "w-once", progress: nil)
        let saved = try #require(try first.saveResults[mine.recordID]?.get())
        var theirs = try fixture.db.fetchRecord(fixture.id("topic"))
        theirs["title"] = "theirs"
        _ = try fixture.db.modifyRecords(saving: [theirs], savePolicy: .allKeys).get()
        // Sent again (its sender killed before it settled the answer): the first answer, nothing applied.
        let again = try await connection.modifyRecords(
            zoneName: "Topics", saving: [mine], deleting: [], savePolicy: .allKeys, atomically: true, writeID: "w-once", progress: nil)
        #expect(try again.saveResults[mine.recordID]?.get().recordChangeTag == saved.recordChangeTag)
        #expect(try fixture.db.fetchRecord(fixture.id("topic"))["title"]?.stringValue == "theirs")
        await connection.close()
    }

    @Test func aMergedRetryRefusedAsAWholeKeepsOnlyItsOwnItemsRefused() async throws {
        let fixture = try InProcessFixture()
        let (sync, p) = try fixture.participant(mergeConflict: { _, server in server })
        defer { p.remove() }
        try fixture.saveNotes("n", count: 2)
        try sync.start()
        try await sync.accept(url: try fixture.share(with: p.identity), timeout: .seconds(120))
        try await expectConverged(sync, fixture)
        let ownerName = fixture.identity.userRecordName
        fixture.owner.isReachable = false
        try await expectEventually(sync, "disconnected", timeout: 90) { sync.status(owner: ownerName) != .following }
        let zone = RecordZone.ID(zoneName: "Topics", ownerName: ownerName)
        var edits: [Record] = []
        for name in ["n0", "n1"] {
            var record = try #require(try sync.replica.fetchRecord(Record.ID(recordName: name, zoneID: zone)))
            record["title"] = .string("mine")
            edits.append(record)
        }
        guard case .queued = try await sync.modifyRecords(owner: ownerName, zoneName: "Topics", saving: edits, atomically: false) else {
            Issue.record("not queued")
            return
        }
        // n1 changes on the owner meanwhile: the send saves n0, n1 conflicts, the hook merges it, and
        // the retry of n1 is refused as a whole.
        var theirs = try fixture.db.fetchRecord(fixture.id("n1"))
        theirs["title"] = "theirs"
        _ = try fixture.db.modifyRecords(saving: [theirs]).get()
        fixture.owner.onRequest(1, of: .modifyRecords) {
            fixture.owner.fail(.modifyRecords, with: ShareSyncError(.invalidArguments, "refused (injected)"))
        }
        fixture.owner.isReachable = true
        try await expectEventually(sync, "the write kept as refused", timeout: 90) {
            try sync.replica.outboxOperations(owner: ownerName).contains { $0.operation.state == .refused }
        }
        #expect(try fixture.db.fetchRecord(fixture.id("n0"))["title"]?.stringValue == "mine")
        let kept = try #require(try sync.replica.outboxOperations(owner: ownerName).first?.operation)
        // Before, the whole write was kept as refused, n0 (saved) included.
        #expect(kept.saving.map(\.recordID.recordName) == ["n1"], "\(kept.saving.map(\.recordID.recordName))")
        await sync.stop()
    }

    @Test func anOwnerLeftWithNothingWhileAnAcceptWasUnderWayIsKeptUntilItAndForgottenWhenTheOwnerRefusesIt() async throws {
        let fixture = try InProcessFixture()
        let (sync, p) = try fixture.participant()
        defer { p.remove() }
        let log = EventLog(sync)
        try sync.start()
        let ownerName = fixture.identity.userRecordName
        try await sync.accept(url: try fixture.share(with: p.identity), timeout: .seconds(120))
        try await expectConverged(sync, fixture)
        // A second share for p, of another topic, whose accept the owner will refuse.
        var second = Record(recordType: "Topic", recordID: fixture.id("second"))
        second["title"] = "Second"
        _ = try fixture.db.modifyRecords(saving: [second]).get()
        var share2 = Share(rootRecord: try fixture.db.fetchRecord(fixture.id("second")))
        try share2.addParticipant(Participant(lookupInfo: .init(userRecordName: p.identity.userRecordName), permission: .readOnly))
        let url2 = try #require(
            Share(try fixture.db.modifyRecords(saving: [share2.record]).get().first { $0.recordType == Record.shareRecordType }!)?.url)

        // When the owner gets that accept, it first removes p from the first share: the link's push
        // then leaves nothing of the owner in the replica while the accept is under way.
        let keptMeanwhile = Mutex<Bool?>(nil)
        fixture.owner.onRequest(1, of: .acceptShare) {
            do {
                let firstName = try #require(try fixture.db.fetchRecord(fixture.id("topic")).share?.recordID.recordName)
                var first = try #require(Share(try fixture.db.fetchRecord(Record.ID(recordName: firstName, zoneID: fixture.zone))))
                try first.removeParticipant(try #require(first.participants.first { $0.userIdentity.userRecordName == p.identity.userRecordName }))
                _ = try fixture.db.modifyRecords(saving: [first.record]).get()
            } catch {
                Issue.record("removing p from the first share: \(error)")
            }
            // Until the link applied that and its check after it was put off (bounded: a failure
            // below if it never is).
            let deadline = Date() + 60
            while !sync.forgetIsPutOff(owner: ownerName), Date() < deadline { Thread.sleep(forTimeInterval: 0.01) }
            keptMeanwhile.withLock { $0 = sync.forgetIsPutOff(owner: ownerName) && (try? sync.replica.owner(named: ownerName)) != nil }
        }
        fixture.owner.fail(.acceptShare, with: ShareSyncError(.permissionFailure, "not invited (injected)"))
        let error = await expectShareSyncError { try await sync.accept(url: url2, timeout: .seconds(30)) }
        #expect(error?.code == .permissionFailure, "\(String(describing: error))")
        #expect(try sync.replica.fetchAllZones(owner: ownerName).isEmpty)
        // While the accept was under way, the owner was not forgotten (its share could have been coming).
        #expect(keptMeanwhile.withLock { $0 } == true, "the owner was forgotten while an accept of its share was under way")
        // The owner refused it: nothing of the owner is left, and it is forgotten now, not at the link's
        // next catch-up (before, it stayed, connected to, until then).
        try await expectEventually(sync, "the owner forgotten", timeout: 30) { try sync.replica.owner(named: ownerName) == nil }
        let forgotten = { log.count { if case .ownerForgotten(ownerName) = $0 { true } else { false } } }
        try await eventually("the event saying so", timeout: .seconds(30)) { forgotten() >= 1 }
        #expect(forgotten() == 1, "\(log.all)")
        try await eventually("the link's connection closed") { fixture.owner.openConnections == 0 }
        await sync.stop()
    }

    @Test func aNodeAcceptingItsOwnShareIsRefusedAndFollowsNobody() async throws {
        let fixture = try InProcessFixture()
        let p = try TestParticipant()
        defer { p.remove() }
        let url = try fixture.share(with: p.identity)
        // The owner's own node (its identity) accepts the share's URL.
        let sync = ParticipantSync(
            replica: try SharedDatabaseReplica(path: p.replicaPath), identity: fixture.identity,
            configuration: .init(pageSize: 10, initialBackoff: .milliseconds(10), maximumBackoff: .milliseconds(50), connector: fixture.owner))
        try sync.start()
        // Before, it said accepted (0 records) and followed itself as an owner from then on.
        let error = await expectShareSyncError { try await sync.accept(url: url, timeout: .seconds(30)) }
        #expect(error?.code == .invalidArguments && error?.rule == .ownShare, "\(String(describing: error))")
        #expect(try sync.replica.owners().isEmpty)
        #expect(fixture.owner.requestCount(.connect) == 0)
        await sync.stop()
    }

    @Test func anOwnersRetryDelayFromTheWireIsKeptWithinReason() async throws {
        let fixture = try InProcessFixture()
        let (sync, p) = try fixture.participant()
        defer { p.remove() }
        try sync.start()
        try await sync.accept(url: try fixture.share(with: p.identity), timeout: .seconds(120))
        try await expectConverged(sync, fixture)
        let ownerName = fixture.identity.userRecordName
        // The connection drops, and the next one is refused with a delay past Int's milliseconds:
        // converting it trapped. The link waits at most an hour (or until asked to sync).
        let events = sync.events()
        fixture.owner.fail(.connect, with: ShareSyncError(.requestRateLimited, "slow down", retryAfterSeconds: 1e300))
        fixture.owner.dropAllConnections()
        let retryIn = try await withTimeout(60) { () async -> Duration? in
            for await event in events {
                if case .disconnected(_, let error?, let wait) = event, error.code == .requestRateLimited { return wait }
            }
            return nil
        }
        #expect(retryIn == .seconds(3600))
        // Once asked, it syncs.
        try await sync.waitUntilSynced(owner: ownerName, timeout: .seconds(60))
        await sync.stop()
    }

    @Test func aConnectionToAnOwnerWithAnotherKeyIsRefused() async throws {
        let fixture = try InProcessFixture()
        let error = await expectShareSyncError {
            _ = try await fixture.owner.connect(
                host: "owner.invalid", port: 7420, identity: NodeIdentity.generate(),
                expectedOwnerFingerprint: NodeIdentity.generate().fingerprint, displayName: nil)
        }
        #expect(error?.rule == .ownerFingerprintMismatch)
    }
}

/// The in-process owner, except that once `stuck` is set its database changes say more are coming and
/// repeat the token they were asked with (a broken or hostile owner); and that it can hold pushes
/// back, then deliver them all at once.
private final class StuckOwner: OwnerDatabaseConnector {
    let inner: InProcessOwner
    let stuck = Atomic<Bool>(false)
    /// Once set, the zone pages get stuck the same way.
    let stuckZones = Atomic<Bool>(false)
    /// Once set, the zone pages of a fetch from no token (a refetch) get stuck after its first page.
    let stuckRefetches = Atomic<Bool>(false)
    /// A fetch of zone pages from no token began while ``stuckRefetches`` was set.
    let refetchBegan = Atomic<Bool>(false)
    /// Once set, a write is refused as too large, goes as two halves (the new cut told), and its
    /// connection fails before anything is answered.
    let halvesThenFails = Atomic<Bool>(false)
    /// While not nil, the pushes held back, each with the receiver it was for.
    let held = Mutex<[(OwnerConnection.Push, PushReceiver)]?>(nil)

    init(_ inner: InProcessOwner) { self.inner = inner }

    var heldCount: Int { held.withLock { $0?.count ?? 0 } }
    func holdPushes() { held.withLock { $0 = [] } }

    /// Delivers every push held back, one right after the other, and stops holding them.
    func releasePushes() {
        let pushes = held.withLock { h in
            defer { h = nil }
            return h ?? []
        }
        for (push, receiver) in pushes { receiver.receive(push) }
    }

    func connect(
        host: String, port: Int, identity: NodeIdentity, expectedOwnerFingerprint: String, displayName: String?
    ) async throws(ShareSyncError) -> any OwnerDatabase {
        StuckConnection(
            try await inner.connect(
                host: host, port: port, identity: identity, expectedOwnerFingerprint: expectedOwnerFingerprint, displayName: displayName),
            owner: self)
    }
}

private final class StuckConnection: OwnerDatabase {
    let inner: any OwnerDatabase
    let owner: StuckOwner
    init(_ inner: any OwnerDatabase, owner: StuckOwner) {
        self.inner = inner
        self.owner = owner
    }
    var ownerName: String { inner.ownerName }
    var limits: WireLimits { inner.limits }
    var isActive: Bool { inner.isActive }
    var announcedAddress: WireAddress? { inner.announcedAddress }
    func onAddressAnnounced(_ body: (@Sendable (WireAddress) -> Void)?) { inner.onAddressAnnounced(body) }
    func fetchShareMetadata(url: String, shouldFetchRootRecord: Bool) async throws(ShareSyncError) -> ShareMetadata {
        try await inner.fetchShareMetadata(url: url, shouldFetchRootRecord: shouldFetchRootRecord)
    }
    func acceptShare(url: String) async throws(ShareSyncError) -> ShareMetadata { try await inner.acceptShare(url: url) }
    func requestAccess(url: String) async throws(ShareSyncError) { try await inner.requestAccess(url: url) }
    func leaveShare(zoneName: String, shareRecordName: String) async throws(ShareSyncError) {
        try await inner.leaveShare(zoneName: zoneName, shareRecordName: shareRecordName)
    }
    func fetchDatabaseChanges(since token: ServerChangeToken?, resultsLimit: Int?) async throws(ShareSyncError) -> DatabaseChanges {
        guard owner.stuck.load(ordering: .relaxed) else { return try await inner.fetchDatabaseChanges(since: token, resultsLimit: resultsLimit) }
        return DatabaseChanges(
            changedZoneIDs: [], deletedZoneIDs: [], changeToken: token ?? ServerChangeToken(stringValue: "stuck"), moreComing: true)
    }
    func startFetchZoneChanges(zoneName: String, since token: ServerChangeToken?, resultsLimit: Int?)
        async throws(ShareSyncError) -> PendingZoneChanges
    {
        if owner.stuckRefetches.load(ordering: .relaxed), token == nil { owner.refetchBegan.store(true, ordering: .relaxed) }
        let stuck = owner.stuckZones.load(ordering: .relaxed) || owner.refetchBegan.load(ordering: .relaxed)
        guard stuck, let token else {
            return try await inner.startFetchZoneChanges(zoneName: zoneName, since: token, resultsLimit: resultsLimit)
        }
        let zoneID = RecordZone.ID(zoneName: zoneName, ownerName: inner.ownerName)
        return PendingZoneChanges { () async throws(ShareSyncError) -> ZoneChanges in
            ZoneChanges(zoneID: zoneID, changes: [], changeToken: token, moreComing: true)
        }
    }
    func fetchRecords(zoneName: String, recordNames: [String]) async throws(ShareSyncError) -> [Record.ID: Result<Record, ShareSyncError>] {
        try await inner.fetchRecords(zoneName: zoneName, recordNames: recordNames)
    }
    func modifyRecords(
        zoneName: String, saving: [Record], deleting: [String], savePolicy: SavePolicy, atomically: Bool, writeID: String?,
        progress: WriteProgress?
    ) async throws(ShareSyncError) -> ModifyRecordsResult {
        if owner.halvesThenFails.load(ordering: .relaxed) {
            let count = saving.count + deleting.count
            try progress?.recut([count / 2, count - count / 2])
            throw ShareSyncError(.networkFailure, "the connection closed before the halves were answered (test)")
        }
        return try await inner.modifyRecords(
            zoneName: zoneName, saving: saving, deleting: deleting, savePolicy: savePolicy, atomically: atomically, writeID: writeID, progress: progress)
    }
    func subscribe(since token: ServerChangeToken?, receiver: PushReceiver) async throws(ShareSyncError) {
        let owner = owner
        let holding = PushReceiver(
            receive: { push in
                let isHeld = owner.held.withLock { h in
                    guard h != nil else { return false }
                    h!.append((push, receiver))
                    return true
                }
                if !isHeld { receiver.receive(push) }
            },
            end: receiver.end)
        try await inner.subscribe(since: token, receiver: holding)
    }
    func close() async { await inner.close() }
}

@Suite("An owner whose pages do not move on")
struct StuckOwnerTests {
    /// A participant engine that reached the fixture's owner through a ``StuckOwner`` (not stuck yet)
    /// and accepted its share.
    fileprivate func acceptedThroughStuckOwner() async throws -> (InProcessFixture, StuckOwner, ParticipantSync, TestParticipant) {
        let fixture = try InProcessFixture()
        let stuckOwner = StuckOwner(fixture.owner)
        let p = try TestParticipant()
        let sync = ParticipantSync(
            replica: try SharedDatabaseReplica(path: p.replicaPath), identity: p.identity,
            configuration: .init(pageSize: 10, initialBackoff: .milliseconds(10), maximumBackoff: .milliseconds(50), connector: stuckOwner))
        try sync.start()
        try await sync.accept(url: try fixture.share(with: p.identity), timeout: .seconds(120))
        return (fixture, stuckOwner, sync, p)
    }

    @Test("a write sent at once, halved and then cut off, is queued with the halves' cut, not the limits' one")
    func aDirectSendQueuedAfterHalvingKeepsTheHalves() async throws {
        let (fixture, stuckOwner, sync, p) = try await acceptedThroughStuckOwner()
        defer { p.remove() }
        let ownerName = fixture.identity.userRecordName
        try await expectEventually(sync, "following", timeout: 90) { sync.status(owner: ownerName) == .following }
        let zone = RecordZone.ID(zoneName: "Topics", ownerName: ownerName)
        let notes = (0..<4).map { Record(recordType: "Note", recordID: Record.ID(recordName: "half\($0)", zoneID: zone)) }
        stuckOwner.halvesThenFails.store(true, ordering: .relaxed)
        guard case .queued(let queued) = try await sync.modifyRecords(owner: ownerName, zoneName: "Topics", saving: notes) else {
            Issue.record("expected the write to be queued")
            return
        }
        #expect(queued.parts == [2, 2], "\(String(describing: queued.parts))")
        await sync.stop()
    }

    @Test func databaseChangesThatDoNotMoveOnAreAFailureNotALoop() async throws {
        let (fixture, stuckOwner, sync, p) = try await acceptedThroughStuckOwner()
        defer { p.remove() }
        let ownerName = fixture.identity.userRecordName
        // From now on every page of database changes says more are coming with the token it was asked
        // with: the link fetched the same page for ever (and a sync never ended, nor failed).
        stuckOwner.stuck.store(true, ordering: .relaxed)
        let error = await expectShareSyncError { try await sync.waitUntilSynced(owner: ownerName, timeout: .seconds(30)) }
        #expect(error?.code == .internalError && error?.message.contains("without moving their token on") == true, "\(String(describing: error))")
        await sync.stop()
    }

    @Test func pushesThatComeFasterThanTheLinkAppliesThemAreReplacedByACatchUpThatMissesNothing() async throws {
        let (fixture, stuckOwner, sync, p) = try await acceptedThroughStuckOwner()
        defer { p.remove() }
        let ownerName = fixture.identity.userRecordName
        try await expectConverged(sync, fixture)
        try await expectEventually(sync, "following", timeout: 90) { sync.status(owner: ownerName) == .following }
        // 100 pushes, one per save (each waited for, so the owner does not merge them), held back and
        // then delivered in one burst: more than the link's queue of 32 waiting pushes holds.
        stuckOwner.holdPushes()
        for i in 0..<100 {
            try fixture.saveNotes("burst\(i)-", count: 1)
            // Held pushes wake nothing in the engine: polled, for at most 30 s each.
            for _ in 0..<30_000 where stuckOwner.heldCount <= i { try await Task.sleep(for: .milliseconds(1)) }
            try #require(stuckOwner.heldCount == i + 1, "push \(i + 1) held")
        }
        let fetchesBefore = fixture.owner.requestCount(.fetchDatabaseChanges)
        stuckOwner.releasePushes()
        try await expectConverged(sync, fixture)
        // The queue overflowed: the pushes were dropped, and a catch-up from the stored tokens read
        // their changes instead (applying them in order would have needed no fetch).
        #expect(fixture.owner.requestCount(.fetchDatabaseChanges) > fetchesBefore)
        #expect(try sync.replica.fetchRecord(Record.ID(recordName: "burst99-0", zoneID: RecordZone.ID(zoneName: "Topics", ownerName: ownerName))) != nil)
        await sync.stop()
    }

    @Test func zonePagesThatDoNotMoveOnAreAFailureNotALoop() async throws {
        let (fixture, stuckOwner, sync, p) = try await acceptedThroughStuckOwner()
        defer { p.remove() }
        let ownerName = fixture.identity.userRecordName
        // A change in the zone, then every page of it repeats the token it was asked with.
        stuckOwner.stuckZones.store(true, ordering: .relaxed)
        try fixture.saveNotes("n", count: 1)
        let error = await expectShareSyncError { try await sync.waitUntilSynced(owner: ownerName, timeout: .seconds(30)) }
        #expect(error?.code == .internalError && error?.message.contains("zone Topics") == true, "\(String(describing: error))")
        await sync.stop()
    }

    @Test func refetchPagesThatDoNotMoveOnAreAFailureNotALoop() async throws {
        let (fixture, stuckOwner, sync, p) = try await acceptedThroughStuckOwner()
        defer { p.remove() }
        let ownerName = fixture.identity.userRecordName
        try fixture.saveNotes("n", count: 30)  // three pages of 10
        try await sync.waitUntilSynced(owner: ownerName, timeout: .seconds(30))
        // The zone's token expires (a deletion, then the owner forgets it), so the zone is fetched
        // again from no token; after its first page, every page repeats the token it was asked with.
        // Before, the refetch fetched and staged the same page for ever.
        stuckOwner.stuckRefetches.store(true, ordering: .relaxed)
        stuckOwner.holdPushes()  // the deletion's push does not move the participant's token on
        _ = try fixture.db.modifyRecords(deleting: [fixture.id("n0")]).get()
        try fixture.db.compactHistory()
        let error = await expectShareSyncError { try await sync.waitUntilSynced(owner: ownerName, timeout: .seconds(30)) }
        let refetched = stuckOwner.refetchBegan.load(ordering: .relaxed)
        #expect(refetched, "the zone was fetched again")
        #expect(error?.code == .internalError && error?.message.contains("zone Topics") == true, "\(String(describing: error))")
        await sync.stop()
    }
}
