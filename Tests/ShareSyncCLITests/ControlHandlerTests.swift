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
