import Foundation
import ShareSyncTestSupport
import Testing

@Suite("CLI details: reference actions, invitation syntax, permission help, examples (CLI, daemons as processes)")
struct CLIDetailsTests {
    @Test("--field k=reference:X:deleteSelf makes the record go when X is deleted; reference:X keeps it")
    func referenceAction() async throws {
        try await blocking {
            let a = try E2ENode(name: "Alice")
            defer { a.stop() }
            try a.ok(["zone", "create", "Lists"])
            try a.ok(["record", "save", "--zone", "Lists", "--type", "Item", "--name", "milk"])
            let note = try #require(try a.ok(["record", "save", "--zone", "Lists", "--type", "Note", "--name", "n1", "--field", "item=reference:milk:deleteSelf"]) as? [String: Any])
            let field = try #require((note["fields"] as? [String: [String: Any]])?["item"])
            #expect("\(field)".contains("DELETE_SELF"), "\(field)")
            try a.ok(["record", "save", "--zone", "Lists", "--type", "Note", "--name", "n2", "--field", "item=reference:milk"])
            let text = try cli(["record", "get", "--zone", "Lists", "--name", "n1", "--home", a.home])
            #expect(text.stdout.contains("→ milk (deleteSelf)"), "\(text.stdout)")
            try a.ok(["record", "delete", "--zone", "Lists", "--name", "milk"])
            #expect(try a.run(["record", "get", "--zone", "Lists", "--name", "n1"]).status == 65, "deleteSelf: gone with milk")
            #expect(try a.run(["record", "get", "--zone", "Lists", "--name", "n2"]).status == 0, "no action: kept")
            // milk is gone now: a deleteSelf reference to it is refused, one with no action is taken.
            let dangling = try a.run(["record", "save", "--zone", "Lists", "--type", "Note", "--name", "n4", "--field", "item=reference:milk:deleteSelf"])
            #expect(dangling.status == 65 && dangling.stderr.contains("referenceViolation") && dangling.stderr.contains("deleteSelfTargetMissing")
                && dangling.stderr.contains("milk"), "\(dangling.stderr)")
            #expect(try a.run(["record", "get", "--zone", "Lists", "--name", "n4"]).status == 65, "nothing saved")
            try a.ok(["record", "save", "--zone", "Lists", "--type", "Note", "--name", "n5", "--field", "item=reference:milk"])
            let bad = try a.run(["record", "save", "--zone", "Lists", "--type", "Note", "--name", "n3", "--field", "item=reference::deleteSelf"])
            #expect(bad.status == 64, "\(bad.stderr)")
        }
    }

    @Test("malformed email and phone invitations are usage errors (64) that change nothing; permission help lists what is accepted")
    func invitationSyntax() async throws {
        try await blocking {
            let a = try E2ENode(name: "Alice")
            defer { a.stop() }
            try a.ok(["zone", "create", "Lists"])
            try a.ok(["share", "create", "--zone", "Lists"])
            for (option, value) in [("--email", "bob"), ("--email", "bob@"), ("--email", "bob@example"), ("--email", "b ob@example.org"),
                                    ("--phone", "12"), ("--phone", "call me"), ("--phone", "+1 555 12a4")] {
                let refused = try a.run(["share", "invite", "--zone", "Lists", option, value, "--permission", "readOnly"])
                #expect(refused.status == 64, "\(option) \(value): \(refused.stderr)")
                #expect(refused.stderr.contains(option), "\(option) \(value): \(refused.stderr)")
            }
            let participants = try #require(try a.ok(["share", "participants", "--zone", "Lists"]) as? [Any])
            #expect(participants.count == 1, "only the owner: \(participants)")
            try a.ok(["share", "invite", "--zone", "Lists", "--email", "bob@example.org", "--permission", "readOnly"])
            try a.ok(["share", "invite", "--zone", "Lists", "--phone", "+1 (555) 123-4567", "--permission", "readOnly"])
            let initBad = try cli(["init", "--home", a.folder.path + "/other", "--name", "X", "--email", "nope"])
            #expect(initBad.status == 64 && initBad.stderr.contains("--email"), "\(initBad.stderr)")

            for command in [["share", "invite"], ["share", "permission"], ["share", "approve"], ["share", "public"]] {
                let help = try cli(command + ["--help"])
                #expect(!help.stdout.contains("unknown"), "\(command): \(help.stdout)")
            }
        }
    }

    @Test("a negative number given to a numeric option is refused by that option's own check (64), not as a missing value")
    func negativeNumbers() async throws {
        try await blocking {
            let folder = try TemporaryFolder()
            defer { folder.remove() }
            let home = folder.path + "/none"
            for (arguments, message) in [
                (["changes", "--shared", "--limit", "-5"], "--limit must be 1 or more"),
                (["record", "query", "--zone", "Z", "--type", "T", "--limit", "-5"], "--limit -5 is not between 1 and"),
                (["record", "query", "--zone", "Z", "--type", "T", "--cursor", "-1"], "--cursor -1 must not be negative"),
                (["accept", "sharesync://127.0.0.1:7420/share/PJddINT0_RFtsUZscRLeoSDj?owner=861c5add48934dc0bbcf0ec1406315ca", "--timeout", "-1"], "--timeout must be more than 0"),
                (["record", "import", "--zone", "Z", "--file", "f", "--batch-size", "-3"], "--batch-size must be 1...10000"),
                (["record", "import", "--zone", "Z", "--file", "f", "--skip", "-1"], "--skip must be 0 or more"),
            ] {
                let result = try cli(arguments + ["--home", home])
                #expect(result.status == 64, "\(arguments): \(result.stderr)")
                #expect(result.stderr.contains(message), "\(arguments): \(result.stderr)")
                #expect(!result.stderr.contains("Missing value"), "\(arguments): \(result.stderr)")
            }
        }
    }

    @Test("a malformed share URL is a usage error that says what is wrong with it")
    func malformedShareURL() async throws {
        try await blocking {
            let folder = try TemporaryFolder()
            defer { folder.remove() }
            for (command, url, problem) in [
                (["accept"], "https://h:1/share/t?owner=f00d", "it does not start with sharesync://"),
                (["share", "info"], "sharesync://h:1/shares/t?owner=f00d", "its path is not /share/TOKEN"),
                (["request-access"], "sharesync://h:1/share/t?owner=nothex", "its owner= is not a hexadecimal key fingerprint"),
            ] {
                let result = try cli(command + [url, "--home", folder.path + "/none"])
                #expect(result.status == 64 && result.stderr.contains("is not a share URL: \(problem)"), "\(command): \(result.stderr)")
            }
        }
    }

    @Test("owner-only share commands with --shared are usage errors (64) before anything is asked")
    func ownerOnlyShareCommands() async throws {
        try await blocking {
            let folder = try TemporaryFolder()
            defer { folder.remove() }
            // No node at all: the check comes first. (unblock read the share, then failed with 65.)
            for command in [["block", "--user", "_x"], ["unblock", "--user", "_x"], ["stop"], ["public", "--permission", "readOnly"]] {
                let result = try cli(["share"] + command + ["--zone", "Z", "--shared", "--home", folder.path + "/none"])
                #expect(result.status == 64 && result.stderr.contains("--shared does not apply"), "\(command): \(result.stderr)")
                // Their help does not offer --shared or --owner (it showed `[--shared]`, a usage error there).
                let help = try cli(["share", command[0], "--help"])
                #expect(help.status == 0 && !help.stdout.contains("--shared") && !help.stdout.contains("--owner"), "\(command): \(help.stdout)")
            }
            let withOwner = try cli(["share", "block", "--zone", "Z", "--owner", "_x", "--user", "_y", "--home", folder.path + "/none"])
            #expect(withOwner.status == 64 && withOwner.stderr.contains("--shared and --owner do not apply"), "\(withOwner.stderr)")
            for command in ["set", "public", "stop", "block", "unblock"] {
                let help = try cli(["share", command, "--help"])
                #expect(!help.stdout.contains("--shared"), "\(command): \(help.stdout)")
            }
            // Commands an administrator gives through --shared still show it.
            let invite = try cli(["share", "invite", "--help"])
            #expect(invite.stdout.contains("--shared") && invite.stdout.contains("--owner"), "\(invite.stdout)")
        }
    }

    @Test("a thumbnail that cannot be read is a usage error of the share command that names it, before anything is asked")
    func unreadableThumbnail() async throws {
        try await blocking {
            let folder = try TemporaryFolder()
            defer { folder.remove() }
            for command in [["create", "--zone", "Z"], ["set", "--zone", "Z"]] {
                let result = try cli(["share"] + command + ["--thumbnail", folder.path + "/missing.png", "--home", folder.path + "/none"])
                #expect(result.status == 64 && result.stderr.contains("cannot read thumbnail file"), "\(command): \(result.stderr)")
                // Before, the top-level usage came with it (`sharesync <subcommand>`), not the command's.
                #expect(result.stderr.contains("sharesync share \(command[0])"), "\(command): \(result.stderr)")
            }
        }
    }

    @Test("init refuses a home too deep for its control socket, and creates nothing")
    func homeTooDeepForTheSocket() async throws {
        try await blocking {
            let folder = try TemporaryFolder()
            defer { folder.remove() }
            // A socket path of 104 bytes: over SwiftNIO's 103, under the kernel's 107.
            let deep = folder.path + "/" + String(repeating: "d", count: 104 - folder.path.utf8.count - "/".utf8.count - "/control.sock".utf8.count)
            #expect((deep + "/control.sock").utf8.count == 104)
            let result = try cli(["init", "--home", deep, "--name", "Alice"])
            #expect(result.status == 64 && result.stderr.contains("at most 103"), "\(result.stderr)")
            #expect(!FileManager.default.fileExists(atPath: deep))
        }
    }

    @Test("every command and subcommand's --help has an example")
    func everyHelpHasAnExample() async throws {
        try await blocking {
            let root = try cli(["--help"])
            #expect(root.stdout.contains("Example"))
            let commands = ["init", "run", "status", "zone", "record", "share", "accept", "request-access", "leave", "outbox", "changes", "watch", "backup"]
            var paths: [[String]] = []
            for command in commands {
                paths.append([command])
                let help = try cli([command, "--help"])
                // Subcommands as ArgumentParser lists them: "  name   abstract" under SUBCOMMANDS.
                if let range = help.stdout.range(of: "SUBCOMMANDS:") {
                    for line in help.stdout[range.upperBound...].split(separator: "\n") {
                        guard line.hasPrefix("  "), !line.hasPrefix("   ") else { continue }
                        let name = String(line.dropFirst(2).prefix { $0 != " " })
                        if name.first?.isLowercase == true, name.allSatisfy({ $0.isLowercase || $0 == "-" }) {
                            paths.append([command, name])
                        }
                    }
                }
            }
            #expect(paths.count > commands.count + 10, "\(paths)")
            for path in paths {
                let help = try cli(path + ["--help"])
                #expect(help.status == 0 && help.stdout.contains("Example"), "sharesync \(path.joined(separator: " ")) --help has no example")
            }
        }
    }
}
