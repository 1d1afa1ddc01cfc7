import Foundation
import ShareSyncCore
@testable import ShareSyncNode
import ShareSyncStore
import ShareSyncWire
import Testing

/// A second share in the owner's zone: a new "Topic" record `name`, shared read-only with `participant`;
/// returns its URL.
private func shareAnotherTopic(_ owner: TestOwner, _ name: String, with participant: NodeIdentity) throws -> String {
    var topic = Record(recordType: "Topic", recordID: owner.id(name))
    topic["title"] = "Other"
    _ = try owner.db.modifyRecords(saving: [topic]).get()
    var share = try Share(rootRecord: try owner.db.fetchRecord(owner.id(name)))
    try share.addParticipant(Participant(lookupInfo: .init(userRecordName: participant.userRecordName), permission: .readOnly))
    let saved = try owner.db.modifyRecords(saving: [share.record]).get()
    let record = try #require(saved.first { $0.recordType == Record.shareRecordType })
    return try #require(Share(record)?.url)
}

@Suite("An owner of whom nothing is left in the replica is forgotten, and no longer connected to")
struct OwnerForgottenTests {
    @Test("leaving the last share of an owner forgets it: no link, no connection, not after a restart; a new share brings it back")
    func leavingTheLastShareForgetsTheOwner() async throws {
        let owner = try await TestOwner.start()
        try owner.saveNotes("n", count: 3)
        let b = try TestParticipant()
        defer { b.remove() }
        let (url, shareName) = try owner.shareTopic(invite: [(b.identity, .readWrite)])
        let ownerName = owner.identity.userRecordName
        let sync = try b.makeSync()
        let log = EventLog(sync)
        try sync.start()
        try await sync.accept(url: url)
        try await expectEventually(sync, "following the owner") { sync.status(owner: ownerName) == .following }
        try await eventually("the accept's own connection closed") { owner.server.connectionCount == 1 }

        try await sync.leaveShare(owner: ownerName, zoneName: "Topics", shareRecordName: shareName)
        try await expectEventually(sync, "the owner forgotten") { try sync.replica.owners().isEmpty }
        #expect(sync.status(owner: ownerName) == nil)
        #expect(sync.lastFailure(owner: ownerName) == nil)
        try await eventually("the owner's connection closed") { owner.server.connectionCount == 0 }
        // Before, the link stayed: it reconnected after every drop (backoff 20-200 ms here) and
        // reported every failure to reach the owner, for good.
        try await Task.sleep(for: .milliseconds(500))
        #expect(owner.server.connectionCount == 0)
        #expect(log.count { if case .ownerForgotten(ownerName) = $0 { true } else { false } } == 1)
        // Writes for it say it is unknown, as for any owner never accepted.
        let write = await expectShareSyncError {
            _ = try await sync.modifyRecords(owner: ownerName, zoneName: "Topics", deleting: ["n0"])
        }
        #expect(write?.code == .unknownItem)
        await sync.stop()

        // A restarted engine does not connect to it either.
        let restarted = try b.makeSync()
        try restarted.start()
        try await Task.sleep(for: .milliseconds(300))
        #expect(owner.server.connectionCount == 0)
        #expect(restarted.status(owner: ownerName) == nil)

        // Another of its shares, accepted: the owner is followed again.
        let second = try shareAnotherTopic(owner, "topic2", with: b.identity)
        try await restarted.accept(url: second)
        try await expectEventually(restarted, "following the owner again") { restarted.status(owner: ownerName) == .following }
        #expect(try restarted.replica.owners().map(\.ownerName) == [ownerName])
        #expect(try restarted.replica.recordCount(owner: ownerName, zoneName: "Topics") == 2)  // topic2 and its share
        var moved = try owner.db.fetchRecord(owner.id("topic2"))
        moved["title"] = "Changed"
        _ = try owner.db.modifyRecords(saving: [moved]).get()
        try await expectEventually(restarted, "the change pushed") {
            try restarted.replica.fetchRecord(Record.ID(recordName: "topic2", zoneID: RecordZone.ID(zoneName: "Topics", ownerName: ownerName)))?["title"]
                == "Changed"
        }
        await restarted.stop()
        try await owner.stop()
    }

    @Test("an owner that stops the last share of one participant is forgotten by it; one with another share keeps following")
    func aStoppedShareForgetsTheOwnerOnlyWhereNothingIsLeft() async throws {
        let owner = try await TestOwner.start()
        try owner.saveNotes("n", count: 3)
        let (b, c) = (try TestParticipant(), try TestParticipant())
        defer { for p in [b, c] { p.remove() } }
        let (url, shareName) = try owner.shareTopic(invite: [(b.identity, .readWrite), (c.identity, .readWrite)])
        let other = try shareAnotherTopic(owner, "topic2", with: c.identity)
        let ownerName = owner.identity.userRecordName
        let (syncB, syncC) = (try b.makeSync(), try c.makeSync())
        for sync in [syncB, syncC] {
            try sync.start()
            try await sync.accept(url: url)
        }
        try await syncC.accept(url: other)
        try await eventually("the accepts' own connections closed") { owner.server.connectionCount == 2 }

        _ = try owner.db.modifyRecords(deleting: [owner.id(shareName)]).get()
        try await expectEventually(syncB, "b forgets the owner") { try syncB.replica.owners().isEmpty }
        try await eventually("b's connection closed") { owner.server.connectionCount == 1 }
        // c still holds the other share: it keeps the owner and follows it.
        try await expectEventually(syncC, "c's first share purged") {
            try syncC.replica.fetchRecord(Record.ID(recordName: "n0", zoneID: RecordZone.ID(zoneName: "Topics", ownerName: ownerName))) == nil
        }
        #expect(try syncC.replica.owners().map(\.ownerName) == [ownerName])
        try await expectEventually(syncC, "c following") { syncC.status(owner: ownerName) == .following }
        #expect(try syncC.replica.recordCount(owner: ownerName, zoneName: "Topics") == 2)
        await syncB.stop()
        await syncC.stop()
        try await owner.stop()
    }
}
