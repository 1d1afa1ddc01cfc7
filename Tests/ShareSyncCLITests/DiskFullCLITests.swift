import Foundation
import ShareSyncTestSupport
import Testing

/// Whether this process may mount a tmpfs (root on Linux): the real full-disk test needs one.
private let canMount: Bool = {
    #if os(Linux)
    return getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/bin/mount")
    #else
    return false
    #endif
}()

private func mount(_ arguments: [String]) throws {
    let outcome = try ChildProcess.run("/bin/mount", arguments)
    guard outcome.exited, outcome.status == 0 else { throw CocoaError(.fileWriteUnknown) }
}

private func unmount(_ path: String) {
    _ = try? ChildProcess.run("/bin/umount", ["-l", path])
}

@Suite("A participant's disk fills up during accept")
struct DiskFullCLITests {
    @Test(.enabled(if: canMount, "needs root to mount a small tmpfs"))
    func acceptOnAFullDiskSaysSoAndTheDaemonResumesWhenThereIsSpace() async throws {
        try await blocking {
            let a = try E2ENode(name: "Alice")
            defer { a.stop() }
            // Bob's home on a 2 MiB file system; the share holds about 4 MB of records.
            var mounted: String?
            let b = try E2ENode(name: "Bob") { home in
                try FileManager.default.createDirectory(atPath: home, withIntermediateDirectories: true)
                try mount(["-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs", home])
                mounted = home
            }
            defer {
                b.daemon.kill()
                if let mounted { unmount(mounted) }
                b.folder.remove()
            }
            let file = a.folder.path + "/records.jsonl"
            let body = String(repeating: "0123456789", count: 1_000)
            try (0..<400).map { #"{"recordName":"n\#($0)","recordType":"Note","fields":{"body":{"type":"STRING","value":"\#($0) \#(body)"}}}"# }
                .joined(separator: "\n").write(toFile: file, atomically: true, encoding: .utf8)
            try a.ok(["record", "import", "--zone", "Big", "--file", file])
            let (url, _) = try invite(b, to: "Big", of: a, permission: "readOnly")

            let accept = try b.run(["accept", url], timeout: 90)
            #expect(accept.status != 0)
            #expect(accept.stderr.contains("quotaExceeded"), "\(accept.stderr)")
            #expect(accept.stderr.contains("diskFull"), "\(accept.stderr)")
            #expect(accept.stderr.contains(b.home), "the error names the file: \(accept.stderr)")
            #expect(!accept.stderr.contains("networkFailure"), "\(accept.stderr)")
            // The daemon is still up and answers.
            #expect(try b.run(["status"]).status == 0)

            // Space again: the daemon finishes the sync by itself.
            try mount(["-o", "remount,size=64m", b.home])
            var count = 0
            let complete = try eventually(timeout: 60) {
                count = (try b.ok(["record", "list", "--shared", "--zone", "Big"]) as? [[String: Any]])?
                    .filter { $0["recordType"] as? String == "Note" }.count ?? 0
                return count == 400
            }
            #expect(complete, "the replica has \(count) of 400 records")
        }
    }
}
