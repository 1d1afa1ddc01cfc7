import Foundation
import Testing

import ShareSyncCore
@testable import ShareSyncStore

@Suite("Fetching from nil across pages after a compaction")
struct ScanAfterCompactionTests {
    @Test("a zone compacted long after its records were written pages from nil in small pages", arguments: Storage.allCases)
    func pagesFromNilAfterCompaction(storage: Storage) throws {
        try withDatabase(storage) { db in
            try db.saveZone(RecordZone(zoneID: topics))
            try db.save((0..<60).map { makeRecord("r\($0)") })
            try db.delete([recordID("r0")])
            try db.compactHistory()
            var names: [String] = []
            var token: ServerChangeToken?
            var more = true
            var pages = 0
            while more, pages < 100 {
                let page = try db.fetchZoneChanges(topics, since: token, resultsLimit: 7)
                names += page.changedRecords.map(\.recordID.recordName)
                token = page.changeToken
                more = page.moreComing
                pages += 1
            }
            #expect(pages == 9)
            #expect(names == (1..<60).map { "r\($0)" })
        }
    }

    @Test("a record deleted while a scan from nil is under way arrives as a deletion", arguments: Storage.allCases)
    func deletionDuringScan(storage: Storage) throws {
        try withDatabase(storage) { db in
            try db.saveZone(RecordZone(zoneID: topics))
            try db.save((0..<20).map { makeRecord("r\($0)") })
            let first = try db.fetchZoneChanges(topics, since: nil, resultsLimit: 5)
            #expect(first.moreComing)
            try db.delete([recordID("r1")])
            var held = Set(first.changedRecords.map(\.recordID.recordName))
            var token = first.changeToken
            var more = true
            var pages = 0
            while more, pages < 100 {
                let page = try db.fetchZoneChanges(topics, since: token, resultsLimit: 5)
                for change in page.changes {
                    switch change {
                    case .changed(let r): held.insert(r.recordID.recordName)
                    case .deleted(let d): held.remove(d.recordID.recordName)
                    }
                }
                token = page.changeToken
                more = page.moreComing
                pages += 1
            }
            #expect(held == Set((0..<20).filter { $0 != 1 }.map { "r\($0)" }))
        }
    }

    @Test("a participant's shared view pages from nil after a compaction")
    func sharedViewPagesAfterCompaction() throws {
        let db = try PrivateDatabase(inMemoryOwnerName: "_owner")
        try db.saveZone(RecordZone(zoneID: topics))
        var root = makeRecord("root")
        root.setParent(nil)
        try db.save(root)
        try db.save((0..<30).map { i -> Record in
            var r = makeRecord("n\(i)")
            r.setParent(recordID("root"))
            return r
        })
        var share = Share(rootRecord: try db.fetchRecord(recordID("root")))
        try share.addParticipant(Participant(lookupInfo: .init(userRecordName: "_b"), permission: .readOnly))
        let saved = Share(try db.modifyRecords(saving: [share.record]).get().first { $0.recordType == Record.shareRecordType }!)!
        try db.acceptShare(url: saved.url!, as: Caller(userRecordName: "_b"))
        try db.delete([recordID("n0")])
        try db.compactHistory()
        let view = db.sharedDatabase(for: Caller(userRecordName: "_b"))
        let zone = RecordZone.ID(zoneName: topics.zoneName, ownerName: "_owner")
        var names: Set<String> = []
        var token: ServerChangeToken?
        var more = true
        var pages = 0
        while more, pages < 100 {
            let page = try view.fetchZoneChanges(zone, since: token, resultsLimit: 4)
            names.formUnion(page.changedRecords.map(\.recordID.recordName))
            token = page.changeToken
            more = page.moreComing
            pages += 1
        }
        #expect(names == Set((1..<30).map { "n\($0)" } + ["root", saved.recordID.recordName]))
    }
}
