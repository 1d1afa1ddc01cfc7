import Foundation
import ShareSyncTestSupport
import Synchronization
import Testing
@testable import ShareSync

/// Failures of the engine's requests reach the app as events: before, a send whose request failed as a
/// whole said nothing (its changes stayed pending, quietly), and an automatic fetch or send that failed
/// was heard only by the logger (a no-op by default).
@Suite("SyncEngine: failures are events")
struct SyncEngineFailureEventsTests {
    static let zoneID = RecordZone.ID(zoneName: "Topics")

    /// Collects an engine's events.
    final class Events: Sendable {
        final class Box: Sendable { let events = Mutex<[SyncEngine.Event]>([]) }
        let box = Box()
        init(_ engine: SyncEngine) {
            let box = self.box
            Task { for await event in engine.events { box.events.withLock { $0.append(event) } } }
        }
        func failures(_ pick: (SyncEngine.Event) -> ShareSyncError?) -> [ShareSyncError] { box.events.withLock { $0.compactMap(pick) } }
    }

    @Test("with the daemon gone, a send keeps its change pending and says why; an automatic engine's fetches say why too")
    func daemonGone() async throws {
        let node = try await TestNode.open(.connected)
        let db = node.container.privateDatabase
        try await db.save(RecordZone(zoneID: Self.zoneID))
        let id = Record.ID(recordName: "n", zoneID: Self.zoneID)
        let manual = SyncEngine(SyncEngine.Configuration(database: db, automaticallySync: false) { recordID in
            Record(recordType: "Note", recordID: recordID)
        })
        let manualEvents = Events(manual)
        manual.state.add(pendingRecordZoneChanges: [.saveRecord(id)])
        node.daemon?.signal()
        _ = try await blocking { try node.daemon?.waitForExit(timeout: 30) }

        // (A first request may go out before the client read the daemon's end of the connection: a cut
        // connection, networkFailure; the next finds no daemon, serviceUnavailable. Both stay pending.)
        try await manual.sendChanges()
        try await manual.sendChanges()
        #expect(manual.state.pendingRecordZoneChanges == [.saveRecord(id)])
        #expect(await eventually {
            manualEvents.failures { if case .sendFailed(let e) = $0 { e } else { nil } }.contains { $0.code == .serviceUnavailable }
        })

        let automatic = SyncEngine(SyncEngine.Configuration(database: db, retryInterval: .milliseconds(100)) { recordID in
            Record(recordType: "Note", recordID: recordID)
        })
        let automaticEvents = Events(automatic)
        // Tried again and again, and each time the app hears why.
        #expect(await eventually {
            automaticEvents.failures { if case .fetchFailed(let e) = $0 { e } else { nil } }.count >= 2
        })
        #expect(automaticEvents.failures { if case .fetchFailed(let e) = $0 { e } else { nil } }.contains { $0.code == .serviceUnavailable })
        await manual.stop()
        await automatic.stop()

        // Tried again less and less often while the failures go on (100, 200, 400, 400… ms here):
        // before, every 100 ms, about 20 tries in 2 s.
        let backingOff = SyncEngine(
            SyncEngine.Configuration(database: db, retryInterval: .milliseconds(100), maximumRetryInterval: .milliseconds(400)) { recordID in
                Record(recordType: "Note", recordID: recordID)
            })
        let backingOffEvents = Events(backingOff)
        func tries() -> Int { backingOffEvents.failures { if case .fetchFailed(let e) = $0 { e } else { nil } }.count }
        // Counted from the first failure (under a loaded run the first attempt alone may take seconds).
        #expect(await eventually(seconds: 60) { tries() >= 1 })
        let first = tries()
        try await Task.sleep(for: .seconds(2))
        #expect(tries() - first <= 9, "\(tries() - first) more tries in 2 s")
        #expect(await eventually(seconds: 60) { tries() >= first + 2 }, "tried again")
        await backingOff.stop()
        await node.close()
    }

    @Test("a saved state that cannot be read is the first event, with why; a readable one is not")
    func unreadableState() async throws {
        let node = try await TestNode.open(.embedded)
        let db = node.container.privateDatabase
        let damaged = try JSONDecoder().decode(
            SyncEngine.State.Serialization.self, from: Data("{\"data\":\"\(Data("not a state".utf8).base64EncodedString())\"}".utf8))
        let engine = SyncEngine(SyncEngine.Configuration(database: db, stateSerialization: damaged, automaticallySync: false) { _ in nil })
        var first: SyncEngine.Event?
        for await event in engine.events {
            first = event
            break
        }
        guard case .stateUnreadable(let error)? = first else {
            Issue.record("the first event is \(String(describing: first))")
            return
        }
        #expect(error.message.contains("cannot be read"))
        #expect(engine.state.pendingRecordZoneChanges.isEmpty)
        // A state the engine wrote itself reads back without a word.
        engine.state.add(pendingRecordZoneChanges: [.saveRecord(Record.ID(recordName: "n", zoneID: Self.zoneID))])
        let good = try #require(engine.state.serialization())
        await engine.stop()
        let again = SyncEngine(SyncEngine.Configuration(database: db, stateSerialization: good, automaticallySync: false) { _ in nil })
        #expect(again.state.pendingRecordZoneChanges.count == 1)
        await again.stop()
        var events: [SyncEngine.Event] = []
        for await event in again.events { events.append(event) }
        #expect(!events.contains { if case .stateUnreadable = $0 { true } else { false } })
        await node.close()
    }
}

extension SyncEngineFailureEventsTests {
    @Test("stateUpdates come in the order they were taken: with changes added from many tasks at once, none goes backwards, and the last holds them all")
    func stateUpdatesComeInTheOrderTheyWereTaken() async throws {
        try await withNode(.embedded) { node in
            let db = node.container.privateDatabase
            let engine = SyncEngine(SyncEngine.Configuration(database: db, automaticallySync: false) { _ in nil })
            let events = engine.collectingEvents()
            // Before, each add took its snapshot and sent it after releasing the state: two adds at
            // once could send theirs in the other order, and the last one, which the app stores,
            // missed the other's change.
            await withTaskGroup(of: Void.self) { group in
                // Each add yields after it: eight tasks adding in a tight loop held both of the test
                // process's pool threads for seconds, and a test of idle timeouts running meanwhile
                // saw its owner's connection task starve.
                for t in 0..<8 {
                    group.addTask {
                        for i in 0..<40 {
                            engine.state.add(pendingRecordZoneChanges: [.saveRecord(Record.ID(recordName: "r\(t)-\(i)", zoneID: Self.zoneID))])
                            await Task.yield()
                        }
                    }
                }
            }
            await engine.stop()
            let updates = await events.value.compactMap { event -> SyncEngine.State.Serialization? in
                if case .stateUpdate(let state) = event { state } else { nil }
            }
            // Every update holds at least what the one before it held (changes are only added here).
            func pending(_ state: SyncEngine.State.Serialization) throws -> Int {
                let object = try #require(try JSONSerialization.jsonObject(with: state.data) as? [String: Any])
                return ((object["pendingRecordZoneChanges"] as? [Any])?.count ?? 0) / 2  // key, value, key, value…
            }
            let counts = try updates.map(pending)
            #expect(counts.count == 320)
            let backwards = zip(counts, counts.dropFirst()).filter { $0 > $1 }
            #expect(backwards.isEmpty, "updates that went backwards: \(backwards.prefix(5))")
            let restored = SyncEngine(
                SyncEngine.Configuration(database: db, stateSerialization: try #require(updates.last), automaticallySync: false) { _ in nil })
            #expect(restored.state.pendingRecordZoneChanges.count == 320)
            await restored.stop()
        }
    }
}

extension SyncEngineFailureEventsTests {
    @Test("a snapshot taken while a send changes the state goes out after the event that reports the change")
    func snapshotsWaitForTheEventOfTheChange() async throws {
        try await withNode(.embedded) { node in
            let db = node.container.privateDatabase
            let engine = SyncEngine(SyncEngine.Configuration(database: db, automaticallySync: false) { recordID in
                Record(recordType: "Note", recordID: recordID)
            })
            let events = engine.collectingEvents()
            // A save into a zone that does not exist fails for good: the send takes it out of the
            // pending changes and reports it failed.
            let failing = Record.ID(recordName: "f", zoneID: RecordZone.ID(zoneName: "Missing"))
            let other = Record.ID(recordName: "o", zoneID: Self.zoneID)
            engine.state.add(pendingRecordZoneChanges: [.saveRecord(failing)])
            // The app adds a change from another thread right after the send changed the state and
            // before it reported the failure (waiting at most half a second for the add to finish).
            engine.betweenChangeAndReport.withLock {
                $0 = {
                    let added = DispatchSemaphore(value: 0)
                    Thread.detachNewThread {
                        engine.state.add(pendingRecordZoneChanges: [.saveRecord(other)])
                        added.signal()
                    }
                    _ = added.wait(timeout: .now() + 0.5)
                }
            }
            try await engine.sendChanges()
            engine.betweenChangeAndReport.withLock { $0 = nil }
            await engine.stop()
            let all = await events.value
            let reported = try #require(all.firstIndex {
                if case .sentRecordZoneChanges(let sent) = $0 { sent.failedRecordSaves.contains { $0.record.recordID == failing } } else { false }
            })
            // The first snapshot without the failed save: before, the add's snapshot went out before
            // the failure's event; an app that stored it and was killed never heard of the failure.
            let firstWithout = all.firstIndex { event in
                guard case .stateUpdate(let snapshot) = event else { return false }
                let restored = SyncEngine(SyncEngine.Configuration(database: db, stateSerialization: snapshot, automaticallySync: false) { _ in nil })
                defer { Task { await restored.stop() } }
                return !restored.state.pendingRecordZoneChanges.contains(.saveRecord(failing))
            }
            #expect(firstWithout.map { $0 > reported } ?? true, "snapshot at \(String(describing: firstWithout)), failure reported at \(reported)")
            #expect(all.contains { if case .stateUpdate = $0 { true } else { false } })
        }
    }
}

extension SyncEngineFailureEventsTests {
    @Test("a save sent again after its answer was lost (the app killed before it stored the state) is reported saved, not as its own conflict")
    func aSaveThatLandedBeforeIsSavedNotAConflict() async throws {
        try await withNode(.embedded) { node in
            let db = node.container.privateDatabase
            try await db.save(RecordZone(zoneID: Self.zoneID))
            let id = Record.ID(recordName: "n", zoneID: Self.zoneID)
            let provider: @Sendable (Record.ID) async -> Record? = { recordID in
                var record = Record(recordType: "Note", recordID: recordID)
                record["title"] = "mine"
                return record
            }
            let first = SyncEngine(SyncEngine.Configuration(database: db, automaticallySync: false, recordProvider: provider))
            first.state.add(pendingRecordZoneChanges: [.saveRecord(id)])
            // The state the app stored last: the change still pending. The send goes through, and the
            // app is killed before it stores the state after it.
            let stored = try #require(first.state.serialization())
            try await first.sendChanges()
            #expect(try await db.record(for: id)["title"] == "mine")
            await first.stop()

            let second = SyncEngine(SyncEngine.Configuration(
                database: db, stateSerialization: stored, automaticallySync: false, recordProvider: provider))
            let events = second.collectingEvents()
            #expect(second.state.pendingRecordZoneChanges == [.saveRecord(id)])
            try await second.sendChanges()
            await second.stop()
            let sent = await events.value.compactMap { event -> SyncEngine.SentRecordZoneChanges? in
                if case .sentRecordZoneChanges(let sent) = event { sent } else { nil }
            }
            // Before, the app was told its own save conflicted (serverRecordChanged).
            #expect(sent.flatMap(\.failedRecordSaves).isEmpty, "\(sent.flatMap(\.failedRecordSaves).map(\.error))")
            #expect(sent.flatMap(\.savedRecords).map(\.recordID) == [id])
            #expect(second.state.pendingRecordZoneChanges.isEmpty)
        }
    }
}

extension SyncEngineFailureEventsTests {
    /// The records a send reported deleted, and the deletes it reported failed.
    static func sentDeletes(_ events: [SyncEngine.Event]) -> (deleted: [Record.ID], failed: [Record.ID: ShareSyncError]) {
        let sent = events.compactMap { event -> SyncEngine.SentRecordZoneChanges? in
            if case .sentRecordZoneChanges(let sent) = event { sent } else { nil }
        }
        return (sent.flatMap(\.deletedRecordIDs), sent.reduce(into: [:]) { $0.merge($1.failedRecordDeletes) { a, _ in a } })
    }

    @Test("a delete sent again after its answer was lost (the app killed before it stored the state) is reported deleted, not failed")
    func aDeleteThatLandedBeforeIsDeletedNotAFailure() async throws {
        try await withNode(.embedded) { node in
            let db = node.container.privateDatabase
            try await db.save(RecordZone(zoneID: Self.zoneID))
            let id = Record.ID(recordName: "n", zoneID: Self.zoneID)
            _ = try await db.save(Record(recordType: "Note", recordID: id))
            let first = SyncEngine(SyncEngine.Configuration(database: db, automaticallySync: false) { _ in nil })
            first.state.add(pendingRecordZoneChanges: [.deleteRecord(id)])
            // The state the app stored last: the delete still pending. The send goes through, and the
            // app is killed before it stores the state after it.
            let stored = try #require(first.state.serialization())
            try await first.sendChanges()
            #expect(await shareSyncError { _ = try await db.record(for: id) }?.code == .unknownItem)
            await first.stop()

            let second = SyncEngine(SyncEngine.Configuration(
                database: db, stateSerialization: stored, automaticallySync: false) { _ in nil })
            let events = second.collectingEvents()
            #expect(second.state.pendingRecordZoneChanges == [.deleteRecord(id)])
            try await second.sendChanges()
            await second.stop()
            let (deleted, failed) = Self.sentDeletes(await events.value)
            // Before, the app was told its own delete failed (unknownItem).
            #expect(failed.isEmpty, "\(failed)")
            #expect(deleted == [id])
            #expect(second.state.pendingRecordZoneChanges.isEmpty)
        }
    }

    @Test("a participant's delete of a record the owner deleted first is reported deleted; one of a record never in the view still fails")
    func aParticipantsDeleteOfAGoneRecord() async throws {
        try await withNode(.embedded, name: "Alice") { alice in
            try await withNode(.embedded, name: "Bob") { bob in
                let db = alice.container.privateDatabase
                let topic = try await saveTopic(in: db, zone: Self.zoneID)
                var note = Record(recordType: "Note", recordID: Record.ID(recordName: "note", zoneID: Self.zoneID))
                note.parent = Record.Reference(recordID: topic.recordID, action: .none)
                _ = try await db.save(note)
                // Outside the share: no parent.
                _ = try await db.save(Record(recordType: "Note", recordID: Record.ID(recordName: "secret", zoneID: Self.zoneID)))
                try await bob.join(try await db.createShare(rootRecordID: topic.recordID), of: db, permission: .readWrite)
                let sharedZone = RecordZone.ID(zoneName: "Topics", ownerName: alice.userRecordName)
                let noteID = Record.ID(recordName: "note", zoneID: sharedZone)
                let secretID = Record.ID(recordName: "secret", zoneID: sharedZone)
                _ = try await bob.container.sharedDatabase.record(for: noteID)
                // The owner deletes the note before Bob's engine sends his delete of it.
                try await db.deleteRecord(withID: note.recordID)

                let engine = SyncEngine(SyncEngine.Configuration(
                    database: bob.container.sharedDatabase, automaticallySync: false) { _ in nil })
                let events = engine.collectingEvents()
                engine.state.add(pendingRecordZoneChanges: [.deleteRecord(noteID), .deleteRecord(secretID)])
                try await engine.sendChanges()
                await engine.stop()
                let (deleted, failed) = Self.sentDeletes(await events.value)
                #expect(deleted == [noteID])
                #expect(failed[noteID] == nil)
                // A record Bob never saw is not his to learn about: it fails as outside his view.
                #expect(failed[secretID]?.code == .permissionFailure, "\(failed)")
                #expect(deleted.contains(secretID) == false)
                #expect(try await db.record(for: Record.ID(recordName: "secret", zoneID: Self.zoneID)).recordType == "Note")
                #expect(engine.state.pendingRecordZoneChanges.isEmpty)
            }
        }
    }
}
