import ArgumentParser
import Foundation
import ShareSync
import ShareSyncNode
import Synchronization

/// A share by its zone and, when the zone has several, its record name: the options every share
/// command's target has (``ShareTarget``, ``OwnerShareTarget``).
struct ShareName: ParsableArguments {
    @Option(help: "The share's zone.") var zone: String
    @Option(help: ArgumentHelp(
        "The share's record name, or its root record's name (default: the zone's only share; a zone-wide share is cloudkit.zoneshare).",
        valueName: "name"))
    var share: String?
}

/// Which share a command is about: a zone and, when the zone has several, the share's record name;
/// with `--shared` (or `--owner`), a share this node accepted from another owner.
struct ShareTarget: ParsableArguments, ShareTargeting {
    @OptionGroup var name: ShareName
    @Flag(help: "A share this node accepted (the participant side), not one of its own.") var shared = false
    @Option(help: ArgumentHelp(
        "With --shared: the owner, by user record name, name or email (needed when several owners share a zone of that name).",
        valueName: "owner"))
    var owner: String?

    func validate() throws {
        if owner != nil, !shared { throw ValidationError("--owner goes with --shared") }
    }

    /// Whether the command is about a share this node accepted.
    var isShared: Bool { shared }
}

/// The share of a command only the owner gives (`share set|public|stop|block|unblock`): a zone and,
/// when the zone has several, the share's record name. `--shared` and `--owner` are still read (so
/// that giving them is the usage error that says they do not apply) but not shown in the help.
struct OwnerShareTarget: ParsableArguments, ShareTargeting {
    @OptionGroup var name: ShareName
    @Flag(help: .hidden) var shared = false
    @Option(help: .hidden) var owner: String?

    var isShared: Bool { shared || owner != nil }
}

/// What the share commands need of their target: ``ShareTarget`` or ``OwnerShareTarget``.
protocol ShareTargeting {
    var name: ShareName { get }
    var owner: String? { get }
    var isShared: Bool { get }
}

extension ShareTargeting {
    /// The share's zone (`--zone`).
    var zone: String { name.zone }
    /// The share's record name, or its root record's name (`--share`), if given.
    var share: String? { name.share }

    /// Refuses `--shared` for a command only the owner can give.
    func ownerOnly(_ command: String) throws {
        guard !isShared else {
            let given = owner != nil ? "--shared and --owner do" : "--shared does"
            throw ValidationError("`share \(command)` is for the owner's own shares; \(given) not apply")
        }
    }

    /// The database the share is in: the private one (the owner's own shares), or the shared one (a
    /// share this node accepted, whose changes go through its owner).
    func database(_ container: Container) -> Database {
        isShared ? container.sharedDatabase : container.privateDatabase
    }

    /// Finds the share through the library. The node resolves the names first (the zone's only share, a
    /// root record's name, the owner by name or email), as ``request`` reads it.
    func find(on container: Container) async throws -> Share {
        let found: ShareInfo = try await container.send(request)
        let zoneID =
            isShared
            ? RecordZone.ID(zoneName: found.zoneName, ownerName: found.ownerName ?? owner ?? RecordZone.ID.currentUserDefaultName)
            : RecordZone.ID(zoneName: found.zoneName)
        return try await database(container).share(withID: Record.ID(recordName: found.shareName, zoneID: zoneID))
    }

    /// The share as the CLI prints it.
    func info(_ share: Share) -> ShareInfo {
        ShareInfo(share, ownerName: isShared ? share.recordID.zoneID.ownerName : nil)
    }

    /// Finds the share, reads it with `body` and prints the result.
    func read<T: Encodable>(_ options: NodeOptions, human: (T) -> String, _ body: @escaping (Share) throws -> T) async throws {
        try await runOnNode(options, human: human) { try body(try await find(on: $0)) }
    }

    /// Changes the share through the library (`body` returns it as saved) and prints the outcome: for the
    /// owner, `result` of the saved share; with --shared (an administrator, through the owner), what the
    /// owner saved and the participant the change was about.
    func change<T: Encodable>(
        _ options: NodeOptions, about participant: @escaping (Share) -> Participant? = { _ in nil },
        result: @escaping (Share) throws -> T, human: (T) -> String, sharedHuman: (ShareEditResult) -> String,
        _ body: @escaping (Database, Share) async throws -> Share
    ) async throws {
        if isShared {
            try await runOnNode(options, human: sharedHuman) { container in
                let saved = try await body(container.sharedDatabase, try await find(on: container))
                return ShareEditResult(
                    share: info(saved), participant: participant(saved).map { ParticipantInfo($0, in: saved) },
                    shareRecord: saved.record)
            }
        } else {
            try await runOnNode(options, human: human) { container in
                try result(try await body(container.privateDatabase, try await find(on: container)))
            }
        }
    }
}

/// The participant of `share` with this ID, or with this user record name.
func findParticipant(id: String, in share: Share) -> Participant? {
    share.participants.first { $0.participantID == id }
}
func findParticipant(user: String, in share: Share) -> Participant? {
    share.participants.first { $0.userIdentity.userRecordName == user }
}

/// A participant as the owner's commands print it (JSON: the participant; a missing one is an error).
func participantInfo(_ found: Participant?, in share: Share) throws -> ParticipantInfo {
    guard let found else { throw ShareSyncError(.internalError, "the saved share lacks the participant") }
    return ParticipantInfo(found, in: share)
}

/// A role given to a participant: privateUser or administrator.
func checkParticipantRole(_ role: Participant.Role) throws {
    guard role == .privateUser || role == .administrator else {
        throw ValidationError("the role must be privateUser or administrator")
    }
}

/// Refuses an argument that is not a share URL, from a command's `validate()`, saying what is wrong with it.
func checkShareURL(_ url: String) throws {
    if let problem = ShareURL.problem(with: url) { throw ValidationError("\(url.debugDescription) is not a share URL: \(problem)") }
}

/// Refuses a thumbnail path that is not a readable file, from a command's `validate()`: there the
/// usage error names the command (thrown from `run()`, it printed the top-level usage instead).
func checkThumbnailPath(_ path: String?) throws {
    guard let path else { return }
    var isDirectory: ObjCBool = false
    guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), !isDirectory.boolValue,
        FileManager.default.isReadableFile(atPath: path)
    else { throw ValidationError("cannot read thumbnail file \(path)") }
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
            commandName: "create",
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
            try checkThumbnailPath(thumbnail)
        }

        func run() async throws {
            let image = try thumbnail.map(readThumbnail)
            try await runOnNode(options) { "created " + Output.describe($0) } _: { container in
                let db = container.privateDatabase
                let zoneID = RecordZone.ID(zoneName: zone)
                let share =
                    if let root {
                        try await db.createShare(
                            rootRecordID: Record.ID(recordName: root, zoneID: zoneID), title: title, publicPermission: publicPermission,
                            allowsAccessRequests: allowAccessRequests, thumbnailImageData: image, shareType: shareType)
                    } else {
                        try await db.createShare(
                            forZone: zoneID, title: title, publicPermission: publicPermission, allowsAccessRequests: allowAccessRequests,
                            thumbnailImageData: image, shareType: shareType)
                    }
                return ShareInfo(share)
            }
        }
    }

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "show",
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
            try await target.read(options, human: Output.describe) { [target] in target.info($0) }
        }
    }

    struct Info: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "info",
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
            try checkShareURL(url)
        }

        func run() async throws {
            try await runOnNode(options) { (m: ShareMetadataInfo) in
                var lines = [
                    // The owner named as `accept` names them.
                    "share \(m.title.map { "\"\($0)\"" } ?? m.shareName) from "
                        + PersonName.describe(userRecordName: m.ownerName, displayName: m.ownerDisplayName, email: m.ownerEmail),
                    "  " + (m.rootRecordName.map { "root record \($0) in zone \(m.zoneName)" } ?? "whole zone \(m.zoneName)"),
                ]
                if let type = m.shareType { lines.append("  type: \(type)") }
                if let size = m.thumbnailSize { lines.append("  thumbnail: \(size) bytes") }
                lines.append("  you: \(m.role.rawValue), \(m.permission.rawValue), \(m.status.rawValue)")
                if let n = m.participantCount { lines.append("  participants: \(n)") }
                if let n = m.recordCount { lines.append("  records: \(n)") }
                return lines.joined(separator: "\n")
            } _: { [url] in try await $0.shareMetadata(for: url) }
        }
    }

    struct SetProperties: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "set",
            abstract: "Change a share's title, thumbnail or type, or whether it takes access requests (owner only).",
            discussion: """
                Participants get the new values in the share record (cloudkit.title, \
                cloudkit.thumbnailImageData, cloudkit.type). A thumbnail over 262144 bytes is refused \
                (exit 65, limitExceeded) and changes nothing.

                Example:
                  sharesync share set --zone Groceries --title "Weekly groceries" --thumbnail basket.png --type com.example.list
                  sharesync share set --zone Groceries --clear thumbnail
                  sharesync share set --zone Groceries --allow-access-requests
                """)
        @OptionGroup var options: NodeOptions
        @OptionGroup var target: OwnerShareTarget
        @Option(help: "The title (cloudkit.title).") var title: String?
        @Option(help: ArgumentHelp("An image file (cloudkit.thumbnailImageData).", valueName: "path")) var thumbnail: String?
        @Option(name: .customLong("type"), help: ArgumentHelp("A uniform type identifier (cloudkit.type).", valueName: "uti"))
        var shareType: String?
        @Option(help: ArgumentHelp("Remove a property: title, thumbnail or type (repeatable).", valueName: "property"))
        var clear: [String] = []
        @Flag(inversion: .prefixedNo, help: "Let uninvited users with the URL ask to join, or no longer (--no-…).")
        var allowAccessRequests: Bool?

        func validate() throws {
            try target.ownerOnly("set")
            guard title != nil || thumbnail != nil || shareType != nil || !clear.isEmpty || allowAccessRequests != nil else {
                throw ValidationError("give --title, --thumbnail, --type, --clear or --[no-]allow-access-requests")
            }
            try checkThumbnailPath(thumbnail)
            for key in clear where !["title", "thumbnail", "type"].contains(key) {
                throw ValidationError("--clear takes title, thumbnail or type, not \(key.debugDescription)")
            }
            // Both set and cleared: which one was meant cannot be told (the clear used to win in silence).
            for (key, given) in [("title", title != nil), ("thumbnail", thumbnail != nil), ("type", shareType != nil)]
            where given && clear.contains(key) {
                throw ValidationError("--\(key) and --clear \(key) contradict each other: give one of them")
            }
        }

        func run() async throws {
            let image = try thumbnail.map(readThumbnail)
            try await target.change(options, result: { ShareInfo($0) }, human: Output.describe, sharedHuman: { _ in "" }) {
                [title, shareType, clear, allowAccessRequests] db, found in
                var share = found
                if let allowAccessRequests { share.allowsAccessRequests = allowAccessRequests }
                if let title { share.title = title }
                if let image { share.thumbnailImageData = image }
                if let shareType { share.shareType = shareType }
                if clear.contains("title") { share.title = nil }
                if clear.contains("thumbnail") { share.thumbnailImageData = nil }
                if clear.contains("type") { share.shareType = nil }
                return try await db.saveProperties(of: share)
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
            try await target.read(options, human: { $0.url ?? "-" }) { [target] in target.info($0) }
        }
    }

    struct Invite: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "invite",
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
            // A user record name is `_` and the 32 hex digits of a key's fingerprint: anything else admits
            // nobody (a name like "Bob" used to give a link nobody could use, and exit 0).
            if let user, !(user.hasPrefix("_") && user.utf8.count == 33 && user.dropFirst().allSatisfy({ $0.isHexDigit && !$0.isUppercase })) {
                throw ValidationError(
                    "--user takes a user record name: _ and 32 lowercase hex digits, as `sharesync status` on their node shows it, not "
                        + "\(user.prefix(80).debugDescription); to invite someone by address, use --email or --phone")
            }
            try checkParticipantPermission(permission)
            try checkParticipantRole(role)
        }

        func run() async throws {
            let lookup = UserIdentity.LookupInfo(emailAddress: email, phoneNumber: phone, userRecordName: user)
            let human = { (p: ParticipantInfo) in
                p.invitationURL ?? "\(p.who) is already a participant (\(p.acceptanceStatus.rawValue))"
            }
            // The participant invited, found in the share as saved by its ID.
            let invited = Mutex<String?>(nil)
            try await target.change(
                options, about: { share in invited.withLock { $0 }.flatMap { findParticipant(id: $0, in: share) } },
                result: { share in try participantInfo(invited.withLock { $0 }.flatMap { findParticipant(id: $0, in: share) }, in: share) },
                human: human, sharedHuman: { $0.participant.map(human) ?? "invited" }
            ) { [permission, role, oneTime] db, share in
                let invitation =
                    oneTime
                    ? try await db.inviteOneTime(permission: permission, role: role, to: share)
                    : try await db.invite(lookup, permission: permission, role: role, to: share)
                invited.withLock { $0 = invitation.participant.participantID }
                return invitation.share
            }
        }
    }

    struct Participants: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "participants",
            abstract: "List a share's participants: ID, role, permission, status, who.",
            discussion: """
                Example:
                  sharesync share participants --zone Groceries --json
                  sharesync share participants --zone Groceries --shared
                """)
        @OptionGroup var options: NodeOptions
        @OptionGroup var target: ShareTarget

        func run() async throws {
            try await target.read(options, human: { $0.map(Output.describe).joined(separator: "\n") }) { [target] in
                target.info($0).participants
            }
        }
    }

    struct Permission: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "permission",
            abstract: "Change a participant's permission.",
            discussion: "Example:\n  sharesync share permission --zone Groceries --participant 6F1C… --permission readOnly")
        @OptionGroup var options: NodeOptions
        @OptionGroup var target: ShareTarget
        @Option(help: "The participant's ID (see `share participants`).") var participant: String
        @Option(help: "readOnly or readWrite.") var permission: Participant.Permission

        func validate() throws { try checkParticipantPermission(permission) }

        func run() async throws {
            let id = participant
            try await target.change(
                options, about: { findParticipant(id: id, in: $0) }, result: { try participantInfo(findParticipant(id: id, in: $0), in: $0) },
                human: Output.describe, sharedHuman: { $0.participant.map(Output.describe) ?? "changed" }
            ) { [permission] db, share in try await db.setPermission(permission, forParticipantID: id, in: share) }
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
            // With --shared, sent anyway: the owner's refusal says why.
            let id = participant
            try await target.change(
                options, about: { findParticipant(id: id, in: $0) }, result: { try participantInfo(findParticipant(id: id, in: $0), in: $0) },
                human: Output.describe, sharedHuman: { $0.participant.map(Output.describe) ?? "changed" }
            ) { [role] db, share in try await db.setRole(role, forParticipantID: id, in: share) }
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "remove",
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
            let id = participant
            try await target.change(
                options, result: { _ in Done() }, human: { _ in "removed participant \(id)" },
                sharedHuman: { _ in "removed participant \(id)" }
            ) { db, share in try await db.removeParticipant(withID: id, from: share) }
        }
    }

    struct Public: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "public",
            abstract: "Set what anyone with the URL may do: none, readOnly or readWrite.",
            discussion: """
                Public users who joined already get the new permission. A change removes pending \
                invitations; none also removes the public users (people you invited who had \
                accepted stay).

                Example:
                  sharesync share public --zone Groceries --permission readOnly
                """)
        @OptionGroup var options: NodeOptions
        @OptionGroup var target: OwnerShareTarget
        @Option(help: "none, readOnly or readWrite.") var permission: Participant.Permission

        func validate() throws {
            try target.ownerOnly("public")
            guard [.none, .readOnly, .readWrite].contains(permission) else {
                throw ValidationError("--permission must be none, readOnly or readWrite")
            }
        }

        func run() async throws {
            try await target.change(options, result: { ShareInfo($0) }, human: Output.describe, sharedHuman: { _ in "" }) {
                [permission] db, share in try await db.setPublicPermission(permission, for: share)
            }
        }
    }

    struct Stop: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "stop",
            abstract: "Stop sharing: delete the share (the records stay).",
            discussion: "Example:\n  sharesync share stop --zone Groceries")
        @OptionGroup var options: NodeOptions
        @OptionGroup var target: OwnerShareTarget

        func validate() throws { try target.ownerOnly("stop") }

        func run() async throws {
            try await runOnNode(options) { _ in "stopped sharing" } _: { [target] container in
                try await container.privateDatabase.stopSharing(try await target.find(on: container))
                return Done()
            }
        }
    }

    struct Requesters: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "requesters",
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
            try await target.read(options, human: human) { $0.requesters.map(RequesterInfo.init) }
        }
    }

    struct Approve: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "approve",
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
            let user = self.user
            try await target.change(
                options, about: { findParticipant(user: user, in: $0) }, result: { try participantInfo(findParticipant(user: user, in: $0), in: $0) },
                human: Output.describe,
                sharedHuman: { $0.participant.map(Output.describe) ?? "approved \(user)" }
            ) { [permission] db, share in try await db.approveAccessRequest(fromUserRecordName: user, permission: permission, for: share) }
        }
    }

    struct Deny: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "deny",
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
            let user = self.user
            try await target.change(options, result: { _ in Done() }, human: { _ in "denied \(user)" }, sharedHuman: { _ in "denied \(user)" }) {
                db, share in try await db.denyAccessRequest(fromUserRecordName: user, for: share)
            }
        }
    }

    struct Block: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "block",
            abstract: "Block a user from asking again (a participant with that identity is removed).",
            discussion: "Example:\n  sharesync share block --zone Groceries --user _3fa4…")
        @OptionGroup var options: NodeOptions
        @OptionGroup var target: OwnerShareTarget
        @Option(help: "The user record name.") var user: String

        func validate() throws { try target.ownerOnly("block") }

        func run() async throws {
            let user = self.user
            try await target.change(options, result: { _ in Done() }, human: { _ in "blocked \(user)" }, sharedHuman: { _ in "" }) {
                db, share in try await db.blockIdentity(withUserRecordName: user, for: share)
            }
        }
    }

    struct Unblock: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "unblock",
            abstract: "Lift a block: the user may ask for access and be invited again.",
            discussion: """
                `share show` lists the blocked users. Inviting a blocked user is refused until they are unblocked.

                Example:
                  sharesync share unblock --zone Groceries --user _3fa4…
                """)
        @OptionGroup var options: NodeOptions
        @OptionGroup var target: OwnerShareTarget
        @Option(help: "The blocked user's record name (see `share show`).") var user: String

        func validate() throws { try target.ownerOnly("unblock") }

        func run() async throws {
            let user = self.user
            try await target.change(options, result: { _ in Done() }, human: { _ in "unblocked \(user)" }, sharedHuman: { _ in "" }) {
                db, share in try await db.unblockIdentity(withUserRecordName: user, for: share)
            }
        }
    }
}

extension ShareTargeting {
    /// The request that reads the share: the owner's own, or (``isShared``) the accepted one from the replica.
    var request: ControlRequest {
        isShared ? .sharedShareGet(owner: owner, zone: zone, share: share) : .shareGet(zone: zone, share: share)
    }
}

extension Participant.Role: ExpressibleByArgument {
    /// The roles a command can give: help lists only these.
    public static var allValueStrings: [String] { [Participant.Role.privateUser.rawValue, Participant.Role.administrator.rawValue] }
}
