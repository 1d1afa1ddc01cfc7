import Foundation
import GRDB
import ShareSyncCore
import ShareSyncNode
import ShareSyncTestSupport
import ShareSyncWire
import Testing

@testable import ShareSyncStore

/// A participant stores each record of a page as the bytes it came in (read from the wire as a record
/// first, or spliced by the owner's store in process) instead of decoding it into a `Record` and
/// encoding it again. The replica must end up holding exactly what the old path stored.
@Suite("Pages stored as the bytes they came in")
struct EncodedPageTests {
    /// The rows of a replica's records, in name order.
    static func rows(_ replica: SharedDatabaseReplica) throws -> [[String]] {
        try replica.read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT z.owner, z.zone, r.name, r.type, r.json FROM replicaRecord r JOIN replicaZone z ON z.id = r.zoneKey
                    ORDER BY z.owner, z.zone, r.name
                    """
            ).map { row in
                [row["owner"], row["zone"], row["name"], row["type"], String(decoding: row["json"] as Data, as: UTF8.self)]
            }
        }
    }

    @Test("random pages, share record included: the wire and in-process paths store what decoding and encoding stored", arguments: [UInt64(4), 5, 6])
    func sameRowsAsDecoding(seed: UInt64) throws {
        let db = try PrivateDatabase(inMemoryOwnerName: "_owner")
        let owner = OwnerInfo(ownerName: "_owner", host: "127.0.0.1", port: 1, fingerprint: "x")
        let replicas = try (0..<3).map { _ in try SharedDatabaseReplica(inMemory: ()) }
        for replica in replicas { try replica.setOwner(owner) }
        var pages = 0
        var deletions = 0
        for zone in ["Topics", "Notes-2.x"] {
            try db.saveZone(RecordZone(zoneID: RecordZone.ID(zoneName: zone)))
            var random = RandomRecords(seed: seed)
            var saved: [Record.ID] = []
            for _ in 0..<8 {
                let result = try db.modifyRecords(
                    saving: SplicedPageTests.records(&random, count: 30, zone: zone), savePolicy: .allKeys, atomically: false)
                saved += result.saveResults.compactMap { id, outcome in if case .success = outcome { id } else { nil } }
            }
            let view = try SplicedPageTests.shareWithViewer(db, zone: zone)
            // Some deletions and changes after the first pages, so that pages mix both.
            let sharedZone = RecordZone.ID(zoneName: zone, ownerName: "_owner")
            var token: ServerChangeToken?
            for round in 0..<100 {
                if round == 2 {
                    let gone = Array(saved.sorted { $0.recordName < $1.recordName }.prefix(20))
                    _ = try db.modifyRecords(saving: [], deleting: gone, savePolicy: .allKeys, atomically: false)
                    deletions += gone.count
                    _ = try db.modifyRecords(
                        saving: SplicedPageTests.records(&random, count: 20, zone: zone), savePolicy: .allKeys, atomically: false)
                }
                // The old path: records decoded and presented by the owner's store, encoded by the replica.
                let decoded = try view.fetchZoneChanges(sharedZone, since: token, resultsLimit: 25)
                try replicas[0].apply(decoded, owner: "_owner")
                // Over the wire: the owner's spliced page, read by the participant as it arrives.
                let spliced = try #require(try view.fetchZoneChangesPageJSON(sharedZone, since: token, resultsLimit: 25, byteBudget: nil, allowEmpty: false))
                let frame = try MessageCoding.encodeData(Response(id: 3, ok: ZoneChangesPage(spliced)))
                let received = try MessageCoding.decode(Response<ReceivedZoneChanges>.self, from: frame).result(ownerName: "_owner")
                try replicas[1].apply(received.zoneChanges(ownerName: "_owner"), owner: "_owner")
                // In process: the owner's spliced bytes handed over as they are.
                try replicas[2].apply(try view.fetchEncodedZoneChanges(sharedZone, since: token, resultsLimit: 25), owner: "_owner")
                pages += 1
                token = decoded.changeToken
                if !decoded.moreComing { break }
            }
        }
        let expected = try Self.rows(replicas[0])
        // (Random records whose deleteSelf reference names no record are refused: about 230 to 270 stay.)
        #expect(expected.count > 200)
        #expect(deletions == 40)
        #expect(pages > 10)
        #expect(try Self.rows(replicas[1]) == expected)
        #expect(try Self.rows(replicas[2]) == expected)
    }

    @Test("names and types are stored byte for byte, whatever an owner sends: a NUL inside, two normal forms, empty")
    func namesStoredExactly() throws {
        let replica = try SharedDatabaseReplica(inMemory: ())
        try replica.setOwner(OwnerInfo(ownerName: "_owner", host: "127.0.0.1", port: 1, fingerprint: "x"))
        let zone = RecordZone.ID(zoneName: "Topics", ownerName: "_owner")
        let names = ["a\u{0}b", "\u{e9}", "e\u{301}", "😀", "plain"]
        let types = ["Note\u{0}x", "", "T", "Ω", "Note"]
        let changes: [EncodedZoneChanges.Change] = zip(names, types).map { name, type in
            .changed(EncodedRecord(recordID: Record.ID(recordName: name, zoneID: zone), recordType: type, json: Data("{\"n\":1}".utf8)))
        }
        try replica.apply(
            EncodedZoneChanges(zoneID: zone, changes: changes, changeToken: ServerChangeToken(stringValue: "t1"), moreComing: false),
            owner: "_owner")
        let stored = try replica.read { db in
            try Row.fetchAll(db, sql: "SELECT CAST(name AS BLOB) AS n, CAST(type AS BLOB) AS t, json FROM replicaRecord ORDER BY rowid").map {
                [Array($0["n"] as Data), Array($0["t"] as Data), Array($0["json"] as Data)]
            }
        }
        #expect(stored == zip(names, types).map { [Array($0.utf8), Array($1.utf8), Array("{\"n\":1}".utf8)] })
    }

    @Test("a record whose JSON carries changed keys is stored without them, as decoding and encoding stored it")
    func changedKeysDropped() throws {
        let zone = RecordZone.ID(zoneName: "Topics", ownerName: "_owner")
        var record = Record(recordType: "Note", recordID: Record.ID(recordName: "n1", zoneID: zone))
        record["title"] = .string("milk")
        let withKeys = try record.jsonData(includingChangedKeys: true)
        #expect(String(decoding: withKeys, as: UTF8.self).contains("changedKeys"))
        let page = Data(#"{"changed":["#.utf8) + withKeys + Data(#"],"deleted":[],"moreComing":false,"order":"c","token":"t1","zoneName":"Topics"}"#.utf8)
        let received = try MessageCoding.decode(ReceivedZoneChanges.self, from: page).zoneChanges(ownerName: "_owner")
        guard case .changed(let encoded) = try #require(received.changes.first) else {
            Issue.record("expected a changed record")
            return
        }
        #expect(encoded.json == (try record.jsonData()))
        #expect(try encoded.decoded().changedKeys.isEmpty)
    }

    @Test("a page with a malformed record, or a record of another zone, is refused and changes nothing")
    func malformedRefused() throws {
        let replica = try SharedDatabaseReplica(inMemory: ())
        try replica.setOwner(OwnerInfo(ownerName: "_owner", host: "127.0.0.1", port: 1, fingerprint: "x"))
        func page(_ records: String, order: String) -> Data {
            Data(#"{"changed":[\#(records)],"deleted":[],"moreComing":false,"order":"\#(order)","token":"t1","zoneName":"Topics"}"#.utf8)
        }
        let good = #"{"fields":{},"recordName":"ok","recordType":"Note","zoneID":{"ownerRecordName":"_owner","zoneName":"Topics"}}"#
        let bad = #"{"fields":{"x":{"type":"INT64","value":"seven"}},"recordName":"bad","recordType":"Note","zoneID":{"ownerRecordName":"_owner","zoneName":"Topics"}}"#
        #expect(throws: ShareSyncError.self) { try MessageCoding.decode(ReceivedZoneChanges.self, from: page(good + "," + bad, order: "cc")) }
        #expect(throws: ShareSyncError.self) {
            try MessageCoding.decode(ReceivedZoneChanges.self, from: page(good, order: "cd")).zoneChanges(ownerName: "_owner")
        }
        let elsewhere = #"{"fields":{},"recordName":"other","recordType":"Note","zoneID":{"ownerRecordName":"_owner","zoneName":"Garden"}}"#
        let moved = try MessageCoding.decode(ReceivedZoneChanges.self, from: page(good + "," + elsewhere, order: "cc"))
            .zoneChanges(ownerName: "_owner")
        let error = try #require(throws: ShareSyncError.self) { try replica.apply(moved, owner: "_owner") }
        #expect(error.rule == .replicaZoneMismatch)
        #expect(try Self.rows(replica).isEmpty)
        try replica.apply(
            try MessageCoding.decode(ReceivedZoneChanges.self, from: page(good, order: "c")).zoneChanges(ownerName: "_owner"), owner: "_owner")
        #expect(try Self.rows(replica).map { $0[2] } == ["ok"])
    }
}
