import Foundation
import NIOPosix
import ShareSyncCore
import ShareSyncNode
import ShareSyncTestSupport
import Testing

// Crash tests (issue 10, the harness), with small counts here; `reliability/run.sh` runs them with
// large ones (SHARESYNC_KILLS, SHARESYNC_CRASH_SEED) and prints the table.

private func environment(_ name: String, default value: Int) -> Int {
    ProcessInfo.processInfo.environment[name].flatMap(Int.init) ?? value
}

/// A free TCP port on 127.0.0.1 (bound and released at once).
private func freePort() throws -> Int {
    let channel = try ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton).bind(host: "127.0.0.1", port: 0).wait()
    defer { try? channel.close().wait() }
    return channel.localAddress?.port ?? 0
}

/// `record list --json` as name → (change tag, fields as sorted JSON), share records left out.
private func snapshot(_ node: E2ENode, zone: String, shared: Bool) throws -> [String: String] {
    let records = try #require(try node.ok(["record", "list", "--zone", zone] + (shared ? ["--shared"] : [])) as? [[String: Any]])
    var out: [String: String] = [:]
    for record in records where record["recordType"] as? String != "cloudkit.share" {
        let name = record["recordName"] as? String ?? "?"
        #expect(out[name] == nil, "record \(name) listed twice")
        let fields = try JSONSerialization.data(withJSONObject: record["fields"] ?? [:], options: [.sortedKeys])
        out[name] = "\(record["recordChangeTag"] as? String ?? "-") \(String(decoding: fields, as: UTF8.self))"
    }
    return out
}

@Suite("Crashes: daemons killed with SIGKILL")
struct CrashTests {
    @Test func aParticipantKilledAtRandomMomentsOfItsInitialSyncEndsWithTheOwnersView() async throws {
        try await blocking {
            let kills = environment("SHARESYNC_KILLS", default: 2)
            var generator = SeededGenerator(seed: UInt64(environment("SHARESYNC_CRASH_SEED", default: 1)))
            let a = try E2ENode(name: "Alice")
            defer { a.stop() }
            let b = try E2ENode(name: "Bob", runArguments: ["--log-level", "debug", "--sync-page-size", "50"])
            defer { b.stop() }
            let file = a.folder.path + "/records.jsonl"
            try (0..<3_000).map { #"{"recordName":"item-\#($0)","recordType":"Item","fields":{"n":{"type":"INT64","value":\#($0)}}}"# }
                .joined(separator: "\n").write(toFile: file, atomically: true, encoding: .utf8)
            try a.ok(["record", "import", "--zone", "Big", "--file", file])
            let (url, _) = try invite(b, to: "Big", of: a, permission: "readOnly")
            let accept = try ChildProcess.start(sharesync, ["accept", url, "--home", b.home, "--json"])
            defer { accept.kill() }
            _ = try b.daemon.waitForErrorLine(containing: "zone changed", timeout: 60)
            for kill in 0..<kills {
                // A random moment of the sync: 0-400 ms into this daemon's life.
                Thread.sleep(forTimeInterval: Double(generator.next() % 400) / 1000)
                b.daemon.signal(SIGKILL)
                try b.restart()
                if kill == 0 { _ = try? accept.waitForExit(timeout: 30) }
            }
            let expected = try snapshot(a, zone: "Big", shared: false)
            var replica: [String: String] = [:]
            let complete = try eventually(timeout: 60) {
                replica = try snapshot(b, zone: "Big", shared: true)
                return replica == expected
            }
            #expect(complete, "after \(kills) kills the replica has \(replica.count) of \(expected.count) records, or stale ones")
            print("reliability: participant-kill kills=\(kills) records=\(expected.count) lost=\(expected.count - replica.count) ok=\(complete)")
        }
    }

    @Test func everySaveAcknowledgedBeforeTheOwnerIsKilledIsThereAfterItRestartsAndParticipantsConverge() async throws {
        let kills = environment("SHARESYNC_KILLS", default: 2)
        var generator = SeededGenerator(seed: UInt64(environment("SHARESYNC_CRASH_SEED", default: 1)))
        // A fixed port, so the restarted owner is where the participant looks for it.
        let a = try E2ENode(name: "Alice", listen: "127.0.0.1:\(try freePort())")
        defer { a.stop() }
        let b = try E2ENode(name: "Bob")
        defer { b.stop() }
        try a.ok(["zone", "create", "Stream"])
        let (url, _) = try invite(b, to: "Stream", of: a, permission: "readOnly")
        try b.ok(["accept", url])
        var acknowledged: [String] = []
        var counter = 0
        for _ in 0..<kills {
            // A stream of saves, one at a time, each acknowledged by the daemon before the next; the
            // daemon is killed at a random moment in the middle of it.
            let client = try await ControlClient.connect(path: NodeHome.controlSocketPath(home: a.home))
            let killAfter = 20 + Int(generator.next() % 200)
            let pid = a.daemon
            let killer = Task.detached {
                try? await Task.sleep(for: .milliseconds(killAfter))
                pid.signal(SIGKILL)
            }
            while true {
                counter += 1
                var record = Record(recordType: "Item", recordID: Record.ID(recordName: "s\(counter)", zoneID: RecordZone.ID(zoneName: "Stream")))
                record["n"] = .int64(Int64(counter))
                do {
                    _ = try await client.call(.recordImport(zone: "Stream", records: [record]), as: ImportResult.self)
                    acknowledged.append("s\(counter)")
                } catch {
                    break  // the daemon is gone: this save was not acknowledged
                }
            }
            _ = await killer.value
            await client.close()
            try a.restart()
            let stored = Set(try snapshot(a, zone: "Stream", shared: false).keys)
            let lost = acknowledged.filter { !stored.contains($0) }
            #expect(lost.isEmpty, "acknowledged saves lost: \(lost)")
        }
        let expected = try snapshot(a, zone: "Stream", shared: false)
        var replica: [String: String] = [:]
        let converged = try eventually(timeout: 60) {
            replica = try snapshot(b, zone: "Stream", shared: true)
            return replica == expected
        }
        #expect(converged, "the participant has \(replica.count) of \(expected.count) records, or stale ones")
        #expect(acknowledged.count > 0)
        let stored = Set(expected.keys)
        print("reliability: owner-kill kills=\(kills) acknowledged=\(acknowledged.count) lost=\(acknowledged.filter { !stored.contains($0) }.count) converged=\(converged)")
    }
}
