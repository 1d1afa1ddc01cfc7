import Foundation
import Logging
import ShareSyncCore
import ShareSyncNode
import ShareSyncStore
import ShareSyncTestSupport
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

    @Test("backup needs an absolute path, and names a path it cannot write")
    func backupPaths() async throws {
        let handler = try makeHandler()
        let relative = try await respond(handler, #"{"backup":{"path":"copy.sqlite"}}"#)
        let error = relative["error"] as? [String: Any]
        #expect(error?["code"] as? String == "invalidArguments", "\(relative)")
        #expect((error?["message"] as? String)?.contains("\"copy.sqlite\" is not absolute") == true, "\(relative)")
        let folder = try TemporaryFolder()
        defer { folder.remove() }
        let missing = try await respond(handler, #"{"backup":{"path":"\#(folder.path)/no/such/dir/copy.sqlite"}}"#)
        #expect(((missing["error"] as? [String: Any])?["message"] as? String)?.contains("/no/such/dir/copy.sqlite") == true, "\(missing)")
        // The shared database's copy needs the participant side.
        let shared = try await respond(handler, #"{"backup":{"path":"\#(folder.path)/replica.sqlite","shared":true}}"#)
        #expect((shared["error"] as? [String: Any])?["code"] as? String == "serviceUnavailable", "\(shared)")
    }

    @Test func recordImportLinesReadByTheFastReaderEqualTheCodableDecoding() async throws {
        try await blocking {
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
            guard case .recordImport(let zoneName, let records, _) = fast else { Issue.record("not a recordImport"); return }
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
    }

    @Test func recordImportLinesWrittenByTheFastWriterAreTheBytesJSONEncoderWrites() throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        var random = RandomRecords(seed: 12)
        var compared = 0
        for n in 0..<200 {
            let records = (0..<(n % 7)).map { _ in random.record() }
            let request = ControlRequest.recordImport(zone: n % 2 == 0 ? "Topics" : "Zone \"\(n)\" / é", records: records)
            guard let fast = request.fastEncode() else { continue }  // a record the writer leaves to Foundation
            #expect(fast == (try encoder.encode(request)), "request \(n)")
            compared += 1
        }
        #expect(compared > 150)
        // Anything else is left to JSONEncoder.
        #expect(ControlRequest.recordImport(zone: "Topics", records: [], policy: .ifServerRecordUnchanged).fastEncode() == nil)
        #expect(ControlRequest.status.fastEncode() == nil)
    }

    @Test func queryPagesWrittenAndReadByTheFastCodecAreFoundationsBytesAndValues() throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .iso8601
        var random = RandomRecords(seed: 31)
        var compared = 0
        var readBack = 0
        for n in 0..<200 {
            let page = QueryPage(records: (0..<(n % 6)).map { _ in random.record() }, cursor: n % 3 == 0 ? n * 7 : nil)
            let foundation = try encoder.encode(ControlResponse(result: page))
            guard let fast = page.fastResponse() else { continue }  // a record the writer leaves to Foundation
            #expect(fast == foundation, "page \(n)")
            compared += 1
            // A record the reader leaves to Foundation makes the whole page fall back (nil): allowed.
            guard let read = QueryPage.fastResult(foundation) else { continue }
            let decoder = JSONDecoder()
            decoder.dateDecodingStrategy = .iso8601
            #expect(read == (try decoder.decode(ControlResponse<QueryPage>.self, from: foundation)).result, "page \(n)")
            readBack += 1
        }
        #expect(compared > 150)
        #expect(readBack > 150)
        // Errors and anything unusual are left to the Codable path, which reads them as before.
        for other in [
            #"{"error":{"code":"zoneNotFound","message":"m"},"ok":false}"#, #"{"ok":true,"result":{"records":[],"extra":1}}"#,
            #"{"ok":true,"result":{}}"#, #"{"ok":true}"#, #"{"ok":true,"result":{"records":[]}} x"#,
        ] {
            #expect(QueryPage.fastResult(Data(other.utf8)) == nil, "\(other)")
        }
        #expect(QueryPage.fastResult(Data(#"{"ok":true,"result":{"cursor":4,"records":[]}}"#.utf8)) == QueryPage(records: [], cursor: 4))
        let refused = Data(#"{"error":{"code":"zoneNotFound","message":"no zone"},"ok":false}"#.utf8)
        #expect(throws: ControlError.self) { try ControlResponse<QueryPage>.result(of: refused) }
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

    @Test func numbersAtTheEdgeOfTheirTypesGetAnAnswerAndDoNotTakeTheDaemonDown() async throws {
        let database = try PrivateDatabase(inMemoryOwnerName: "_owner")
        try database.saveZone(RecordZone(zoneID: RecordZone.ID(zoneName: "Topics")))
        let feeds = NodeChangeFeeds(database: database, replica: try SharedDatabaseReplica(inMemory: ()))
        let status = NodeStatusStub.status
        let handler = ControlHandler(database: database, feeds: feeds, status: { status }, logger: Logger(label: "test"))
        // Each trapped (overflow) in the daemon before: the shared feed's limit plus one, and a query
        // date whose milliseconds do not fit in an Int64.
        let query = #"{"recordType":"Note","predicate":[{"key":"creationDate","comparator":"lessThan","value":{"value":9223372036854775807,"type":"TIMESTAMP"}}],"sortDescriptors":[]}"#
        for line in [
            #"{"changes":{"shared":true,"limit":9223372036854775807}}"#,
            #"{"changes":{"shared":false,"zone":"Topics","limit":9223372036854775807}}"#,
            #"{"recordQuery":{"shared":false,"zone":"Topics","query":\#(query)}}"#,
        ] {
            let response = try await respond(handler, line)
            #expect(response["ok"] as? Bool == true, "\(line): \(response)")
        }
        // And the node still answers.
        #expect(try await respond(handler, #"{"status":{}}"#)["ok"] as? Bool == true)
    }

    @Test func aPrivateTokenFromBeforeAZoneWasDeletedAndCreatedAgainGetsTheDeletionThenTheNewZone() async throws {
        let database = try PrivateDatabase(inMemoryOwnerName: "_owner")
        let topics = RecordZone.ID(zoneName: "Topics")
        try database.saveZone(RecordZone(zoneID: topics))
        _ = try database.modifyRecords(saving: [Record(recordType: "Note", recordID: .init(recordName: "old", zoneID: topics))]).get()
        let feeds = NodeChangeFeeds(database: database, replica: try SharedDatabaseReplica(inMemory: ()))
        let token = try await feeds.changes(shared: false, since: nil, wait: nil).token
        try database.deleteZone(topics)
        try database.saveZone(RecordZone(zoneID: topics))
        _ = try database.modifyRecords(saving: [Record(recordType: "Note", recordID: .init(recordName: "new", zoneID: topics))]).get()
        // Before: changeTokenExpired for the whole database, from this token every time.
        let page = try await feeds.changes(shared: false, since: token, wait: nil)
        #expect(page.changes.map { "\($0.kind.rawValue) \($0.zoneName) \($0.recordName ?? "")" } == [
            "zoneDeleted Topics ", "recordChanged Topics new",
        ])
    }

    @Test("closing the feeds ends a waiting changes request at once, and one that comes after does not wait", arguments: [false, true])
    func closingTheFeedsEndsEveryWait(shared: Bool) async throws {
        let database = try PrivateDatabase(inMemoryOwnerName: "_owner")
        try database.saveZone(RecordZone(zoneID: RecordZone.ID(zoneName: "Topics")))
        let feeds = NodeChangeFeeds(database: database, replica: try SharedDatabaseReplica(inMemory: ()))
        let token = try feeds.currentToken(shared: shared)
        let clock = ContinuousClock()
        // What `sharesync watch` asks: the changes since now, waiting for one (120 s here, so that a
        // wait that goes on stands out however loaded the machine is).
        let waiting = Task { try await feeds.changes(shared: shared, since: token, wait: .seconds(120)) }
        try await Task.sleep(for: .milliseconds(200))
        let closed = clock.now
        feeds.close()
        // Before, the wait was woken and went back to waiting: a node stopping with a watch attached
        // waited out the control server's 5-second grace.
        let page = try await waiting.value
        #expect(page.changes.isEmpty)
        #expect(clock.now - closed < .seconds(30), "the wait went on after close: \(clock.now - closed)")
        let after = clock.now
        _ = try await feeds.changes(shared: shared, since: token, wait: .seconds(120))
        #expect(clock.now - after < .seconds(30))
    }

    @Test("an expired private token's advice is in the control channel's terms (without --since), not the API's (from nil)")
    func expiredPrivateTokensAdviseInControlTerms() async throws {
        let database = try PrivateDatabase(inMemoryOwnerName: "_owner")
        let topics = RecordZone.ID(zoneName: "Topics")
        try database.saveZone(RecordZone(zoneID: topics))
        let feeds = NodeChangeFeeds(database: database, replica: try SharedDatabaseReplica(inMemory: ()))
        let token = try await feeds.changes(shared: false, since: nil, wait: nil, zone: "Topics").token
        try database.deleteZone(topics)
        try database.saveZone(RecordZone(zoneID: topics))
        let error = await #expect(throws: ShareSyncError.self) { try await feeds.changes(shared: false, since: token, wait: nil, zone: "Topics") }
        #expect(error?.code == .changeTokenExpired)
        #expect(error?.message.hasSuffix("read the changes again without --since") == true, "\(String(describing: error))")
        #expect(error?.message.contains("from nil") == false)
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

    @Test("a date field takes a calendar date (midnight UTC), a date and time, or seconds since 1970")
    func dateFields() throws {
        let zone = RecordZone.ID(zoneName: "Z")
        func value(_ text: String) throws -> FieldValue { try FieldAssignment(parsing: "d=date:" + text).fieldValue(in: zone) }
        #expect(try value("2026-01-01") == .date(Date(timeIntervalSince1970: 1_767_225_600)))  // refused before
        #expect(try value("2026-01-01T00:00:00Z") == .date(Date(timeIntervalSince1970: 1_767_225_600)))
        #expect(try value("1767225600.5") == .date(Date(timeIntervalSince1970: 1_767_225_600.5)))
        #expect(throws: ShareSyncError.self) { try value("2026-13-01") }
        #expect(throws: ShareSyncError.self) { try value("2026-1-1") }
    }

    @Test("a reference's action is read in any case; another suffix is refused, and a name holding colons takes its action")
    func referenceActions() throws {
        let zone = RecordZone.ID(zoneName: "Z")
        func value(_ text: String) throws -> FieldValue { try FieldAssignment(parsing: "r=reference:" + text).fieldValue(in: zone) }
        let p1 = Record.ID(recordName: "p1", zoneID: zone)
        #expect(try value("p1:deleteSelf") == .reference(Record.Reference(recordID: p1, action: .deleteSelf)))
        // Before, these referred to a record named "p1:deleteself" (or "p1:NONE"), with no action.
        #expect(try value("p1:deleteself") == .reference(Record.Reference(recordID: p1, action: .deleteSelf)))
        #expect(try value("p1:NONE") == .reference(Record.Reference(recordID: p1, action: .none)))
        // A mistyped action was taken as part of the name, a reference to "milk:delete" with no action.
        for typo in ["milk:delete", "milk:cascade", "a:b"] {
            let error = #expect(throws: ShareSyncError.self) { try value(typo) }
            #expect(error?.rule == .fieldSyntax && error?.message.contains("is not an action (deleteSelf or none)") == true, "\(typo): \(String(describing: error))")
            #expect(error?.message.contains("\(typo):none") == true, "\(typo): the way to name such a record")
        }
        // A record whose name holds a colon is named with its action.
        #expect(try value("a:b:none") == .reference(Record.Reference(recordID: Record.ID(recordName: "a:b", zoneID: zone), action: .none)))
        #expect(try value("a:b:deleteSelf") == .reference(Record.Reference(recordID: Record.ID(recordName: "a:b", zoneID: zone), action: .deleteSelf)))
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

@Suite("Control requests and results of the outbox")
struct OutboxControlCodingTests {
    @Test func aSharedSaveWithoutPolicyDecodesWithTheDefaultLeftToTheHandler() async throws {
        try await blocking {
            let line = #"{"sharedRecordSave":{"zone":"Topics","type":"Topic","name":"t","fields":[]}}"#
            let request = try JSONDecoder().decode(ControlRequest.self, from: Data(line.utf8))
            #expect(request == .sharedRecordSave(owner: nil, zone: "Topics", type: "Topic", name: "t", parent: nil, fields: [], policy: nil))
            let withPolicy = #"{"sharedRecordSave":{"zone":"Topics","type":"Topic","name":"t","fields":[],"policy":"allKeys"}}"#
            guard case .sharedRecordSave(_, _, _, _, _, _, let policy, _) = try JSONDecoder().decode(ControlRequest.self, from: Data(withPolicy.utf8))
            else { Issue.record("not a sharedRecordSave"); return }
            #expect(policy == .allKeys)
            for (line, expected) in [
                (#"{"outboxList":{}}"#, ControlRequest.outboxList),
                (#"{"outboxResolve":{"id":3,"keep":"mine"}}"#, .outboxResolve(id: 3, keep: .mine)),
                (#"{"outboxDiscard":{"id":4}}"#, .outboxDiscard(id: 4)),
            ] {
                #expect(try JSONDecoder().decode(ControlRequest.self, from: Data(line.utf8)) == expected)
            }
        }
    }

    @Test func aSharedRecordIsTheRecordsJSONWithThePendingMarker() async throws {
        try await blocking {
            var record = Record(recordType: "Topic", recordID: .init(recordName: "t", zoneID: RecordZone.ID(zoneName: "Topics", ownerName: "_a")))
            record["title"] = "B"
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys]
            let plain = try #require(try JSONSerialization.jsonObject(with: encoder.encode(SharedRecord(record: record))) as? [String: Any])
            #expect(plain["pending"] == nil && plain["recordName"] as? String == "t")
            let pending = SharedRecord(record: record, outboxID: 7, outboxState: .pending)
            let data = try encoder.encode(pending)
            let object = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
            #expect(object["pending"] as? Bool == true && object["outboxID"] as? Int == 7 && object["recordType"] as? String == "Topic")
            let decoded = try JSONDecoder().decode(SharedRecord.self, from: data)
            #expect(decoded.outboxState == .pending && decoded.outboxID == 7 && decoded.record["title"] == "B")
            let conflict = try JSONDecoder().decode(
                SharedRecord.self, from: encoder.encode(SharedRecord(record: record, outboxID: 8, outboxState: .conflict)))
            #expect(conflict.outboxState == .conflict && conflict.outboxID == 8)
        }
    }

}

extension ControlHandlerTests {
    @Test("an outbox item says what each write changes, as keep-mine reads it: fields, a move, or nothing noted (sent whole)")
    func outboxItemsNameWhatAWriteChanges() throws {
        let zone = RecordZone.ID(zoneName: "Topics", ownerName: "_a")
        var edited = Record(recordType: "Note", recordID: .init(recordName: "edited", zoneID: zone))
        edited.clearChangeTracking()
        edited["title"] = .string("t")
        edited["done"] = .bool(true)
        var moved = Record(recordType: "Note", recordID: .init(recordName: "moved", zoneID: zone))
        moved.clearChangeTracking()
        moved.setParent(.init(recordName: "folder", zoneID: zone))
        var whole = Record(recordType: "Note", recordID: .init(recordName: "whole", zoneID: zone))
        whole.clearChangeTracking()
        let item = OutboxItem(owner: "_a", operation: OutboxOperation(zoneName: "Topics", saving: [edited, moved, whole], savePolicy: .changedKeys))
        #expect(item.changedKeys == ["edited": ["done", "title"], "moved": []])
        #expect(item.parentChanged == ["moved"])
        // "whole" notes nothing: keep-mine sends it whole, so it has no entry (before: an empty list,
        // which read as "this write changes nothing").
        #expect(item.changedKeys?["whole"] == nil)
    }

    @Test("creating a zone-wide share of a zone already shared says so (alreadyShared), and the share stays as it was")
    func sharingASharedZoneAgainSaysItIsShared() async throws {
        let handler = try makeHandler()
        func call(_ request: ControlRequest) async throws -> [String: Any] {
            try await respond(handler, String(decoding: try request.line(), as: UTF8.self))
        }
        _ = try await call(.zoneCreate(name: "Groceries"))
        let first = try await call(.shareCreate(zone: "Groceries", root: nil, title: "Weekly", publicPermission: .none, allowsAccessRequests: false))
        #expect(first["ok"] as? Bool == true, "\(first)")
        // Before: serverRecordChanged, "share cloudkit.zoneshare changed on the server since it was fetched".
        let again = try await call(.shareCreate(zone: "Groceries", root: nil, title: "Other", publicPermission: .readOnly, allowsAccessRequests: false))
        let error = try #require(again["error"] as? [String: Any], "\(again)")
        #expect(error["code"] as? String == "alreadyShared")
        #expect(error["rule"] as? String == "oneSharePerRecord")
        #expect((error["message"] as? String)?.contains("zone Groceries is already shared as a whole") == true, "\(error)")
        let share = try await call(.shareGet(zone: "Groceries", share: nil))
        #expect((share["result"] as? [String: Any])?["title"] as? String == "Weekly", "\(share)")
        #expect((share["result"] as? [String: Any])?["publicPermission"] as? String == "none", "\(share)")
    }

    @Test("inviting someone already in the share again changes nothing, and with another permission or role is refused")
    func reinviteDoesNotDemote() async throws {
        let handler = try makeHandler()
        func call(_ request: ControlRequest) async throws -> [String: Any] {
            try await respond(handler, String(decoding: try request.line(), as: UTF8.self))
        }
        _ = try await call(.zoneCreate(name: "Groceries"))
        _ = try await call(.shareCreate(zone: "Groceries", root: nil, title: nil, publicPermission: .none, allowsAccessRequests: false))
        let bob = UserIdentity.LookupInfo(userRecordName: "_" + String(repeating: "b", count: 32))
        let first = try await call(.shareInvite(zone: "Groceries", share: nil, lookup: bob, permission: .readWrite, role: .administrator))
        #expect(first["ok"] as? Bool == true)
        // Again with no role: the same person, unchanged (before, the role went back to privateUser).
        let again = try await call(.shareInvite(zone: "Groceries", share: nil, lookup: bob, permission: .readWrite))
        #expect((again["result"] as? [String: Any])?["role"] as? String == "administrator", "\(again)")
        let demote = try await call(.shareInvite(zone: "Groceries", share: nil, lookup: bob, permission: .readOnly))
        #expect((demote["error"] as? [String: Any])?["rule"] as? String == "alreadyParticipant", "\(demote)")
        let share = try await call(.shareGet(zone: "Groceries", share: nil))
        let participants = ((share["result"] as? [String: Any])?["participants"] as? [[String: Any]]) ?? []
        let entry = participants.first { ($0["userRecordName"] as? String) == bob.userRecordName }
        #expect(entry?["permission"] as? String == "readWrite", "\(participants)")
        #expect(entry?["role"] as? String == "administrator")
    }
}
