import ArgumentParser
import Foundation
import ShareSyncCore
import ShareSyncNode

// PARTICIPANT SIDE — NOT AVAILABLE YET.
// Accepting shares, leaving them, and reading or watching the shared database need the participant
// sync engine (Sources/ShareSyncNode/Participant*.swift), which is written on another branch. Until
// it lands these commands parse their arguments and fail with a clear message (exit 69: the service
// they need is not there). `request-access` works now: it needs only one authenticated request.

enum ParticipantSide {
    /// The error of a participant-side command that waits for the sync engine.
    static func notAvailable(_ command: String) -> any Error {
        Output.error(
            "\(command) is not available yet: it needs the participant sync engine, which this build does not have")
        return Exit.unreachable
    }
}

struct AcceptCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "accept",
        abstract: "Accept a share by its URL and keep a synced replica (not available yet).",
        discussion: "Example:\n  sharesync accept 'sharesync://alice.example.org:7420/share/…?owner=…&invite=…'")
    @OptionGroup var options: NodeOptions
    @Argument(help: "The share URL or invitation link.") var url: String

    func validate() throws {
        guard ShareURL(string: url) != nil else { throw ValidationError("\(url.debugDescription) is not a share URL") }
    }

    func run() async throws { throw ParticipantSide.notAvailable("accept") }
}

struct LeaveCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "leave",
        abstract: "Leave a share you accepted (not available yet).",
        discussion: "Example:\n  sharesync leave --owner _a1b2… --zone Groceries")
    @OptionGroup var options: NodeOptions
    @Option(help: "The owner's user record name.") var owner: String
    @Option(help: "The shared zone.") var zone: String

    func run() async throws { throw ParticipantSide.notAvailable("leave") }
}

struct ChangesCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "changes",
        abstract: "Print the changes of the shared database since a token (not available yet).",
        discussion: "Example:\n  sharesync changes --json")
    @OptionGroup var options: NodeOptions

    func run() async throws { throw ParticipantSide.notAvailable("changes") }
}

struct WatchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "watch",
        abstract: "Print changes of the shared database as they arrive (not available yet).",
        discussion: "Example:\n  sharesync watch --json")
    @OptionGroup var options: NodeOptions

    func run() async throws { throw ParticipantSide.notAvailable("watch") }
}

struct RequestAccessCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "request-access",
        abstract: "Ask a share's owner to let you in (the share must allow access requests).",
        discussion: """
            Connects to the owner named in the URL with this node's identity; no daemon is needed.

            Example:
              sharesync request-access 'sharesync://alice.example.org:7420/share/…?owner=…'
            """)
    @OptionGroup var options: NodeOptions
    @Argument(help: "The share URL.") var url: String

    func validate() throws {
        guard ShareURL(string: url) != nil else { throw ValidationError("\(url.debugDescription) is not a share URL") }
    }

    struct Requested: Codable { var requested: Bool; var userRecordName: String }

    func run() async throws {
        do {
            let home = try NodeHome.open(at: options.homePath)
            let connection = try await OwnerConnection.connect(
                url: url, identity: home.identity, displayName: home.settings.displayName)
            do {
                try await connection.requestAccess(url: url)
            } catch {
                await connection.close()
                throw error
            }
            await connection.close()
            Output.emit(Requested(requested: true, userRecordName: home.identity.userRecordName), json: options.json) {
                "asked for access as \($0.userRecordName); the owner sees you in `sharesync share requesters`"
            }
        } catch {
            throw Output.fail(error)
        }
    }
}
