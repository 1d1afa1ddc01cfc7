import Foundation
import ShareSyncTestSupport
import Testing

// Owners that can move, first part (issue 10, observation 4): a node told to listen on port 0 keeps
// the port the system chose and comes back on it after a restart, so its share URLs and its
// participants' stored address stay right.
@Suite("A chosen port is kept")
struct KeptPortTests {
    @Test func aNodeListeningOnPortZeroComesBackOnTheSamePortAfterARestart() async throws {
        try await blocking {
            let folder = try TemporaryFolder()
            defer { folder.remove() }
            let home = folder.path + "/home"
            let created = try cli(["init", "--home", home, "--name", "Alice", "--listen", "127.0.0.1:0", "--json"])
            #expect(created.status == 0, "\(created.stderr)")
            func start() throws -> (ChildProcess, String) {
                let daemon = try ChildProcess.start(sharesync, ["run", "--home", home])
                let line = try daemon.waitForLine(containing: "listening on", timeout: 30)
                return (daemon, String(line.dropFirst("listening on ".count)))
            }
            let (first, address) = try start()
            #expect(!address.hasSuffix(":0"))
            first.signal(SIGKILL)
            _ = try first.waitForExit(timeout: 10)
            let (second, again) = try start()
            defer { second.kill() }
            #expect(again == address, "the node came back on \(again), not \(address)")
            let settings = try String(contentsOfFile: home + "/settings.json", encoding: .utf8)
            #expect(settings.contains("\"boundPort\""), "\(settings)")
        }
    }
}
