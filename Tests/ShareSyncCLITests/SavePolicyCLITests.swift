import Foundation
import ShareSyncTestSupport
import Testing

/// The JSON error a `--json` command printed on standard error.
func jsonError(_ outcome: ChildProcess.Outcome, sourceLocation: SourceLocation = #_sourceLocation) throws -> [String: Any] {
    let line = outcome.stderr.split(separator: "\n").last.map(String.init) ?? ""
    let object = try #require(
        try? json(line) as? [String: Any], "not a JSON error: \(outcome.stderr)", sourceLocation: sourceLocation)
    return try #require(object["error"] as? [String: Any], "no error object: \(line)", sourceLocation: sourceLocation)
}

private func fields(_ record: Any?) -> [String: Any] {
    ((record as? [String: Any])?["fields"] as? [String: [String: Any]])?.mapValues { $0["value"] as Any } ?? [:]
}

private func tag(_ record: Any?) -> String? { (record as? [String: Any])?["recordChangeTag"] as? String }

@Suite("Save policies and --if-tag on every write command (CLI, daemons as processes)")
struct SavePolicyCLITests {
    @Test("owner side: --if-tag with a stale tag fails with serverRecordChanged showing the stored record, in text and JSON")
    func ownerIfTag() async throws {
        try await blocking {
            let a = try E2ENode(name: "Alice")
            defer { a.stop() }
            try a.ok(["zone", "create", "Topics"])
            let first = try a.ok(["record", "save", "--zone", "Topics", "--type", "Topic", "--name", "t", "--field", "title=string:A", "--field", "n=int64:1"])
            let staleTag = try #require(tag(first))
            // No --type: the record exists, its type is known.
            let second = try a.ok(["record", "save", "--zone", "Topics", "--name", "t", "--field", "title=string:B"])
            #expect(fields(second)["title"] as? String == "B" && fields(second)["n"] as? Int == 1)
            let currentTag = try #require(tag(second))

            let refused = try a.run(["record", "save", "--zone", "Topics", "--name", "t", "--field", "title=string:C", "--if-tag", staleTag])
            #expect(refused.status == 65, "\(refused.stderr)")
            let error = try jsonError(refused)
            #expect(error["code"] as? String == "serverRecordChanged")
            #expect(error["exitCode"] as? Int == 65)
            #expect(fields(error["serverRecord"])["title"] as? String == "B", "\(error)")
            let text = try cli(["record", "save", "--zone", "Topics", "--name", "t", "--field", "title=string:C", "--if-tag", staleTag, "--home", a.home])
            #expect(text.status == 65 && text.stderr.contains("serverRecordChanged"), "\(text.stderr)")
            #expect(text.stderr.contains("the owner's record") && text.stderr.contains("title = \"B\""), "\(text.stderr)")
            #expect(fields(try a.ok(["record", "get", "--zone", "Topics", "--name", "t"]))["title"] as? String == "B")

            let saved = try a.ok(["record", "save", "--zone", "Topics", "--name", "t", "--field", "title=string:C", "--if-tag", currentTag])
            #expect(fields(saved)["title"] as? String == "C" && fields(saved)["n"] as? Int == 1, "fields kept")

            // ifServerRecordUnchanged without a tag: only a new record.
            let exists = try a.run(["record", "save", "--zone", "Topics", "--type", "Topic", "--name", "t", "--field", "title=string:D", "--policy", "ifServerRecordUnchanged"])
            #expect(exists.status == 65, "\(exists.stderr)")
            #expect(try jsonError(exists)["code"] as? String == "serverRecordChanged")
            try a.ok(["record", "save", "--zone", "Topics", "--type", "Topic", "--name", "new", "--field", "title=string:N", "--policy", "ifServerRecordUnchanged"])
            // allKeys replaces: the fields not given are gone.
            let replaced = try a.ok(["record", "save", "--zone", "Topics", "--name", "t", "--field", "title=string:E", "--policy", "allKeys"])
            #expect(fields(replaced)["title"] as? String == "E" && fields(replaced)["n"] == nil, "\(fields(replaced))")

            // Bad input: clear usage errors, nothing changes.
            let mixed = try a.run(["record", "save", "--zone", "Topics", "--name", "t", "--field", "title=string:F", "--if-tag", "x", "--policy", "allKeys"])
            #expect(mixed.status == 64, "\(mixed.stderr)")
            #expect(try jsonError(mixed)["message"].map { "\($0)".contains("--if-tag") } == true, "\(mixed.stderr)")
            let noType = try a.run(["record", "save", "--zone", "Topics", "--name", "missing", "--field", "title=string:F"])
            #expect(noType.status == 65, "\(noType.stderr)")
            #expect(try jsonError(noType)["rule"] as? String == "typeNeeded", "\(noType.stderr)")
            #expect(fields(try a.ok(["record", "get", "--zone", "Topics", "--name", "t"]))["title"] as? String == "E")
        }
    }

    @Test("record import --policy: ifServerRecordUnchanged refuses a stale line (nothing saved), changedKeys keeps other fields")
    func importPolicies() async throws {
        try await blocking {
            let a = try E2ENode(name: "Alice")
            defer { a.stop() }
            try a.ok(["zone", "create", "Topics"])
            let first = try a.ok(["record", "save", "--zone", "Topics", "--type", "Topic", "--name", "t", "--field", "title=string:A", "--field", "n=int64:1"])
            let staleTag = try #require(tag(first))
            try a.ok(["record", "save", "--zone", "Topics", "--name", "t", "--field", "title=string:B"])
            let file = a.folder.path + "/lines.jsonl"
            let line = #"{"recordName":"t","recordType":"Topic","recordChangeTag":"\#(staleTag)","fields":{"title":{"type":"STRING","value":"I"}}}"#
            let fresh = #"{"recordName":"u","recordType":"Topic","fields":{"title":{"type":"STRING","value":"U"}}}"#
            try (fresh + "\n" + line + "\n").write(toFile: file, atomically: true, encoding: .utf8)
            let refused = try a.run(["record", "import", "--zone", "Topics", "--file", file, "--policy", "ifServerRecordUnchanged"])
            #expect(refused.status == 65, "\(refused.stderr)")
            let error = try jsonError(Self.firstJSONLine(refused))
            #expect(error["code"] as? String == "serverRecordChanged" && fields(error["serverRecord"])["title"] as? String == "B", "\(error)")
            #expect(try a.run(["record", "get", "--zone", "Topics", "--name", "u"]).status == 65, "the batch is one transaction")

            try (line + "\n").write(toFile: file, atomically: true, encoding: .utf8)
            try a.ok(["record", "import", "--zone", "Topics", "--file", file, "--policy", "changedKeys"])
            let merged = fields(try a.ok(["record", "get", "--zone", "Topics", "--name", "t"]))
            #expect(merged["title"] as? String == "I" && merged["n"] as? Int == 1, "\(merged)")
            try a.ok(["record", "import", "--zone", "Topics", "--file", file])
            #expect(fields(try a.ok(["record", "get", "--zone", "Topics", "--name", "t"]))["n"] == nil, "allKeys replaces")
        }
    }

    /// The outcome with only the JSON error line on stderr (import adds a line of its own after it).
    static func firstJSONLine(_ outcome: ChildProcess.Outcome) -> ChildProcess.Outcome {
        var copy = outcome
        copy.stderr = outcome.stderr.split(separator: "\n").first { $0.hasPrefix("{") }.map(String.init) ?? outcome.stderr
        return copy
    }

    @Test("shared side: --if-tag with a stale tag gets serverRecordChanged with the owner's record; a save without --type edits")
    func sharedIfTag() async throws {
        try await blocking {
            let a = try E2ENode(name: "Alice")
            defer { a.stop() }
            let b = try E2ENode(name: "Bob")
            defer { b.stop() }
            try a.ok(["zone", "create", "Topics"])
            let first = try a.ok(["record", "save", "--zone", "Topics", "--type", "Topic", "--name", "t", "--field", "title=string:A"])
            let staleTag = try #require(tag(first))
            try a.ok(["record", "save", "--zone", "Topics", "--name", "t", "--field", "title=string:B"])
            let (url, _) = try invite(b, to: "Topics", of: a)
            try b.ok(["accept", url])
            #expect(try eventually { fields(try b.ok(["record", "get", "--shared", "--zone", "Topics", "--name", "t"]))["title"] as? String == "B" })
            let refused = try b.run(["record", "save", "--shared", "--zone", "Topics", "--name", "t", "--field", "title=string:C", "--if-tag", staleTag])
            #expect(refused.status == 65, "\(refused.stderr)")
            let error = try jsonError(refused)
            #expect(error["code"] as? String == "serverRecordChanged" && fields(error["serverRecord"])["title"] as? String == "B", "\(error)")
            let sent = try #require(try b.ok(["record", "save", "--shared", "--zone", "Topics", "--name", "t", "--field", "title=string:D"]) as? [String: Any])
            #expect(sent["outcome"] as? String == "sent")
            #expect(try eventually { fields(try a.ok(["record", "get", "--zone", "Topics", "--name", "t"]))["title"] as? String == "D" })
        }
    }
}
