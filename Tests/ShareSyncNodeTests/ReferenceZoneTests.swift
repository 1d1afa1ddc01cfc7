import Foundation
import ShareSyncCore
import ShareSyncNode
import ShareSyncTestSupport
import ShareSyncWire
import Testing

/// A participant's references name the owner's zones as its records do: with the owner's user record
/// name, or without a zoneID for the record's own zone.
@Suite("References in a participant's write")
struct ReferenceZoneTests {
    @Test("a reference whose zoneID is the owner's own form (__defaultOwner__, or no ownerRecordName) is zoneMismatch and saves nothing")
    func ownersOwnFormIsRefused() async throws {
        let owner = try await TestOwner.start()
        let b = NodeIdentity.generate()
        let (url, _) = try owner.shareTopic(invite: [(b, .readWrite)])
        try owner.saveNote("note-1", title: "one")
        let client = try await RawClient.plain(port: owner.server.port, .tls(b))
        try await client.authenticate(b)
        try await client.sendJSON(["id": 1, "op": "acceptShare", "url": url])
        #expect(try await client.json()?["ok"] != nil)
        let ownerName = owner.identity.userRecordName
        func save(_ id: Int, _ name: String, field: [String: Any]) async throws -> [String: Any]? {
            let record: [String: Any] = [
                "recordName": name, "recordType": "Note", "zoneID": ["zoneName": "Topics", "ownerRecordName": ownerName],
                "parent": ["recordName": "topic"], "fields": ["r": field],
            ]
            try await client.sendJSON(["id": id, "op": "modifyRecords", "zoneName": "Topics", "saving": [record], "atomically": false])
            return try await client.json()
        }
        let ownForms: [[String: Any]] = [
            ["type": "REFERENCE", "value": ["recordName": "note-1", "zoneID": ["zoneName": "Topics", "ownerRecordName": "__defaultOwner__"]]],
            ["type": "REFERENCE", "value": ["recordName": "note-1", "zoneID": ["zoneName": "Topics"]]],
            ["type": "REFERENCE_LIST", "value": [["recordName": "note-1"], ["recordName": "note-1", "zoneID": ["zoneName": "Topics"]]]],
        ]
        for (i, field) in ownForms.enumerated() {
            let answer = try await save(10 + i, "r\(i)", field: field)
            #expect(errorCode(answer) == "invalidArguments" && errorRule(answer) == "zoneMismatch", "\(answer ?? [:])")
            let message = ((answer?["error"] as? [String: Any])?["message"] as? String) ?? ""
            #expect(message.contains("field r refers to note-1"), "\(message)")
            #expect(throws: ShareSyncError.self) { try owner.db.fetchRecord(owner.id("r\(i)")) }
        }
        // The owner's user record name, or no zoneID: the record's zone, saved.
        for (i, field) in [
            ["type": "REFERENCE", "value": ["recordName": "note-1", "zoneID": ["zoneName": "Topics", "ownerRecordName": ownerName]]],
            ["type": "REFERENCE", "value": ["recordName": "note-1"]],
        ].enumerated() {
            let answer = try await save(20 + i, "ok\(i)", field: field)
            #expect(answer?["ok"] != nil, "\(answer ?? [:])")
            #expect(try owner.db.fetchRecord(owner.id("ok\(i)"))["r"]?.references.first?.recordID.recordName == "note-1")
        }
        // A parent in the owner's own form: the same.
        try await client.sendJSON(["id": 25, "op": "modifyRecords", "zoneName": "Topics", "saving": [[
            "recordName": "p0", "recordType": "Note", "zoneID": ["zoneName": "Topics", "ownerRecordName": ownerName],
            "parent": ["recordName": "topic", "zoneID": ["zoneName": "Topics"]], "fields": [:] as [String: Any],
        ] as [String: Any]]])
        let parentAnswer = try await client.json()
        #expect(errorRule(parentAnswer) == "zoneMismatch", "\(parentAnswer ?? [:])")
        #expect(throws: ShareSyncError.self) { try owner.db.fetchRecord(owner.id("p0")) }
        // A write applied under its writeID and sent again (by an owner of an earlier version it was
        // taken) gets its kept answer, not the refusal.
        let record: [String: Any] = [
            "recordName": "w0", "recordType": "Note", "zoneID": ["zoneName": "Topics", "ownerRecordName": ownerName],
            "parent": ["recordName": "topic"], "fields": ["r": ["type": "REFERENCE", "value": ["recordName": "note-1"]]],
        ]
        try await client.sendJSON(["id": 26, "op": "modifyRecords", "zoneName": "Topics", "saving": [record], "writeID": "w-ref-1"])
        let first = try await client.json()
        #expect(first?["ok"] != nil, "\(first ?? [:])")
        var ownForm = record
        ownForm["fields"] = ["r": ["type": "REFERENCE", "value": ["recordName": "note-1", "zoneID": ["zoneName": "Topics"]]]]
        try await client.sendJSON(["id": 27, "op": "modifyRecords", "zoneName": "Topics", "saving": [ownForm], "writeID": "w-ref-1"])
        let repeated = try await client.json()
        #expect(repeated?["ok"] != nil, "\(repeated ?? [:])")

        // A TIMESTAMP past 64-bit milliseconds fails its own item (validDate); the other item is saved.
        let at: [String: Any] = [
            "recordName": "late", "recordType": "Note", "zoneID": ["zoneName": "Topics", "ownerRecordName": ownerName],
            "parent": ["recordName": "topic"], "fields": ["at": ["type": "TIMESTAMP", "value": 1e20]],
        ]
        let fine: [String: Any] = [
            "recordName": "fine", "recordType": "Note", "zoneID": ["zoneName": "Topics", "ownerRecordName": ownerName],
            "parent": ["recordName": "topic"], "fields": ["at": ["type": "TIMESTAMP", "value": 1_700_000_000_000]],
        ]
        try await client.sendJSON(["id": 30, "op": "modifyRecords", "zoneName": "Topics", "saving": [at, fine], "atomically": false])
        let answer = try await client.json()
        let itemError = ((answer?["ok"] as? [String: Any])?["errors"] as? [String: Any])?["late"] as? [String: Any]
        #expect(itemError?["rule"] as? String == "validDate", "\(answer ?? [:])")
        #expect(try owner.db.fetchRecord(owner.id("fine")).recordID.recordName == "fine")
        #expect(throws: ShareSyncError.self) { try owner.db.fetchRecord(owner.id("late")) }
        await client.close()
        try await owner.stop()
    }
}
