import NIOCore
import NIOEmbedded
import NIOSSL
import Testing
@testable import ShareSyncWire

/// Records the transport-security events a pipeline fires.
private final class SecurityRecorder: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    var events: [ConnectionSecurity] = []
    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let event = event as? ConnectionSecurity { events.append(event) }
        context.fireUserInboundEventTriggered(event)
    }
}

/// The server's first-byte choice between TLS and cleartext (`ServerTransportSelector`), on an
/// `EmbeddedChannel`.
@Suite struct TransportSelectorTests {
    private func channel(allowCleartext: Bool) throws -> (EmbeddedChannel, SecurityRecorder) {
        let channel = EmbeddedChannel()
        let context = try TransportSecurity.serverContext(try NodeIdentity.generate().tlsCredentials())
        try TransportSecurity.addServerHandlers(to: channel.pipeline.syncOperations, context: context, allowCleartext: allowCleartext)
        let recorder = SecurityRecorder()
        try channel.pipeline.syncOperations.addHandler(recorder)
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        return (channel, recorder)
    }

    @Test func cleartextIsRefusedWithTLSRequiredAndClosed() throws {
        let (channel, recorder) = try channel(allowCleartext: false)
        try channel.writeInbound(ByteBuffer(string: "SHARESYNC versions=1 encodings=plain\n"))
        let line = try #require(try channel.readOutbound(as: ByteBuffer.self))
        #expect(String(buffer: line).hasPrefix("SHARESYNC-ERROR tlsRequired "))
        #expect(String(buffer: line).hasSuffix("\n"))
        #expect(try channel.readInbound(as: ByteBuffer.self) == nil)
        #expect(!channel.isActive)
        #expect(recorder.events.isEmpty)
    }

    @Test func allowedCleartextPassesThroughUnchangedAndTheSelectorLeaves() throws {
        let (channel, recorder) = try channel(allowCleartext: true)
        try channel.writeInbound(ByteBuffer(string: "SHARESYNC versions=1 encodings=plain\n"))
        #expect(try channel.readInbound(as: ByteBuffer.self) == ByteBuffer(string: "SHARESYNC versions=1 encodings=plain\n"))
        #expect(recorder.events == [.cleartext])
        #expect((try? channel.pipeline.syncOperations.handler(type: ServerTransportSelector.self)) == nil)
        try channel.writeInbound(ByteBuffer(string: "more\n"))
        #expect(try channel.readInbound(as: ByteBuffer.self) == ByteBuffer(string: "more\n"))
        _ = try? channel.finish()
    }

    @Test func aTLSRecordStartsTLSInPlaceOfTheSelector() throws {
        let (channel, recorder) = try channel(allowCleartext: true)
        // The first bytes of a TLS ClientHello record (content type 0x16, legacy version 3.1).
        try channel.writeInbound(ByteBuffer(bytes: [0x16, 0x03, 0x01]))
        #expect(try channel.readInbound(as: ByteBuffer.self) == nil)
        #expect((try? channel.pipeline.syncOperations.handler(type: NIOSSLServerHandler.self)) != nil)
        #expect((try? channel.pipeline.syncOperations.handler(type: ServerTransportSelector.self)) == nil)
        #expect(recorder.events.isEmpty)
        _ = try? channel.finish()
    }
}
