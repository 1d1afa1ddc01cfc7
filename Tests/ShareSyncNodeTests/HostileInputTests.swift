import Foundation
import NIOCore
import NIOPosix
import ShareSyncCore
import ShareSyncNode
import ShareSyncStore
import ShareSyncWire
import Testing

// Issue 10, "Hostile input against a running owner": every kind of bad peer at once, while a legitimate
// participant follows the share and the owner keeps writing. Each gets its documented error, the owner
// stays up, the participant's replica converges, and no answer tells an outsider whether zones or
// records outside its view exist. (1,000 idle connections and the owner's memory under them are
// measured by `sharesync-bench connections`; a removed participant has its own suite.)

/// The error object of an answer, without the parts that echo what the asker sent (zone and record names).
private func errorShape(_ answer: [String: Any]?) -> String {
    guard let error = answer?["error"] as? [String: Any] else { return "ok: \(answer ?? [:])" }
    var message = error["message"] as? String ?? ""
    for name in ["Secret", "NoSuchZone", "private-1", "no-such-record", "Topics"] {
        message = message.replacingOccurrences(of: name, with: "NAME")
    }
    return "\(error["code"] ?? "-") \(error["rule"] ?? "-") \(message)"
}

@Suite("Hostile input against a running owner while a participant syncs")
struct HostileInputTests {
    @Test func everyAttackGetsItsDocumentedErrorWhileAParticipantKeepsSyncing() async throws {
        var configuration = OwnerServer.Configuration()
        configuration.transport.limits.maximumFrameSize = 1024 * 1024
        configuration.transport.limits.maximumLineLength = 1024 * 1024 + 64 * 1024
        configuration.transport.limits.handshakeTimeout = .seconds(15)  // idle peers wait this long; attackers that authenticate have it too
        var limits = Limits()
        limits.maximumResponseSize = 256 * 1024
        limits.maximumRecordSize = 100_000
        let owner = try await TestOwner.start(configuration, limits: limits, keepHandshakeTimeout: true)
        // Outside anyone's view: a zone, and a record of Topics outside the shared hierarchy.
        try owner.db.saveZone(RecordZone(zoneID: RecordZone.ID(zoneName: "Secret")))
        var secret = Record(recordType: "Note", recordID: Record.ID(recordName: "secret-1", zoneID: RecordZone.ID(zoneName: "Secret")))
        secret["title"] = "secret"
        var outside = Record(recordType: "Note", recordID: owner.id("private-1"))
        outside["title"] = "not shared"
        _ = try owner.db.modifyRecords(saving: [secret]).get()
        _ = try owner.db.modifyRecords(saving: [outside]).get()

        let b = try TestParticipant()
        defer { b.remove() }
        let reader = NodeIdentity.generate()
        let (url, _) = try owner.shareTopic(invite: [(b.identity, .readWrite), (reader, .readOnly)])
        let sync = try b.makeSync()
        try sync.start()
        try await sync.accept(url: url, timeout: .seconds(60))

        // The owner keeps writing while the attacks run.
        let writer = Task {
            for i in 0..<30 where !Task.isCancelled {
                try owner.saveNote("during-\(i)", title: "written during the attacks \(i)")
                try await Task.sleep(for: .milliseconds(100))
            }
        }

        try await withThrowingTaskGroup(of: Void.self) { group in
            // Random bytes instead of TLS: refused and closed.
            group.addTask {
                let client = try await RawClient.connect(port: owner.server.port, .cleartext)
                var bytes = [UInt8](repeating: 0, count: 4096)
                for i in bytes.indices { bytes[i] = UInt8.random(in: 0...255) }
                bytes[0] = 0x41  // not a TLS record byte: the cleartext path, which is refused
                try await client.channel.writeAndFlush(client.channel.allocator.buffer(bytes: bytes))
                #expect(try await client.closes(within: 30), "random bytes: still open")
                await client.close()
            }
            // Random bytes inside TLS where the handshake line belongs: SHARESYNC-ERROR, closed.
            group.addTask {
                let client = try await RawClient.connect(port: owner.server.port, .tls(NodeIdentity.generate()))
                try await client.send(String((0..<200).map { _ in Character(UnicodeScalar(UInt8.random(in: 0x21...0x7E))) }))
                let refusal = try await client.line()
                #expect(refusal?.hasPrefix("SHARESYNC-ERROR") == true, "\(refusal ?? "closed")")
                #expect(try await client.closes(within: 30))
                await client.close()
            }
            // Mutated frames after authentication: each answered, never a crash.
            group.addTask {
                let me = NodeIdentity.generate()
                let client = try await RawClient.plain(port: owner.server.port, .tls(me))
                #expect(try await client.authenticate(me).answer?["op"] as? String == "welcome")
                let valid = Array(#"{"id":1,"op":"fetchZoneChanges","zoneName":"Topics","resultsLimit":10}"#.utf8)
                var answered = 0
                for round in 0..<30 {
                    var mutated = valid
                    for _ in 0..<(1 + round % 3) {
                        mutated[Int.random(in: mutated.indices)] = UInt8.random(in: 0x20...0x7E)
                    }
                    try await client.send(String(decoding: mutated, as: UTF8.self))
                    guard let answer = try await client.json() else { break }
                    #expect(answer["ok"] != nil || answer["error"] != nil, "\(answer)")
                    answered += 1
                }
                #expect(answered == 30, "a mutated frame went unanswered or closed the connection")
                await client.close()
            }
            // A decompression bomb: 32 MiB of zeros in one deflate frame of a few KiB, over a 1 MiB frame limit.
            group.addTask {
                let client = try await RawClient.connect(port: owner.server.port, .tls(NodeIdentity.generate()))
                try await client.send("SHARESYNC versions=1 encodings=deflate")
                #expect(try await client.line() == "SHARESYNC version=1 encoding=deflate")
                let encoder = try FrameEncoder(
                    encoding: .deflate, limits: FrameLimits(maximumLineLength: 1 << 30, maximumFrameSize: 1 << 30))
                let bomb = try encoder.encode(ByteBuffer(repeating: 0x20, count: 32 * 1024 * 1024))
                #expect(bomb.readableBytes < 256 * 1024)
                try await client.channel.writeAndFlush(bomb)
                #expect(try await client.closes(within: 30), "the bomb's connection stayed open")
                await client.close()
            }
            // An endless line: the line limit, then the close.
            group.addTask {
                let me = NodeIdentity.generate()
                let client = try await RawClient.plain(port: owner.server.port, .tls(me))
                try await client.authenticate(me)
                let chunk = client.channel.allocator.buffer(string: String(repeating: "x", count: 64 * 1024))
                var closed = false
                for _ in 0..<40 where !closed {
                    do { try await client.channel.writeAndFlush(chunk) } catch { closed = true }
                }
                let answer = try await client.json()
                #expect(errorRule(answer) == "lineTooLong", "\(answer ?? [:])")
                #expect(try await client.closes(within: 30))
                await client.close()
            }
            // Slowloris: the handshake line one byte at a time, slower than the handshake timeout allows.
            group.addTask {
                let client = try await RawClient.connect(port: owner.server.port, .tls(NodeIdentity.generate()))
                var closed = false
                for byte in "SHARESYNC versions=1 encodings=plain".utf8 {
                    do {
                        try await client.channel.writeAndFlush(client.channel.allocator.buffer(bytes: [byte]))
                    } catch { closed = true; break }
                    try await Task.sleep(for: .milliseconds(500))
                    if client.collector.pop().1 { closed = true; break }
                }
                var closedInTheEnd = closed
                if !closedInTheEnd { closedInTheEnd = try await client.closes(within: 30) }
                #expect(closedInTheEnd, "a slowloris peer was kept open")
                await client.close()
            }
            // 100 idle TCP connections that never send a byte: closed after the handshake timeout.
            group.addTask {
                let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
                var channels: [any Channel] = []
                for _ in 0..<100 {
                    channels.append(try await ClientBootstrap(group: group).connect(host: "127.0.0.1", port: owner.server.port).get())
                }
                let deadline = ContinuousClock.now + .seconds(60)
                while channels.contains(where: \.isActive), ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(200))
                }
                let stillOpen = channels.filter(\.isActive).count
                #expect(stillOpen == 0, "idle connections were kept open")
                for channel in channels { try? await channel.close() }
                try await group.shutdownGracefully()
            }
            // A stranger: guessed share tokens, and zones or records outside its view that exist or do not.
            group.addTask {
                let me = NodeIdentity.generate()
                let client = try await RawClient.plain(port: owner.server.port, .tls(me))
                try await client.authenticate(me)
                let base = url.components(separatedBy: "/share/")[0]
                let ownerParameter = "?" + (url.components(separatedBy: "?").last ?? "")
                var guessed: Set<String> = []
                for i in 0..<10 {
                    let token = (0..<22).map { _ in "abcdefghijklmnopqrstuvwxyz0123456789".randomElement()! }
                    try await client.sendJSON(["id": 100 + i, "op": "acceptShare", "url": base + "/share/" + String(token) + ownerParameter])
                    guessed.insert(errorShape(try await client.json()))
                }
                #expect(guessed.count == 1 && guessed.first?.hasPrefix("participantMayNeedVerification") == true, "\(guessed)")
                func ask(_ request: [String: Any]) async throws -> String {
                    try await client.sendJSON(request)
                    return errorShape(try await client.json())
                }
                let existing = try await ask(["id": 1, "op": "fetchZoneChanges", "zoneName": "Secret"])
                let missing = try await ask(["id": 2, "op": "fetchZoneChanges", "zoneName": "NoSuchZone"])
                #expect(existing == missing, "a stranger can tell an existing zone from a missing one")
                #expect(existing.hasPrefix("zoneNotFound"), "\(existing)")
                let shared = try await ask(["id": 3, "op": "fetchZoneChanges", "zoneName": "Topics"])
                #expect(shared == missing, "a stranger can tell that a shared zone exists")
                // Writes: the answer for an existing record of an existing zone is the one for a missing record
                // of a missing zone (whole-request or per-item).
                func writeAnswer(_ id: Int, zone: String, record: String) async throws -> String {
                    try await client.sendJSON(["id": id, "op": "modifyRecords", "zoneName": zone, "saving": [], "deleting": [record]])
                    let answer = try await client.json()
                    if let item = ((answer?["ok"] as? [String: Any])?["errors"] as? [String: Any])?[record] as? [String: Any] {
                        return errorShape(["error": item]).replacingOccurrences(of: "secret-1", with: "NAME")
                    }
                    return errorShape(answer)
                }
                let existingWrite = try await writeAnswer(4, zone: "Secret", record: "secret-1")
                let missingWrite = try await writeAnswer(5, zone: "NoSuchZone", record: "no-such-record")
                #expect(existingWrite == missingWrite, "a stranger's write tells an existing record from a missing one")
                #expect(!existingWrite.hasPrefix("ok"), "\(existingWrite)")
                #expect((try? owner.db.fetchRecord(Record.ID(recordName: "secret-1", zoneID: RecordZone.ID(zoneName: "Secret")))) != nil, "the stranger deleted a record")
                await client.close()
            }
            // A read-only participant: writes refused; records outside the share look like missing ones.
            group.addTask {
                let client = try await RawClient.plain(port: owner.server.port, .tls(reader))
                try await client.authenticate(reader)
                try await client.sendJSON(["id": 1, "op": "acceptShare", "url": url])
                #expect(try await client.json()?["ok"] != nil)
                try await client.sendJSON(["id": 2, "op": "modifyRecords", "zoneName": "Topics", "saving": [], "deleting": ["topic"]])
                let refused = try await client.json()
                let itemError = ((refused?["ok"] as? [String: Any])?["errors"] as? [String: Any])?["topic"] as? [String: Any]
                let code = (itemError?["code"] as? String) ?? errorCode(refused)
                #expect(code == "permissionFailure", "\(refused ?? [:])")
                try await client.sendJSON(["id": 3, "op": "fetchRecords", "zoneName": "Topics", "recordNames": ["private-1", "no-such-record"]])
                let fetched = try #require(try await client.json()?["ok"] as? [String: Any])
                let errors = try #require(fetched["errors"] as? [String: [String: Any]])
                #expect((fetched["records"] as? [Any])?.isEmpty == true, "\(fetched)")
                #expect(errorShape(["error": errors["private-1"] ?? [:]]) == errorShape(["error": errors["no-such-record"] ?? [:]]),
                        "a participant can tell a record outside its share from a missing one: \(errors)")
                await client.close()
            }
            try await group.waitForAll()
        }
        try await writer.value

        // The owner is up, the participant converged, and a newcomer still gets in.
        try await expectReplicaMatches(sync, owner, timeout: 60)
        #expect(try replicaView(sync.replica, owner: owner.identity.userRecordName)["Topics"]?.count ?? 0 >= 32)
        let late = NodeIdentity.generate()
        let newcomer = try await RawClient.plain(port: owner.server.port, .tls(late))
        #expect(try await newcomer.authenticate(late).answer?["op"] as? String == "welcome")
        await newcomer.close()
        await sync.stop()
        try await owner.stop()
    }
}
