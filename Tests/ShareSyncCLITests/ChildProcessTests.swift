import Foundation
import ShareSyncTestSupport
import Testing

/// The test harness's own process launcher: every CLI and end-to-end test starts `sharesync` with it,
/// so what it promises is checked here against real programs.
@Suite("Child processes started by tests")
struct ChildProcessTests {
    @Test("a child holds no descriptor of the test process but its standard streams; its input is /dev/null")
    func aChildInheritsOnlyItsStandardStreams() async throws {
        try await blocking {
            // Descriptors without close-on-exec, as a careless library would leave them.
            let leaked = (0..<32).map { _ in dup(2) }
            defer { for fd in leaked { close(fd) } }
            #expect(leaked.allSatisfy { $0 > 2 })
            let listing = try ChildProcess.run("/bin/ls", ["-1", "/proc/self/fd"])
            #expect(listing.exited && listing.status == 0, "\(listing.stderr)")
            // ls's own descriptors: 0, 1, 2 and the directory it lists.
            let open = Set(listing.stdout.split(separator: "\n").compactMap { Int32($0) })
            #expect(open.isDisjoint(with: leaked.filter { $0 != 3 }), "inherited: \(open.intersection(leaked))")
            #expect(open.count <= 4, "\(open.sorted())")
            let input = try ChildProcess.run("/bin/readlink", ["/proc/self/fd/0"])
            #expect(input.stdout == "/dev/null\n")
        }
    }

    @Test("an exit status and a killing signal are told apart")
    func exitStatusAndSignal() async throws {
        try await blocking {
            let exited = try ChildProcess.run("/bin/sh", ["-c", "echo out; echo err >&2; exit 3"])
            #expect(exited.exited && exited.status == 3)
            #expect(exited.stdout == "out\n" && exited.stderr == "err\n")
            let signalled = try ChildProcess.run("/bin/sh", ["-c", "kill -TERM $$"])
            #expect(!signalled.exited && signalled.status == SIGTERM)
            let sleeper = try ChildProcess.start("/bin/sleep", ["30"])
            #expect(sleeper.isRunning)
            sleeper.kill()
            #expect(!sleeper.isRunning)
        }
    }

    @Test("a program that does not exist is an error naming it")
    func missingProgram() async throws {
        try await blocking {
            let error = #expect(throws: ChildProcessError.self) {
                try ChildProcess.run("/nonexistent/sharesync", [])
            }
            #expect(error.map { "\($0)" }?.contains("/nonexistent/sharesync") == true)
        }
    }
}
