import Foundation
import ShareSyncNode
import ShareSyncTestSupport
import Testing

@Suite("The daemon and its control channel")
struct DaemonTests {
    @Test func initPrintsTheIdentityAndRefusesAnExistingHome() async throws {
        try await blocking {
            let folder = try TemporaryFolder()
            defer { folder.remove() }
            let home = folder.path + "/home"
            let created = try cli(["init", "--home", home, "--name", "Alice", "--email", "alice@example.org", "--json"])
            #expect(created.status == 0, "\(created.stderr)")
            let object = try #require(try json(created.stdout) as? [String: Any])
            let fingerprint = try #require(object["fingerprint"] as? String)
            #expect(fingerprint.count == 32)
            #expect(object["userRecordName"] as? String == "_" + fingerprint)
            let attributes = try FileManager.default.attributesOfItem(atPath: home)
            #expect((attributes[.posixPermissions] as? Int) == 0o700)
            for file in ["identity.key", "settings.json", "private.sqlite", "replica.sqlite"] {
                #expect(FileManager.default.fileExists(atPath: home + "/" + file), "missing \(file)")
            }

            let again = try cli(["init", "--home", home, "--name", "Alice"])
            #expect(again.status == 73)
            #expect(again.stderr.contains("already a node home"))
            #expect(again.stdout.isEmpty)
        }
    }

    @Test("run --cleartext-loopback is refused with a clear message unless the node listens on loopback")
    func cleartextLoopbackNeedsALoopbackListenAddress() async throws {
        try await blocking {
            let folder = try TemporaryFolder()
            defer { folder.remove() }
            let remote = folder.path + "/remote"
            #expect(try cli(["init", "--home", remote, "--name", "Alice", "--listen", "0.0.0.0:0"]).status == 0)
            let refused = try cli(["run", "--home", remote, "--cleartext-loopback"], timeout: 30)
            #expect(refused.status != 0)
            #expect(refused.stderr.contains("--cleartext-loopback needs a loopback listen address"), "\(refused.stderr)")
            #expect(refused.stderr.contains("0.0.0.0"))
            #expect(!refused.stdout.contains("listening on"))

            let local = folder.path + "/local"
            #expect(try cli(["init", "--home", local, "--name", "Alice", "--listen", "127.0.0.1:0"]).status == 0)
            let daemon = try ChildProcess.start(sharesync, ["run", "--home", local, "--cleartext-loopback"])
            defer { daemon.kill() }
            _ = try daemon.waitForLine(containing: "listening on", timeout: 30)
            let help = try cli(["run", "--help"])
            #expect(help.stdout.contains("--cleartext-loopback"))
        }
    }

    @Test func runPrintsItsAddressAndStopsCleanlyOnSIGTERM() async throws {
        try await blocking {
            let node = try RunningNode()
            defer { node.stop() }
            #expect(node.listening.hasPrefix("127.0.0.1:"))
            #expect(Int(node.listening.split(separator: ":").last!)! > 0)
            let socket = node.home + "/control.sock"
            let attributes = try FileManager.default.attributesOfItem(atPath: socket)
            #expect((attributes[.posixPermissions] as? Int) == 0o600)

            let status = try #require(try node.json(["status"]) as? [String: Any])
            #expect(status["userRecordName"] as? String == node.userRecordName)

            node.daemon.signal(SIGTERM)
            let outcome = try node.daemon.waitForExit(timeout: 30)
            #expect(outcome.exited && outcome.status == 0, "\(outcome.stderr)")
            #expect(!FileManager.default.fileExists(atPath: socket))

            let unreachable = try node.run(["zone", "list"])
            #expect(unreachable.status == 69)
            #expect(unreachable.stderr.contains("not running"))
        }
    }

    @Test("a daemon a test started stops cleanly once the process named by SHARESYNC_EXIT_WITH_PARENT is gone")
    func daemonEndsWithItsStarter() async throws {
        try await blocking {
            let folder = try TemporaryFolder()
            defer { folder.remove() }
            let home = folder.path + "/home"
            #expect(try cli(["init", "--home", home, "--name", "Alice", "--listen", "127.0.0.1:0"]).status == 0)
            // The daemon watches a stand-in for the test run (a test cannot end itself).
            let starter = try ChildProcess.start("/bin/sleep", ["60"])
            defer { starter.kill() }
            var environment = ProcessInfo.processInfo.environment
            environment[ChildProcess.exitWithParentVariable] = String(starter.pid)
            let daemon = try ChildProcess.start(sharesync, ["run", "--home", home], environment: environment)
            defer { daemon.kill() }
            _ = try daemon.waitForLine(containing: "listening on", timeout: 30)
            // While its starter lives, it runs on.
            Thread.sleep(forTimeInterval: 0.5)
            #expect(try cli(["status", "--home", home]).status == 0)

            starter.kill()
            let outcome = try daemon.waitForExit(timeout: 10)
            #expect(outcome.exited && outcome.status == 0, "\(outcome.stderr)")
            #expect(!FileManager.default.fileExists(atPath: home + "/control.sock"))

            // A starter gone before the daemon started: it still stops cleanly (exit 0), not of a signal.
            environment[ChildProcess.exitWithParentVariable] = String(starter.pid)
            let late = try ChildProcess.start(sharesync, ["run", "--home", home], environment: environment)
            defer { late.kill() }
            let lateOutcome = try late.waitForExit(timeout: 30)
            #expect(lateOutcome.exited && lateOutcome.status == 0, "\(lateOutcome.stderr)")
            #expect(!FileManager.default.fileExists(atPath: home + "/control.sock"))
        }
    }

    @Test func oneControlClientSendsManyRequestsAndFailsCleanlyWhenTheDaemonStops() async throws {
        let node = try await blocking { try RunningNode() }
        defer { node.stop() }
        let client = try await ControlClient.connect(path: node.home + "/control.sock")
        let status = try await client.call(.status, as: NodeStatus.self)
        #expect(status.userRecordName == node.userRecordName)
        _ = try await client.call(.zoneCreate(name: "Trips"), as: ZoneInfo.self)
        // Several requests in flight on the one connection: answers come back in order.
        async let first = client.call(.zoneList, as: [ZoneInfo].self)
        async let second = client.call(.status, as: NodeStatus.self)
        #expect(try await first.map(\.zoneName).contains("Trips"))
        #expect(try await second.userRecordName == node.userRecordName)
        // A refusal comes back as the node's error, and the connection stays usable.
        await #expect(throws: ControlError.self) { try await client.call(.zoneCreate(name: ""), as: ZoneInfo.self) }
        #expect(try await client.call(.status, as: NodeStatus.self).userRecordName == node.userRecordName)

        node.daemon.signal(SIGTERM)
        _ = try await blocking { try node.daemon.waitForExit(timeout: 30) }
        // The daemon is gone: a call on the old connection fails instead of waiting for ever.
        await #expect(throws: ControlClientError.self) { try await client.call(.status, as: NodeStatus.self) }
        await client.close()
    }

    @Test func sigintStopsTheDaemonToo() async throws {
        try await blocking {
            let node = try RunningNode()
            defer { node.stop() }
            node.daemon.signal(SIGINT)
            let outcome = try node.daemon.waitForExit(timeout: 30)
            #expect(outcome.exited && outcome.status == 0, "\(outcome.stderr)")
            #expect(!FileManager.default.fileExists(atPath: node.home + "/control.sock"))
        }
    }

    @Test func commandsWithoutADaemonExit69() async throws {
        try await blocking {
            let folder = try TemporaryFolder()
            defer { folder.remove() }
            // A folder that is not a node home says so (before: "not running", start it with `run`,
            // which then said it was not a node home).
            let wrong = try cli(["zone", "list", "--home", folder.path])
            #expect(wrong.status == 65 && wrong.stderr.contains("noHome") && wrong.stderr.contains("not a node home"), "\(wrong.stderr)")
            let home = folder.path + "/home"
            #expect(try cli(["init", "--home", home, "--name", "Stopped", "--listen", "127.0.0.1:0"]).status == 0)
            let outcome = try cli(["zone", "list", "--home", home])
            #expect(outcome.status == 69)
            #expect(outcome.stderr.contains("not running"))
            #expect(outcome.stderr.split(separator: "\n").count == 1)
        }
    }

    @Test func aSecondDaemonOnTheSameHomeIsRefused() async throws {
        try await blocking {
            let node = try RunningNode()
            defer { node.stop() }
            let second = try ChildProcess.start(sharesync, ["run", "--home", node.home])
            defer { second.kill() }
            let outcome = try second.waitForExit(timeout: 30)
            #expect(outcome.status != 0)
            // The first daemon still answers.
            #expect(try node.run(["zone", "list"]).status == 0)
        }
    }

    @Test(arguments: [
        ["zone"] as [String],
        ["record", "save", "--zone", "Z", "--type", "T", "--name", "n", "--field", "x=int64:nope"],
        ["record", "save", "--zone", "Z", "--type", "T", "--name", "n", "--field", "novalue"],
        ["share", "invite", "--zone", "Z", "--permission", "readOnly"],
        ["share", "invite", "--zone", "Z", "--email", "a@b", "--permission", "none"],
        ["init", "--name", "A", "--listen", "nowhere"],
        ["frobnicate"],
    ])
    func badArgumentsExit64(arguments: [String]) throws {
        let outcome = try cli(arguments + ["--home", "/tmp/ss-cli-nonexistent"])
        #expect(outcome.status == 64, "\(arguments): \(outcome.stderr)")
        #expect(outcome.stderr.contains("Error") || outcome.stderr.contains("error"), "\(outcome.stderr)")
    }

    @Test func everySubcommandHasHelpWithAnExample() async throws {
        try await blocking {
            let commands: [[String]] = [
                ["init"], ["run"], ["status"], ["zone", "create"], ["zone", "list"], ["zone", "delete"],
                ["record", "save"], ["record", "get"], ["record", "delete"], ["record", "list"],
                ["share", "create"], ["share", "invite"], ["share", "participants"], ["share", "permission"],
                ["share", "remove"], ["share", "url"], ["share", "stop"], ["share", "requesters"],
                ["share", "approve"], ["share", "deny"], ["share", "block"], ["accept"], ["request-access"],
            ]
            for command in commands {
                let outcome = try cli(command + ["--help"])
                #expect(outcome.status == 0, "\(command)")
                #expect(outcome.stdout.contains("Example"), "\(command) --help has no example")
                #expect(outcome.stdout.contains("--json"), "\(command) --help has no --json")
            }
        }
    }
}
