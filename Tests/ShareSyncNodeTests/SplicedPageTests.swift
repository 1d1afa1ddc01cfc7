import Foundation
import GRDB
import ShareSyncCore
import ShareSyncNode
import ShareSyncTestSupport
import ShareSyncWire
import Testing

@testable import ShareSyncStore

typealias Record = ShareSyncCore.Record

/// The owner serves a page of a zone's changes from the stored JSON, spliced (the zone ID changed),
/// instead of decoding each record, presenting it and encoding it again. The bytes on the wire must be
/// the same either way.
@Suite("Pages spliced from stored JSON")
struct SplicedPageTests {
    /// Random records moved into `zone`: references into other zones point into `zone` instead, a
    /// third of them naming it with the owner's user record name (stored with an explicit zone, which
    /// presenting drops: those records take the long way).
    static func records(_ random: inout RandomRecords, count: Int, zone: String) -> [Record] {
        (0..<count).map { i in
            let r = random.record()
            var n = 0
            func move(_ reference: Record.Reference) -> Record.Reference {
                n += 1
                let owner = n % 3 == 0 ? "_owner" : RecordZone.ID.currentUserDefaultName
                return Record.Reference(
                    recordID: Record.ID(recordName: reference.recordID.recordName, zoneID: RecordZone.ID(zoneName: zone, ownerName: owner)),
                    action: reference.action)
            }
            var fields: [String: FieldValue] = [:]
            func simple(_ s: String) -> Bool { s.wholeMatch(of: /[A-Za-z][A-Za-z0-9_]{0,40}/) != nil }
            for (k, (original, value)) in r.fields.sorted(by: { $0.key < $1.key }).enumerated() {
                let key = simple(original) ? original : "field\(k)"
                switch value {
                case .reference(let reference): fields[key] = .reference(move(reference))
                case .list(.reference(let references)): fields[key] = .list(.reference(references.map(move)))
                default: fields[key] = value
                }
            }
            var record = Record(
                recordType: simple(r.recordType) ? r.recordType : "Note", recordID: Record.ID(recordName: "r\(i)-\(random.int(0...99))", zoneID: RecordZone.ID(zoneName: zone)))
            for (key, value) in fields { record[key] = value }
            if let parent = r.parent {
                record.setParent(Record.ID(recordName: parent.recordID.recordName, zoneID: RecordZone.ID(zoneName: zone)))
            }
            return record
        }
    }

    /// Shares `zone` read-only by URL, accepted by `_viewer`; returns `_viewer`'s view.
    static func shareWithViewer(_ db: PrivateDatabase, zone: String) throws -> SharedDatabaseView {
        var share = Share(recordZoneID: RecordZone.ID(zoneName: zone))
        share.publicPermission = .readOnly
        let url = try #require(Share(try db.modifyRecords(saving: [share.record]).get()[0])?.url)
        _ = try db.acceptShare(url: url, as: Caller(userRecordName: "_viewer"))
        return db.sharedDatabase(for: Caller(userRecordName: "_viewer"))
    }

    @Test("every page, share record included, is byte for byte what decoding and presenting gives", arguments: [UInt64(1), 2, 3])
    func splicedEqualsDecoded(seed: UInt64) throws {
        let db = try PrivateDatabase(inMemoryOwnerName: "_owner")
        for zone in ["Topics", "Notes-2.x"] {
            try db.saveZone(RecordZone(zoneID: RecordZone.ID(zoneName: zone)))
            var random = RandomRecords(seed: seed)
            var names: Set<String> = []
            var refusals: [String: Int] = [:]
            for _ in 0..<10 {
                let result = try db.modifyRecords(saving: Self.records(&random, count: 30, zone: zone), savePolicy: .allKeys, atomically: false)
                for (id, outcome) in result.saveResults {
                    switch outcome {
                    case .success: names.insert(id.recordName)
                    case .failure(let error): refusals[error.rule?.rawValue ?? "\(error.code)", default: 0] += 1
                    }
                }
            }
            let saved = names.count
            #expect(saved > 100, "refused: \(refusals)")
            let view = try Self.shareWithViewer(db, zone: zone)
            let sharedZone = RecordZone.ID(zoneName: zone, ownerName: "_owner")
            var token: ServerChangeToken?
            var records = 0
            var spliced = 0
            for _ in 0..<100 {
                let decoded = try #require(try view.fetchZoneChangesPage(sharedZone, since: token, resultsLimit: 25, byteBudget: nil, allowEmpty: false))
                let json = try #require(try view.fetchZoneChangesPageJSON(sharedZone, since: token, resultsLimit: 25, byteBudget: nil, allowEmpty: false))
                let expected = try MessageCoding.encodeData(Response(id: 7, ok: ZoneChangesResult(decoded.changes)))
                let got = try MessageCoding.encodeData(Response(id: 7, ok: ZoneChangesPage(json)))
                #expect(got == expected, "zone \(zone), page after \(String(describing: token))")
                #expect(json.bytes == decoded.bytes)
                for case .changed(let bytes) in json.changes {
                    records += 1
                    // Spliced when the stored JSON names no zone but its own, and it is not a share.
                    let record = try Record(jsonData: bytes)
                    let stored = try db.fetchRecord(Record.ID(recordName: record.recordID.recordName, zoneID: RecordZone.ID(zoneName: zone)))
                    let zones = String(decoding: try stored.jsonData(), as: UTF8.self).components(separatedBy: "\"zoneID\"").count - 1
                    if zones == 1, record.recordType != Record.shareRecordType { spliced += 1 }
                }
                token = decoded.changes.changeToken
                if !decoded.changes.moreComing { break }
            }
            #expect(records == saved + 1)  // and the share record
            #expect(spliced > records / 3 && spliced < records, "both ways taken: \(spliced) of \(records) spliced")
        }
    }
}

@Suite("Decoded share records kept per version")
struct DecodedShareCacheTests {
    @Test("a share decoded once is reused while its JSON is the same, and decoded again when it changes")
    func reusedPerVersion() throws {
        let db = try PrivateDatabase(inMemoryOwnerName: "_owner")
        let zone = RecordZone.ID(zoneName: "Topics")
        try db.saveZone(RecordZone(zoneID: zone))
        var share = Share(recordZoneID: zone)
        share.publicPermission = .readOnly
        let first = try db.modifyRecords(saving: [share.record]).get()[0]
        let json1 = try first.jsonData()
        let a = try db.decodeStored(json1, type: Record.shareRecordType, zone: "Topics", name: first.recordID.recordName)
        let b = try db.decodeStored(json1, type: Record.shareRecordType, zone: "Topics", name: first.recordID.recordName)
        #expect(a == b)
        #expect(a == (try Record(jsonData: json1)))
        var changed = try #require(Share(first))
        changed.publicPermission = .readWrite
        let json2 = try changed.record.jsonData()
        let c = try db.decodeStored(json2, type: Record.shareRecordType, zone: "Topics", name: first.recordID.recordName)
        #expect(Share(c)?.publicPermission == .readWrite)
        #expect(c == (try Record(jsonData: json2)))
    }
}
