import Foundation
import Logging
import NIOCore
import NIOExtras
import NIOPosix
import ShareSyncCore
import Synchronization

/// The daemon's end of the control channel: a Unix domain socket, one JSON request per line, one JSON
/// response per line (the format is described on ``ControlRequest``).
///
/// The socket file gets mode 0600 and lives in the node home (0700), so only the node's user can
/// connect. ``run()`` serves until ``close()``; each connection runs in its own child task and a bad
/// client never stops the server.
public final class ControlServer: Sendable {
    /// The longest request line accepted; a longer one closes that connection.
    public static let maximumLineLength = 4 * 1024 * 1024

    /// The socket's path.
    public let path: String
    private let listener: NIOAsyncChannel<NIOAsyncChannel<ByteBuffer, ByteBuffer>, Never>
    private let handler: ControlHandler
    private let logger: Logger
    private let inProgress = Mutex(0)

    private init(
        path: String, listener: NIOAsyncChannel<NIOAsyncChannel<ByteBuffer, ByteBuffer>, Never>,
        handler: ControlHandler, logger: Logger
    ) {
        self.path = path
        self.listener = listener
        self.handler = handler
        self.logger = logger
    }

    /// Binds the socket, replacing a stale socket file left by a daemon that died.
    /// Fails with ``ShareSyncError/Code/serviceUnavailable`` if another daemon is serving it. (A daemon
    /// checks the home's lock long before, ``NodeHome/lockForDaemon()``; this is the second line.)
    public static func bind(
        path: String, handler: ControlHandler, logger: Logger, group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) async throws(ShareSyncError) -> ControlServer {
        if FileManager.default.fileExists(atPath: path) {
            if await ControlClient.isServing(path: path) {
                throw ShareSyncError(
                    .serviceUnavailable, "a daemon is already running on \(path)", rule: .oneDaemonPerHome)
            }
            try? FileManager.default.removeItem(atPath: path)
        }
        do {
            let listener = try await ServerBootstrap(group: group)
                .bind(unixDomainSocketPath: path, cleanupExistingSocketFile: false) { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandler(
                            ByteToMessageHandler(LineBasedFrameDecoder(), maximumBufferSize: maximumLineLength))
                        return try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel)
                    }
                }
            chmod(path, 0o600)
            return ControlServer(path: path, listener: listener, handler: handler, logger: logger)
        } catch {
            throw ShareSyncError(.serviceUnavailable, "cannot listen on the control socket \(path): \(error)")
        }
    }

    /// Serves connections until ``close()``.
    public func run() async {
        do {
            try await withThrowingDiscardingTaskGroup { group in
                try await listener.executeThenClose { inbound in
                    for try await connection in inbound {
                        group.addTask { await self.serve(connection) }
                    }
                }
                group.cancelAll()
            }
        } catch {
            logger.debug("control socket closed", metadata: ["error": "\(error)"])
        }
    }

    /// Stops listening and removes the socket file.
    public func close() async {
        try? await listener.channel.close()
        try? FileManager.default.removeItem(atPath: path)
    }

    /// How many requests are being answered now.
    public var requestsInProgress: Int { inProgress.withLock { $0 } }

    /// Serves one connection's requests in order. A request whose client goes away (the CLI's timeout,
    /// Ctrl-C) is cancelled: the wait it was in (an accept's sync, say) ends, and the daemon does no
    /// more work for nobody.
    private func serve(_ connection: NIOAsyncChannel<ByteBuffer, ByteBuffer>) async {
        let channel = connection.channel
        do {
            try await connection.executeThenClose { inbound, outbound in
                for try await line in inbound {
                    let request = Data(line.readableBytesView)
                    guard var response = await respond(toLine: request, unlessClosed: channel) else {
                        logger.info("the control client went away; its request was cancelled")
                        return
                    }
                    response.append(UInt8(ascii: "\n"))
                    try await outbound.write(ByteBuffer(bytes: response))
                }
            }
        } catch {
            logger.debug("control connection ended", metadata: ["error": "\(error)"])
        }
    }

    /// The handler's response, or nil if `channel` closed first (the handler's task is then cancelled).
    private func respond(toLine request: Data, unlessClosed channel: any Channel) async -> Data? {
        inProgress.withLock { $0 += 1 }
        defer { inProgress.withLock { $0 -= 1 } }
        return await withTaskGroup(of: Data?.self) { group in
            group.addTask {
                // On the store's threads: most requests read or write a database (StoreThreads).
                await withTaskExecutorPreference(StoreThreads.executor) { await self.handler.respond(toLine: request) }
            }
            group.addTask {
                // Ends when the channel closes, or when this task is cancelled (the response came).
                let (closed, continuation) = AsyncStream.makeStream(of: Void.self)
                channel.closeFuture.whenComplete { _ in continuation.finish() }
                for await _ in closed {}
                return nil
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first
        }
    }
}
