import Foundation
import Logging
import ShareSyncCore
@testable import ShareSyncNode
import ShareSyncStore
import Testing

/// `recordList` and `sharedRecordList` in pages (`after`, `limit`): a large zone never makes one
/// answer of hundreds of megabytes, and paging through gives every record once, by name.
@Suite("Record listings in pages")
struct RecordListPagingTests {
    private func handler(_ database: PrivateDatabase) -> ControlHandler {
        let status = NodeStatusStubForPaging.status
        return ControlHandler(database: database, status: { status }, logger: Logger(label: "test"))
    }

    private func respond(_ handler: ControlHandler, _ request: [String: Any]) async throws -> [String: Any] {
        let line = try JSONSerialization.data(withJSONObject: request)
        let data = await handler.respond(toLine: line)
        return try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
    }

    private func names(_ response: [String: Any]) throws -> [String] {
        let records = try #require(response["result"] as? [[String: Any]], "\(response)")
        return records.compactMap { $0["recordName"] as? String }
    }

    /// Every page of `zone`'s listing, `limit` at a time, until an empty one; the names of each page.
    private func pages(_ handler: ControlHandler, zone: String, limit: Int) async throws -> [[String]] {
        var pages: [[String]] = []
        var after: String?
        for _ in 0..<1_000 {
            var arguments: [String: Any] = ["zone": zone, "limit": limit]
            if let after { arguments["after"] = after }
            let page = try names(try await respond(handler, ["recordList": arguments]))
            guard let last = page.last else { return pages }
            pages.append(page)
            after = last
        }
        Issue.record("paging did not end")
        return pages
    }

    private func saveNotes(_ database: PrivateDatabase, zone: String, count: Int, bytes: Int = 20) throws {
        let zoneID = RecordZone.ID(zoneName: zone)
        try database.saveZone(RecordZone(zoneID: zoneID))
        for start in stride(from: 0, to: count, by: 10) {
            let notes = (start..<min(start + 10, count)).map { i in
                var note = Record(recordType: "Note", recordID: Record.ID(recordName: String(format: "n%03d", i), zoneID: zoneID))
                note["body"] = .string(String(repeating: "x", count: bytes))
                return note
            }
            _ = try database.modifyRecords(saving: notes).get()
        }
    }

    @Test("pages of 10 of 25 records: 10, 10, 5, then none; together the whole listing, by name")
    func pagesByCount() async throws {
        let database = try PrivateDatabase(inMemoryOwnerName: "_owner")
        try saveNotes(database, zone: "Topics", count: 25)
        let handler = handler(database)
        let paged = try await pages(handler, zone: "Topics", limit: 10)
        #expect(paged.map(\.count) == [10, 10, 5])
        let whole = try names(try await respond(handler, ["recordList": ["zone": "Topics"]]))
        #expect(paged.flatMap { $0 } == whole)
        #expect(whole == (0..<25).map { String(format: "n%03d", $0) })
        let refused = try await respond(handler, ["recordList": ["zone": "Topics", "limit": 0]])
        #expect((refused["error"] as? [String: Any])?["rule"] as? String == "limitRange")
        let missing = try await respond(handler, ["recordList": ["zone": "Nothing", "limit": 5]])
        #expect((missing["error"] as? [String: Any])?["code"] as? String == "zoneNotFound")
    }

    @Test("a page stops at about 4 MiB of records; past 64 MiB a whole listing is refused, and pages still give every record")
    func pagesByBytes() async throws {
        let database = try PrivateDatabase(inMemoryOwnerName: "_owner")
        // 80 records of 900 KB: 72 MB.
        try saveNotes(database, zone: "Big", count: 80, bytes: 900_000)
        let handler = handler(database)
        let paged = try await pages(handler, zone: "Big", limit: 100)
        #expect(paged.first?.count == 4, "4 of 900 KB fit in 4 MiB: \(paged.map(\.count))")
        #expect(paged.flatMap { $0 } == (0..<80).map { String(format: "n%03d", $0) })
        // Before, one answer of 72 MB (and of hundreds of MB for a larger zone).
        let whole = try await respond(handler, ["recordList": ["zone": "Big"]])
        let error = try #require(whole["error"] as? [String: Any], "\(whole.keys)")
        #expect(error["code"] as? String == "limitExceeded" && error["rule"] as? String == "listTooLarge", "\(error)")
    }

    @Test("a shared page holds this node's new records whose names fall in it, and the last page the rest")
    func sharedPagesMergeLocalEdits() {
        let zone = RecordZone.ID(zoneName: "Topics", ownerName: "_owner")
        func record(_ name: String, _ title: String = "replica") -> Record {
            var record = Record(recordType: "Note", recordID: Record.ID(recordName: name, zoneID: zone))
            record["title"] = .string(title)
            return record
        }
        func edit(_ name: String) -> ParticipantSync.LocalEdit {
            ParticipantSync.LocalEdit(operationID: 1, state: .pending, record: record(name, "mine"))
        }
        let edits = ["a": edit("a"), "c": edit("c"), "d": edit("d"), "g": edit("g")]
        func page(_ records: [Record], after: String?) -> [String] {
            ControlHandler.shared(records, edits: edits, after: after).map {
                $0.record.recordID.recordName + ($0.record["title"]?.stringValue == "mine" ? "*" : "")
            }
        }
        // The replica holds b, d, f, read in pages of two: b d | f | (none).
        #expect(page([record("b"), record("d")], after: nil) == ["a*", "b", "c*", "d*"])
        #expect(page([record("f")], after: "d") == ["f"])
        #expect(page([], after: "f") == ["g*"])
        #expect(page([], after: "g") == [])
    }
}

enum NodeStatusStubForPaging {
    static let status: NodeStatus = {
        let json = #"""
            {"userRecordName":"_owner","fingerprint":"00","displayName":"Test","listen":{"host":"127.0.0.1","port":1},
             "advertised":{"host":"127.0.0.1","port":1},"connections":0}
            """#
        return try! JSONDecoder().decode(NodeStatus.self, from: Data(json.utf8))
    }()
}
