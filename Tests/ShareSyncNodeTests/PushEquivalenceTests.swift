import Foundation
import ShareSyncCore
import ShareSyncStore
import ShareSyncTestSupport
import ShareSyncWire
import Testing

@testable import ShareSyncNode

/// Subscriptions push changes built from the stored JSON, spliced (``RequestExecutor/splicedChanges(since:)``),
/// rather than from records decoded, presented and encoded again (``RequestExecutor/changes(since:)``,
/// the obviously correct path). The bytes pushed must be the same either way.
@Suite("Pushes spliced from stored JSON")
struct PushEquivalenceTests {
    @Test("a zone lost and shared again since the cursor is pushed as deleted too, so a stale copy goes")
    func zoneRegainedWithinOnePush() throws {
        let db = try PrivateDatabase(inMemoryOwnerName: "_owner")
        let zone = RecordZone.ID(zoneName: "Topics")
        try db.saveZone(RecordZone(zoneID: zone))
        func id(_ name: String) -> Record.ID { Record.ID(recordName: name, zoneID: zone) }
        func record(_ name: String, parent: String? = nil) -> Record {
            var r = Record(recordType: "Note", recordID: id(name))
            if let parent { r.setParent(id(parent)) }
            return r
        }
        _ = try db.modifyRecords(saving: [record("topic"), record("x", parent: "topic"), record("y", parent: "topic")]).get()
        func share() throws -> Share {
            var share = Share(rootRecord: try db.fetchRecord(id("topic")))
            try share.addParticipant(Participant(lookupInfo: .init(userRecordName: "_b")))
            let saved = try #require(Share(try db.modifyRecords(saving: [share.record]).get().first { $0.recordType == Record.shareRecordType }!))
            _ = try db.acceptShare(url: try #require(saved.url), as: Caller(userRecordName: "_b"))
            return saved
        }
        let first = try share()
        let cursor = try db.currentChangeToken()
        // Before _b's next push: the share goes (_b loses the zone), x is deleted, the topic is shared again.
        _ = try db.modifyRecords(deleting: [first.recordID]).get()
        _ = try db.modifyRecords(deleting: [id("x")]).get()
        _ = try share()
        let executor = RequestExecutor(database: db, caller: Caller(userRecordName: "_b"))
        for push in [try executor.changes(since: cursor).map { try MessageCoding.encodeData($0) },
                     try executor.splicedChanges(since: cursor).map { try MessageCoding.encodeData($0) }] {
            let decoded = try MessageCoding.decode(ChangesPush.self, from: try #require(push))
            #expect(decoded.databaseChanges.deletedZones == ["Topics"], "x would stay in _b's copy")
            #expect(decoded.databaseChanges.changedZones == ["Topics"])
            let page = try #require(decoded.zoneChanges.first)
            #expect(Set(page.changed.map(\.recordID.recordName)).isSuperset(of: ["topic", "y"]))
            #expect(!page.changed.contains { $0.recordID.recordName == "x" })
        }
    }

    @Test("every push, from every cursor and for every viewer, is byte for byte the decoded one", arguments: [UInt64(1), 2, 3])
    func splicedPushEqualsDecoded(seed: UInt64) throws {
        var limits = Limits()
        limits.maximumResponseSize = 24 * 1024  // small: pushes get cut
        let db = try PrivateDatabase(inMemoryOwnerName: "_owner", limits: limits)
        var random = RandomRecords(seed: seed)
        var cursors: [ServerChangeToken] = [try db.currentChangeToken()]
        var shares: [String: Share] = [:]
        for zone in ["Topics", "Notes-2.x"] {
            try db.saveZone(RecordZone(zoneID: RecordZone.ID(zoneName: zone)))
            var share = Share(recordZoneID: RecordZone.ID(zoneName: zone))
            share.publicPermission = .readOnly
            let saved = try #require(Share(try db.modifyRecords(saving: [share.record]).get()[0]))
            shares[zone] = saved
            let url = try #require(saved.url)
            _ = try db.acceptShare(url: url, as: Caller(userRecordName: "_a"))
            cursors.append(try db.currentChangeToken())
        }
        let topicsURL = try #require(shares["Topics"]?.url)
        _ = try db.acceptShare(url: topicsURL, as: Caller(userRecordName: "_b"))
        var names: [String: [String]] = [:]
        for round in 0..<8 {
            let zone = round % 2 == 0 ? "Topics" : "Notes-2.x"
            let batch = SplicedPageTests.records(&random, count: 25, zone: zone)
            let result = try db.modifyRecords(saving: batch, savePolicy: .allKeys, atomically: false)
            for case (let id, .success) in result.saveResults { names[zone, default: []].append(id.recordName) }
            cursors.append(try db.currentChangeToken())
            if round % 3 == 2, let victims = names[zone]?.shuffled().prefix(5) {
                let ids = victims.map { Record.ID(recordName: $0, zoneID: RecordZone.ID(zoneName: zone)) }
                _ = try db.modifyRecords(deleting: ids, atomically: false)
                cursors.append(try db.currentChangeToken())
            }
            if round == 5 {
                // A share change: every viewer's push carries the share record, presented to them.
                let topics = try #require(shares["Topics"])
                var share = try #require(Share(try db.fetchRecord(topics.recordID)))
                share.publicPermission = .readWrite
                _ = try db.modifyRecords(saving: [share.record]).get()
                cursors.append(try db.currentChangeToken())
            }
        }
        try db.deleteZone(RecordZone.ID(zoneName: "Notes-2.x"))
        cursors.append(try db.currentChangeToken())

        var pushes = 0
        var cut = 0
        var withShare = 0
        for viewer in ["_a", "_b", "_owner"] {
            let executor = RequestExecutor(database: db, caller: Caller(userRecordName: viewer))
            for cursor in cursors {
                let decoded = try executor.changes(since: cursor)
                let spliced = try executor.splicedChanges(since: cursor)
                #expect((decoded == nil) == (spliced == nil), "viewer \(viewer), cursor \(cursor)")
                guard let decoded, let spliced else { continue }
                let expected = try MessageCoding.encodeData(decoded)
                let got = try MessageCoding.encodeData(spliced)
                #expect(got == expected, "viewer \(viewer), cursor \(cursor)")
                // And by the hand-written writer itself, not its Codable fallback.
                var writer = JSONWriter()
                try spliced.writeJSON(to: &writer, includingChangedKeys: false)
                #expect(Data(writer.bytes) == expected)
                pushes += 1
                if decoded.moreComing == true { cut += 1 }
                let shareRecords = decoded.zoneChanges.flatMap(\.changed).filter { $0.recordType == Record.shareRecordType }
                if !shareRecords.isEmpty { withShare += 1 }
            }
        }
        #expect(pushes >= 20)
        #expect(cut > 0, "no push was cut by the response size")
        #expect(withShare > 0, "no push carried a share record")
    }
}
