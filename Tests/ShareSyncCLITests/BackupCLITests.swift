import Foundation
import ShareSyncTestSupport
import Testing

@Suite("sharesync backup: a copy of the private database while the node runs")
struct BackupCLITests {
    @Test("a node restored from a backup has the data as it was, and refuses a token handed out after the copy in the middle of a fetch")
    func backupAndRestore() async throws {
        try await blocking {
            let a = try E2ENode(name: "Alice")
            defer { a.stop() }
            try a.ok(["zone", "create", "Topics"])
            for name in ["t1", "t2", "t3", "t4"] {
                try a.ok(["record", "save", "--zone", "Topics", "--type", "Topic", "--name", name, "--field", "title=string:\(name)"])
            }
            let first = try #require(try a.ok(["changes", "--zone", "Topics", "--limit", "2"]) as? [String: Any])
            let firstToken = try #require(first["token"] as? String)

            // A relative path is the caller's, not the daemon's.
            let relative = try ChildProcess.run(
                "/usr/bin/env", ["-C", a.folder.path, sharesync, "backup", "copy.sqlite", "--home", a.home, "--json"])
            #expect(relative.status == 0, "\(relative.stderr)")
            let copy = a.folder.path + "/copy.sqlite"
            let written = try #require(try json(relative.stdout) as? [String: Any])
            #expect(written["path"] as? String == copy, "\(written)")
            let size = try FileManager.default.attributesOfItem(atPath: copy)
            #expect((written["bytes"] as? Int).map { $0 > 0 && $0 == (size[.size] as? Int) } == true, "\(written) \(size)")
            #expect(size[.posixPermissions] as? Int == 0o600)
            // An existing file is not replaced, and the error names it.
            let again = try a.run(["backup", copy])
            #expect(again.status != 0 && again.stderr.contains(copy) && again.stderr.contains("exists"), "\(again.stderr)")
            #expect((try FileManager.default.attributesOfItem(atPath: copy)[.size] as? Int) == size[.size] as? Int)

            // After the copy: t3, not fetched yet, changes (it moves past the fetch), and the fetch goes on.
            try a.ok(["record", "save", "--zone", "Topics", "--type", "Topic", "--name", "t3", "--field", "title=string:changed"])
            try a.ok(["record", "save", "--zone", "Topics", "--type", "Topic", "--name", "after"])
            let second = try #require(try a.ok(["changes", "--zone", "Topics", "--limit", "1", "--since", firstToken]) as? [String: Any])
            #expect(names(second) == ["t4"] && second["moreComing"] as? Bool == true, "\(second)")
            let secondToken = try #require(second["token"] as? String)

            try restore(a, "private.sqlite", from: copy)
            #expect(try a.recordNames(zone: "Topics", shared: false).sorted() == ["t1", "t2", "t3", "t4"])
            // With the second page's token the fetch would never give t3, which the copy has before it.
            let lost = try a.run(["changes", "--zone", "Topics", "--since", secondToken])
            #expect(lost.status != 0 && lost.stderr.contains("changeTokenExpired") && lost.stderr.contains("restored"), "\(lost.stderr)")
            // The first page's token, from before the copy, gives the rest.
            let rest = try #require(try a.ok(["changes", "--zone", "Topics", "--since", firstToken]) as? [String: Any])
            #expect(names(rest) == ["t3", "t4"], "\(rest)")
        }
    }

    @Test("a participant restored from a backup of its shared database catches up: what its owner changed since arrives, nothing extra stays")
    func sharedBackupAndRestore() async throws {
        try await blocking {
            let a = try E2ENode(name: "Alice")
            defer { a.stop() }
            let b = try E2ENode(name: "Bob")
            defer { b.stop() }
            try a.ok(["zone", "create", "Topics"])
            for name in ["t1", "t2"] {
                try a.ok(["record", "save", "--zone", "Topics", "--type", "Topic", "--name", name, "--field", "title=string:\(name)"])
            }
            let (url, _) = try invite(b, to: "Topics", of: a, permission: "readOnly")
            try b.ok(["accept", url])
            #expect(try b.recordNames(zone: "Topics", shared: true).filter { $0.hasPrefix("t") }.sorted() == ["t1", "t2"])
            let copy = b.folder.path + "/replica-copy.sqlite"
            let written = try #require(try b.ok(["backup", "--shared", copy]) as? [String: Any])
            #expect(written["path"] as? String == copy && (written["bytes"] as? Int ?? 0) > 0, "\(written)")

            // After the copy, the owner adds t3 and deletes t1; Bob's replica follows.
            try a.ok(["record", "save", "--zone", "Topics", "--type", "Topic", "--name", "t3"])
            try a.ok(["record", "delete", "--zone", "Topics", "--name", "t1"])
            func topics() throws -> [String] { try b.recordNames(zone: "Topics", shared: true).filter { $0.hasPrefix("t") }.sorted() }
            #expect(try eventually { try topics() == ["t2", "t3"] })

            // Bob's replica restored from the copy (t1, no t3); the restarted node catches up from its tokens.
            try restore(b, "replica.sqlite", from: copy)
            var seen: [String] = []
            #expect(try eventually { seen = try topics(); return seen == ["t2", "t3"] }, "Bob's replica holds \(seen)")
        }
    }

    /// Stops `node`, puts `copy` in place of its home's `file` (its -wal and -shm removed), starts it.
    private func restore(_ node: E2ENode, _ file: String, from copy: String) throws {
        try node.kill()
        let database = node.home + "/" + file
        for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: database + suffix) }
        try FileManager.default.copyItem(atPath: copy, toPath: database)
        try node.restart()
    }

    private func names(_ page: [String: Any]) -> [String] {
        (page["changes"] as? [[String: Any]] ?? []).compactMap { $0["recordName"] as? String }
    }
}
