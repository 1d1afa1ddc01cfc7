import Foundation
import NIOCore
import NIOPosix
import ShareSyncCore
import ShareSyncNode
import ShareSyncWire

#if canImport(Glibc)
import Glibc
#endif

// `sharesync-bench connections [--count N]`: the owner daemon's memory under many connections
// (issue 10, "Overall limits under hostile load"). With an owner daemon at its default limits:
// N slowloris peers (TCP connected, a few bytes of a TLS ClientHello, then nothing), then N idle
// authenticated peers (TLS, authenticated, subscribed, then quiet). Prints how many
// connections the owner kept and its resident memory after each.

func runConnectionsBenchmark(count: Int) async throws {
    let root = FileManager.default.temporaryDirectory.appending(path: "sharesync-connections-\(getpid())").path
    try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: root) }
    let owner = try NodeDaemon(name: "owner", root: root)
    try owner.start()
    defer { owner.stop() }
    let url = try await populate(Results(), owner: owner, count: 100)
    print(String(format: "owner RSS at rest: %.1f MB", currentRSS(pid: owner.pid)))

    // Slowloris: connect, send 5 bytes of a TLS record header, then nothing.
    let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
    var slow: [any Channel] = []
    for _ in 0..<count {
        do {
            let channel = try await ClientBootstrap(group: group).connect(host: "127.0.0.1", port: owner.port).get()
            channel.writeAndFlush(ByteBuffer(bytes: [0x16, 0x03, 0x01, 0x02, 0x00]), promise: nil)
            slow.append(channel)
        } catch {
            break
        }
    }
    try await Task.sleep(for: .seconds(1))
    let open = slow.filter(\.isActive).count
    print(String(format: "%d slowloris peers: %d still connected after 1 s; owner RSS %.1f MB", count, open, currentRSS(pid: owner.pid)))
    for channel in slow { try? await channel.close() }
    try await Task.sleep(for: .seconds(1))

    // Idle authenticated peers, each its own identity, subscribed to its (empty) shared database. A share
    // holds at most 100 participants, so these do not accept it: an authenticated connection costs the
    // owner the same either way while it is quiet.
    var idle: [OwnerConnection] = []
    let t0 = now()
    for _ in 0..<count {
        do {
            let connection = try await OwnerConnection.connect(url: url, identity: .generate(), timeout: .seconds(30))
            _ = try await connection.subscribe()
            idle.append(connection)
        } catch {
            print("connection \(idle.count + 1) failed: \(error)")
            break
        }
    }
    print(String(format: "%d idle authenticated, subscribed peers connected in %.1f s; owner RSS %.1f MB (peak %.1f MB)",
                 idle.count, now() - t0, currentRSS(pid: owner.pid), owner.peakRSSMegabytes))
    for connection in idle { await connection.close() }
    try await group.shutdownGracefully()
}
