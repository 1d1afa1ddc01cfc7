import Foundation
import ShareSyncCore
import ShareSyncNode
import ShareSyncWire
import Testing

/// On a subscribed connection, the answer to a `modifyRecords` comes before the push of the change it
/// made (protocol.md, "Pushes"): a writer learns its write succeeded first, and the push follows.
/// (Without the deferred wake-up in `ConnectionShared.commitObserved`, 2 runs in 3 failed here.)
@Suite("A write's answer before its push")
struct AnswerBeforePushTests {
    @Test("each of 20 writes on a subscribed connection is answered before the push that carries it")
    func answerThenPush() async throws {
        let owner = try await TestOwner.start()
        let writer = NodeIdentity.generate()
        let (url, _) = try owner.shareTopic(invite: [(writer, .readWrite)])
        let raw = try await RawClient.plain(port: owner.server.port, .tls(writer))
        _ = try await raw.authenticate(writer)
        try await raw.sendJSON(["id": 1, "op": "acceptShare", "url": url])
        #expect(try await raw.json()?["ok"] != nil)
        try await raw.sendJSON(["id": 2, "op": "subscribe"])
        #expect(try await raw.json()?["ok"] != nil)

        // As the participant names them: the zone with its owner's name.
        let zone = RecordZone.ID(zoneName: "Topics", ownerName: owner.identity.userRecordName)
        for i in 0..<20 {
            var note = Record(recordType: "Note", recordID: Record.ID(recordName: "w\(i)", zoneID: zone))
            note["title"] = .string("write \(i)")
            note.setParent(Record.ID(recordName: "topic", zoneID: zone))
            let record = try JSONSerialization.jsonObject(with: note.jsonData())
            let id = 10 + i
            try await raw.sendJSON(["id": id, "op": "modifyRecords", "zoneName": "Topics", "saving": [record]])
            let first = try #require(try await raw.json())
            #expect(first["id"] as? Int == id, "write \(i): the first frame after it is \(first)")
            #expect(first["ok"] != nil, "write \(i): \(first)")
            // Then the push with the record written (it may also carry earlier changes).
            let push = try #require(try await raw.json())
            #expect(push["push"] as? String == "changes", "write \(i): \(push)")
            let text = String(decoding: try JSONSerialization.data(withJSONObject: push), as: UTF8.self)
            #expect(text.contains("\"w\(i)\""), "write \(i): the push does not carry it")
        }
        await raw.close()
        try await owner.stop()
    }
}
