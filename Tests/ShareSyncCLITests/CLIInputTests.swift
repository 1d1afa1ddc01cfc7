import Foundation
import ShareSyncCore
import ShareSyncTestSupport
import Testing

/// Bad or unusual input to the CLI, from a review of every command: each is refused naming what is
/// wrong, or now does what it says.
@Suite("CLI input")
struct CLIInputTests {
    @Test("contradictory or malformed options are usage errors (64) before anything is asked")
    func usageErrors() throws {
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
}
