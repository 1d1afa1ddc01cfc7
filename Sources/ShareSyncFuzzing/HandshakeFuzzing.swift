import NIOCore
import NIOEmbedded
import ShareSyncWire

/// The handshake target. Input: the bytes a peer sends from the start of the connection.
///
/// Each of the first lines is parsed as a client hello, a server hello and a server reply; what parses
/// must render to a line that parses back to the same value, and a negotiated answer must be one the
/// grammar allows (the highest common version, an encoding both sides allow). Then the whole input goes
/// to a server and to a client `HandshakeHandler` on `EmbeddedChannel`s (split in two reads at a point
/// the first byte chooses), followed by the frames of whatever encoding was negotiated, and the clock is
/// run past the handshake and idle timeouts.
enum HandshakeFuzzing {
    static let limits = FrameLimits(maximumLineLength: 4096, maximumFrameSize: 16 * 1024, handshakeTimeout: .seconds(10), idleTimeout: .seconds(120))
    static let servers = [
        ServerConfiguration(limits: limits),
        ServerConfiguration(supportedVersions: [1, 2, 7], allowPlain: false, allowDeflateBase64: false, limits: limits),
    ]

    static func run(_ input: UnsafeRawBufferPointer) throws(FuzzFailure) {
        let bytes = Array(input)
        for line in bytes.split(separator: 0x0A, maxSplits: 3, omittingEmptySubsequences: false).prefix(3) {
            try parseLine(Substring(String(decoding: line, as: UTF8.self)))
        }
        let split = bytes.first.map { Int($0) % (bytes.count + 1) } ?? 0
        try runHandler(.server(servers[bytes.count % 2]), bytes, split: split)
        try runHandler(.client(ClientConfiguration(encodings: [.deflate, .plain, .deflateBase64], limits: limits)), bytes, split: split)
    }

    static func parseLine(_ line: Substring) throws(FuzzFailure) {
        if let hello = try? Handshake.ClientHello(parsing: line) {
            try check(!hello.versions.isEmpty && !hello.encodings.isEmpty, "a client hello with an empty list: \(line)")
            try check(hello.versions.allSatisfy { (1...999_999).contains($0) }, "a version out of range: \(line)")
            let again = try? Handshake.ClientHello(parsing: Substring(hello.render()))
            try check(again == hello, "the client hello '\(hello.render())' does not parse back from '\(line)'")
            for server in servers {
                guard let answer = try? Handshake.negotiate(hello, configuration: server) else { continue }
                let common = hello.versions.filter(server.supportedVersions.contains)
                try check(answer.version == common.max(), "negotiated version \(answer.version) for \(line)")
                let first = hello.encodings.compactMap(FrameEncoding.init(rawValue:)).first(where: server.allowedEncodings.contains)
                try check(answer.encoding == first, "negotiated encoding \(answer.encoding) for \(line)")
            }
        }
        if let hello = try? Handshake.ServerHello(parsing: line) {
            let again = try? Handshake.ServerHello(parsing: Substring(hello.render()))
            try check(again == hello, "the server hello '\(hello.render())' does not parse back from '\(line)'")
        }
        if case .accepted(let hello)? = try? Handshake.ServerReply(parsing: line) {
            try check((try? Handshake.ServerHello(parsing: line)) == hello, "ServerReply and ServerHello disagree on '\(line)'")
        }
    }

    static func runHandler(_ role: HandshakeHandler.Role, _ bytes: [UInt8], split: Int) throws(FuzzFailure) {
        let channel = EmbeddedChannel()
        defer { _ = try? channel.finish(acceptAlreadyClosed: true) }
        let promise = channel.eventLoop.makePromise(of: NegotiatedSession.self)
        let recorder = SessionRecorder()
        do {
            try channel.pipeline.syncOperations.addHandler(HandshakeHandler(role: role, completion: promise))
            try channel.pipeline.syncOperations.addHandler(recorder)
            try channel.pipeline.syncOperations.addHandler(FrameErrorHandler { error in ByteBuffer(string: error.code.rawValue) })
            try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        } catch {
            throw FuzzFailure("cannot set up the channel: \(error)")
        }
        for part in [bytes[..<split], bytes[split...]] where !part.isEmpty {
            do {
                try channel.writeInbound(ByteBuffer(bytes: part))
            } catch {
                break
            }
        }
        // Whatever came out of the decoder is read, then the timeouts fire.
        while (try? channel.readInbound(as: ByteBuffer.self)) != nil {}
        // Not `writeOutbound`: it waits for the write, which the handler holds until the handshake ends.
        channel.writeAndFlush(ByteBuffer(string: "{}"), promise: nil)
        channel.embeddedEventLoop.advanceTime(by: .seconds(300))
        while (try? channel.readOutbound(as: ByteBuffer.self)) != nil {}
        if case .server(let configuration) = role {
            for session in recorder.sessions {
                try check(configuration.allowedEncodings.contains(session.encoding), "the server agreed to \(session.encoding)")
                try check(configuration.supportedVersions.contains(session.version), "the server agreed to version \(session.version)")
            }
        }
    }
}

/// Keeps the sessions the handshake handler announces.
private final class SessionRecorder: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    var sessions: [NegotiatedSession] = []

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let session = event as? NegotiatedSession { self.sessions.append(session) }
        context.fireUserInboundEventTriggered(event)
    }
}
