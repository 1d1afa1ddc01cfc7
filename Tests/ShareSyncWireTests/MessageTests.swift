import Foundation
import NIOCore
import ShareSyncCore
import Testing

@testable import ShareSyncWire

@Suite("Messages: JSON forms of protocol.md")
struct MessageTests {
    func roundTrip<T: Codable>(_ value: T) throws -> T {
        try MessageCoding.decode(T.self, from: try MessageCoding.encode(value, includingChangedKeys: true))
    }

    func json(_ value: some Encodable) throws -> [String: Any] {
        try JSONSerialization.jsonObject(with: try MessageCoding.encodeData(value)) as! [String: Any]
    }

    var note: Record {
        var r = Record(recordType: "Note", recordID: Record.ID(recordName: "note-1", zoneID: RecordZone.ID(zoneName: "Topics", ownerName: "_owner")))
        r["title"] = "Milk"
        r["due"] = .date(Date(timeIntervalSince1970: 1_700_000_000))
        return r
    }

    @Test("authentication messages round-trip and carry their op")
    func authentication() throws {
        let hello = HelloMessage(publicKey: "K", nonce: "N", displayName: "B")
        #expect(try roundTrip(hello) == hello)
        #expect(try json(hello)["op"] as? String == "hello")
        let challenge = ChallengeMessage(publicKey: "K", nonce: "N", signature: "S")
        #expect(try roundTrip(challenge) == challenge)
        #expect(try json(challenge)["op"] as? String == "challenge")
        let auth = AuthenticateMessage(signature: "S")
        #expect(try roundTrip(auth) == auth)
        let welcome = WelcomeMessage(userRecordName: "_b", ownerName: "_a")
        #expect(try roundTrip(welcome) == welcome)
        #expect(try json(welcome) as NSDictionary == ["op": "welcome", "userRecordName": "_b", "ownerName": "_a"] as NSDictionary)
    }

    @Test("every request op round-trips with its parameters")
    func requests() throws {
        let token = ServerChangeToken(stringValue: "1.abc.5")
        let bodies: [RequestBody] = [
            .fetchShareMetadata(url: "sharesync://h:1/share/t?owner=f", shouldFetchRootRecord: true),
            .acceptShare(url: "u"), .requestAccess(url: "u"),
            .fetchDatabaseChanges(token: token, resultsLimit: 10), .fetchDatabaseChanges(token: nil, resultsLimit: nil),
            .fetchZoneChanges(zoneName: "Topics", token: token, resultsLimit: 3),
            .fetchRecords(zoneName: "Topics", recordNames: ["a", "b"]),
            .modifyRecords(zoneName: "Topics", saving: [note], deleting: ["x"], savePolicy: .changedKeys, atomically: false),
            .leaveShare(zoneName: "Topics", shareRecordName: "s"), .subscribe(token: token), .subscribe(token: nil),
            .ping,
        ]
        for (i, body) in bodies.enumerated() {
            let decoded = try roundTrip(Request(id: i, body: body))
            #expect(decoded.id == i)
            #expect(decoded.body.op == body.op)
            if case .modifyRecords(_, let saving, _, _, _, _) = decoded.body { #expect(saving == [note]) }
            #expect(
                try MessageCoding.encodeData(decoded, includingChangedKeys: true)
                    == MessageCoding.encodeData(Request(id: i, body: body), includingChangedKeys: true))
        }
        let dict = try json(Request(id: 7, body: .fetchZoneChanges(zoneName: "Topics", token: token, resultsLimit: nil)))
        #expect(dict as NSDictionary == ["id": 7, "op": "fetchZoneChanges", "zoneName": "Topics", "token": "1.abc.5"] as NSDictionary)
    }

    @Test func pingIsARequestWithNoParametersAnsweredWithAnEmptyResult() throws {
        #expect(try json(Request(id: 7, body: .ping)) as NSDictionary == ["id": 7, "op": "ping"] as NSDictionary)
        let decoded = try MessageCoding.decode(Request.self, from: Data(#"{"id":7,"op":"ping"}"#.utf8))
        #expect(decoded.id == 7)
        guard case .ping = decoded.body else { Issue.record("not a ping: \(decoded.body.op)"); return }
        let answer = try MessageCoding.decode(Response<EmptyResult>.self, from: Data(#"{"id":7,"ok":{}}"#.utf8))
        #expect(try answer.result(ownerName: "_o") == EmptyResult())
    }

    @Test("modifyRecords defaults: savePolicy ifServerRecordUnchanged, atomically true; records keep changedKeys")
    func modifyDefaults() throws {
        let line = #"{"id":1,"op":"modifyRecords","zoneName":"Topics","saving":[{"recordName":"n","recordType":"Note","fields":{"t":{"value":"x","type":"STRING"}},"changedKeys":["t"]}]}"#
        let request = try MessageCoding.decode(Request.self, from: Data(line.utf8))
        guard case .modifyRecords(_, let saving, let deleting, let policy, let atomically, _) = request.body else {
            Issue.record("wrong op"); return
        }
        #expect(policy == .ifServerRecordUnchanged)
        #expect(atomically)
        #expect(deleting.isEmpty)
        #expect(saving.first?.changedKeys == ["t"])
    }

    @Test("results round-trip; zone changes keep commit order through `order`")
    func results() throws {
        let token = ServerChangeToken(stringValue: "1.abc.9")
        let zone = RecordZone.ID(zoneName: "Topics", ownerName: "_owner")
        let changes = ZoneChanges(
            zoneID: zone,
            changes: [
                .deleted(DeletedRecord(recordID: Record.ID(recordName: "gone", zoneID: zone), recordType: "Note")),
                .changed(note),
                .deleted(DeletedRecord(recordID: Record.ID(recordName: "gone2", zoneID: zone), recordType: "Note")),
            ], changeToken: token, moreComing: true)
        let wire = try roundTrip(ZoneChangesResult(changes))
        #expect(wire.order == "dcd")
        let back = try wire.zoneChanges(ownerName: "_owner")
        #expect(back.changes == changes.changes)
        #expect(back.moreComing && back.changeToken == token)

        var bad = wire
        bad.order = "cc"
        #expect(throws: ShareSyncError.self) { try bad.zoneChanges(ownerName: "_owner") }

        let db = DatabaseChanges(changedZoneIDs: [zone], deletedZoneIDs: [RecordZone.ID(zoneName: "Old", ownerName: "_owner")], changeToken: token, moreComing: false)
        let dbBack = try roundTrip(DatabaseChangesResult(db)).databaseChanges(ownerName: "_owner")
        #expect(dbBack.changedZoneIDs == db.changedZoneIDs && dbBack.deletedZoneIDs == db.deletedZoneIDs)

        let push = ChangesPush(databaseChanges: DatabaseChangesResult(db), zoneChanges: [wire], token: token)
        #expect(try json(push)["push"] as? String == "changes")
        #expect(try roundTrip(push).zoneChanges.first?.changed.first == note)

        let response = try roundTrip(Response(id: 3, ok: FetchRecordsResult(records: [note], errors: ["x": WireError(code: "unknownItem", message: "no")])))
        let fetched = try response.result(ownerName: "_owner")
        #expect(fetched.records == [note])
        #expect(fetched.errors["x"]?.shareSyncError().code == .unknownItem)
    }

    @Test("errors map to the wire and back, with serverRecord and partialErrors")
    func errorMapping() throws {
        let zone = RecordZone.ID(zoneName: "Topics", ownerName: "_owner")
        let conflict = ShareSyncError(
            .serverRecordChanged, "changed", recordID: Record.ID(recordName: "note-1", zoneID: zone), serverRecord: note,
            rule: Rule(rawValue: "recordChangeTag"))
        let error = ShareSyncError(
            .partialFailure, "1 failed", partialErrors: ["note-1": conflict], retryAfterSeconds: 2.5)
        let wire = try roundTrip(ErrorResponse(id: 4, error))
        #expect(wire.id == 4)
        let back = wire.error.shareSyncError(ownerName: "_owner")
        #expect(back == error)
        #expect(back.partialErrors?["note-1"]?.serverRecord == note)
        #expect(back.partialErrors?["note-1"]?.zoneID == zone)

        let dict = try json(ErrorResponse(id: nil, ShareSyncError(.notAuthenticated, "no", rule: .badSignature)))
        #expect(dict["id"] is NSNull)
        #expect((dict["error"] as? [String: Any])?["code"] as? String == "notAuthenticated")

        for code in ShareSyncError.Code.allCases {
            #expect(WireError(ShareSyncError(code, "m")).shareSyncError().code == code)
        }
        let unknown = WireError(code: "somethingNew", message: "m").shareSyncError()
        #expect(unknown.code == .internalError)
        #expect(unknown.message.contains("somethingNew"))
    }

    @Test("frame errors become message-layer errors naming the rule")
    func frameErrors() {
        #expect(FrameError(.lineTooLong, "x").shareSyncError.code == .limitExceeded)
        #expect(FrameError(.inflateFailed, "x").shareSyncError.rule == .inflateFailed)
        #expect(FrameError(.idleTimeout, "x").shareSyncError.code == .networkFailure)
    }

    @Test(
        "malformed input is invalidArguments with rule malformedRequest",
        arguments: [
            "", "not json", "[]", "{", #"{"id":1}"#, #"{"id":"1","op":"acceptShare","url":"u"}"#,
            #"{"id":1,"op":"noSuchOp"}"#, #"{"id":1,"op":"fetchRecords","zoneName":"Z"}"#,
            #"{"id":1,"op":"modifyRecords","zoneName":"Z","saving":[{"recordType":"Note"}]}"#,
            #"{"id":1,"op":"modifyRecords","zoneName":"Z","savePolicy":"sometimes"}"#,
            #"{"id":1,"op":"modifyRecords","zoneName":"Z","saving":[{"recordName":"n","recordType":"Note","fields":{"x":{"value":1,"type":"NOPE"}}}]}"#,
        ])
    func malformed(line: String) {
        do {
            _ = try MessageCoding.decode(Request.self, from: Data(line.utf8))
            Issue.record("decoded \(line)")
        } catch {
            #expect(error.code == .invalidArguments)
            #expect(error.rule == .malformedRequest)
        }
    }

    @Test("a request whose id is not a whole number is refused naming the id", arguments: [#"{"id":1.5,"op":"ping"}"#, #"{"id":"1","op":"ping"}"#, #"{"id":1e40,"op":"ping"}"#])
    func idNotAnInteger(line: String) {
        do {
            _ = try MessageCoding.decode(Request.self, from: Data(line.utf8))
            Issue.record("decoded \(line)")
        } catch {
            #expect(error.rule == .malformedRequest)
            #expect(error.message.contains("id"), "\(error.message)")
            #expect(!error.message.contains("not valid JSON"), "\(error.message)")
            if line.contains("1.5") { #expect(error.message.contains("id must be a whole number (it is 1.5)"), "\(error.message)") }
        }
    }

    @Test("an id past 64 bits is refused saying the range, not that it is not whole")
    func idPast64Bits() {
        let error = #expect(throws: ShareSyncError.self) {
            try MessageCoding.decode(Request.self, from: Data(#"{"id":18446744073709551616,"op":"ping"}"#.utf8))
        }
        #expect(error?.rule == .malformedRequest)
        #expect(error?.message.contains("id must be a whole number from -2^63 to 2^63 - 1 (it is 18446744073709551616)") == true, "\(error?.message ?? "")")
    }

    @Test("a malformed field value's place is given as a JSON path, saving[0].fields.d.value")
    func jsonPathOfAMalformedValue() {
        let line = #"{"id":4,"op":"modifyRecords","zoneName":"Z","saving":[{"recordName":"a","recordType":"T","zoneID":{"zoneName":"Z","ownerRecordName":"o"},"fields":{"d":{"type":"BYTES","value":"not base64!"}}}]}"#
        let error = #expect(throws: ShareSyncError.self) { try MessageCoding.decode(Request.self, from: Data(line.utf8)) }
        #expect(error?.message.hasSuffix("field d: BYTES value is not base64 at saving[0].fields.d.value") == true, "\(error?.message ?? "")")
    }

    @Test("a number past what a double holds is named, not called invalid JSON; one inside a string is not a number")
    func numberPastDouble() {
        let line = #"{"id":4,"op":"modifyRecords","zoneName":"Z","saving":[{"recordName":"a","recordType":"T","zoneID":{"zoneName":"Z","ownerRecordName":"o"},"fields":{"d":{"type":"DOUBLE","value":1e400},"s":{"type":"STRING","value":"9e999"}}}]}"#
        let error = #expect(throws: ShareSyncError.self) { try MessageCoding.decode(Request.self, from: Data(line.utf8)) }
        #expect(error?.rule == .malformedRequest)
        #expect(error?.message.contains("the number 1e400 is out of range") == true, "\(error?.message ?? "")")
        #expect(MessageCoding.numberPastDouble(in: Data(#"{"s":"1e999","t":true,"n":-2.5e3}"#.utf8)) == nil)
    }

    @Test("resultsLimit past 64 bits is lowered like any larger value; one that is not a whole number is refused naming it")
    func resultsLimitRange() throws {
        func limit(_ value: String) throws(ShareSyncError) -> Int? {
            let request = try MessageCoding.decode(Request.self, from: Data(#"{"id":3,"op":"fetchZoneChanges","zoneName":"Z"\#(value)}"#.utf8))
            guard case .fetchZoneChanges(_, _, let limit) = request.body else { return -42 }
            return limit
        }
        #expect(try limit(#","resultsLimit":1180591620717411303424"#) == Int.max)
        #expect(try limit(#","resultsLimit":-1180591620717411303424"#) == 0)
        #expect(try limit(#","resultsLimit":7"#) == 7)
        #expect(try limit(#","resultsLimit":null"#) == nil)
        #expect(try limit("") == nil)
        for bad in [#","resultsLimit":1.5"#, #","resultsLimit":"7""#, #","resultsLimit":true"#] {
            let error = #expect(throws: ShareSyncError.self) { _ = try limit(bad) }
            #expect(error?.rule == .malformedRequest)
            #expect(error?.message.contains("resultsLimit must be a whole number") == true, "\(error?.message ?? "")")
        }
        let database = try MessageCoding.decode(
            Request.self, from: Data(#"{"id":3,"op":"fetchDatabaseChanges","resultsLimit":1e30}"#.utf8))
        guard case .fetchDatabaseChanges(_, let limit) = database.body else { Issue.record("\(database.body)"); return }
        #expect(limit == Int.max)
    }

    @Test("the head of a malformed request still yields its id when there is one")
    func headOfMalformed() throws {
        #expect(try MessageCoding.decode(MessageHead.self, from: Data(#"{"id":9,"op":"noSuchOp"}"#.utf8)).id == 9)
        #expect(try MessageCoding.decode(MessageHead.self, from: Data(#"{"id":"x"}"#.utf8)).id == nil)
    }
}

@Suite("Identities: keys, fingerprints, transcripts")
struct IdentityTests {
    @Test("fingerprint is the hex of the first 16 bytes of SHA-256 of the raw public key")
    func fingerprint() throws {
        // RFC 8032 test vector 1.
        let secret = Data(hex: "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
        let identity = try NodeIdentity(rawPrivateKey: secret)
        #expect(identity.rawPublicKey == Data(hex: "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"))
        #expect(identity.fingerprint.count == 32)
        #expect(identity.fingerprint == identity.fingerprint.lowercased())
        #expect(identity.userRecordName == "_" + identity.fingerprint)
        #expect(Fingerprint.of(publicKeyBase64: identity.publicKeyBase64) == identity.fingerprint)
        // The signature of the empty message, from RFC 8032.
        #expect(identity.signBase64(Data()) == Data(hex: "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b").base64EncodedString())
    }

    @Test("transcripts are signed and verified as protocol.md writes them; other keys and transcripts fail")
    func transcripts() {
        let a = NodeIdentity.generate()
        let b = NodeIdentity.generate()
        let nc = AuthTranscript.makeNonce()
        let ns = AuthTranscript.makeNonce()
        #expect(nc != ns && AuthTranscript.isBase64Of32Bytes(nc))
        let t = AuthTranscript.server(clientNonce: nc, serverNonce: ns, clientKey: b.publicKeyBase64)
        #expect(String(decoding: t, as: UTF8.self) == "sharesync-server-v1\n\(nc)\n\(ns)\n\(b.publicKeyBase64)")
        let s = a.signBase64(t)
        #expect(AuthTranscript.verify(signature: s, publicKey: a.publicKeyBase64, data: t))
        #expect(!AuthTranscript.verify(signature: s, publicKey: b.publicKeyBase64, data: t))
        let c = AuthTranscript.client(serverNonce: ns, clientNonce: nc, serverKey: a.publicKeyBase64)
        #expect(String(decoding: c, as: UTF8.self) == "sharesync-client-v1\n\(ns)\n\(nc)\n\(a.publicKeyBase64)")
        #expect(!AuthTranscript.verify(signature: s, publicKey: a.publicKeyBase64, data: c))
        #expect(!AuthTranscript.verify(signature: "garbage", publicKey: a.publicKeyBase64, data: t))
    }

    @Test("a key file is created with mode 0600 in a 0700 folder and loads back")
    func keyFile() throws {
        let home = NSTemporaryDirectory() + "sharesync-identity-\(UUID().uuidString)/node"
        defer { try? FileManager.default.removeItem(atPath: (home as NSString).deletingLastPathComponent) }
        let created = try NodeIdentity.loadOrCreate(home: home)
        let loaded = try NodeIdentity.loadOrCreate(home: home)
        #expect(created.fingerprint == loaded.fingerprint)
        let fileMode = try FileManager.default.attributesOfItem(atPath: home + "/identity.key")[.posixPermissions] as? Int
        let dirMode = try FileManager.default.attributesOfItem(atPath: home)[.posixPermissions] as? Int
        #expect(fileMode == 0o600)
        #expect(dirMode == 0o700)
        try Data("not a key\n".utf8).write(to: URL(fileURLWithPath: home + "/identity.key"))
        #expect(throws: ShareSyncError.self) { try NodeIdentity.load(path: home + "/identity.key") }
    }
}

extension Data {
    init(hex: String) {
        var bytes: [UInt8] = []
        var i = hex.startIndex
        while i < hex.endIndex {
            let j = hex.index(i, offsetBy: 2)
            bytes.append(UInt8(hex[i..<j], radix: 16)!)
            i = j
        }
        self.init(bytes)
    }
}
