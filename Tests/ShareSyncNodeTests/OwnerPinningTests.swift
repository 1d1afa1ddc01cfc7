import Foundation
import NIOCore
import NIOPosix
import ShareSyncCore
import ShareSyncNode
import ShareSyncStore
import ShareSyncWire
import Synchronization
import Testing

/// A TCP listener on 127.0.0.1, port 0, that only counts the connections it accepts.
enum CountingListener {
    final class Counter: ChannelInboundHandler, Sendable {
        typealias InboundIn = ByteBuffer
        let accepted: @Sendable () -> Void
        init(_ accepted: @escaping @Sendable () -> Void) { self.accepted = accepted }
        func channelActive(context: ChannelHandlerContext) {
            accepted()
            context.fireChannelActive()
        }
    }

    static func start() async throws -> (listener: any Channel, accepted: @Sendable () -> Int) {
        let count = Mutex(0)
        let counted: @Sendable () -> Void = { count.withLock { $0 += 1 } }
        let listener = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(Counter(counted)) }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        return (listener, { count.withLock { $0 } })
    }
}

/// A share URL without its `owner=` part.
func withoutOwnerFingerprint(_ url: String) throws -> String {
    var parsed = try #require(ShareURL(string: url))
    parsed.ownerFingerprint = nil
    let bare = parsed.absoluteString
    #expect(!bare.contains("owner="))
    return bare
}

@Suite("Pinning: a node connects by URL only to the owner whose key fingerprint the URL carries")
struct OwnerPinningTests {
    @Test func connectingByAURLWithoutTheOwnersFingerprintIsRefusedBeforeAnythingConnects() async throws {
        let (listener, accepted) = try await CountingListener.start()
        let port = try #require(listener.localAddress?.port)
        let url = "sharesync://127.0.0.1:\(port)/share/some-token"
        let error = await expectShareSyncError { _ = try await OwnerConnection.connect(url: url, identity: NodeIdentity.generate()) }
        #expect(error?.code == .invalidArguments)
        #expect(error?.rule == .ownerFingerprintMissing)
        #expect(error?.message.contains("owner's key fingerprint") == true)
        #expect(error?.message.contains("verify whom it talks to") == true)
        try await Task.sleep(for: .milliseconds(100))
        #expect(accepted() == 0, "nothing may connect for a URL without owner=")
        try await listener.close()
    }

    @Test func acceptingAShareByAURLWithoutTheOwnersFingerprintIsRefusedAndRecordsNoOwner() async throws {
        let owner = try await TestOwner.start()
        let b = try TestParticipant()
        defer { b.remove() }
        let (url, shareName) = try owner.shareTopic(invite: [(b.identity, .readWrite)])
        let bare = try withoutOwnerFingerprint(url)
        let sync = try b.makeSync()
        try sync.start()

        let accept = await expectShareSyncError { try await sync.accept(url: bare, timeout: .seconds(10)) }
        #expect(accept?.code == .invalidArguments)
        #expect(accept?.rule == .ownerFingerprintMissing)
        let metadata = await expectShareSyncError { _ = try await sync.fetchShareMetadata(url: bare) }
        #expect(metadata?.code == .invalidArguments)
        #expect(metadata?.rule == .ownerFingerprintMissing)
        #expect(try sync.replica.owners().isEmpty)
        // The owner never saw the participant accept.
        let share = try #require(Share(try owner.db.fetchRecord(owner.id(shareName))))
        #expect(share.participants.allSatisfy { $0.role == .owner || $0.acceptanceStatus == .pending })

        // The full URL works, and the stored fingerprint is the URL's.
        try await sync.accept(url: url, timeout: .seconds(30))
        let stored = try #require(try sync.replica.owner(named: owner.identity.userRecordName))
        #expect(stored.fingerprint == owner.identity.fingerprint)
        await sync.stop()
        try await owner.stop()
    }
}
