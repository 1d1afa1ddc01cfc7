import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import Prometheus
import ShareSyncCore

/// The Prometheus endpoint of `sharesync run --metrics HOST:PORT`: `GET /metrics` answers the registry's
/// metrics in the Prometheus text format (version 0.0.4); anything else is 404, and a method other than
/// GET or HEAD 405. Before each answer `collect` refreshes the gauges read off the node (connections,
/// participants, outbox, replica lag, compression ratio).
///
/// An HTTP/1.1 server on SwiftNIO's `NIOHTTP1`, which the node already depends on, rather than a web
/// framework: one route does not need one.
public final class MetricsEndpoint: Sendable {
    /// Where it listens (the actual port when 0 was asked for).
    public let address: HostAndPort
    private let channel: any Channel

    private init(address: HostAndPort, channel: any Channel) {
        self.address = address
        self.channel = channel
    }

    /// Starts listening. `networkUnavailable` if the address cannot be bound.
    public static func start(
        host: String, port: Int, registry: PrometheusCollectorRegistry, collect: @escaping @Sendable () -> Void,
        logger: Logger
    ) async throws(ShareSyncError) -> MetricsEndpoint {
        do {
            let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
                .childChannelInitializer { channel in
                    channel.pipeline.configureHTTPServerPipeline().flatMapThrowing {
                        try channel.pipeline.syncOperations.addHandler(MetricsHandler(registry: registry, collect: collect))
                    }
                }
                .bind(host: host, port: port).get()
            let bound = channel.localAddress?.port ?? port
            logger.info("metrics endpoint listening", metadata: ["address": "\(host):\(bound)"])
            return MetricsEndpoint(address: HostAndPort(host: host, port: bound), channel: channel)
        } catch {
            throw ShareSyncError(.networkUnavailable, "cannot listen for metrics on \(HostAndPort(host: host, port: port)): \(error)")
        }
    }

    /// Stops listening.
    public func close() async {
        try? await channel.close()
    }
}

/// Answers one HTTP request at a time on a connection.
private final class MetricsHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let registry: PrometheusCollectorRegistry
    private let collect: @Sendable () -> Void
    private var head: HTTPRequestHead?

    init(registry: PrometheusCollectorRegistry, collect: @escaping @Sendable () -> Void) {
        self.registry = registry
        self.collect = collect
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head): self.head = head
        case .body: break
        case .end:
            guard let head else { return }
            self.head = nil
            respond(to: head, context: context)
        }
    }

    private func respond(to head: HTTPRequestHead, context: ChannelHandlerContext) {
        let path = head.uri.split(separator: "?", maxSplits: 1).first.map(String.init) ?? head.uri
        let status: HTTPResponseStatus
        var body = context.channel.allocator.buffer(capacity: 0)
        var contentType = "text/plain; charset=utf-8"
        if head.method != .GET && head.method != .HEAD {
            status = .methodNotAllowed
            body.writeString("only GET /metrics\n")
        } else if path != "/metrics" {
            status = .notFound
            body.writeString("not found: the metrics are at /metrics\n")
        } else {
            status = .ok
            collect()
            body.writeBytes(registry.emitToBuffer())
            contentType = "text/plain; version=0.0.4; charset=utf-8"
        }
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: contentType)
        headers.add(name: "Content-Length", value: "\(body.readableBytes)")
        let keepAlive = head.isKeepAlive
        if !keepAlive { headers.add(name: "Connection", value: "close") }
        context.write(wrapOutboundOut(.head(HTTPResponseHead(version: head.version, status: status, headers: headers))), promise: nil)
        if head.method != .HEAD { context.write(wrapOutboundOut(.body(.byteBuffer(body))), promise: nil) }
        let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
        context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in
            if !keepAlive { loopBound.value.close(promise: nil) }
        }
    }
}
