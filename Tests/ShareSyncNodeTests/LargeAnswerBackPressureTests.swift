import Foundation
import NIOCore
import ShareSyncCore
@testable import ShareSyncNode
import ShareSyncWire
import Testing

/// A client that asks for many large answers and reads none makes the owner read only a couple of
/// them: the rest wait (protocol.md, "Back-pressure"), and all are answered once it reads.
@Suite("Large answers to a client that reads nothing")
struct LargeAnswerBackPressureTests {
    @Test("32 fetchRecords of 900 KB records, nothing read: only a few are read until the client reads; then all 32 are answered")
    func largeAnswersWait() async throws {
        let owner = try await TestOwner.start()
        let reader = NodeIdentity.generate()
        let notes = (0..<8).map { i in
            var note = Record(recordType: "Note", recordID: owner.id("big\(i)"))
            note["body"] = .string(incompressibleText(900_000, index: i))
            note.setParent(owner.id("topic"))
            return note
        }
        _ = try owner.db.modifyRecords(saving: notes, savePolicy: .allKeys).get()
        let (url, _) = try owner.shareTopic(invite: [(reader, .readOnly)])
        let raw = try await RawClient.plain(port: owner.server.port, .tls(reader), receiveBuffer: 65_536)
        _ = try await raw.authenticate(reader)
        try await raw.sendJSON(["id": 1, "op": "acceptShare", "url": url])
        #expect(try await raw.json()?["ok"] != nil)

        // Stop reading, then ask 32 times for one 900 KB record each.
        try await raw.channel.setOption(ChannelOptions.autoRead, value: false)
        let before = owner.server.registry.largeAnswersStarted.load(ordering: .relaxed)
        var requests = raw.channel.allocator.buffer(capacity: 8_192)
        for id in 100..<132 {
            requests.writeString(#"{"id":\#(id),"op":"fetchRecords","zoneName":"Topics","recordNames":["big\#(id % 8)"]}"# + "\n")
        }
        try await raw.channel.writeAndFlush(requests)
        // Time for the owner to read whatever it would (before: all 32, 29 MB held for this client; now the two permits, and what the sockets
        // take before writes wait: 7 in the runs here).
        try await Task.sleep(for: .seconds(2))
        let started = owner.server.registry.largeAnswersStarted.load(ordering: .relaxed) - before
        #expect(started <= 14, "\(started) of 32 large answers were read for a client that reads nothing")
        #expect(started >= 1)

        // Reading again: every request is answered, in full.
        raw.channel.read()
        try await raw.channel.setOption(ChannelOptions.autoRead, value: true)
        var answered = Set<Int>()
        for _ in 0..<32 {
            let answer = try #require(try await raw.json(60))
            #expect(answer["ok"] != nil, "\(answer["error"] ?? "")")
            if let id = answer["id"] as? Int { answered.insert(id) }
        }
        #expect(answered == Set(100..<132))
        await raw.close()
        try await owner.stop()
    }
}
