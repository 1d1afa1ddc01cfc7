import Foundation
import ShareSyncTestSupport
import Testing

private func names(_ page: Any?, kind: String = "recordChanged") -> [String] {
    ((page as? [String: Any])?["changes"] as? [[String: Any]] ?? []).filter { $0["kind"] as? String == kind }
        .compactMap { $0["recordName"] as? String }
}

private func zones(_ page: Any?, _ key: String) -> [String] {
    ((page as? [String: Any])?[key] as? [[String: Any]] ?? []).compactMap { $0["zoneName"] as? String }
}

@Suite("Change feeds as CloudKit has them: database view, zone view, pages (CLI, daemons as processes)")
struct ChangeFeedCLITests {
    @Test("private database: --database lists zones changed and deleted; --zone with --limit pages with moreComing")
    func privateViews() async throws {
        try await blocking {
            let a = try E2ENode(name: "Alice")
            defer { a.stop() }
            try a.ok(["zone", "create", "Topics"])
            try a.ok(["zone", "create", "Notes"])
            for name in ["t1", "t2", "t3"] {
                try a.ok(["record", "save", "--zone", "Topics", "--type", "Topic", "--name", name, "--field", "title=string:\(name)"])
            }
            try a.ok(["record", "save", "--zone", "Notes", "--type", "Note", "--name", "n1"])
            let database = try #require(try a.ok(["changes", "--database"]) as? [String: Any])
            #expect(Set(zones(database, "changedZones")).isSuperset(of: ["Topics", "Notes"]), "\(database)")
            #expect(database["moreComing"] as? Bool == false)
            let token = try #require(database["token"] as? String)

            let first = try #require(try a.ok(["changes", "--zone", "Topics", "--limit", "2"]) as? [String: Any])
            #expect(names(first) == ["t1", "t2"], "\(first)")
            #expect(first["moreComing"] as? Bool == true)
            let firstToken = try #require(first["token"] as? String)
            let second = try #require(try a.ok(["changes", "--zone", "Topics", "--limit", "2", "--since", firstToken]) as? [String: Any])
            #expect(names(second) == ["t3"] && second["moreComing"] as? Bool == false, "\(second)")
            let text = try cli(["changes", "--zone", "Topics", "--limit", "1", "--home", a.home])
            #expect(text.status == 0 && text.stdout.contains("more coming") && text.stdout.contains("token: private:"), "\(text.stdout)")

            let paged = try #require(try a.ok(["changes", "--database", "--limit", "1"]) as? [String: Any])
            #expect(zones(paged, "changedZones").count == 1 && paged["moreComing"] as? Bool == true, "\(paged)")
            let pagedToken = try #require(paged["token"] as? String)
            let restOfZones = try #require(try a.ok(["changes", "--database", "--since", pagedToken]) as? [String: Any])
            #expect(Set(zones(paged, "changedZones") + zones(restOfZones, "changedZones")).isSuperset(of: ["Topics", "Notes"]), "\(restOfZones)")

            try a.ok(["zone", "delete", "Notes"])
            try a.ok(["record", "save", "--zone", "Topics", "--name", "t2", "--field", "title=string:again"])
            let later = try #require(try a.ok(["changes", "--database", "--since", token]) as? [String: Any])
            #expect(zones(later, "deletedZones") == ["Notes"] && zones(later, "changedZones") == ["Topics"], "\(later)")

            let usage = try a.run(["changes", "--limit", "2"])
            #expect(usage.status == 64 && usage.stderr.contains("--limit"), "\(usage.stderr)")
            let both = try a.run(["changes", "--database", "--zone", "Topics"])
            #expect(both.status == 64, "\(both.stderr)")
        }
    }

    @Test("shared database: tokens survive a participant daemon restart; changes made while it was down come next")
    func sharedTokensSurviveRestart() async throws {
        try await blocking {
            let a = try E2ENode(name: "Alice")
            defer { a.stop() }
            let b = try E2ENode(name: "Bob")
            defer { b.stop() }
            try a.ok(["zone", "create", "Topics"])
            for name in ["t1", "t2", "t3"] {
                try a.ok(["record", "save", "--zone", "Topics", "--type", "Topic", "--name", name, "--field", "title=string:\(name)"])
            }
            let (url, _) = try invite(b, to: "Topics", of: a)
            try b.ok(["accept", url])
            let all = try #require(try b.ok(["changes", "--shared"]) as? [String: Any])
            #expect(Set(names(all)).isSuperset(of: ["t1", "t2", "t3"]), "\(all)")
            let token = try #require(all["token"] as? String)
            let page = try #require(try b.ok(["changes", "--shared", "--zone", "Topics", "--limit", "2"]) as? [String: Any])
            #expect(names(page).count == 2 && page["moreComing"] as? Bool == true, "\(page)")
            let pageToken = try #require(page["token"] as? String)
            let rest = try #require(try b.ok(["changes", "--shared", "--zone", "Topics", "--since", pageToken]) as? [String: Any])
            #expect(Set(names(page) + names(rest)).isSuperset(of: ["t1", "t2", "t3"]), "\(rest)")
            let database = try #require(try b.ok(["changes", "--shared", "--database"]) as? [String: Any])
            #expect(zones(database, "changedZones") == ["Topics"], "\(database)")
            let databaseToken = try #require(database["token"] as? String)
            let databaseText = try cli(["changes", "--shared", "--database", "--home", b.home])
            #expect(databaseText.stdout.contains("zone changed Topics from Alice (\(a.userRecordName))"), "\(databaseText.stdout)")

            try b.kill()
            try a.ok(["record", "save", "--zone", "Topics", "--type", "Topic", "--name", "t4", "--field", "title=string:four"])
            try a.ok(["record", "delete", "--zone", "Topics", "--name", "t1"])
            try b.restart()
            #expect(try eventually(timeout: 60) {
                let listed = try #require(try b.ok(["record", "list", "--shared", "--zone", "Topics"]) as? [[String: Any]])
                let present = listed.compactMap { $0["recordName"] as? String }
                return present.contains("t4") && !present.contains("t1")
            })
            // --jsonl with --shared: the zone as record import reads it, without its share record.
            let listed = try #require(try b.ok(["record", "list", "--shared", "--zone", "Topics"]) as? [[String: Any]])
            let exported = try cli(["record", "list", "--shared", "--zone", "Topics", "--jsonl", "--home", b.home])
            #expect(exported.status == 0, "\(exported.stderr)")
            let lines = try exported.stdout.split(separator: "\n").map {
                try #require(try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any])
            }
            #expect(!lines.isEmpty && lines.allSatisfy { $0["recordType"] as? String != "cloudkit.share" }, "\(exported.stdout)")
            #expect(Set(lines.compactMap { $0["recordName"] as? String })
                == Set(listed.filter { $0["recordType"] as? String != "cloudkit.share" }.compactMap { $0["recordName"] as? String }),
                "\(exported.stdout)")
            let after = try #require(try b.ok(["changes", "--shared", "--since", token]) as? [String: Any])
            #expect(names(after).contains("t4") && !names(after).contains("t2"), "\(after)")
            #expect(names(after, kind: "recordDeleted") == ["t1"], "\(after)")
            let zoneView = try #require(try b.ok(["changes", "--shared", "--database", "--since", databaseToken]) as? [String: Any])
            #expect(zones(zoneView, "changedZones") == ["Topics"], "\(zoneView)")
            let foreign = try b.run(["changes", "--shared", "--since", "shared:00000000:1"])
            #expect(foreign.status == 65 && foreign.stderr.contains("changeTokenExpired"), "\(foreign.stderr)")
        }
    }
}
