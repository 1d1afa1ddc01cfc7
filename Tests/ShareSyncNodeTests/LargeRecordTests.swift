import Foundation
import NIOCore
import ShareSyncCore
@testable import ShareSyncNode
import ShareSyncStore
import ShareSyncWire
import Testing

// Records of any legal size reach every replica (issue 15, observations 1, 2 and 6). The frame limit is
// configured small (256 KiB) with records of about 8 kB, so that pages, pushes and answers pass it with
// tens of records instead of hundreds of megabytes; the code paths are the ones of the default limits.

/// An owner whose frames are at most 256 KiB and whose answers carry at most 64 KiB of records.
private func smallFrameOwner(maximumItemsPerRequest: Int = 400) async throws -> TestOwner {
    var configuration = OwnerServer.Configuration()
    configuration.transport.limits.maximumFrameSize = 256 * 1024
    configuration.transport.limits.maximumLineLength = 256 * 1024 + 64 * 1024
    var limits = Limits()
    limits.maximumRecordSize = 50_000
    limits.maximumResponseSize = 64 * 1024
    limits.maximumItemsPerRequest = maximumItemsPerRequest
    return try await TestOwner.start(configuration, limits: limits)
}

/// Notes of about `size` bytes under the topic, each with its own text that deflate barely shrinks.
private func bigNotes(_ owner: TestOwner, _ prefix: String, count: Int, size: Int = 8_000) -> [Record] {
    (0..<count).map { i in
        var note = Record(recordType: "Note", recordID: owner.id("\(prefix)\(i)"))
        note["body"] = .string(incompressibleText(size, index: i))
        note["title"] = .string("\(prefix) \(i)")
        note.setParent(owner.id("topic"))
        return note
    }
}

@Suite("Records of any legal size reach every replica")
struct LargeRecordTests {
    /// The issue's own sizes at the default limits (16 MiB frames): about 20 MB each way, so it runs only
    /// when asked (`SHARESYNC_FULL_SIZE=1 swift test --filter defaultLimits`); the tests below run the
    /// same paths with small limits.
    @Test(
        "at the default limits a zone of 450 records of 45 kB syncs to a new participant, and 400 records of 41 kB written by one reach the other",
        .enabled(if: ProcessInfo.processInfo.environment["SHARESYNC_FULL_SIZE"] != nil))
    func defaultLimits() async throws {
        let owner = try await TestOwner.start()
        let b = try TestParticipant()
        let c = try TestParticipant()
        defer { b.remove(); c.remove() }
        let (url, _) = try owner.shareTopic(invite: [(b.identity, .readWrite), (c.identity, .readOnly)])
        let zoneNotes = bigNotes(owner, "z", count: 450, size: 45_000)
        for start in stride(from: 0, to: zoneNotes.count, by: 50) {
            _ = try owner.db.modifyRecords(saving: Array(zoneNotes[start..<start + 50]), savePolicy: .allKeys).get()
        }
        let syncC = try c.makeSync(pageSize: nil)
        try syncC.start()
        let started = ContinuousClock.now
        try await syncC.accept(url: url, timeout: .seconds(300))
        print("default limits: 450 records of 45 kB synced by a new participant in \(ContinuousClock.now - started)")
        #expect(try syncC.replica.recordCount(owner: owner.identity.userRecordName, zoneName: "Topics") == 452)

        let connection = try await OwnerConnection.connect(url: url, identity: b.identity)
        _ = try await connection.acceptShare(url: url)
        let zone = RecordZone.ID(zoneName: "Topics", ownerName: connection.ownerName)
        let written = bigNotes(owner, "w", count: 400, size: 41_000).map { note in
            var copy = Record(recordType: note.recordType, recordID: Record.ID(recordName: note.recordID.recordName, zoneID: zone))
            for key in note.allKeys { copy[key] = note[key] }
            copy.setParent(Record.ID(recordName: "topic", zoneID: zone))
            return copy
        }
        let writing = ContinuousClock.now
        let result = try await connection.modifyRecords(zoneName: "Topics", saving: written, savePolicy: .allKeys)
        #expect(result.savedRecords.count == 400)
        #expect(result.errors.isEmpty)
        try await expectReplicaMatches(syncC, owner, timeout: 300)
        print("default limits: 400 records of 41 kB written by one participant reached the other in \(ContinuousClock.now - writing)")
        #expect(try syncC.replica.recordCount(owner: owner.identity.userRecordName, zoneName: "Topics") == 852)
        await connection.close()
        await syncC.stop()
        try await owner.stop()
    }

    @Test("one commit larger than a push reaches a following participant: the push is cut and the rest fetched")
    func commitLargerThanAPush() async throws {
        let owner = try await smallFrameOwner()
        let c = try TestParticipant()
        defer { c.remove() }
        let (url, _) = try owner.shareTopic(invite: [(c.identity, .readOnly)])
        let sync = try c.makeSync(pageSize: nil)
        let events = EventLog(sync)
        try sync.start()
        try await sync.accept(url: url)
        try await expectReplicaMatches(sync, owner)

        // 60 notes of 8 kB in one transaction: 480 kB of changes, more than a 256 KiB frame.
        let notes = bigNotes(owner, "big", count: 60)
        for start in stride(from: 0, to: notes.count, by: 60) {
            _ = try owner.db.modifyRecords(saving: Array(notes[start..<min(start + 60, notes.count)]), savePolicy: .allKeys).get()
        }
        try await expectReplicaMatches(sync, owner, timeout: 30)
        #expect(try sync.replica.recordCount(owner: owner.identity.userRecordName, zoneName: "Topics") == 62)
        // Later changes still arrive as pushes.
        try owner.saveNote("after", title: "small")
        try await expectReplicaMatches(sync, owner)
        // All of it over the first connection: the push was cut to fit, not dropped and resumed.
        #expect(events.count { if case .disconnected = $0 { true } else { false } } == 0)
        #expect(events.count { if case .connected = $0 { true } else { false } } == 1)
        await sync.stop()
        try await owner.stop()
    }

    @Test("a participant's write of many large records is split to fit and reaches every other replica")
    func participantWriteReachesOthers() async throws {
        let owner = try await smallFrameOwner()
        let b = try TestParticipant()
        let c = try TestParticipant()
        defer { b.remove(); c.remove() }
        let (url, _) = try owner.shareTopic(invite: [(b.identity, .readWrite), (c.identity, .readOnly)])
        let syncC = try c.makeSync(pageSize: nil)
        try syncC.start()
        try await syncC.accept(url: url)

        let connection = try await OwnerConnection.connect(url: url, identity: b.identity)
        #expect(connection.limits.maximumResponseSize == 64 * 1024)
        _ = try await connection.acceptShare(url: url)
        let zone = RecordZone.ID(zoneName: "Topics", ownerName: connection.ownerName)
        let notes = bigNotes(owner, "fromB", count: 40).map { note in
            var copy = Record(recordType: note.recordType, recordID: Record.ID(recordName: note.recordID.recordName, zoneID: zone))
            for key in note.allKeys { copy[key] = note[key] }
            copy.setParent(Record.ID(recordName: "topic", zoneID: zone))
            return copy
        }
        let result = try await connection.modifyRecords(zoneName: "Topics", saving: notes, savePolicy: .allKeys)
        #expect(result.savedRecords.count == 40)
        #expect(result.errors.isEmpty)
        try await expectReplicaMatches(syncC, owner, timeout: 30)
        #expect(try syncC.replica.recordCount(owner: owner.identity.userRecordName, zoneName: "Topics") == 42)
        await connection.close()
        await syncC.stop()
        try await owner.stop()
    }

    @Test("a modifyRecords request larger than the response size is refused with limitExceeded before any work")
    func oversizedModifyRefused() async throws {
        let owner = try await smallFrameOwner()
        let b = try TestParticipant()
        defer { b.remove() }
        let (url, _) = try owner.shareTopic(invite: [(b.identity, .readWrite)])
        let connection = try await OwnerConnection.connect(url: url, identity: b.identity)
        _ = try await connection.acceptShare(url: url)
        let zone = RecordZone.ID(zoneName: "Topics", ownerName: connection.ownerName)
        // 12 notes of 8 kB: 96 kB in one request, over the 64 KiB answer size, under the 256 KiB frame.
        let notes = bigNotes(owner, "raw", count: 12).map { note in
            var copy = Record(recordType: note.recordType, recordID: Record.ID(recordName: note.recordID.recordName, zoneID: zone))
            for key in note.allKeys { copy[key] = note[key] }
            return copy
        }
        let error = await expectShareSyncError {
            _ = try await connection.send(
                .modifyRecords(zoneName: "Topics", saving: notes, deleting: [], savePolicy: .allKeys, atomically: true),
                expecting: ModifyRecordsWireResult.self)
        }
        #expect(error?.code == .limitExceeded)
        #expect(error?.rule == .maximumResponseSize)
        #expect(error?.message.contains("\(64 * 1024)") == true)
        #expect(try owner.db.fetchRecords(notes.map { owner.id($0.recordID.recordName) }).values.allSatisfy { (try? $0.get()) == nil })
        await connection.close()
        try await owner.stop()
    }

    @Test("a new participant syncs a zone whose records pass the frame limit many times over, in byte-bounded pages")
    func initialSyncOfLargeZone() async throws {
        let owner = try await smallFrameOwner()
        let notes = bigNotes(owner, "z", count: 45)
        for start in stride(from: 0, to: notes.count, by: 5) {
            _ = try owner.db.modifyRecords(saving: Array(notes[start..<min(start + 5, notes.count)]), savePolicy: .allKeys).get()
        }
        let b = try TestParticipant()
        defer { b.remove() }
        let (url, _) = try owner.shareTopic(invite: [(b.identity, .readOnly)])
        let sync = try b.makeSync(pageSize: nil)
        try sync.start()
        // A bound for a sync that never ends: 30 s was passed by a starved full test run.
        _ = try await withTimeout(300) { try await sync.accept(url: url, timeout: .seconds(300)) }
        try await expectReplicaMatches(sync, owner)
        #expect(try sync.replica.recordCount(owner: owner.identity.userRecordName, zoneName: "Topics") == 47)
        await sync.stop()
        try await owner.stop()
    }

    @Test("fetchRecords of more than one answer holds: the raw request is limitExceeded, the client splits and gets all")
    func fetchRecordsSplit() async throws {
        let owner = try await smallFrameOwner()
        let notes = bigNotes(owner, "f", count: 24)
        _ = try owner.db.modifyRecords(saving: notes, savePolicy: .allKeys).get()
        let b = try TestParticipant()
        defer { b.remove() }
        let (url, _) = try owner.shareTopic(invite: [(b.identity, .readOnly)])
        let connection = try await OwnerConnection.connect(url: url, identity: b.identity)
        _ = try await connection.acceptShare(url: url)
        let names = notes.map(\.recordID.recordName)
        let error = await expectShareSyncError {
            _ = try await connection.send(.fetchRecords(zoneName: "Topics", recordNames: names), expecting: FetchRecordsResult.self)
        }
        #expect(error?.code == .limitExceeded)
        #expect(error?.rule == .maximumResponseSize)
        let fetched = try await withTimeout(20) { try await connection.fetchRecords(zoneName: "Topics", recordNames: names) }
        #expect(fetched.count == 24)
        #expect(fetched.values.allSatisfy { (try? $0.get())?["body"] != nil })
        await connection.close()
        try await owner.stop()
    }

    @Test("the owner's configured item limit reaches the client, which splits its writes by it")
    func configuredItemLimit() async throws {
        let owner = try await smallFrameOwner(maximumItemsPerRequest: 25)
        let b = try TestParticipant()
        defer { b.remove() }
        let (url, _) = try owner.shareTopic(invite: [(b.identity, .readWrite)])
        let connection = try await OwnerConnection.connect(url: url, identity: b.identity)
        #expect(connection.maximumItemsPerRequest == 25)
        _ = try await connection.acceptShare(url: url)
        let zone = RecordZone.ID(zoneName: "Topics", ownerName: connection.ownerName)
        let notes = (0..<60).map { i in
            var note = Record(recordType: "Note", recordID: Record.ID(recordName: "small\(i)", zoneID: zone))
            note["title"] = .string("small \(i)")
            note.setParent(Record.ID(recordName: "topic", zoneID: zone))
            return note
        }
        let result = try await connection.modifyRecords(zoneName: "Topics", saving: notes, savePolicy: .allKeys)
        #expect(result.savedRecords.count == 60)
        #expect(result.errors.isEmpty)
        await connection.close()
        try await owner.stop()
    }

    @Test("an owner refuses to start with a response size that does not fit in its frames")
    func responseSizeMustFitFrames() async throws {
        var configuration = OwnerServer.Configuration()
        configuration.transport.limits.maximumFrameSize = 4 * 1024 * 1024
        let error = await expectShareSyncError { _ = try await TestOwner.start(configuration) }
        #expect(error?.code == .invalidArguments)
        #expect(error?.rule == .maximumResponseSize)
    }
}
