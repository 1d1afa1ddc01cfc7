import Foundation
import ShareSyncStore
import ShareSyncTestSupport
import Testing

/// A node for end-to-end tests: a temporary home, its daemon as a child process (restartable), and
/// the CLI run against it with `--json`. ``stop()`` kills what still runs and removes the home.
final class E2ENode {
    let folder: TemporaryFolder
    let home: String
    let userRecordName: String
    private(set) var daemon: ChildProcess
    let runArguments: [String]

    /// Makes a node home and starts its daemon; `prepareHome` runs first with the home's path (to mount
    /// a file system there, say). `listen` with a fixed port keeps the node reachable at the same
    /// address across ``restart()``.
    init(
        name: String, runArguments: [String] = [], listen: String = "127.0.0.1:0", initArguments: [String] = [],
        prepareHome: (String) throws -> Void = { _ in }
    ) throws {
        folder = try TemporaryFolder()
        home = folder.path + "/home"
        self.runArguments = runArguments
        try prepareHome(home)
        let created = try cli(["init", "--home", home, "--name", name, "--listen", listen, "--json"] + initArguments)
        guard created.status == 0, let object = try json(created.stdout) as? [String: Any],
            let user = object["userRecordName"] as? String
        else {
            folder.remove()
            throw ChildProcessError.exitedEarly(status: created.status, stdout: created.stdout, stderr: created.stderr)
        }
        userRecordName = user
        do {
            daemon = try Self.startDaemon(home: home, arguments: runArguments)
        } catch {
            folder.remove()
            throw error
        }
    }

    private static func startDaemon(home: String, arguments: [String]) throws -> ChildProcess {
        let daemon = try ChildProcess.start(sharesync, ["run", "--home", home] + arguments)
        do {
            _ = try daemon.waitForLine(containing: "listening on", timeout: 30)
        } catch {
            daemon.kill()
            throw error
        }
        return daemon
    }

    /// Starts the daemon again on the same home (after it was killed).
    func restart() throws {
        daemon.kill()
        daemon = try Self.startDaemon(home: home, arguments: runArguments)
    }

    /// Kills the daemon (SIGKILL) and waits until it is gone; ``restart()`` starts it again.
    func kill() throws {
        daemon.signal(SIGKILL)
        _ = try daemon.waitForExit(timeout: 10)
    }

    /// Runs a subcommand with --json against this node.
    func run(_ arguments: [String], timeout: Double = 60) throws -> ChildProcess.Outcome {
        try cli(arguments + ["--home", home, "--json"], timeout: timeout)
    }

    /// Runs a subcommand that must succeed and returns its parsed JSON output.
    @discardableResult
    func ok(_ arguments: [String], timeout: Double = 60, sourceLocation: SourceLocation = #_sourceLocation) throws -> Any {
        let outcome = try run(arguments, timeout: timeout)
        try #require(outcome.status == 0, "sharesync \(arguments) exited \(outcome.status): \(outcome.stderr)", sourceLocation: sourceLocation)
        do {
            return try json(outcome.stdout)
        } catch {
            let message = "sharesync \(arguments) printed what is not JSON (\(outcome.stdout.utf8.count) bytes): "
                + String(outcome.stdout.suffix(300)) + " -- stderr: " + String(outcome.stderr.suffix(500))
            Issue.record(Comment(rawValue: message), sourceLocation: sourceLocation)
            throw error
        }
    }

    /// The record names `record list` prints (with `--shared` for the shared database).
    func recordNames(zone: String, shared: Bool) throws -> [String] {
        let records = try #require(try ok(["record", "list", "--zone", zone] + (shared ? ["--shared"] : [])) as? [[String: Any]])
        return records.compactMap { $0["recordName"] as? String }
    }

    func stop() {
        daemon.kill()
        folder.remove()
    }
}

/// Polls `condition` every 100 ms for at most `timeout` seconds; returns whether it held.
func eventually(timeout: Double = 20, _ condition: () throws -> Bool) rethrows -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    while Date() < deadline {
        if try condition() { return true }
        Thread.sleep(forTimeInterval: 0.1)
    }
    return try condition()
}

/// Creates the zone `Topics` on `owner` with one Topic, `topic-1` ("Hello"), as most sharing tests start.
func makeTopics(on owner: E2ENode) throws {
    try owner.ok(["zone", "create", "Topics"])
    try owner.ok(["record", "save", "--zone", "Topics", "--type", "Topic", "--name", "topic-1", "--field", "title=string:Hello"])
}

/// Shares `zone` of `owner` with `participant` (by user record name) and returns (invitation URL, participant ID).
func invite(_ participant: E2ENode, to zone: String, of owner: E2ENode, permission: String = "readWrite") throws
    -> (url: String, participantID: String)
{
    try owner.ok(["share", "create", "--zone", zone, "--title", zone])
    let invited = try #require(
        try owner.ok(["share", "invite", "--zone", zone, "--user", participant.userRecordName, "--permission", permission])
            as? [String: Any])
    return (try #require(invited["invitationURL"] as? String), try #require(invited["participantID"] as? String))
}

@Suite("End to end: owner and participant nodes as processes, driven through the CLI")
struct EndToEndTests {
    @Test func aParticipantAcceptsReadsWritesLosesWriteAccessAndLeaves() async throws {
        try await blocking {
            let a = try E2ENode(name: "Alice")
            defer { a.stop() }
            let b = try E2ENode(name: "Bob")
            defer { b.stop() }

            try makeTopics(on: a)
            let (url, participantID) = try invite(b, to: "Topics", of: a)
            // The private database's feed: everything from no token, then only what came after.
            let first = try #require(try a.ok(["changes"]) as? [String: Any])
            #expect((first["changes"] as? [[String: Any]])?.contains { $0["recordName"] as? String == "topic-1" } == true)
            let privateToken = try #require(first["token"] as? String)

            let accepted = try #require(try b.ok(["accept", url]) as? [String: Any])
            #expect(accepted["ownerName"] as? String == a.userRecordName)
            let zones = try #require(accepted["zones"] as? [[String: Any]])
            #expect(zones.map { $0["zoneName"] as? String } == ["Topics"])
            #expect(try b.recordNames(zone: "Topics", shared: true).contains("topic-1"))
            let topic = try #require(try b.ok(["record", "get", "--shared", "--zone", "Topics", "--name", "topic-1"]) as? [String: Any])
            let fields = try #require(topic["fields"] as? [String: [String: Any]])
            #expect(fields["title"]?["value"] as? String == "Hello")

            // A change on the owner reaches the participant's replica, and `watch --shared` prints it.
            let watch = try ChildProcess.start(sharesync, ["watch", "--shared", "--json", "--home", b.home])
            defer { watch.kill() }
            Thread.sleep(forTimeInterval: 0.5)  // let watch take its starting token
            try a.ok(["record", "save", "--zone", "Topics", "--type", "Note", "--name", "note-1", "--parent", "topic-1", "--field", "text=string:from A"])
            #expect(try eventually { try b.recordNames(zone: "Topics", shared: true).contains("note-1") })
            let next = try #require(try a.ok(["changes", "--since", privateToken]) as? [String: Any])
            // note-1, and the share (B accepted it since), but not topic-1 again.
            let nextNames = (next["changes"] as? [[String: Any]] ?? []).compactMap { $0["recordName"] as? String }
            #expect(nextNames.contains("note-1") && !nextNames.contains("topic-1"), "\(nextNames)")
            let line = try watch.waitForLine(containing: "note-1", timeout: 20)
            let change = try #require(try json(line) as? [String: Any])
            #expect(change["kind"] as? String == "recordChanged")
            #expect(change["ownerName"] as? String == a.userRecordName)
            // The participant's daemon restarts: watch waits for it and goes on, missing nothing.
            try b.kill()
            try a.ok(["record", "save", "--zone", "Topics", "--type", "Note", "--name", "note-away", "--parent", "topic-1"])
            try b.restart()
            _ = try watch.waitForLine(containing: "note-away", timeout: 60)
            watch.kill()

            // `changes --shared` from no token lists the replica and ends with a token.
            let page = try #require(try b.ok(["changes", "--shared"]) as? [String: Any])
            #expect((page["token"] as? String)?.hasPrefix("shared:") == true)
            let changedNames = (page["changes"] as? [[String: Any]] ?? []).compactMap { $0["recordName"] as? String }
            #expect(changedNames.contains("note-1") && changedNames.contains("topic-1"))

            // The participant writes through the owner.
            let saved = try #require(
                try b.ok(["record", "save", "--shared", "--zone", "Topics", "--type", "Note", "--name", "note-2", "--field", "text=string:from B"])
                    as? [String: Any])
            #expect(saved["outcome"] as? String == "sent")
            #expect(try a.recordNames(zone: "Topics", shared: false).contains("note-2"))
            #expect(try eventually { try b.recordNames(zone: "Topics", shared: true).contains("note-2") })

            // Read-only now: the owner refuses the next write.
            try a.ok(["share", "permission", "--zone", "Topics", "--participant", participantID, "--permission", "readOnly"])
            let refused = try b.run(["record", "save", "--shared", "--zone", "Topics", "--type", "Note", "--name", "note-3", "--field", "text=string:no"])
            #expect(refused.status == 65, "\(refused.stdout) \(refused.stderr)")
            #expect(refused.stderr.contains("permissionFailure"), "\(refused.stderr)")
            #expect(try !a.recordNames(zone: "Topics", shared: false).contains("note-3"))

            // Leaving empties the shared database.
            try b.ok(["leave", "--owner", a.userRecordName, "--zone", "Topics"])
            let after = try #require(try b.ok(["zone", "list", "--shared"]) as? [Any])
            #expect(after.isEmpty)
        }
    }

    @Test func oneNodeHoldsSharesFromTwoOwners() async throws {
        try await blocking {
            let a = try E2ENode(name: "Alice")
            defer { a.stop() }
            let b = try E2ENode(name: "Bob")
            defer { b.stop() }
            let c = try E2ENode(name: "Carol")
            defer { c.stop() }

            try a.ok(["zone", "create", "Topics"])
            try a.ok(["record", "save", "--zone", "Topics", "--type", "Topic", "--name", "topic-1", "--field", "title=string:A's"])
            try b.ok(["zone", "create", "Photos"])
            try b.ok(["record", "save", "--zone", "Photos", "--type", "Photo", "--name", "photo-1", "--field", "title=string:B's"])
            let fromA = try invite(c, to: "Topics", of: a, permission: "readWrite")
            let fromB = try invite(c, to: "Photos", of: b, permission: "readOnly")
            try c.ok(["accept", fromA.url])
            try c.ok(["accept", fromB.url])

            let zones = try #require(try c.ok(["zone", "list", "--shared"]) as? [[String: Any]])
            let pairs = Set(zones.map { "\($0["ownerName"] as? String ?? "?")/\($0["zoneName"] as? String ?? "?")" })
            #expect(pairs == ["\(a.userRecordName)/Topics", "\(b.userRecordName)/Photos"])
            #expect(try c.recordNames(zone: "Topics", shared: true).contains("topic-1"))
            let photos = try c.ok(["record", "list", "--shared", "--owner", b.userRecordName, "--zone", "Photos"]) as? [[String: Any]]
            #expect(photos?.contains { $0["recordName"] as? String == "photo-1" } == true)

            // With A gone, C still reads A's zone from its replica, and a write waits in the outbox.
            a.daemon.signal(SIGKILL)
            _ = try a.daemon.waitForExit(timeout: 10)
            #expect(try c.recordNames(zone: "Topics", shared: true).contains("topic-1"))
            let queued = try #require(
                try c.ok(["record", "save", "--shared", "--zone", "Topics", "--type", "Note", "--name", "offline", "--field", "text=string:later"])
                    as? [String: Any])
            #expect(queued["outcome"] as? String == "queued")
            let human = try cli(["record", "save", "--shared", "--zone", "Topics", "--type", "Note", "--name", "offline-2", "--home", c.home])
            #expect(human.status == 0 && human.stdout.contains("queued (not sent now: the owner is not connected"), "\(human.stdout) \(human.stderr)")
            // A queued new record is not the owner's to delete yet: the refusal points to the outbox.
            let delete = try c.run(["record", "delete", "--shared", "--zone", "Topics", "--name", "offline"])
            #expect(delete.status == 65 && delete.stderr.contains("not accepted by the owner yet: `sharesync outbox discard "),
                    "\(delete.stderr)")

            // With B gone too, a write to B's zone, where C may only read, is refused at once, not queued.
            b.daemon.signal(SIGKILL)
            _ = try b.daemon.waitForExit(timeout: 10)
            let readOnly = try c.run(["record", "save", "--shared", "--owner", b.userRecordName, "--zone", "Photos", "--name", "photo-1",
                                      "--field", "title=string:mine"])
            #expect(readOnly.status == 65 && readOnly.stderr.contains("read-only permission in every share of zone Photos"),
                    "\(readOnly.stdout) \(readOnly.stderr)")
            let outbox = try #require(try c.ok(["outbox", "list"]) as? [[String: Any]])
            #expect(outbox.count == 2, "the two writes to A's zone only: \(outbox)")
        }
    }

    @Test func aParticipantKilledDuringItsInitialSyncResumesAfterRestart() async throws {
        try await blocking {
            let total = 5_000
            let a = try E2ENode(name: "Alice")
            defer { a.stop() }
            // Small pages, so the initial sync takes many steps and can be interrupted midway.
            let b = try E2ENode(name: "Bob", runArguments: ["--log-level", "debug", "--sync-page-size", "100"])
            defer { b.stop() }

            let file = a.folder.path + "/records.jsonl"
            let lines = (0..<total).map { i in
                #"{"recordName":"item-\#(i)","recordType":"Item","fields":{"title":{"type":"STRING","value":"Item \#(i)"},"n":{"type":"INT64","value":\#(i)}}}"#
            }
            try lines.joined(separator: "\n").write(toFile: file, atomically: true, encoding: .utf8)
            let imported = try #require(try a.ok(["record", "import", "--zone", "Big", "--file", file]) as? [String: Any])
            #expect(imported["saved"] as? Int == total)
            let (url, _) = try invite(b, to: "Big", of: a, permission: "readOnly")

            let accept = try ChildProcess.start(sharesync, ["accept", url, "--home", b.home, "--json"])
            defer { accept.kill() }
            // The first applied page: some records are in, most are not. Kill the daemon there.
            _ = try b.daemon.waitForErrorLine(containing: "zone changed", timeout: 30)
            b.daemon.signal(SIGKILL)
            let interrupted = try accept.waitForExit(timeout: 30)
            #expect(interrupted.status != 0, "accept should fail when the daemon dies: \(interrupted.stdout)")
            do {
                // What the killed daemon left: part of the zone.
                let replica = try SharedDatabaseReplica(path: b.home + "/replica.sqlite")
                let stored = try replica.recordCount(owner: a.userRecordName, zoneName: "Big")
                #expect(stored > 0 && stored < total, "the daemon was killed with \(stored) of \(total) records stored")
            }

            // Restarted on the same home, the daemon resumes from its stored tokens without a new accept.
            try b.restart()
            let expected = try #require(try a.ok(["record", "list", "--zone", "Big"]) as? [[String: Any]])
            // Listed in pages of 1,000 (the daemon answers no more at once): every record once, by name.
            let listed = expected.compactMap { $0["recordName"] as? String }
            #expect(listed.count == total + 1 && Set(listed).count == listed.count, "\(listed.count) listed: the records and the share")
            #expect(listed == listed.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) })
            func comparable(_ records: [[String: Any]]) -> [String: String] {
                var out: [String: String] = [:]
                for record in records where record["recordType"] as? String != "cloudkit.share" {
                    let fields = record["fields"] ?? [:]
                    let data = try? JSONSerialization.data(withJSONObject: fields, options: [.sortedKeys])
                    out[record["recordName"] as? String ?? "?"] = data.map { String(decoding: $0, as: UTF8.self) }
                }
                return out
            }
            var replica: [[String: Any]] = []
            let complete = try eventually(timeout: 40) {
                replica = try #require(try b.ok(["record", "list", "--shared", "--zone", "Big"]) as? [[String: Any]])
                return comparable(replica).count == total
            }
            #expect(complete, "the replica has \(comparable(replica).count) of \(total) records")
            #expect(comparable(replica) == comparable(expected))
            #expect(!b.daemon.stderr.contains("share accepted"), "the restarted daemon must not accept again")
        }
    }
}
