import ShareSyncTestSupport
import Foundation
import NIOCore
import Testing

@testable import ShareSyncCore
@testable import ShareSyncWire

/// Decodes with `MessageCoding` (hand-written first) and with `JSONDecoder` alone, and expects the
/// same message (compared by its Foundation encoding) or the same error.
private func expectSameDecoding<T: Codable>(
    _ type: T.Type, _ data: Data, viaBuffer: Bool = false, sourceLocation: SourceLocation = #_sourceLocation
) {
    let fast = Result { () throws(ShareSyncError) in
        viaBuffer ? try MessageCoding.decode(type, from: ByteBuffer(bytes: data)) : try MessageCoding.decode(type, from: data)
    }
    let foundation = Result { () throws(ShareSyncError) in try MessageCoding.foundationDecode(type, from: data) }
    switch (fast, foundation) {
    case (.success(let fast), .success(let foundation)):
        #expect(
            (try? MessageCoding.foundationEncodeData(fast, includingChangedKeys: true))
                == (try? MessageCoding.foundationEncodeData(foundation, includingChangedKeys: true)),
            "\(String(decoding: data, as: UTF8.self))", sourceLocation: sourceLocation)
    case (.failure(let fast), .failure(let foundation)):
        #expect(fast == foundation, sourceLocation: sourceLocation)
    case (let fast, let foundation):
        Issue.record("fast \(fast) but Foundation \(foundation) for \(String(decoding: data, as: UTF8.self))", sourceLocation: sourceLocation)
    }
}

/// The same for the routing head of a frame.
private func expectSameHead(_ data: Data, sourceLocation: SourceLocation = #_sourceLocation) {
    func describe(_ result: Result<MessageHead, ShareSyncError>) -> String {
        switch result {
        case .success(let head): "op \(head.op ?? "-") id \(head.id.map(String.init) ?? "-") push \(head.push ?? "-") ok \(head.hasOk) error \(String(describing: head.error))"
        case .failure(let error): "\(error)"
        }
    }
    let fast = Result { () throws(ShareSyncError) in try MessageCoding.decode(MessageHead.self, from: ByteBuffer(bytes: data)) }
    let foundation = Result { () throws(ShareSyncError) in try MessageCoding.foundationDecode(MessageHead.self, from: data) }
    #expect(describe(fast) == describe(foundation), "\(String(decoding: data, as: UTF8.self))", sourceLocation: sourceLocation)
}

extension RandomRecords {
    mutating func zoneChanges() -> ZoneChangesResult {
        var changed: [Record] = []
        var deleted: [ZoneChangesResult.Deleted] = []
        var order = ""
        for _ in 0..<int(0...12) {
            if chance(0.7) {
                changed.append(record())
                order.append("c")
            } else {
                deleted.append(.init(recordName: name(), recordType: pick(["Note", "Topic", string()])))
                order.append("d")
            }
        }
        return ZoneChangesResult(
            zoneName: pick(["Topics", string()]), changed: changed, deleted: deleted, order: order,
            token: ServerChangeToken(stringValue: "1.\(string()).\(int(0...1000))"), moreComing: chance(0.5))
    }

    mutating func push() -> ChangesPush {
        ChangesPush(
            databaseChanges: DatabaseChangesResult(
                changedZones: list { $0.string() }, deletedZones: list { $0.string() },
                token: ServerChangeToken(stringValue: string()), moreComing: chance(0.5)),
            zoneChanges: list { $0.zoneChanges() }, token: ServerChangeToken(stringValue: string()), moreComing: chance(0.3))
    }

    mutating func wireError() -> WireError {
        WireError(code: "unknownItem", message: string(), recordName: chance(0.5) ? name() : nil, serverRecord: chance(0.3) ? record() : nil)
    }

    mutating func errors() -> [String: WireError] {
        chance(0.8) ? [:] : [name(): wireError()]
    }
}

/// The hand-written coders of the hot messages against `JSONEncoder`/`JSONDecoder`.
@Suite("Message JSON codec equivalence")
struct MessageJSONCodecTests {
    /// Encodes through `MessageCoding` (both entry points) and through `JSONEncoder`, expects the same
    /// bytes, then the same decoding; returns the bytes.
    @discardableResult
    func check<T: Codable>(_ message: T, includingChangedKeys: Bool = false, sourceLocation: SourceLocation = #_sourceLocation) throws -> Data {
        let foundation = try MessageCoding.foundationEncodeData(message, includingChangedKeys: includingChangedKeys)
        let fast = try MessageCoding.encodeData(message, includingChangedKeys: includingChangedKeys)
        let buffer = try MessageCoding.encode(message, includingChangedKeys: includingChangedKeys)
        #expect(fast == foundation, "\(String(decoding: foundation, as: UTF8.self))\n\(String(decoding: fast, as: UTF8.self))", sourceLocation: sourceLocation)
        #expect(Data(buffer.readableBytesView) == foundation, sourceLocation: sourceLocation)
        expectSameDecoding(T.self, foundation, sourceLocation: sourceLocation)
        expectSameDecoding(T.self, foundation, viaBuffer: true, sourceLocation: sourceLocation)
        expectSameHead(foundation, sourceLocation: sourceLocation)
        return foundation
    }

    @Test("a frame whose error key is not an error object still has its id and op: a request is answered by its id")
    func malformedErrorKeyKeepsTheID() throws {
        for text in [#"{"id":7,"op":"ping","error":5}"#, #"{"error":"x","op":"ping","id":7}"#] {
            let head = try MessageCoding.decode(MessageHead.self, from: ByteBuffer(string: text))
            #expect(head.id == 7 && head.op == "ping" && head.error == nil, "\(text)")
            expectSameHead(Data(text.utf8))
        }
    }

    @Test("fetchZoneChanges responses: Foundation's bytes, Foundation's decoding, mostly without Foundation")
    func zoneChangesResponses() throws {
        var random = RandomRecords(seed: 1)
        var fast = 0
        for i in 0..<200 {
            let response = Response(id: i, ok: random.zoneChanges())
            let json = try check(response)
            let decoded = json.withUnsafeBytes { MessageCoding.fastDecode(Response<ZoneChangesResult>.self, from: $0) }
            if MessageCoding.fastEncode(response, includingChangedKeys: false) != nil, decoded != nil { fast += 1 }
        }
        #expect(fast > 100, "\(fast) of 200 pages coded by hand")
    }

    @Test("change pushes: Foundation's bytes and decoding")
    func pushes() throws {
        var random = RandomRecords(seed: 2)
        for _ in 0..<60 { try check(random.push()) }
        var push = random.push()
        push.push = "other"
        try check(push)
    }

    @Test("fetchRecords and modifyRecords responses, with and without errors")
    func recordResults() throws {
        var random = RandomRecords(seed: 3)
        for i in 0..<80 {
            try check(Response(id: i, ok: FetchRecordsResult(records: random.list { $0.record() }, errors: random.errors())))
            try check(
                Response(
                    id: i,
                    ok: ModifyRecordsWireResult(saved: random.list { $0.record() }, deleted: random.list { $0.name() }, errors: random.errors())))
        }
        var failed = Response(id: 1, ok: EmptyResult())
        failed.error = random.wireError()
        try check(failed)
    }

    @Test("modifyRecords requests with changed keys, and the other requests")
    func requests() throws {
        var random = RandomRecords(seed: 4)
        for i in 0..<100 {
            let body = RequestBody.modifyRecords(
                zoneName: random.string(), saving: random.list { $0.record() }, deleting: random.list { $0.name() },
                savePolicy: random.pick(SavePolicy.allCases), atomically: random.chance(0.5))
            try check(Request(id: i, body: body), includingChangedKeys: true)
            try check(Request(id: i, body: body), includingChangedKeys: false)
        }
        try check(Request(id: 1, body: .fetchZoneChanges(zoneName: "Topics", token: nil, resultsLimit: 400)), includingChangedKeys: true)
        try check(Request(id: 2, body: .subscribe(token: ServerChangeToken(stringValue: "1.a.2"))), includingChangedKeys: true)
        try check(Request(id: 3, body: .ping), includingChangedKeys: true)
    }

    @Test("frames cut short or with bytes changed decode (and route) as Foundation decodes them")
    func mutatedFrames() throws {
        var random = RandomRecords(seed: 5)
        let small = try MessageCoding.foundationEncodeData(Response(id: 3, ok: random.zoneChanges()))
        for end in 0..<small.count {
            expectSameDecoding(Response<ZoneChangesResult>.self, small.prefix(end))
            expectSameHead(small.prefix(end))
        }
        let interesting: [UInt8] = Array(#"{}[]",:\/0123456789-+.eEtfnu "#.utf8) + [0x00, 0x1F, 0x80, 0xED, 0xFF]
        for _ in 0..<30 {
            let frames: [Data] = [
                try MessageCoding.foundationEncodeData(Response(id: 1, ok: random.zoneChanges())),
                try MessageCoding.foundationEncodeData(random.push()),
                try MessageCoding.foundationEncodeData(
                    Request(id: 9, body: .modifyRecords(zoneName: "Z", saving: [random.record()], deleting: ["x"], savePolicy: .changedKeys, atomically: true)),
                    includingChangedKeys: true),
            ]
            for frame in frames {
                for _ in 0..<10 {
                    var bytes = [UInt8](frame)
                    let at = random.int(0...bytes.count - 1)
                    let byte = random.pick(interesting)
                    switch random.int(0...2) {
                    case 0: bytes[at] = byte
                    case 1: bytes.insert(byte, at: at)
                    default: bytes.remove(at: at)
                    }
                    let data = Data(bytes)
                    expectSameDecoding(Response<ZoneChangesResult>.self, data)
                    expectSameDecoding(ChangesPush.self, data)
                    expectSameDecoding(Request.self, data)
                    expectSameHead(data)
                }
            }
        }
    }

    @Test("unusual frames route and decode as Foundation does", arguments: [
        #"{"id":1,"ok":{}}"#, #"{"id":1}"#, #"{}"#, #"{"id":null,"ok":1}"#, #"{"id":"1","ok":1}"#, #"{"id":1.0,"ok":[]}"#,
        #"{"id":1,"ok":true,"id":2}"#, #"{"\u0069d":1,"ok":true}"#, #"{"push":"changes","x":[1,{"a":null}]}"#,
        #"{"op":"hello","x":1e999}"#, #"{"op":"hello","x":"\ud800"}"#, #"{"op":7}"#, #"{"error":{"code":"x","message":"m"},"id":4}"#,
        #"{"id":1,"ok":{"changed":[],"deleted":[],"moreComing":false,"order":"","token":"t","zoneName":"z","extra":0}}"#,
        #"{"id":1,"ok":{"changed":[],"deleted":[],"moreComing":false,"order":"c","token":"t","zoneName":"z"}}"#,
        #"{"id":1,"ok":{"changed":[],"deleted":[],"moreComing":false,"order":"","token":"t"}}"#,
        #"{"atomically":false,"id":3,"op":"modifyRecords","zoneName":"Z"}"#,
        #"{"id":3,"op":"modifyRecords","zoneName":"Z","savePolicy":"sometimes"}"#,
        #"{"id":3,"op":"fetchRecords","zoneName":"Z","recordNames":["a"]}"#,
        #"{"id":3,"op":"modifyRecords","zoneName":"Z","saving":[{"recordName":"a","recordType":"cloudkit.share"}]}"#,
        #"[1]"#, "", "null",
    ])
    func unusualFrames(json: String) {
        let data = Data(json.utf8)
        expectSameDecoding(Response<ZoneChangesResult>.self, data)
        expectSameDecoding(Response<FetchRecordsResult>.self, data)
        expectSameDecoding(Response<ModifyRecordsWireResult>.self, data)
        expectSameDecoding(Request.self, data)
        expectSameHead(data)
    }

    @Test("a response written as owners write them is routed by the id in its first bytes; anything else is not")
    func responseIDFromThePrefix() throws {
        let cases: [(String, Int?)] = [
            (#"{"id":12,"ok":{"changed":[]}}"#, 12), (#"{"id":0,"ok":true}"#, 0), (#"{"id":7,"ok":{}}"#, 7),
            (#"{"id":012,"ok":{}}"#, nil), (#"{"error":{"code":"x"},"id":3}"#, nil), (#"{"id":3,"error":{}}"#, nil),
            (#"{"id":,"ok":{}}"#, nil), (#"{"id":-1,"ok":{}}"#, nil), (#"{"id":123456789012345678901,"ok":{}}"#, nil),
            (#"{"ok":{},"push":"changes"}"#, nil), (#"{"id":5,"ok""#, nil), (#"{"id":5,"ok":"#, nil), (#" {"id":5,"ok":{}}"#, nil),
        ]
        for (frame, id) in cases {
            #expect(MessageHead.responseID(ByteBuffer(string: frame)) == id, "\(frame)")
            // Where it answers, the whole head agrees.
            if let id {
                let head = try MessageCoding.decode(MessageHead.self, from: ByteBuffer(string: frame))
                #expect(head.id == id && head.hasOk && head.push == nil && head.op == nil)
            }
        }
        // Every response the owner writes is read from its prefix.
        for id in [0, 1, 42, 65_535, Int(Int32.max)] {
            let frame = try MessageCoding.encode(Response(id: id, ok: ZoneChangesResult(ZoneChanges(
                zoneID: RecordZone.ID(zoneName: "Topics", ownerName: "_o"), changes: [],
                changeToken: ServerChangeToken(stringValue: "t"), moreComing: false))))
            #expect(MessageHead.responseID(frame) == id)
        }
    }
}
