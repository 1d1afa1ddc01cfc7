import Foundation
import ShareSyncCore
import ShareSyncStore
import ShareSyncTestSupport
import Testing

/// A TCP port on 127.0.0.1 that was free a moment ago, for a node that must keep its address across
/// restarts (its participants reconnect to the address in the share URL).
func freeLoopbackPort() throws -> Int {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw POSIXError(.EMFILE) }
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = 0
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) { pointer in
        pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa in
            bind(fd, sa, length) == 0 && getsockname(fd, sa, &length) == 0
        }
    }
    guard bound else { throw POSIXError(.EADDRINUSE) }
    return Int(UInt16(bigEndian: address.sin_port))
}

/// Owner A (at a fixed address, so it can restart) sharing zone Topics read-write with B, who accepted.
private func sharedTopics() throws -> (a: E2ENode, b: E2ENode, participantID: String) {
    let a = try E2ENode(name: "Alice", listen: "127.0.0.1:\(try freeLoopbackPort())")
    let b: E2ENode
    do {
        b = try E2ENode(name: "Bob")
    } catch {
        a.stop()
        throw error
    }
    do {
        try makeTopics(on: a)
        let (url, participantID) = try invite(b, to: "Topics", of: a)
        try b.ok(["accept", url])
        return (a, b, participantID)
    } catch {
        a.stop()
        b.stop()
        throw error
    }
}

/// The owner `a` saves topic-1 with a count of 9; once `b`'s replica has it, `a` is killed.
private func saveTopicWithACountThenStop(_ a: E2ENode, seenBy b: E2ENode) throws {
    try a.ok(["record", "save", "--zone", "Topics", "--type", "Topic", "--name", "topic-1", "--field", "count=int64:9"])
    #expect(try eventually { (try b.sharedTopic()["fields"] as? [String: Any])?["count"] != nil })
    try a.kill()
}

private func title(_ record: Any?) -> String? {
    ((record as? [String: Any])?["fields"] as? [String: [String: Any]])?["title"]?["value"] as? String
}

extension E2ENode {
    func outbox() throws -> [[String: Any]] { try #require(try ok(["outbox"]) as? [[String: Any]]) }
    func outboxCounts() throws -> [String: Int] {
        let status = try #require(try ok(["status"]) as? [String: Any])
        return try #require(status["outbox"] as? [String: Int])
    }
    func ownerTitle() throws -> String? { title(try ok(["record", "get", "--zone", "Topics", "--name", "topic-1"])) }
    func sharedTopic() throws -> [String: Any] {
        try #require(try ok(["record", "get", "--shared", "--zone", "Topics", "--name", "topic-1"]) as? [String: Any])
    }
}

@Suite("Offline writes: conflicts and refusals stay in the outbox until resolved (CLI, daemons as processes)")
struct OutboxCLITests {
    /// Owner down → B queues `title` → B down → owner back, saves `ownerTitle` → B back: B's write meets
    /// the owner's newer record. Returns the outbox entry.
    private func queuedEditMeetsOwnerEdit(
        _ a: E2ENode, _ b: E2ENode, mine: String, theirs: String, policy: [String] = []
    ) throws -> [String: Any]? {
        try a.kill()
        let queued = try #require(
            try b.ok(["record", "save", "--shared", "--zone", "Topics", "--type", "Topic", "--name", "topic-1", "--field", "title=string:\(mine)"] + policy)
                as? [String: Any])
        #expect(queued["outcome"] as? String == "queued")
        try b.kill()
        try a.restart()
        try a.ok(["record", "save", "--zone", "Topics", "--type", "Topic", "--name", "topic-1", "--field", "title=string:\(theirs)"])
        try b.restart()
        var entry: [String: Any]?
        _ = try eventually(timeout: 30) {
            entry = try b.outbox().first
            return entry == nil || entry?["state"] as? String != "pending"
        }
        return entry
    }

    @Test("a write queued offline that meets a newer owner's record is kept as a conflict; resolved with mine, then with theirs")
    func queuedConflictIsKeptAndResolved() async throws {
        try await blocking {
            let (a, b, _) = try sharedTopics()
            defer { a.stop(); b.stop() }

            // Read your own writes while the write is queued.
            try a.kill()
            let queued = try #require(
                try b.ok(["record", "save", "--shared", "--zone", "Topics", "--type", "Topic", "--name", "topic-1", "--field", "title=string:B"])
                    as? [String: Any])
            #expect(queued["outcome"] as? String == "queued")
            let local = try b.sharedTopic()
            #expect(title(local) == "B")
            #expect(local["pending"] as? Bool == true)
            let listed = try #require(try b.ok(["record", "list", "--shared", "--zone", "Topics"]) as? [[String: Any]])
            let listedTopic = try #require(listed.first { $0["recordName"] as? String == "topic-1" })
            #expect(title(listedTopic) == "B" && listedTopic["pending"] as? Bool == true)
            let human = try cli(["record", "get", "--shared", "--zone", "Topics", "--name", "topic-1", "--home", b.home])
            #expect(human.stdout.contains("[pending"), "\(human.stdout)")
            #expect(try b.outboxCounts() == ["pending": 1, "conflicts": 0, "refused": 0])
            let pending = try b.outbox()
            #expect(pending.count == 1 && pending.first?["state"] as? String == "pending")

            // B goes down too; the owner comes back and saves title=A; B comes back.
            try b.kill()
            try a.restart()
            try a.ok(["record", "save", "--zone", "Topics", "--type", "Topic", "--name", "topic-1", "--field", "title=string:A"])
            try b.restart()
            var conflict: [String: Any]?
            let kept = try eventually(timeout: 30) {
                conflict = try b.outbox().first
                return conflict?["state"] as? String == "conflict"
            }
            #expect(kept, "the outbox: \(String(describing: conflict))")
            // Nothing was overwritten: the owner still has title=A, and B's outbox shows the owner's version.
            #expect(try a.ownerTitle() == "A")
            let servers = try #require(conflict?["serverRecords"] as? [[String: Any]])
            #expect(servers.map { title($0) } == ["A"])
            #expect((conflict?["error"] as? [String: Any])?["code"] as? String == "serverRecordChanged")
            #expect(conflict?["records"] as? [String] == ["topic-1"])
            #expect(conflict?["ownerName"] as? String == a.userRecordName)
            #expect(conflict?["zoneName"] as? String == "Topics")
            #expect(try b.outboxCounts() == ["pending": 0, "conflicts": 1, "refused": 0])
            let humanStatus = try cli(["status", "--home", b.home])
            #expect(humanStatus.stdout.contains("0 pending, 1 conflicts, 0 refused"), "\(humanStatus.stdout)")
            let humanOutbox = try cli(["outbox", "--home", b.home])
            #expect(humanOutbox.stdout.contains("conflict") && humanOutbox.stdout.contains("theirs"), "\(humanOutbox.stdout)")
            // "mine" names what the write changes (what --keep mine sends), not only the record as a
            // whole: a field another write changed looked as if this one would send it.
            #expect(humanOutbox.stdout.contains("mine (this write changes field title; the rest as you last saw it):"), "\(humanOutbox.stdout)")
            #expect(conflict?["changedKeys"] as? [String: [String]] == ["topic-1": ["title"]], "\(String(describing: conflict))")
            // Reads show the local version, marked as a conflict.
            let marked = try b.sharedTopic()
            #expect(title(marked) == "B" && marked["conflict"] as? Bool == true)

            // Keep mine: sent again over the owner's change tag.
            let id = try #require(conflict?["id"] as? Int)
            let resolved = try #require(try b.ok(["outbox", "resolve", "\(id)", "--keep", "mine"]) as? [String: Any])
            #expect(resolved["outcome"] as? String == "sent", "\(resolved)")
            #expect(try a.ownerTitle() == "B")
            #expect(try b.outbox().isEmpty)
            #expect(try eventually { let topic = try b.sharedTopic(); return title(topic) == "B" && topic["pending"] == nil })

            // Another conflict. The owner changes the record once more before B keeps its own: the
            // resend is in conflict again, and the command exits 65 (it exited 0).
            let second = try queuedEditMeetsOwnerEdit(a, b, mine: "B2", theirs: "A2")
            #expect(second?["state"] as? String == "conflict", "\(String(describing: second))")
            #expect(try a.ownerTitle() == "A2")
            let secondID = try #require(second?["id"] as? Int)
            try a.ok(["record", "save", "--zone", "Topics", "--type", "Topic", "--name", "topic-1", "--field", "title=string:A3"])
            let again = try b.run(["outbox", "resolve", "\(secondID)", "--keep", "mine"])
            #expect(again.status == 65 && again.stderr.contains("serverRecordChanged"), "\(again.stdout) \(again.stderr)")
            #expect((try? json(again.stdout) as? [String: Any])?["outcome"] as? String == "conflict", "\(again.stdout)")
            #expect(try a.ownerTitle() == "A3")
            // Resolved with theirs: the owner's title stays and the outbox empties.
            let dropped = try #require(try b.ok(["outbox", "resolve", "\(secondID)", "--keep", "theirs"]) as? [String: Any])
            #expect(dropped["outcome"] as? String == "dropped")
            #expect(try b.outbox().isEmpty)
            #expect(try a.ownerTitle() == "A3")
            #expect(try eventually { let topic = try b.sharedTopic(); return title(topic) == "A3" && topic["conflict"] == nil })
            #expect(try b.outboxCounts() == ["pending": 0, "conflicts": 0, "refused": 0])
        }
    }

    @Test("the outbox listing shortens a long value (a queued field of 5,000 characters filled the terminal)")
    func longValuesAreShortenedInTheListing() async throws {
        try await blocking {
            let (a, b, _) = try sharedTopics()
            defer { a.stop(); b.stop() }
            try a.kill()
            let long = String(repeating: "x", count: 5_000)
            try b.ok(["record", "save", "--shared", "--zone", "Topics", "--type", "Topic", "--name", "topic-1", "--field", "body=string:\(long)"])
            let listing = try cli(["outbox", "--home", b.home])
            #expect(listing.status == 0 && listing.stdout.contains("more characters)"), "\(listing.stdout.prefix(500))")
            #expect(listing.stdout.split(separator: "\n").allSatisfy { $0.count <= 260 }, "\(listing.stdout.prefix(500))")
            // The JSON form keeps it whole.
            let item = try #require(try b.outbox().first)
            let saving = try #require(item["saving"] as? [[String: Any]])
            let body = ((saving.first?["fields"] as? [String: Any])?["body"] as? [String: Any])?["value"] as? String
            #expect(body == long)
        }
    }

    @Test("two queued writes of one record in conflict: theirs for the first, mine for the second keeps only the second's fields")
    func keepingMineOnALaterWriteDoesNotUndoTheirsOnAnEarlierOne() async throws {
        try await blocking {
            let (a, b, _) = try sharedTopics()
            defer { a.stop(); b.stop() }
            try saveTopicWithACountThenStop(a, seenBy: b)
            for field in ["count=int64:1", "note=string:second"] {
                let queued = try #require(try b.ok(["record", "save", "--shared", "--zone", "Topics", "--name", "topic-1", "--field", field]) as? [String: Any])
                #expect(queued["outcome"] as? String == "queued")
            }
            try b.kill()
            try a.restart()
            try a.ok(["record", "save", "--zone", "Topics", "--type", "Topic", "--name", "topic-1", "--field", "title=string:A"])
            try b.restart()
            var entries: [[String: Any]] = []
            #expect(try eventually(timeout: 30) {
                entries = try b.outbox()
                return entries.count == 2 && entries.allSatisfy { $0["state"] as? String == "conflict" }
            }, "\(entries)")
            let ids = entries.compactMap { $0["id"] as? Int }.sorted()
            try #require(ids.count == 2)
            _ = try b.ok(["outbox", "resolve", "\(ids[0])", "--keep", "theirs"])
            _ = try b.ok(["outbox", "resolve", "\(ids[1])", "--keep", "mine"])
            let owners = try #require(try a.ok(["record", "get", "--zone", "Topics", "--name", "topic-1"]) as? [String: Any])
            let fields = try #require(owners["fields"] as? [String: [String: Any]])
            // Before, the second write carried the first's count as its own change, and put it back.
            #expect(fields["count"]?["value"] as? Int == 9, "\(fields)")
            #expect(fields["note"]?["value"] as? String == "second", "\(fields)")
            #expect(fields["title"]?["value"] as? String == "A", "\(fields)")
        }
    }

    @Test("a queued edit of a record the owner deleted meanwhile is refused (unknownItem); --keep mine saves it again, whole")
    func anEditOfADeletedRecordIsKeptWithMine() async throws {
        try await blocking {
            let (a, b, _) = try sharedTopics()
            defer { a.stop(); b.stop() }
            try saveTopicWithACountThenStop(a, seenBy: b)
            try b.ok(["record", "save", "--shared", "--zone", "Topics", "--name", "topic-1", "--field", "title=string:B"])
            try b.kill()
            try a.restart()
            try a.ok(["record", "delete", "--zone", "Topics", "--name", "topic-1"])
            try b.restart()
            var entry: [String: Any]?
            #expect(try eventually(timeout: 30) {
                entry = try b.outbox().first
                return entry?["state"] as? String == "refused"
            }, "\(String(describing: entry))")
            #expect((entry?["error"] as? [String: Any])?["code"] as? String == "unknownItem", "\(String(describing: entry))")
            let id = try #require(entry?["id"] as? Int)
            let resolved = try b.run(["outbox", "resolve", "\(id)", "--keep", "mine"])
            // Sent and accepted, or (a slow run: the resolve waits 10 s for the answer) still pending.
            let answer = try? JSONSerialization.jsonObject(with: Data(resolved.stdout.utf8)) as? [String: Any]
            #expect(resolved.status == 0 && ["sent", "pending"].contains(answer?["outcome"] as? String), "\(resolved.stdout) \(resolved.stderr)")
            // The owner has the record again as B wrote it: B's title, and the count B's copy had.
            var owners: [String: Any]?
            #expect(try eventually(timeout: 60) {
                let got = try a.run(["record", "get", "--zone", "Topics", "--name", "topic-1"])
                guard got.status == 0 else { return false }  // not there again yet
                owners = try? JSONSerialization.jsonObject(with: Data(got.stdout.utf8)) as? [String: Any]
                return owners != nil
            })
            let fields = try #require(owners?["fields"] as? [String: [String: Any]])
            #expect(fields["title"]?["value"] as? String == "B", "\(fields)")
            #expect(fields["count"]?["value"] as? Int == 9, "\(fields)")
            #expect(try eventually(timeout: 60) { try b.outbox().isEmpty })
            #expect(try eventually { title(try b.sharedTopic()) == "B" })
        }
    }

    @Test("a queued write the owner refuses (made read-only meanwhile) is kept as refused; discard removes it")
    func refusedWriteIsKeptUntilDiscarded() async throws {
        try await blocking {
            let (a, b, participantID) = try sharedTopics()
            defer { a.stop(); b.stop() }
            try a.kill()
            try b.ok(["record", "save", "--shared", "--zone", "Topics", "--type", "Topic", "--name", "topic-1", "--field", "title=string:B"])
            try b.kill()
            try a.restart()
            try a.ok(["share", "permission", "--zone", "Topics", "--participant", participantID, "--permission", "readOnly"])
            try b.restart()
            var entry: [String: Any]?
            let kept = try eventually(timeout: 30) {
                entry = try b.outbox().first
                return entry?["state"] as? String == "refused"
            }
            #expect(kept, "the outbox: \(String(describing: entry))")
            #expect((entry?["error"] as? [String: Any])?["code"] as? String == "permissionFailure")
            #expect(try b.outboxCounts() == ["pending": 0, "conflicts": 0, "refused": 1])
            #expect(try a.ownerTitle() == "Hello")
            // A refused write is not read back as the record.
            #expect(title(try b.sharedTopic()) == "Hello")
            // Resolving a refusal as a conflict is refused; discarding it works.
            let id = try #require(entry?["id"] as? Int)
            let wrong = try b.run(["outbox", "resolve", "\(id)", "--keep", "mine"])
            #expect(wrong.status == 65 && wrong.stderr.contains("notAConflict"), "\(wrong.stderr)")
            try b.ok(["outbox", "discard", "\(id)"])
            #expect(try b.outbox().isEmpty)
            #expect(try b.outboxCounts() == ["pending": 0, "conflicts": 0, "refused": 0])
        }
    }

    @Test("connected, a save from a stale copy fails at once with serverRecordChanged and the owner's record; changedKeys overwrites")
    func connectedConflictFailsAtOnce() async throws {
        try await blocking {
            let (a, b, _) = try sharedTopics()
            defer { a.stop(); b.stop() }
            // B's copy of topic-1 before the owner changes it; once the owner's push arrived, it is put
            // back in B's replica (as if the push were still on its way).
            let replica = try SharedDatabaseReplica(path: b.home + "/replica.sqlite")
            let zone = RecordZone.ID(zoneName: "Topics", ownerName: a.userRecordName)
            let stale = try #require(try replica.fetchRecord(Record.ID(recordName: "topic-1", zoneID: zone)))
            try a.ok(["record", "save", "--zone", "Topics", "--type", "Topic", "--name", "topic-1", "--field", "title=string:A"])
            #expect(try eventually { title(try b.sharedTopic()) == "A" })
            let token = try #require(try replica.zoneChangeToken(owner: a.userRecordName, zoneName: "Topics"))
            try replica.apply(
                ZoneChanges(zoneID: zone, changes: [.changed(stale)], changeToken: token, moreComing: false), owner: a.userRecordName)
            #expect(title(try b.sharedTopic()) == "Hello")

            let refused = try cli([
                "record", "save", "--shared", "--zone", "Topics", "--type", "Topic", "--name", "topic-1", "--field", "title=string:B",
                "--home", b.home,
            ])
            #expect(refused.status == 65, "\(refused.stdout) \(refused.stderr)")
            #expect(refused.stderr.contains("serverRecordChanged"), "\(refused.stderr)")
            #expect(refused.stderr.contains("the owner's record") && refused.stderr.contains("title = \"A\""), "\(refused.stderr)")
            #expect(try a.ownerTitle() == "A")
            #expect(try b.outbox().isEmpty, "a write answered at once is not kept")

            let overwritten = try #require(
                try b.ok(["record", "save", "--shared", "--zone", "Topics", "--type", "Topic", "--name", "topic-1", "--field", "title=string:B", "--policy", "changedKeys"])
                    as? [String: Any])
            #expect(overwritten["outcome"] as? String == "sent")
            #expect(try a.ownerTitle() == "B")
        }
    }

    @Test("--policy allKeys makes a queued write overwrite the owner's newer record (last writer wins)")
    func allKeysPolicyOverwrites() async throws {
        try await blocking {
            let (a, b, _) = try sharedTopics()
            defer { a.stop(); b.stop() }
            let entry = try queuedEditMeetsOwnerEdit(a, b, mine: "B", theirs: "A", policy: ["--policy", "allKeys"])
            #expect(entry == nil, "the outbox: \(String(describing: entry))")
            #expect(try eventually { try a.ownerTitle() == "B" })
            let usage = try b.run(["record", "save", "--shared", "--zone", "Topics", "--name", "topic-1", "--policy", "allKeys", "--if-tag", "1"])
            #expect(usage.status == 64, "--if-tag with allKeys: \(usage.stderr)")
        }
    }
}
