import Foundation
import ShareSyncCore
import ShareSyncTestSupport
import Testing

/// Bad or unusual input to the CLI, from a review of every command: each is refused naming what is
/// wrong, or now does what it says.
@Suite("CLI input")
struct CLIInputTests {
    @Test("contradictory or malformed options are usage errors (64) before anything is asked")
    func usageErrors() async throws {
        try await blocking {
            let folder = try TemporaryFolder()
            defer { folder.remove() }
            let home = ["--home", folder.path + "/none"]
            let cases: [([String], String)] = [
                (["share", "set", "--zone", "Z", "--title", "A", "--clear", "title"], "contradict"),
                (["share", "invite", "--zone", "Z", "--user", "Bob", "--permission", "readOnly"], "user record name"),
                (["record", "save", "--zone", "Z", "--type", "T", "--name", "n", "--field", "t=string:A", "--field", "t=int64:1"], "given twice"),
                (["advertise", "alice.example.org/x:7421"], ""),
                (["init", "--name", "A", "--advertise", "alice.example.org/x"], "--advertise"),
                (["init", "--name", "A", "--advertise", "[]"], "--advertise"),
                (["share", "invite", "--zone", "Z", "--user", "_" + String(repeating: "A", count: 32), "--permission", "readOnly"], "lowercase"),
            ]
            for (arguments, says) in cases {
                let result = try cli(arguments + home)
                #expect(result.status == 64, "\(arguments): \(result.status) \(result.stderr)")
                #expect(says.isEmpty || result.stderr.contains(says), "\(arguments): \(result.stderr)")
            }
        }
    }

    @Test("record import reads a file with Windows line ends, and imports into the default zone")
    func importCRLFAndDefaultZone() async throws {
        try await blocking {
            let a = try E2ENode(name: "Alice")
            defer { a.stop() }
            let file = a.folder.path + "/crlf.jsonl"
            let lines = (0..<3).map { i in
                #"{"recordName":"item-\#(i)","recordType":"Item","fields":{"title":{"type":"STRING","value":"Item \#(i)"}}}"#
            }
            try lines.joined(separator: "\r\n").appending("\r\n").write(toFile: file, atomically: true, encoding: .utf8)
            let imported = try #require(try a.ok(["record", "import", "--zone", "Big", "--file", file]) as? [String: Any])
            #expect(imported["saved"] as? Int == 3)
            let intoDefault = try #require(try a.ok(["record", "import", "--zone", "_defaultZone", "--file", file]) as? [String: Any])
            #expect(intoDefault["saved"] as? Int == 3)
            #expect(try a.recordNames(zone: "_defaultZone", shared: false).sorted() == ["item-0", "item-1", "item-2"])
        }
    }

    @Test("record list --jsonl exports a zone that record import takes back as it is; share lines and repeated names are refused by line")
    func exportImportRoundTrip() async throws {
        try await blocking {
            let a = try E2ENode(name: "Alice")
            defer { a.stop() }
            try a.ok(["zone", "create", "Groceries"])
            try a.ok(["record", "save", "--zone", "Groceries", "--type", "Topic", "--name", "topic", "--field", "title=string:Weekly"])
            try a.ok(["record", "save", "--zone", "Groceries", "--type", "Item", "--name", "milk", "--parent", "topic",
                      "--field", "title=string:Milk", "--field", "count=int64:2"])
            try a.ok(["share", "create", "--zone", "Groceries", "--title", "Groceries"])
            let exported = try cli(["record", "list", "--zone", "Groceries", "--jsonl", "--home", a.home])
            #expect(exported.status == 0, "\(exported.stderr)")
            let lines = exported.stdout.split(separator: "\n").map(String.init)
            #expect(lines.count == 2, "\(exported.stdout)")  // the share record is left out
            let file = a.folder.path + "/groceries.jsonl"
            try exported.stdout.write(toFile: file, atomically: true, encoding: .utf8)
            let imported = try #require(try a.ok(["record", "import", "--zone", "Copy", "--file", file]) as? [String: Any])
            #expect(imported["saved"] as? Int == 2)
            let copy = try #require(try a.ok(["record", "get", "--zone", "Copy", "--name", "milk"]) as? [String: Any])
            #expect(((copy["fields"] as? [String: Any])?["count"] as? [String: Any])?["value"] as? Int == 2)
            #expect((copy["parent"] as? [String: Any])?["recordName"] as? String == "topic")
            // A share record's line, and a name given twice, are refused naming their lines; nothing is saved.
            let withShare = try cli(["record", "list", "--zone", "Groceries", "--json", "--home", a.home])
            let shareLine = try #require(((try JSONSerialization.jsonObject(with: Data(withShare.stdout.utf8)) as? [[String: Any]]) ?? [])
                .first { $0["recordType"] as? String == "cloudkit.share" })
            let bad = a.folder.path + "/bad.jsonl"
            let shareText = String(decoding: try JSONSerialization.data(withJSONObject: shareLine), as: UTF8.self)
            try (lines + [shareText]).joined(separator: "\n").write(toFile: bad, atomically: true, encoding: .utf8)
            let refusedShare = try a.run(["record", "import", "--zone", "Other", "--file", bad])
            #expect(refusedShare.status == 64 && refusedShare.stderr.contains("line 3"), "\(refusedShare.stderr)")
            try (lines + [lines[0]]).joined(separator: "\n").write(toFile: bad, atomically: true, encoding: .utf8)
            let twice = try a.run(["record", "import", "--zone", "Other", "--file", bad])
            #expect(twice.status == 64 && twice.stderr.contains("lines 1 and 3"), "\(twice.stderr)")
            let zones = try #require(try a.ok(["zone", "list"]) as? [[String: Any]])
            #expect(!zones.contains { $0["zoneName"] as? String == "Other" }, "\(zones)")
        }
    }
}
