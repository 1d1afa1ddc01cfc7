import Foundation
import ShareSyncTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `GET path` over HTTP/1.0 on 127.0.0.1:port: the status code and the body.
func httpGet(port: Int, path: String) throws -> (status: Int, body: String) {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw POSIXError(.EIO) }
    defer { close(fd) }
    var timeout = timeval(tv_sec: 10, tv_usec: 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = in_port_t(UInt16(port).bigEndian)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    let connected = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    guard connected == 0 else { throw POSIXError(.ECONNREFUSED) }
    let request = Array("GET \(path) HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n".utf8)
    _ = request.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, 0) }
    var response: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 65536)
    for _ in 0..<10_000 {
        let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        if n <= 0 { break }
        response += chunk[0..<n]
    }
    let text = String(decoding: response, as: UTF8.self)
    let statusLine = text.split(separator: "\r\n").first ?? ""
    let status = Int(statusLine.split(separator: " ").dropFirst().first ?? "") ?? 0
    let body = text.components(separatedBy: "\r\n\r\n").dropFirst().joined(separator: "\r\n\r\n")
    return (status, body)
}

/// The value of a Prometheus sample line `name{labels} value` (the first whose name and labels contain
/// every string of `matches`).
func sample(_ metrics: String, _ name: String, containing matches: String...) -> Double? {
    for line in metrics.split(separator: "\n") where line.hasPrefix(name) && matches.allSatisfy({ line.contains($0) }) {
        let rest = line.dropFirst(name.count)
        guard rest.first == " " || rest.first == "{" else { continue }
        return Double(line.split(separator: " ").last ?? "")
    }
    return nil
}

@Suite("Operating a node: metrics, status and JSON logs")
struct OperationsCLITests {
    @Test func metricsStatusAndJSONLogsOfTwoNodes() async throws {
        try await blocking {
            let alice = try E2ENode(
                name: "Alice", runArguments: ["--metrics", "127.0.0.1:0", "--log-format", "json", "--log-level", "debug"])
            defer { alice.stop() }
            let bob = try E2ENode(name: "Bob", runArguments: ["--metrics", "127.0.0.1:0"])
            defer { bob.stop() }
            let metricsLine = try alice.daemon.waitForLine(containing: "metrics on", timeout: 30)
            let port = try #require(Int(metricsLine.split(separator: ":").last ?? ""))
            let bobMetricsLine = try bob.daemon.waitForLine(containing: "metrics on", timeout: 30)
            let bobPort = try #require(Int(bobMetricsLine.split(separator: ":").last ?? ""))
            #expect(bobPort != port)

            try makeTopics(on: alice)
            let (url, _) = try invite(bob, to: "Topics", of: alice, permission: "readWrite")
            try bob.ok(["accept", url])
            try bob.ok(["record", "save", "--shared", "--zone", "Topics", "--name", "topic-1", "--field", "title=string:Changed"])
            // A refusal, to count by code.
            #expect(try alice.run(["zone", "delete", "_defaultZone"]).status == 65)

            // Status: Alice's share, accepted and connected; Bob's replica, following with no lag.
            #expect(eventually {
                let status = (try? alice.ok(["status"])) as? [String: Any]
                let shares = status?["shares"] as? [[String: Any]]
                return shares?.first?["accepted"] as? Int == 1 && shares?.first?["connected"] as? Int == 1
            })
            #expect(eventually {
                let status = (try? bob.ok(["status"])) as? [String: Any]
                let replica = (status?["replicas"] as? [[String: Any]])?.first
                return replica?["state"] as? String == "following" && replica?["lagSeconds"] as? Double == 0
                    && replica?["records"] as? Int == 2 && replica?["pending"] as? Int == 0
            })
            let human = try cli(["status", "--home", bob.home])
            #expect(human.stdout.contains("Alice (\(alice.userRecordName)) Topics: following"))

            // The metrics endpoint (scraped until Bob's write has been pushed back to him).
            var scraped = try httpGet(port: port, path: "/metrics")
            #expect(scraped.status == 200)
            _ = try eventually {
                scraped = try httpGet(port: port, path: "/metrics")
                return (sample(scraped.body, "sharesync_pushes_total") ?? 0) >= 1
            }
            let metrics = scraped.body
            #expect(sample(metrics, "sharesync_connections") == 1)
            #expect(sample(metrics, "sharesync_participants") == 1)
            #expect(sample(metrics, "sharesync_shares") == 1)
            #expect((sample(metrics, "sharesync_frames_total", containing: "direction=\"in\"") ?? 0) > 2)
            #expect((sample(metrics, "sharesync_payload_bytes_total", containing: "direction=\"out\"") ?? 0) > 0)
            #expect((sample(metrics, "sharesync_compression_ratio") ?? 0) > 0)
            #expect((sample(metrics, "sharesync_pushes_total") ?? 0) >= 1)
            #expect((sample(metrics, "sharesync_requests_total", containing: "request=\"modifyRecords\"") ?? 0) >= 1)
            #expect(metrics.contains("sharesync_request_duration_seconds_bucket"))
            #expect(sample(metrics, "sharesync_errors_total", containing: "code=\"invalidArguments\"") == 1)
            #expect(sample(metrics, "sharesync_outbox_operations", containing: "state=\"pending\"") == 0)
            #expect(try httpGet(port: port, path: "/other").status == 404)

            // Bob's side, the participant: his replica of Alice's zone follows (lag 0), frames went both ways,
            // nothing waits in his outbox, no conflict yet.
            let zoneLabels = ["owner=\"\(alice.userRecordName)\"", "zone=\"Topics\""]
            let bobScraped = try httpGet(port: bobPort, path: "/metrics")
            #expect(bobScraped.status == 200)
            let bobMetrics = bobScraped.body
            #expect(sample(bobMetrics, "sharesync_replica_lag_seconds", containing: zoneLabels[0], zoneLabels[1]) == 0, "\(bobMetrics)")
            #expect((sample(bobMetrics, "sharesync_wire_bytes_total", containing: "direction=\"in\"") ?? 0) > 0)
            #expect((sample(bobMetrics, "sharesync_wire_bytes_total", containing: "direction=\"out\"") ?? 0) > 0)
            #expect(sample(bobMetrics, "sharesync_outbox_operations", containing: "state=\"pending\"") == 0)
            #expect(sample(bobMetrics, "sharesync_conflicts_total", containing: "side=\"participant\"") ?? 0 == 0)

            // A real conflict: Bob saves against the change tag he had before Alice changed the record.
            let before = try #require(try bob.ok(["record", "get", "--shared", "--zone", "Topics", "--name", "topic-1"]) as? [String: Any])
            let staleTag = try #require(before["recordChangeTag"] as? String)
            try alice.ok(["record", "save", "--zone", "Topics", "--name", "topic-1", "--field", "title=string:By Alice"])
            #expect(eventually {
                let record = (try? bob.ok(["record", "get", "--shared", "--zone", "Topics", "--name", "topic-1"])) as? [String: Any]
                return record?["recordChangeTag"] as? String != staleTag
            })
            let conflicting = try bob.run([
                "record", "save", "--shared", "--zone", "Topics", "--name", "topic-1", "--field", "title=string:By Bob", "--if-tag", staleTag,
            ])
            #expect(conflicting.status == 65 && conflicting.stderr.contains("serverRecordChanged"), "\(conflicting.stderr)")
            let afterConflict = try httpGet(port: bobPort, path: "/metrics").body
            #expect(sample(afterConflict, "sharesync_conflicts_total", containing: "side=\"participant\"") == 1, "\(afterConflict)")
            #expect(sample(try httpGet(port: port, path: "/metrics").body, "sharesync_conflicts_total", containing: "side=\"owner\"") == 1)

            // Bob's replica falls behind when Alice stops: no longer following, lag growing.
            try alice.kill()
            #expect(eventually {
                let status = (try? bob.ok(["status"])) as? [String: Any]
                let replica = (status?["replicas"] as? [[String: Any]])?.first
                return replica?["state"] as? String != "following" && (replica?["lagSeconds"] as? Double ?? 0) > 0
                    && replica?["connected"] as? Bool == false
            })
            // A write while Alice is away waits in Bob's outbox; his scrape shows it and the lag.
            let queued = try #require(
                try bob.ok(["record", "save", "--shared", "--zone", "Topics", "--name", "topic-1", "--field", "title=string:Offline"])
                    as? [String: Any])
            #expect(queued["outcome"] as? String == "queued")
            let offline = try httpGet(port: bobPort, path: "/metrics").body
            #expect(sample(offline, "sharesync_outbox_operations", containing: "state=\"pending\"") == 1, "\(offline)")
            #expect((sample(offline, "sharesync_replica_lag_seconds", containing: zoneLabels[0], zoneLabels[1]) ?? 0) > 0, "\(offline)")

            // Alice's log: one JSON object per line, with metadata.
            let logLines = alice.daemon.stderr.split(separator: "\n")
            #expect(!logLines.isEmpty)
            for line in logLines {
                let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
                #expect(object?["level"] is String && object?["message"] is String, "\(line)")
            }
            // The daemon's allocator settings (glibc's malloc thresholds) took, unless the environment sets its own.
            let allocatorLine = try #require(logLines.first { $0.contains("allocator settings") })
            let allocator = try #require(
                (try JSONSerialization.jsonObject(with: Data(allocatorLine.utf8)) as? [String: Any])?["metadata"] as? [String: Any])
            let environment = ProcessInfo.processInfo.environment
            let operatorSet = environment["GLIBC_TUNABLES"]?.contains("glibc.malloc.") == true || environment.keys.contains { $0.hasPrefix("MALLOC_") }
            #if os(Linux)
            #expect(allocator["applied"] as? String == (operatorSet ? "false" : "true"), "\(allocatorLine)")
            #endif
            let running = logLines.first { $0.contains("node running") }
            let object = try #require(try JSONSerialization.jsonObject(with: Data((running ?? "").utf8)) as? [String: Any])
            #expect((object["metadata"] as? [String: Any])?["node.user"] as? String == alice.userRecordName)
            // A refused control request names itself and its request number; a connection its peer.
            let refusedLine = try #require(logLines.first { $0.contains("control request refused") })
            let refusedMetadata = try #require(
                (try JSONSerialization.jsonObject(with: Data(refusedLine.utf8)) as? [String: Any])?["metadata"] as? [String: Any])
            #expect(refusedMetadata["request"] as? String == "zoneDelete")
            #expect(refusedMetadata["error.code"] as? String == "invalidArguments")
            #expect(Int(refusedMetadata["request.id"] as? String ?? "") != nil)
            // Each request of Bob's node Alice's server answered: its connection, peer, request id and zone.
            let answered = logLines.compactMap { line -> [String: Any]? in
                guard line.contains("owner request answered"),
                    let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
                else { return nil }
                return object["metadata"] as? [String: Any]
            }
            let save = try #require(
                answered.first { $0["request"] as? String == "modifyRecords" && $0["zone"] as? String == "Topics" },
                "\(answered)")
            #expect((save["peer"] as? String ?? "").contains("127.0.0.1"), "\(save)")
            #expect(Int(save["connection.id"] as? String ?? "") != nil, "\(save)")
            #expect(Int(save["request.id"] as? String ?? "") != nil, "\(save)")
            #expect(save["user"] as? String == bob.userRecordName, "\(save)")
            #expect(save["outcome"] as? String == "ok", "\(save)")
            let fetches = answered.filter { $0["request"] as? String == "fetchZoneChanges" }
            #expect(!fetches.isEmpty && fetches.allSatisfy { $0["zone"] as? String == "Topics" && $0["request.id"] != nil }, "\(fetches)")
        }
    }

    /// Alice's `status --json`: her share of Topics and its one participant's sync state.
    private func bobsSync(on alice: E2ENode) throws -> [String: Any]? {
        let status = try #require(try alice.ok(["status"]) as? [String: Any])
        let share = (status["shares"] as? [[String: Any]])?.first { $0["zoneName"] as? String == "Topics" }
        return (share?["participantSync"] as? [[String: Any]])?.first
    }

    @Test func ownerStatusShowsEachParticipantsSync() async throws {
        try await blocking {
            let alice = try E2ENode(name: "Alice", runArguments: ["--metrics", "127.0.0.1:0"])
            defer { alice.stop() }
            let bob = try E2ENode(name: "Bob")
            defer { bob.stop() }
            let metricsLine = try alice.daemon.waitForLine(containing: "metrics on", timeout: 30)
            let port = try #require(Int(metricsLine.split(separator: ":").last ?? ""))
            try makeTopics(on: alice)
            let (url, _) = try invite(bob, to: "Topics", of: alice, permission: "readWrite")
            try bob.ok(["accept", url])
            #expect(eventually {
                let replica = (((try? bob.ok(["status"])) as? [String: Any])?["replicas"] as? [[String: Any]])?.first
                return replica?["state"] as? String == "following"
            })

            // Bob follows: connected, served a moment ago, nothing waiting for him.
            var sync: [String: Any]?
            #expect(eventually {
                sync = try? bobsSync(on: alice)
                return sync?["connected"] as? Bool == true && sync?["pending"] as? Int == 0
            }, "\(String(describing: sync))")
            #expect(sync?["userRecordName"] as? String == bob.userRecordName)
            let lastSyncText = try #require(sync?["lastSync"] as? String)
            let lastSync = try #require(ISO8601DateFormatter().date(from: lastSyncText))
            #expect(abs(lastSync.timeIntervalSinceNow) < 60)
            let human = try cli(["status", "--home", alice.home])
            #expect(human.stdout.contains("(\(bob.userRecordName)): connected, last sync 20"), "\(human.stdout)")
            #expect(human.stdout.contains(", 0 pending"), "\(human.stdout)")
            var metrics = try httpGet(port: port, path: "/metrics").body
            #expect(sample(metrics, "sharesync_share_connected_participants", containing: "zone=\"Topics\"") == 1, "\(metrics)")
            #expect(sample(metrics, "sharesync_share_pending_changes", containing: "zone=\"Topics\"") == 0, "\(metrics)")

            // Bob stops; Alice changes one record and adds another: two changes wait for him.
            try bob.kill()
            #expect(eventually { (try? bobsSync(on: alice))?["connected"] as? Bool == false })
            let lastServed = try #require(try bobsSync(on: alice)?["lastSync"] as? String)
            #expect(try #require(ISO8601DateFormatter().date(from: lastServed)) >= lastSync)
            try alice.ok(["record", "save", "--zone", "Topics", "--name", "topic-1", "--field", "title=string:While Bob was away"])
            try alice.ok(["record", "save", "--zone", "Topics", "--type", "Topic", "--name", "topic-2", "--field", "title=string:New"])
            sync = try bobsSync(on: alice)
            #expect(sync?["connected"] as? Bool == false)
            #expect(sync?["pending"] as? Int == 2, "\(String(describing: sync))")
            #expect(sync?["lastSync"] as? String == lastServed, "nothing was served to Bob since he stopped")
            let away = try cli(["status", "--home", alice.home])
            #expect(away.stdout.contains("(\(bob.userRecordName)): not connected, last sync \(lastServed), 2 pending"), "\(away.stdout)")
            metrics = try httpGet(port: port, path: "/metrics").body
            #expect(sample(metrics, "sharesync_share_connected_participants", containing: "zone=\"Topics\"") == 0, "\(metrics)")
            #expect(sample(metrics, "sharesync_share_pending_changes", containing: "zone=\"Topics\"") == 2, "\(metrics)")

            // Bob comes back and catches up: connected, nothing pending, a later sync (status gives whole
            // seconds: Bob comes back more than one after he was last served).
            Thread.sleep(forTimeInterval: 1.1)
            try bob.restart()
            let lastServedDate = try #require(ISO8601DateFormatter().date(from: lastServed))
            #expect(eventually {
                sync = try? bobsSync(on: alice)
                let last = (sync?["lastSync"] as? String).flatMap { ISO8601DateFormatter().date(from: $0) }
                return sync?["connected"] as? Bool == true && sync?["pending"] as? Int == 0 && last.map { $0 > lastServedDate } == true
            }, "\(String(describing: sync))")
        }
    }

    @Test func badOperatingOptionsAreRefused() async throws {
        try await blocking {
            let folder = try TemporaryFolder()
            defer { folder.remove() }
            let home = folder.path + "/home"
            #expect(try cli(["init", "--home", home, "--name", "A", "--listen", "127.0.0.1:0"]).status == 0)
            let badMetrics = try cli(["run", "--home", home, "--metrics", "nowhere"])
            #expect(badMetrics.status == 64)
            #expect(badMetrics.stderr.contains("--metrics"))
            let badFormat = try cli(["run", "--home", home, "--log-format", "xml"])
            #expect(badFormat.status == 64)
            #expect(badFormat.stderr.contains("--log-format"))
        }
    }
}
