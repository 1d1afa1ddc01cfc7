import Foundation
import ShareSyncTestSupport
import Testing

// `record import` is exact (issue 15, observation 4): batches split by bytes as well as by count, each
// batch one transaction, the output says which committed, and a re-run resumes without duplicates.

@Suite("record import")
struct ImportTests {
    /// A JSON line of a record with a `body` of `size` bytes.
    static func line(_ name: String, size: Int) -> String {
        let body = String(repeating: "abcdefghij", count: size / 10)
        return #"{"recordName":"\#(name)","recordType":"Item","fields":{"body":{"type":"STRING","value":"\#(body)"}}}"#
    }

    static func count(_ node: E2ENode, zone: String) throws -> Int {
        try #require(try node.ok(["record", "list", "--zone", zone]) as? [[String: Any]]).count
    }

    @Test func recordsNearTheRecordLimitImportWithTheDefaultOptions() async throws {
        try await blocking {
            let a = try E2ENode(name: "Alice")
            defer { a.stop() }
            // 12 records of 700 kB: 8.4 MB, twice the control socket's line limit, in batches of 3 MiB or less.
            let file = a.folder.path + "/big.jsonl"
            try (0..<12).map { Self.line("big-\($0)", size: 700_000) }.joined(separator: "\n").write(toFile: file, atomically: true, encoding: .utf8)
            let imported = try #require(try a.ok(["record", "import", "--zone", "Big", "--file", file]) as? [String: Any])
            #expect(imported["saved"] as? Int == 12)
            #expect((imported["batches"] as? Int ?? 0) >= 3)
            #expect(try Self.count(a, zone: "Big") == 12)
        }
    }

    @Test("a file that cannot be read, or a line that is not a record, is named in plain words; one record is one record")
    func unreadableInputIsNamedPlainly() async throws {
        try await blocking {
            let a = try E2ENode(name: "Alice")
            defer { a.stop() }
            try a.ok(["zone", "create", "Items"])
            func importing(_ file: String) throws -> ChildProcess.Outcome {
                try cli(["record", "import", "--zone", "Items", "--file", file, "--home", a.home])
            }
            // Before: "cannot read FILE", and why was left out.
            let missing = try importing(a.folder.path + "/nosuch.jsonl")
            #expect(missing.status == 64 && missing.stderr.contains("nosuch.jsonl: no such file"), "\(missing.stderr)")
            let folder = try importing(a.folder.path)
            #expect(folder.status == 64 && folder.stderr.contains("it is a folder"), "\(folder.stderr)")
            // Before: "not a record: Error Domain=NSCocoaErrorDomain Code=3840 …".
            let bad = a.folder.path + "/bad.jsonl"
            try (Self.line("fine", size: 10) + "\n{not json\n").write(toFile: bad, atomically: true, encoding: .utf8)
            let notJSON = try importing(bad)
            #expect(notJSON.status == 64 && notJSON.stderr.contains("line 2: not a record: not valid JSON"), "\(notJSON.stderr)")
            let shape = a.folder.path + "/shape.jsonl"
            try #"{"recordName":"x","recordType":"Item","fields":3}"#.write(toFile: shape, atomically: true, encoding: .utf8)
            let wrongShape = try importing(shape)
            // Named by its path, as the node's record reader names it.
            #expect(wrongShape.status == 64 && wrongShape.stderr.contains("line 1: not a record: malformed record JSON: "), "\(wrongShape.stderr)")
            #expect(wrongShape.stderr.contains("expected an object at fields"), "\(wrongShape.stderr)")
            for outcome in [notJSON, wrongShape] {
                #expect(!outcome.stderr.contains("Domain="), "\(outcome.stderr)")
            }
            #expect(try Self.count(a, zone: "Items") == 0, "nothing of a file with a bad line is imported")
            let one = a.folder.path + "/one.jsonl"
            try Self.line("only", size: 10).write(toFile: one, atomically: true, encoding: .utf8)
            let single = try importing(one)
            #expect(single.status == 0 && single.stdout.contains("imported 1 record into zone Items in 1 batch\n"), "\(single.stdout)")
            // (And an empty list says so: before, `zone list --shared` printed nothing at all.)
            let noShares = try cli(["zone", "list", "--shared", "--home", a.home])
            #expect(noShares.status == 0 && noShares.stdout.contains("no zones are shared with this node"), "\(noShares.stdout)")
        }
    }

    @Test func aFailingBatchSavesNothingAndTheRunSaysWhereToResume() async throws {
        try await blocking {
            let a = try E2ENode(name: "Alice")
            defer { a.stop() }
            let file = a.folder.path + "/items.jsonl"
            // Record 25 (1-based 26) is over the 1,000,000-byte record limit: its batch of 10 fails whole.
            var lines = (0..<40).map { Self.line("item-\($0)", size: 100) }
            lines[25] = Self.line("item-25", size: 1_100_000)
            try lines.joined(separator: "\n").write(toFile: file, atomically: true, encoding: .utf8)
            let failed = try cli(["record", "import", "--zone", "Items", "--file", file, "--batch-size", "10", "--home", a.home])
            #expect(failed.status != 0)
            #expect(failed.stdout.contains("batch 2 of 4: records 11-20 committed"), "\(failed.stdout)")
            #expect(failed.stderr.contains("recordSize") || failed.stderr.contains("limit"), "\(failed.stderr)")
            #expect(failed.stderr.contains("batches 1-2 of 4 committed (records 1-20)"), "\(failed.stderr)")
            #expect(failed.stderr.contains("--skip 20"), "\(failed.stderr)")
            // With --json, the failure is one JSON object on standard error, its message saying where to resume.
            let failedJSON = try cli(["record", "import", "--zone", "Items", "--file", file, "--batch-size", "10", "--json", "--home", a.home])
            let errorLines = failedJSON.stderr.split(separator: "\n")
            #expect(failedJSON.status == 65 && errorLines.count == 1, "\(failedJSON.stderr)")
            let object = try JSONSerialization.jsonObject(with: Data((errorLines.first ?? "").utf8)) as? [String: Any]
            let message = (object?["error"] as? [String: Any])?["message"] as? String ?? ""
            #expect(message.contains("batches 1-2 of 4 committed") && message.contains("--skip 20"), "\(failedJSON.stderr)")
            // Exactly the committed batches are there: none of the failed batch's 9 good records.
            #expect(try Self.count(a, zone: "Items") == 20)

            // Fixed, and resumed where it stopped: every record once.
            lines[25] = Self.line("item-25", size: 100)
            try lines.joined(separator: "\n").write(toFile: file, atomically: true, encoding: .utf8)
            let resumed = try #require(
                try a.ok(["record", "import", "--zone", "Items", "--file", file, "--batch-size", "10", "--skip", "20"]) as? [String: Any])
            #expect(resumed["saved"] as? Int == 20)
            #expect(try Self.count(a, zone: "Items") == 40)
            // Running the whole import again saves by name: still 40 records.
            _ = try a.ok(["record", "import", "--zone", "Items", "--file", file, "--batch-size", "10"])
            #expect(try Self.count(a, zone: "Items") == 40)
            // A --skip past the file's end is a usage error (it saved nothing and said it had imported 0).
            let past = try cli(["record", "import", "--zone", "Items", "--file", file, "--skip", "41", "--home", a.home])
            #expect(past.status == 64 && past.stderr.contains("holds 40 records"), "\(past.stderr)")
        }
    }
}
