import Foundation
import GRDB
import ShareSyncCore
import ShareSyncNode
import ShareSyncStore
import Testing

/// Change tokens and tags keep the owner's change counter from participants (`PositionCipher`): a
/// participant that holds tokens of version 1, where the counter was in clear, fetches again once.
@Suite("Change tokens of version 2")
struct TokenVersionTests {
    /// An owner with 40 notes under its topic, shared with `b`, who accepted and stopped.
    static func ownerSharingTopic(with b: TestParticipant) async throws -> TestOwner {
        let owner = try await TestOwner.start()
        try owner.saveNotes("n", count: 40)
        let (url, _) = try owner.shareTopic(invite: [(b.identity, .readWrite)])
        try await b.acceptAndStop(url: url)
        return owner
    }

    @Test("a participant whose replica holds version-1 tokens (from before an upgrade) fetches again from nil and is caught up")
    func aReplicaWithVersionOneTokensFetchesAgain() async throws {
        let b = try TestParticipant()
        defer { b.remove() }
        let owner = try await Self.ownerSharingTopic(with: b)

        // The tokens as a version before this one stored them: the position in clear.
        let queue = try DatabaseQueue(path: b.replicaPath)
        let stored = try await queue.write { db in
            try db.execute(sql: "UPDATE replicaOwner SET databaseToken = '1.' || ? || '.3'", arguments: [owner.db.databaseID])
            try db.execute(sql: "UPDATE replicaZone SET token = '1.' || ? || '.5'", arguments: [owner.db.databaseID])
            return try String.fetchAll(db, sql: "SELECT token FROM replicaZone")
        }
        try queue.close()
        #expect(stored.allSatisfy { $0.hasPrefix("1.") } && !stored.isEmpty)
        // While it is away: a deletion and a new note.
        _ = try owner.db.modifyRecords(deleting: [owner.id("n0")]).get()
        try owner.saveNote("new", title: "after the upgrade")

        let (second, log) = try await b.restartAndCatchUp(with: owner)
        #expect(try replicaView(second.replica, owner: owner.identity.userRecordName) == owner.sharedView(for: b.identity))
        try await eventually { log.count { if case .zoneReplaced(_, "Topics", _) = $0 { true } else { false } } == 1 }
        let zoneToken = try #require(try second.replica.zoneChangeToken(owner: owner.identity.userRecordName, zoneName: "Topics"))
        #expect(zoneToken.stringValue.hasPrefix("2.\(owner.db.databaseID)."), "\(zoneToken)")
        await second.stop()
        try await owner.stop()
    }

    @Test("a participant whose stored tokens the owner calls malformed (a damaged replica) fetches again from nil and is caught up")
    func aReplicaWithMalformedTokensFetchesAgain() async throws {
        let b = try TestParticipant()
        defer { b.remove() }
        let owner = try await Self.ownerSharingTopic(with: b)
        let queue = try DatabaseQueue(path: b.replicaPath)
        try await queue.write { db in
            try db.execute(sql: "UPDATE replicaOwner SET databaseToken = '2.x.y'")
            try db.execute(sql: "UPDATE replicaZone SET token = '2.' || ? || '.damaged'", arguments: [owner.db.databaseID])
        }
        try queue.close()
        _ = try owner.db.modifyRecords(deleting: [owner.id("n0")]).get()
        try owner.saveNote("new", title: "while away")

        // Before, each catch-up failed with changeTokenFormat, for good.
        let (second, log) = try await b.restartAndCatchUp(with: owner)
        #expect(try replicaView(second.replica, owner: owner.identity.userRecordName) == owner.sharedView(for: b.identity))
        try await eventually { log.count { if case .zoneReplaced(_, "Topics", _) = $0 { true } else { false } } == 1 }
        await second.stop()
        try await owner.stop()
    }

    @Test("tokens and change tags say nothing of the owner's changes elsewhere, and differ from one database to the next")
    func tokensAndTagsHideTheChangeCounter() throws {
        let zone = RecordZone.ID(zoneName: "Topics")
        let elsewhere = RecordZone.ID(zoneName: "Private")
        func note(_ name: String, in zone: RecordZone.ID) -> Record { Record(recordType: "Note", recordID: Record.ID(recordName: name, zoneID: zone)) }
        var tags: [[String]] = []
        for _ in 0..<2 {
            let db = try PrivateDatabase(inMemoryOwnerName: "_owner")
            _ = try db.saveZone(RecordZone(zoneID: zone))
            _ = try db.saveZone(RecordZone(zoneID: elsewhere))
            let a = try db.modifyRecords(saving: [note("a", in: zone)]).get()[0]
            // 500 changes the holder of a token of Topics never sees.
            for i in 0..<5 { _ = try db.modifyRecords(saving: (0..<100).map { note("p\(i)-\($0)", in: elsewhere) }).get() }
            let b = try db.modifyRecords(saving: [note("b", in: zone)]).get()[0]
            let token = try db.currentChangeToken()
            // Zones 2, a 1, the rest 500, b 1: the counter a version-1 token and tag showed.
            let sequence = 504
            #expect(try db.changeToken(at: Int64(sequence)) == token)
            #expect(!token.stringValue.contains(String(sequence)), "\(token)")
            #expect(b.recordChangeTag != String(sequence, radix: 36) && a.recordChangeTag != String(3, radix: 36))
            #expect(try #require(b.recordChangeTag).count >= 8, "\(b.recordChangeTag ?? "")")
            // Tags are compared as given: a save with the tag as read is taken, one with another is not.
            var edited = b
            edited["title"] = .string("edited")
            #expect(try db.modifyRecords(saving: [edited]).get()[0].recordChangeTag != b.recordChangeTag)
            #expect(try db.modifyRecords(saving: [edited]).errors["b"]?.code == .serverRecordChanged)
            tags.append([a.recordChangeTag ?? "", b.recordChangeTag ?? ""])
        }
        // The same history in two databases: other tags (each database has its own key).
        #expect(tags[0] != tags[1])
    }
}
