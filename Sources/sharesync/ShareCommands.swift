import ArgumentParser
import Foundation
import ShareSyncCore
import ShareSyncNode

/// Which share a command is about: a zone and, when the zone has several, the share's record name;
/// with `--shared` (or `--owner`), a share this node accepted from another owner.
struct ShareTarget: ParsableArguments {
    @Option(help: "The share's zone.") var zone: String
    @Option(help: ArgumentHelp(
        "The share's record name, or its root record's name (default: the zone's only share; a zone-wide share is cloudkit.zoneshare).",
        valueName: "name"))
    var share: String?
    @Flag(help: "A share this node accepted (the participant side), not one of its own.") var shared = false
    @Option(help: ArgumentHelp(
        "With --shared: the owner's user record name (needed when several owners share a zone of that name).", valueName: "user"))
    var owner: String?

    func validate() throws {
        if owner != nil, !shared { throw ValidationError("--owner goes with --shared") }
    }

    /// Whether the command is about a share this node accepted.
    var isShared: Bool { shared }

    /// Refuses `--shared` for a command only the owner can give.
    func ownerOnly(_ command: String) throws {
        guard !isShared else {
            throw ValidationError("`share \(command)` is for the owner's own shares; --shared does not apply")
        }
    }

    /// Sends a change of an accepted share through its owner (administrators only) and prints the result.
    func edit(_ options: NodeOptions, _ edit: ShareEdit, human: (ShareEditResult) -> String) async throws {
        try await callNode(options, .sharedShareEdit(owner: owner, zone: zone, share: share, edit: edit), as: ShareEditResult.self, human: human)
    }
}

/// A role given to a participant: privateUser or administrator.
func checkParticipantRole(_ role: Participant.Role) throws {
    guard role == .privateUser || role == .administrator else {
        throw ValidationError("the role must be privateUser or administrator")
    }
}

/// Reads a thumbnail image file, refusing one over ``Share/maximumThumbnailSize`` before anything is sent.
func readThumbnail(_ path: String) throws -> Data {
    let url = Foundation.URL(fileURLWithPath: path)
    guard let attributes = try? FileManager.default.attributesOfItem(atPath: path), let value = attributes[.size] else {
        throw ValidationError("cannot read thumbnail file \(path)")
    }
    let size = (value as? NSNumber)?.intValue ?? (value as? Int) ?? Int.max
    guard size <= Share.maximumThumbnailSize else {
        throw Output.fail(ShareSyncError(
            .limitExceeded, "thumbnail \(path) is \(size) bytes; a share's thumbnail is at most \(Share.maximumThumbnailSize) bytes",
            rule: .thumbnailSize))
    }
    do {
        return try Data(contentsOf: url)
    } catch {
        throw ValidationError("cannot read thumbnail file \(path): \(error.localizedDescription)")
    }
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
              sharesync share info 'sharesync://alice.example.org:7420/share/…?owner=…&invite=…'

            On a participant's node, --shared (with --owner USER when needed) names a share this node accepted: \
            `share show --shared`, and for administrators `share invite|permission|remove|approve|deny|requesters --shared`, \
            which go to the owner (who refuses anyone but an administrator, exit 65, permissionFailure).
            """,
        subcommands: [
            Create.self, Show.self, Info.self, URL.self, SetProperties.self, Invite.self, Participants.self, Permission.self,
            Role.self, Remove.self, Public.self, Stop.self, Requesters.self, Approve.self, Deny.self, Block.self, Unblock.self,
        ])

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Share a whole zone, or the hierarchy under a root record.",
            discussion: """
                Example:
                  sharesync share create --zone Groceries --title "Weekly groceries"
                  sharesync share create --zone Projects --root project-1 --public readOnly
                  sharesync share create --zone Photos --title "Holiday" --thumbnail cover.png --type public.image
                """)
        @OptionGroup var options: NodeOptions
        @Option(help: "The zone to share.") var zone: String
        @Option(help: "Share only this record and its descendants (by parent).") var root: String?
        @Option(help: "The title people see when offered the share (cloudkit.title).") var title: String?
        @Option(help: ArgumentHelp(
            "An image file shown with the share (cloudkit.thumbnailImageData; at most 262144 bytes).", valueName: "path"))
        var thumbnail: String?
        @Option(name: .customLong("type"), help: ArgumentHelp(
            "A uniform type identifier for what is shared (cloudkit.type), like public.image.", valueName: "uti"))
        var shareType: String?
        @Option(name: .customLong("public"), help: "What anyone with the URL may do: none, readOnly or readWrite.")
        var publicPermission: Participant.Permission = .none
        @Flag(help: "Let uninvited users with the URL ask to join.") var allowAccessRequests = false

        func validate() throws {
            guard [.none, .readOnly, .readWrite].contains(publicPermission) else {
                throw ValidationError("--public must be none, readOnly or readWrite")
            }
        }

        func run() async throws {
            let image = try thumbnail.map(readThumbnail)
            try await callNode(
                options,
                .shareCreate(
                    zone: zone, root: root, title: title, publicPermission: publicPermission,
                    allowsAccessRequests: allowAccessRequests, thumbnail: image, shareType: shareType),
                as: ShareInfo.self
            ) { "created " + Output.describe($0) }
        }
    }

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Show a share: its URL, properties, permissions, participants and blocked users.",
            discussion: """
                With --shared, a share this node accepted, as its share record gives it to this participant: \
                administrators see every participant and the requesters, others the owner and themselves.

                Example:
                  sharesync share show --zone Groceries
                  sharesync share show --zone Groceries --shared
                """)
        @OptionGroup var options: NodeOptions
        @OptionGroup var target: ShareTarget

        func run() async throws {
            try await callNode(options, target.request, as: ShareInfo.self) { Output.describe($0) }
        }
    }

    struct Info: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Show what a share URL offers, without accepting it (CKShare.Metadata).",
            discussion: """
                Asks the owner: its name, the share's title, type, root record or zone, your role, \
                permission and status, how many participants and records it has. Nothing is accepted \
                or stored.

                Example:
                  sharesync share info 'sharesync://alice.example.org:7420/share/…?owner=…&invite=…'
                """)
        @OptionGroup var options: NodeOptions
        @Argument(help: "The share URL or invitation link.") var url: String

        func validate() throws {
            guard ShareURL(string: url) != nil else { throw ValidationError("\(url.debugDescription) is not a share URL") }
        }

        func run() async throws {
            try await callNode(options, .shareMetadata(url: url), as: ShareMetadataInfo.self) { m in
                var lines = [
                    "share \(m.title.map { "\"\($0)\"" } ?? m.shareName) from \(m.ownerDisplayName.map { "\($0) (\(m.ownerName))" } ?? m.ownerName)",
                    "  " + (m.rootRecordName.map { "root record \($0) in zone \(m.zoneName)" } ?? "whole zone \(m.zoneName)"),
                ]
                if let type = m.shareType { lines.append("  type: \(type)") }
                if let size = m.thumbnailSize { lines.append("  thumbnail: \(size) bytes") }
                lines.append("  you: \(m.role.rawValue), \(m.permission.rawValue), \(m.status.rawValue)")
                if let n = m.participantCount { lines.append("  participants: \(n)") }
                if let n = m.recordCount { lines.append("  records: \(n)") }
                return lines.joined(separator: "\n")
            }
        }
    }

    struct SetProperties: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "set",
            abstract: "Change a share's title, thumbnail or type (owner only).",
            discussion: """
                Participants get the new values in the share record (cloudkit.title, \
                cloudkit.thumbnailImageData, cloudkit.type). A thumbnail over 262144 bytes is refused \
                (exit 65, limitExceeded) and changes nothing.

                Example:
                  sharesync share set --zone Groceries --title "Weekly groceries" --thumbnail basket.png --type com.example.list
                  sharesync share set --zone Groceries --clear thumbnail
                """)
        @OptionGroup var options: NodeOptions
        @OptionGroup var target: ShareTarget
        @Option(help: "The title (cloudkit.title).") var title: String?
        @Option(help: ArgumentHelp("An image file (cloudkit.thumbnailImageData).", valueName: "path")) var thumbnail: String?
        @Option(name: .customLong("type"), help: ArgumentHelp("A uniform type identifier (cloudkit.type).", valueName: "uti"))
        var shareType: String?
        @Option(help: ArgumentHelp("Remove a property: title, thumbnail or type (repeatable).", valueName: "property"))
        var clear: [String] = []

        func validate() throws {
            try target.ownerOnly("set")
            guard title != nil || thumbnail != nil || shareType != nil || !clear.isEmpty else {
                throw ValidationError("give --title, --thumbnail, --type or --clear")
            }
            for key in clear where !["title", "thumbnail", "type"].contains(key) {
                throw ValidationError("--clear takes title, thumbnail or type, not \(key.debugDescription)")
            }
        }

        func run() async throws {
            let image = try thumbnail.map(readThumbnail)
            try await callNode(
                options,
                .shareSetProperties(
                    zone: target.zone, share: target.share, title: title, thumbnail: image, shareType: shareType,
                    clear: clear.isEmpty ? nil : clear),
                as: ShareInfo.self
            ) { Output.describe($0) }
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
            try await callNode(options, target.request, as: ShareInfo.self) { $0.url ?? "-" }
        }
    }

    struct Invite: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Invite someone and print their invitation link (send it to them).",
            discussion: """
                Exactly one of --email, --phone or --user, or --one-time. A link for --user admits only \
                that user; a link for --email or --phone, and a --one-time link (a participant with no \
                email, phone or user, CKShare.Participant.oneTimeURLParticipant()), admit whoever opens \
                it first, who then becomes this participant; anyone else is refused (rule \
                invitationSpent). Send it privately. --role administrator makes them an administrator: \
                they can invite and remove participants other than the owner and administrators, change \
                their permissions and answer access requests. An administrator invites with --shared.

                Example:
                  sharesync share invite --zone Groceries --email bob@example.org --permission readWrite
                  sharesync share invite --zone Groceries --user _3fa4… --permission readWrite --role administrator
                  sharesync share invite --zone Groceries --one-time --permission readOnly
                  sharesync share invite --zone Groceries --shared --one-time --permission readOnly
                """)
        @OptionGroup var options: NodeOptions
        @OptionGroup var target: ShareTarget
        @Option(help: "Their email address.") var email: String?
        @Option(help: "Their phone number.") var phone: String?
        @Option(help: "Their user record name (`sharesync status` on their node shows it).") var user: String?
        @Flag(help: "A one-time link for someone not named: whoever uses it first becomes the participant.")
        var oneTime = false
        @Option(help: "readOnly or readWrite.") var permission: Participant.Permission
        @Option(help: "privateUser (the default) or administrator.") var role: Participant.Role = .privateUser

        func validate() throws {
            let named = [email, phone, user].compactMap({ $0 }).count
            guard oneTime ? named == 0 : named == 1 else {
                throw ValidationError(oneTime
                    ? "--one-time invites someone not named: give no --email, --phone or --user"
                    : "give exactly one of --email, --phone or --user, or --one-time")
            }
            try Syntax.checkInvitation(email: email, phone: phone)
            try checkParticipantPermission(permission)
            try checkParticipantRole(role)
        }

        func run() async throws {
            let lookup = UserIdentity.LookupInfo(emailAddress: email, phoneNumber: phone, userRecordName: user)
            let human = { (p: ParticipantInfo) in
                p.invitationURL ?? "\(p.who) is already a participant (\(p.acceptanceStatus.rawValue))"
            }
            if target.isShared {
                try await target.edit(options, .invite(lookup: lookup, permission: permission, role: role, oneTime: oneTime)) {
                    $0.participant.map(human) ?? "invited"
                }
                return
            }
            try await callNode(
                options,
                .shareInvite(
                    zone: target.zone, share: target.share, lookup: lookup, permission: permission, role: role,
                    oneTime: oneTime),
                as: ParticipantInfo.self, human: human)
        }
    }

    struct Participants: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List a share's participants: ID, role, permission, status, who.",
            discussion: """
                Example:
                  sharesync share participants --zone Groceries --json
                  sharesync share participants --zone Groceries --shared
                """)
        @OptionGroup var options: NodeOptions
        @OptionGroup var target: ShareTarget

        func run() async throws {
            do {
                let client = try await ControlClient.connect(path: NodeHome.controlSocketPath(home: options.homePath))
                let share = try await client.call(target.request, as: ShareInfo.self)
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
            if target.isShared {
                try await target.edit(options, .setPermission(participantID: participant, permission: permission)) {
                    $0.participant.map(Output.describe) ?? "changed"
                }
                return
            }
            try await callNode(
                options,
                .shareSetPermission(zone: target.zone, share: target.share, participantID: participant, permission: permission),
                as: ParticipantInfo.self
            ) { Output.describe($0) }
        }
    }

    struct Role: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "role",
            abstract: "Make a participant an administrator, or a privateUser again (owner only).",
            discussion: """
                An administrator (CKShare.ParticipantRole.administrator) manages the share from their own \
                node with `--shared`: invites and removes participants who are neither the owner nor \
                administrators, changes their permissions, and approves or denies access requests. Only \
                the owner changes roles, the public permission and the share's properties.

                Example:
                  sharesync share role --zone Groceries --participant 6F1C… administrator
                  sharesync share role --zone Groceries --participant 6F1C… privateUser
                """)
        @OptionGroup var options: NodeOptions
        @OptionGroup var target: ShareTarget
        @Option(help: "The participant's ID (see `share participants`).") var participant: String
        @Argument(help: "administrator or privateUser.") var role: Participant.Role

        func validate() throws { try checkParticipantRole(role) }

        func run() async throws {
            if target.isShared {
                // Sent anyway: the owner's refusal says why.
                try await target.edit(options, .setRole(participantID: participant, role: role)) {
                    $0.participant.map(Output.describe) ?? "changed"
                }
                return
            }
            try await callNode(
                options, .shareSetRole(zone: target.zone, share: target.share, participantID: participant, role: role),
                as: ParticipantInfo.self
            ) { Output.describe($0) }
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Remove a participant from a share.",
            discussion: """
                Example:
                  sharesync share remove --zone Groceries --participant 6F1C…
                  sharesync share remove --zone Groceries --shared --participant 6F1C…   (an administrator)
                """)
        @OptionGroup var options: NodeOptions
        @OptionGroup var target: ShareTarget
        @Option(help: "The participant's ID (see `share participants`).") var participant: String

        func run() async throws {
            if target.isShared {
                try await target.edit(options, .remove(participantID: participant)) { _ in "removed participant \(participant)" }
                return
            }
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
            try target.ownerOnly("public")
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

        func validate() throws { try target.ownerOnly("stop") }

        func run() async throws {
            try await callNode(options, .shareStop(zone: target.zone, share: target.share), as: Done.self) { _ in
                "stopped sharing"
            }
        }
    }

    struct Requesters: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List the users waiting for access.",
            discussion: """
                Example:
                  sharesync share requesters --zone Groceries
                  sharesync share requesters --zone Groceries --shared   (an administrator)
                """)
        @OptionGroup var options: NodeOptions
        @OptionGroup var target: ShareTarget

        func run() async throws {
            let human = { (requesters: [RequesterInfo]) in
                requesters.map { "\($0.userRecordName)  \($0.displayName ?? "-")  \($0.requestDate.formatted(.iso8601))" }
                    .joined(separator: "\n")
            }
            if target.isShared {
                do {
                    let client = try await ControlClient.connect(path: NodeHome.controlSocketPath(home: options.homePath))
                    let share = try await client.call(target.request, as: ShareInfo.self)
                    Output.emit(share.requesters ?? [], json: options.json, human: human)
                } catch {
                    throw Output.fail(error)
                }
                return
            }
            try await callNode(options, .shareRequesters(zone: target.zone, share: target.share), as: [RequesterInfo].self, human: human)
        }
    }

    struct Approve: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Let a requester in with a permission.",
            discussion: """
                Example:
                  sharesync share approve --zone Groceries --user _3fa4… --permission readOnly
                  sharesync share approve --zone Groceries --shared --user _3fa4… --permission readOnly   (an administrator)
                """)
        @OptionGroup var options: NodeOptions
        @OptionGroup var target: ShareTarget
        @Option(help: "The requester's user record name (see `share requesters`).") var user: String
        @Option(help: "readOnly or readWrite.") var permission: Participant.Permission

        func validate() throws { try checkParticipantPermission(permission) }

        func run() async throws {
            if target.isShared {
                try await target.edit(options, .approve(userRecordName: user, permission: permission)) {
                    $0.participant.map(Output.describe) ?? "approved \(user)"
                }
                return
            }
            try await callNode(
                options, .shareApprove(zone: target.zone, share: target.share, userRecordName: user, permission: permission),
                as: ParticipantInfo.self
            ) { Output.describe($0) }
        }
    }

    struct Deny: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Turn a requester away (they may ask again).",
            discussion: """
                Example:
                  sharesync share deny --zone Groceries --user _3fa4…
                  sharesync share deny --zone Groceries --shared --user _3fa4…   (an administrator)
                """)
        @OptionGroup var options: NodeOptions
        @OptionGroup var target: ShareTarget
        @Option(help: "The requester's user record name.") var user: String

        func run() async throws {
            if target.isShared {
                try await target.edit(options, .deny(userRecordName: user)) { _ in "denied \(user)" }
                return
            }
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

        func validate() throws { try target.ownerOnly("block") }

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

extension ShareTarget {
    /// The request that reads the share: the owner's own, or (``isShared``) the accepted one from the replica.
    var request: ControlRequest {
        isShared ? .sharedShareGet(owner: owner, zone: zone, share: share) : .shareGet(zone: zone, share: share)
    }
}

extension Participant.Role: ExpressibleByArgument {
    /// The roles a command can give: help lists only these.
    public static var allValueStrings: [String] { [Participant.Role.privateUser.rawValue, Participant.Role.administrator.rawValue] }
}
