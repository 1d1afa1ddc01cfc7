import Foundation
import Logging
import ShareSyncCore
import ShareSyncNode
import ShareSyncStore
import Testing

@Suite("Control requests, in process")
struct ControlHandlerTests {
    func makeHandler() throws -> ControlHandler {
        let database = try PrivateDatabase(inMemoryOwnerName: "_owner")
        let status = NodeStatusStub.status
        return ControlHandler(database: database, status: { status }, logger: Logger(label: "test"))
    }

    func respond(_ handler: ControlHandler, _ line: String) async throws -> [String: Any] {
        let data = await handler.respond(toLine: Data(line.utf8))
        return try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
    }

    @Test func recordImportLinesReadByTheFastReaderEqualTheCodableDecoding() throws {
        let zone = RecordZone.ID(zoneName: "Topics")
        var note = Record(recordType: "Note", recordID: .init(recordName: "note-1", zoneID: zone))
        note["title"] = .string("Milk \"and\" eggs / \u{1F95A} \\ é")
        note["count"] = .int64(-42)
        note["score"] = .double(0.1)
        note["done"] = .bool(true)
        note["due"] = .date(Date(timeIntervalSince1970: 1_700_000_000.123))
        note["tags"] = .list(.string(["a", "b"]))
        note["see"] = .reference(.init(recordID: .init(recordName: "note-2", zoneID: zone), action: .deleteSelf))
        note.setParent(.init(recordName: "topic-1", zoneID: zone))
        let topic = Record(recordType: "Topic", recordID: .init(recordName: "topic-1", zoneID: zone))
        let request = ControlRequest.recordImport(zone: "Topics", records: [note, topic])
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let line = try encoder.encode(request)
        let fast = try #require(ControlRequest.fastDecode(line))
        #expect(fast == (try JSONDecoder().decode(ControlRequest.self, from: line)))
        guard case .recordImport(let zoneName, let records) = fast else { Issue.record("not a recordImport"); return }
        #expect(zoneName == "Topics")
        #expect(records.map(\.fields) == [note.fields, topic.fields])
        #expect(records.map(\.parent) == [note.parent, nil])
        // Keys in another order read the same; anything unusual is left to the Codable path.
        let reordered = Data(#"{"recordImport":{"zone":"Topics","records":[]}}"#.utf8)
        #expect(ControlRequest.fastDecode(reordered) == .recordImport(zone: "Topics", records: []))
        for other in [
            #"{"recordImport":{"zone":"Topics","records":[],"extra":1}}"#, #"{"status":{}}"#,
            #"{"recordImport":{"zone":"Topics"}}"#, #"{"recordImport":{"zone":"Topics","records":[]}} x"#,
        ] {
            #expect(ControlRequest.fastDecode(Data(other.utf8)) == nil, "\(other)")
        }
    }

    @Test func aLineThatIsNotARequestGetsAnInvalidArgumentsError() async throws {
        let handler = try makeHandler()
        for line in ["", "not json", #"{"noSuchCommand":{}}"#, #"{"zoneCreate":{}}"#] {
            let response = try await respond(handler, line)
            #expect(response["ok"] as? Bool == false)
            let error = try #require(response["error"] as? [String: Any])
            #expect(error["code"] as? String == "invalidArguments")
            #expect(error["rule"] as? String == "controlSyntax")
        }
    }

    @Test func requestsUseTheDocumentedWireForm() async throws {
        let handler = try makeHandler()
        let created = try await respond(handler, #"{"zoneCreate":{"name":"Topics"}}"#)
        #expect(created["ok"] as? Bool == true)
        #expect((created["result"] as? [String: Any])?["zoneName"] as? String == "Topics")
        let refused = try await respond(handler, #"{"zoneDelete":{"name":"_defaultZone"}}"#)
        let error = try #require(refused["error"] as? [String: Any])
        #expect(error["code"] as? String == "invalidArguments")
        #expect(error["rule"] as? String == "defaultZone")
        #expect(error["zoneName"] as? String == "_defaultZone")
    }

    @Test(arguments: [
        ("t=string:a:b", true), ("n=int64:12", true), ("n=int64:1.5", false), ("d=double:1e3", true),
        ("b=bool:maybe", false), ("d=date:0", true), ("d=date:yesterday", false), ("x=bytes:***", false),
        ("l=location:91,0", false), ("l=location:1.5,-2", true), ("r=reference:", false), ("x=blob:1", false),
        ("=string:a", false), ("nocolon", false),
    ])
    func fieldAssignmentsAreCheckedAgainstTheirType(text: String, valid: Bool) {
        #expect((try? FieldAssignment(parsing: text)) != nil ? valid : !valid, "\(text)")
    }
}

enum NodeStatusStub {
    static let status: NodeStatus = {
        let json = #"""
            {"userRecordName":"_owner","fingerprint":"00","displayName":"Test","listen":{"host":"127.0.0.1","port":1},
             "advertised":{"host":"127.0.0.1","port":1},"connections":0}
            """#
        return try! JSONDecoder().decode(NodeStatus.self, from: Data(json.utf8))
    }()
}
