import Foundation
import Logging
import ShareSyncCore
import ShareSyncStore
import ShareSyncWire
import Testing

@testable import ShareSyncNode

@Suite("A link and the engine's stop")
struct LinkStopTests {
    @Test("a link stopped before its start (the engine's stop between adding a link and starting it) never runs")
    func aLinkStoppedBeforeItStartsNeverRuns() async throws {
        let replica = try SharedDatabaseReplica(inMemory: ())
        // An owner at a port nobody listens on: a running link would try, fail and wait to reconnect.
        let owner = NodeIdentity.generate()
        try replica.setOwner(OwnerInfo(ownerName: owner.userRecordName, host: "127.0.0.1", port: 9, fingerprint: owner.fingerprint))
        let link = ParticipantOwnerLink(
            ownerName: owner.userRecordName, replica: replica, identity: .generate(),
            configuration: .init(initialBackoff: .milliseconds(10), maximumBackoff: .milliseconds(20)), hub: ParticipantEventHub(),
            logger: Logger(label: "test"), forget: { false })
        await link.stop()
        link.start()
        try await Task.sleep(for: .milliseconds(300))
        // Before, start() after stop() launched the link's task, which nothing would cancel.
        #expect(link.status == .stopped)
        #expect(link.failureCount == 0)
    }
}
