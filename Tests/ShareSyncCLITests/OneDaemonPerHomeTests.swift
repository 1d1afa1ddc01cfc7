import Foundation
import ShareSyncCore
import ShareSyncNode
import ShareSyncTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A TCP socket bound to 127.0.0.1 (listening if asked); ``close()`` frees its port.
struct LoopbackSocket {
    let descriptor: Int32
    let port: Int

    /// Binds a new socket to 127.0.0.1, port 0, and learns the port it got.
    static func bind(listening: Bool) throws -> LoopbackSocket {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        try #require(fd >= 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { sockaddrPointer in
                Glibc.bind(fd, sockaddrPointer, length) == 0 && getsockname(fd, sockaddrPointer, &length) == 0
            }
        }
        try #require(bound)
        if listening { try #require(listen(fd, 8) == 0) }
        return LoopbackSocket(descriptor: fd, port: Int(UInt16(bigEndian: address.sin_port)))
    }

    func close() { _ = Glibc.close(descriptor) }

    /// Whether something accepts a TCP connection on 127.0.0.1:`port` right now.
    static func acceptsConnections(port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { _ = Glibc.close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = UInt16(port).bigEndian
        return withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
    }
}

@Suite("One daemon per home, checked before anything else")
struct OneDaemonPerHomeTests {
    @Test func theHomesDaemonLockIsHeldUntilReleased() async throws {
        try await blocking {
            let folder = try TemporaryFolder()
            defer { folder.remove() }
            let created = try cli(["init", "--home", folder.path + "/home", "--name", "Alice", "--listen", "127.0.0.1:0"])
            #expect(created.status == 0, "\(created.stderr)")
            let home = try NodeHome.open(at: folder.path + "/home")
            let lock = try home.lockForDaemon()
            do {
                _ = try home.lockForDaemon()
                Issue.record("a second lock was granted")
            } catch let error as ShareSyncError {
                #expect(error.code == .serviceUnavailable)
                #expect(error.rule == .oneDaemonPerHome)
            }
            lock.release()
            // Released, the lock can be taken again. (Within a bound: a child another test spawns at
            // that moment holds a copy of the descriptor, and with it the lock, until it execs, when
            // the copy closes. A CI run saw the lock still held right after the release.)
            var relocked: DaemonLock?
            for _ in 0..<200 where relocked == nil {
                relocked = try? home.lockForDaemon()
                if relocked == nil { usleep(50_000) }
            }
            #expect(relocked != nil, "the released lock could not be taken again within 10 s")
            relocked?.release()
        }
    }

    @Test func aSecondDaemonOnARunningHomeIsRefusedBeforeItListensOrContactsAnOwner() async throws {
        try await blocking {
            let a = try E2ENode(name: "Alice", runArguments: ["--log-level", "debug"])
            defer { a.stop() }
            let b = try E2ENode(name: "Bob")
            defer { b.stop() }
            try a.ok(["zone", "create", "Topics"])
            let (url, _) = try invite(b, to: "Topics", of: a)
            try b.ok(["accept", url])
            func ownerAuthentications() -> Int { a.daemon.stderr.components(separatedBy: "authenticated").count - 1 }
            let authenticationsBefore = ownerAuthentications()

            // The first daemon read its settings when it started; the second gets a port of its own.
            var home = try NodeHome.open(at: b.home)
            let refusal = "oneDaemonPerHome"

            // With that port taken by someone else, the refusal still names the running daemon: the home's
            // lock is checked before the listener is opened.
            let taken = try LoopbackSocket.bind(listening: true)
            home.settings.listen = HostAndPort(host: "127.0.0.1", port: taken.port)
            try home.saveSettings()
            let whilePortTaken = try cli(["run", "--home", b.home], timeout: 30)
            taken.close()
            #expect(whilePortTaken.status == 65, "\(whilePortTaken.stderr)")
            #expect(whilePortTaken.stderr.contains(refusal), "\(whilePortTaken.stderr)")

            // With the port free, nothing accepts connections on it while the second daemon runs or after.
            let free = try LoopbackSocket.bind(listening: false)
            let port = free.port
            free.close()
            home.settings.listen = HostAndPort(host: "127.0.0.1", port: port)
            try home.saveSettings()
            let second = try ChildProcess.start(sharesync, ["run", "--home", b.home])
            defer { second.kill() }
            var listened = false
            let deadline = Date().addingTimeInterval(30)
            while second.isRunning, Date() < deadline {
                if LoopbackSocket.acceptsConnections(port: port) { listened = true }
                Thread.sleep(forTimeInterval: 0.002)
            }
            let outcome = try second.waitForExit(timeout: 30)
            #expect(!listened, "the second daemon listened on its port")
            #expect(!LoopbackSocket.acceptsConnections(port: port))
            #expect(outcome.exited && outcome.status == 65, "\(outcome.stderr)")
            #expect(outcome.stderr.contains("serviceUnavailable"), "\(outcome.stderr)")
            #expect(outcome.stderr.contains("a daemon is already running on \(b.home)"), "\(outcome.stderr)")
            #expect(outcome.stderr.contains(refusal), "\(outcome.stderr)")
            #expect(!outcome.stdout.contains("listening on"))
            #expect(!outcome.stderr.contains("owner connected"), "the second daemon contacted an owner")

            // The owner never heard from the second daemon, and the first one still works: it answers, and a
            // change on the owner still reaches its replica.
            #expect(ownerAuthentications() == authenticationsBefore, "the owner saw another connection from Bob's home")
            let status = try #require(try b.ok(["status"]) as? [String: Any])
            let listen = try #require(status["listen"] as? [String: Any])
            let firstPort = try #require(listen["port"] as? Int)
            #expect(firstPort != port)
            #expect(LoopbackSocket.acceptsConnections(port: firstPort), "the first daemon's listener is gone")
            try a.ok(["record", "save", "--zone", "Topics", "--type", "Note", "--name", "after", "--field", "text=string:still here"])
            #expect(try eventually { try b.recordNames(zone: "Topics", shared: true).contains("after") })
        }
    }
}
