import Foundation
import NIOCore
import NIOEmbedded
import ShareSyncCore
@testable import ShareSyncNode
import ShareSyncStore
@testable import ShareSyncWire
import Testing

// No push is skipped on either end (issue 15, observations 3 and 7): a push the client cannot read
// closes the connection instead of vanishing (tested on the client's end in ClientHandlerEmbeddedTests),
// and a subscriber that stops reading is closed by the
// owner after a deadline instead of making it hold its pushes.

@Suite("Pushes are never skipped")
struct NothingSkippedTests {
    // A push the client cannot read: see ClientHandlerEmbeddedTests.anUndecodablePushClosesTheConnection,
    // which feeds it in pieces to the participant's end of the link.

    @Test("a subscriber that stops reading is closed after the write deadline; other participants keep syncing")
    func stalledSubscriberClosed() async throws {
        var configuration = OwnerServer.Configuration()
        configuration.pushWriteTimeout = .seconds(1)
        let owner = try await TestOwner.start(configuration)
        let staller = NodeIdentity.generate()
        let b = try TestParticipant()
        defer { b.remove() }
        let (url, _) = try owner.shareTopic(invite: [(staller, .readOnly), (b.identity, .readOnly)])
        let sync = try b.makeSync(pageSize: nil)
        try sync.start()
        try await sync.accept(url: url)

        let raw = try await RawClient.plain(port: owner.server.port, .tls(staller), receiveBuffer: 16 * 1024)
        let (answer, _, _) = try await raw.authenticate(staller)
        #expect(answer?["op"] as? String == "welcome")
        try await raw.sendJSON(["id": 1, "op": "acceptShare", "url": url])
        #expect(try await raw.json()?["ok"] != nil)
        try await raw.sendJSON(["id": 2, "op": "subscribe"])
        #expect(try await raw.json()?["ok"] != nil)
        // Stop reading: the kernel buffers fill and the owner's push waits to be written.
        try await raw.channel.setOption(ChannelOptions.autoRead, value: false).get()
        #expect(owner.server.connectionCount == 2)

        // About 9.6 MB of changes (7 MB deflated), more than the owner's send buffer (at most 4 MiB on
        // Linux by default) and the stalled client's 16 KiB receive buffer hold.
        for batch in 0..<16 {
            let notes = (0..<20).map { i in
                var note = Record(recordType: "Note", recordID: owner.id("s\(batch)-\(i)"))
                note["body"] = .string(incompressibleText(30_000, index: batch * 20 + i))
                note.setParent(owner.id("topic"))
                return note
            }
            _ = try owner.db.modifyRecords(saving: notes, savePolicy: .allKeys).get()
        }
        // The stalled connection is closed; the engine converges. (By identity: on a loaded machine the
        // engine's own connection may be between a close and its reconnection when counted.)
        let deadline = ContinuousClock.now + .seconds(30)
        while owner.server.connectedIdentities.contains(staller.userRecordName), ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(!owner.server.connectedIdentities.contains(staller.userRecordName), "the stalled subscriber's connection must be closed")
        try await expectReplicaMatches(sync, owner, timeout: 30)
        let server = owner.server, engine = b.identity.userRecordName
        try await eventually { server.connectedIdentities == [engine] }
        await raw.close()
        await sync.stop()
        try await owner.stop()
    }
}
