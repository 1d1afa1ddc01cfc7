import ArgumentParser
import ShareSyncCore
import ShareSyncNode

/// Which share a command is about: a zone and, when the zone has several, the share's record name.
struct ShareTarget: ParsableArguments {
    @Option(help: "The share's zone.") var zone: String
    @Option(help: ArgumentHelp(
        "The share's record name, or its root record's name (default: the zone's only share; a zone-wide share is cloudkit.zoneshare).",
        valueName: "name"))
    var share: String?
}

/// A permission given to a participant: readOnly or readWrite.
func checkParticipantPermission(_ permission: Participant.Permission) throws {
    guard permission == .readOnly || permission == .readWrite else {
        throw ValidationError("--permission must be readOnly or readWrite")
    }
}

struct ShareCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "share",
        abstract: "Share zones and record hierarchies, and manage who takes part.",
        discussion: """
            Example:
              sharesync share create --zone Groceries --title "Weekly groceries"
              sharesync share invite --zone Groceries --email bob@example.org --permission readWrite
              sharesync share participants --zone Groceries
            """,
        subcommands: [
            Create.self, Show.self, URL.self, Invite.self, Participants.self, Permission.self, Remove.self,
            Public.self, Stop.self, Requesters.self, Approve.self, Deny.self, Block.self, Unblock.self,
        ])

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Share a whole zone, or the hierarchy under a root record.",
            discussion: """
                Example:
                  sharesync share create --zone Groceries --title "Weekly groceries"
                  sharesync share create --zone Projects --root project-1 --public readOnly
                """)
        @OptionGroup var options: NodeOptions
        @Option(help: "The zone to share.") var zone: String
        @Option(help: "Share only this record and its descendants (by parent).") var root: String?
        @Option(help: "The title people see when offered the share.") var title: String?
        @Option(name: .customLong("public"), help: "What anyone with the URL may do: none, readOnly or readWrite.")
        var publicPermission: Participant.Permission = .none
        @Flag(help: "Let uninvited users with the URL ask to join.") var allowAccessRequests = false

        func validate() throws {
            guard [.none, .readOnly, .readWrite].contains(publicPermission) else {
                throw ValidationError("--public must be none, readOnly or readWrite")
            }
        }

        func run() async throws {
            try await callNode(
                options,
                .shareCreate(
                    zone: zone, root: root, title: title, publicPermission: publicPermission,
                    allowsAccessRequests: allowAccessRequests),
                as: ShareInfo.self
            ) { "created " + Output.describe($0) }
        }
    }

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Show a share: its URL, permissions, participants and blocked users.",
            discussion: "Example:\n  sharesync share show --zone Groceries")
        @OptionGroup var options: NodeOptions
        @OptionGroup var target: ShareTarget

        func run() async throws {
            try await callNode(options, .shareGet(zone: target.zone, share: target.share), as: ShareInfo.self) {
                Output.describe($0)
            }
        }
    }

    struct URL: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "url",
            abstract: "Print a share's URL.",
            discussion: "Example:\n  sharesync share url --zone Groceries")
        @OptionGroup var options: NodeOptions
        @OptionGroup var target: ShareTarget

        func run() async throws {
            try await callNode(options, .shareGet(zone: target.zone, share: target.share), as: ShareInfo.self) {
                $0.url ?? "-"
            }
        }
    }

    struct Invite: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Invite someone and print their invitation link (send it to them).",
            discussion: """
                Exactly one of --email, --phone or --user. Whoever opens the link first becomes this \
                participant, so send it privately.

                Example:
                  sharesync share invite --zone Groceries --email bob@example.org --permission readWrite
                """)
        @OptionGroup var options: NodeOptions
        @OptionGroup var target: ShareTarget
        @Option(help: "Their email address.") var email: String?
        @Option(help: "Their phone number.") var phone: String?
        @Option(help: "Their user record name (`sharesync status` on their node shows it).") var user: String?
        @Option(help: "readOnly or readWrite.") var permission: Participant.Permission

        func validate() throws {
            guard [email, phone, user].compactMap({ $0 }).count == 1 else {
                throw ValidationError("give exactly one of --email, --phone or --user")
            }
            try Syntax.checkInvitation(email: email, phone: phone)
            try checkParticipantPermission(permission)
        }

        func run() async throws {
            let lookup = UserIdentity.LookupInfo(emailAddress: email, phoneNumber: phone, userRecordName: user)
            try await callNode(
                options, .shareInvite(zone: target.zone, share: target.share, lookup: lookup, permission: permission),
                as: ParticipantInfo.self
            ) { $0.invitationURL ?? "\($0.who) is already a participant (\($0.acceptanceStatus.rawValue))" }
        }
    }

    struct Participants: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List a share's participants: ID, role, permission, status, who.",
            discussion: "Example:\n  sharesync share participants --zone Groceries --json")
        @OptionGroup var options: NodeOptions
        @OptionGroup var target: ShareTarget

        func run() async throws {
            do {
                let client = try await ControlClient.connect(path: NodeHome.controlSocketPath(home: options.homePath))
                let share = try await client.call(.shareGet(zone: target.zone, share: target.share), as: ShareInfo.self)
                Output.emit(share.participants, json: options.json) { $0.map(Output.describe).joined(separator: "\n") }
            } catch {
                throw Output.fail(error)
            }
        }
    }

    struct Permission: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Change a participant's permission.",
            discussion: "Example:\n  sharesync share permission --zone Groceries --participant 6F1C… --permission readOnly")
        @OptionGroup var options: NodeOptions
        @OptionGroup var target: ShareTarget
        @Option(help: "The participant's ID (see `share participants`).") var participant: String
        @Option(help: "readOnly or readWrite.") var permission: Participant.Permission

        func validate() throws { try checkParticipantPermission(permission) }

        func run() async throws {
            try await callNode(
                options,
                .shareSetPermission(zone: target.zone, share: target.share, participantID: participant, permission: permission),
                as: ParticipantInfo.self
            ) { Output.describe($0) }
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Remove a participant from a share.",
            discussion: "Example:\n  sharesync share remove --zone Groceries --participant 6F1C…")
        @OptionGroup var options: NodeOptions
        @OptionGroup var target: ShareTarget
        @Option(help: "The participant's ID (see `share participants`).") var participant: String

        func run() async throws {
            try await callNode(
                options, .shareRemoveParticipant(zone: target.zone, share: target.share, participantID: participant),
                as: Done.self
            ) { _ in "removed participant \(participant)" }
        }
    }

    struct Public: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "public",
            abstract: "Set what anyone with the URL may do: none, readOnly or readWrite.",
            discussion: """
                Public users who joined already get the new permission. A change removes pending \
                invitations; none removes every participant but you.

                Example:
                  sharesync share public --zone Groceries --permission readOnly
                """)
        @OptionGroup var options: NodeOptions
        @OptionGroup var target: ShareTarget
        @Option(help: "none, readOnly or readWrite.") var permission: Participant.Permission

        func validate() throws {
            guard [.none, .readOnly, .readWrite].contains(permission) else {
                throw ValidationError("--permission must be none, readOnly or readWrite")
            }
        }

        func run() async throws {
            try await callNode(
                options, .shareSetPublicPermission(zone: target.zone, share: target.share, permission: permission),
                as: ShareInfo.self
            ) { Output.describe($0) }
        }
    }

    struct Stop: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Stop sharing: delete the share (the records stay).",
            discussion: "Example:\n  sharesync share stop --zone Groceries")
        @OptionGroup var options: NodeOptions
        @OptionGroup var target: ShareTarget

        func run() async throws {
            try await callNode(options, .shareStop(zone: target.zone, share: target.share), as: Done.self) { _ in
                "stopped sharing"
            }
        }
    }

    struct Requesters: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List the users waiting for access.",
            discussion: "Example:\n  sharesync share requesters --zone Groceries")
        @OptionGroup var options: NodeOptions
        @OptionGroup var target: ShareTarget

        func run() async throws {
            try await callNode(options, .shareRequesters(zone: target.zone, share: target.share), as: [RequesterInfo].self) {
                $0.map { "\($0.userRecordName)  \($0.displayName ?? "-")  \($0.requestDate.formatted(.iso8601))" }
                    .joined(separator: "\n")
            }
        }
    }

    struct Approve: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Let a requester in with a permission.",
            discussion: "Example:\n  sharesync share approve --zone Groceries --user _3fa4… --permission readOnly")
        @OptionGroup var options: NodeOptions
        @OptionGroup var target: ShareTarget
        @Option(help: "The requester's user record name (see `share requesters`).") var user: String
        @Option(help: "readOnly or readWrite.") var permission: Participant.Permission

        func validate() throws { try checkParticipantPermission(permission) }

        func run() async throws {
            try await callNode(
                options, .shareApprove(zone: target.zone, share: target.share, userRecordName: user, permission: permission),
                as: ParticipantInfo.self
            ) { Output.describe($0) }
        }
    }

    struct Deny: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Turn a requester away (they may ask again).",
            discussion: "Example:\n  sharesync share deny --zone Groceries --user _3fa4…")
        @OptionGroup var options: NodeOptions
        @OptionGroup var target: ShareTarget
        @Option(help: "The requester's user record name.") var user: String

        func run() async throws {
            try await callNode(options, .shareDeny(zone: target.zone, share: target.share, userRecordName: user), as: Done.self) {
                _ in "denied \(user)"
            }
        }
    }

    struct Block: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Block a user from asking again (a participant with that identity is removed).",
            discussion: "Example:\n  sharesync share block --zone Groceries --user _3fa4…")
        @OptionGroup var options: NodeOptions
        @OptionGroup var target: ShareTarget
        @Option(help: "The user record name.") var user: String

        func run() async throws {
            try await callNode(options, .shareBlock(zone: target.zone, share: target.share, userRecordName: user), as: Done.self) {
                _ in "blocked \(user)"
            }
        }
    }

    struct Unblock: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Lift a block: the user may ask for access and be invited again.",
            discussion: """
                `share show` lists the blocked users. Inviting a blocked user is refused until they are unblocked.

                Example:
                  sharesync share unblock --zone Groceries --user _3fa4…
                """)
        @OptionGroup var options: NodeOptions
        @OptionGroup var target: ShareTarget
        @Option(help: "The blocked user's record name (see `share show`).") var user: String

        func run() async throws {
            try await callNode(
                options, .shareUnblock(zone: target.zone, share: target.share, userRecordName: user), as: Done.self
            ) { _ in "unblocked \(user)" }
        }
    }
}
