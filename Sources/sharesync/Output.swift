import ArgumentParser
import Foundation
import ShareSync
import ShareSyncNode

/// Exit codes (sysexits.h), as the root command's help lists them.
enum Exit {
    static let usage = ExitCode(64)
    static let refused = ExitCode(65)
    static let unreachable = ExitCode(69)
    static let software = ExitCode(70)
    static let cannotCreate = ExitCode(73)
}

/// Printing results and failures.
enum Output {
    /// Writes one line to standard error.
    static func error(_ message: String) {
        FileHandle.standardError.write(Data(("sharesync: " + message + "\n").utf8))
    }

    /// Prints a result: as JSON with `--json`, else as `human` renders it.
    static func emit<T: Encodable>(_ value: T, json: Bool, human: (T) -> String) {
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
            encoder.dateEncodingStrategy = .iso8601
            let data = (try? encoder.encode(value)) ?? Data("null".utf8)
            print(String(decoding: data, as: UTF8.self))
        } else {
            let text = human(value)
            if !text.isEmpty { print(text) }
        }
    }

    /// Whether failures print as JSON (on standard error): set once, before parsing, when the command
    /// line holds `--json`.
    nonisolated(unsafe) static var jsonErrors = false

    /// A failure as `--json` prints it on standard error: `{"error":{"code","message","rule",…,"exitCode"}}`.
    struct JSONError: Encodable {
        struct Body: Encodable {
            var code: String
            var message: String
            var rule: String?
            var recordName: String?
            var zoneName: String?
            var serverRecord: Record?
            var exitCode: Int32
        }
        var error: Body
    }

    /// Prints a failure as JSON on standard error (one object on one line): standard output stays for
    /// results, so a script reads results from one stream and failures from the other.
    static func emitJSONError(
        code: String, message: String, exit: ExitCode, rule: String? = nil, recordName: String? = nil,
        zoneName: String? = nil, serverRecord: Record? = nil
    ) {
        let value = JSONError(error: .init(
            code: code, message: message, rule: rule, recordName: recordName, zoneName: zoneName,
            serverRecord: serverRecord, exitCode: exit.rawValue))
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .iso8601
        let data = (try? encoder.encode(value)) ?? Data(#"{"error":{"code":"internalError","message":"cannot encode the error"}}"#.utf8)
        FileHandle.standardError.write(data + Data("\n".utf8))
    }

    /// Turns a failure into its message on standard error (with `--json`: a JSON error, see
    /// ``JSONError``) and its exit code.
    static func fail(_ error: any Error) -> any Error {
        if jsonErrors {
            switch error {
            case let error as ControlError:
                emitJSONError(
                    code: error.code.rawValue, message: error.message, exit: Exit.refused, rule: error.rule?.rawValue,
                    recordName: error.recordName, zoneName: error.zoneName, serverRecord: error.serverRecord)
                return Exit.refused
            case let error as ShareSyncError where error.rule == .nodeNotRunning:
                emitJSONError(code: "nodeNotRunning", message: error.message, exit: Exit.unreachable, rule: error.rule?.rawValue)
                return Exit.unreachable
            case let error as ShareSyncError:
                emitJSONError(
                    code: error.code.rawValue, message: error.message, exit: Exit.refused, rule: error.rule?.rawValue,
                    recordName: error.recordID?.recordName, zoneName: error.zoneID?.zoneName,
                    serverRecord: error.serverRecord)
                return Exit.refused
            case let error as ControlClientError:
                if case .unreachable = error {
                    emitJSONError(code: "nodeNotRunning", message: error.description, exit: Exit.unreachable)
                    return Exit.unreachable
                }
                emitJSONError(code: "malformedResponse", message: error.description, exit: Exit.software)
                return Exit.software
            case let error as ExitCode:
                return error
            default:
                emitJSONError(code: "internalError", message: "\(error)", exit: Exit.software)
                return Exit.software
            }
        }
        switch error {
        case let error as ControlError:
            Output.error(error.description)
            if let server = error.serverRecord {
                FileHandle.standardError.write(Data(("the owner's record:\n" + describe(server) + "\n").utf8))
            }
            return Exit.refused
        case let error as ShareSyncError where error.rule == .nodeNotRunning:
            Output.error(error.message)
            return Exit.unreachable
        case let error as ShareSyncError:
            Output.error(error.description)
            if let server = error.serverRecord {
                FileHandle.standardError.write(Data(("the owner's record:\n" + describe(server) + "\n").utf8))
            }
            return Exit.refused
        case let error as ControlClientError:
            Output.error(error.description)
            if case .unreachable = error { return Exit.unreachable }
            return Exit.software
        case let error as ExitCode:
            return error
        default:
            Output.error("\(error)")
            return Exit.software
        }
    }

    /// A usage error found by the CLI itself (not by the parser): its message, exit 64.
    static func usage(_ message: String) -> ExitCode {
        if jsonErrors {
            emitJSONError(code: "usage", message: message, exit: Exit.usage)
        } else {
            Output.error(message)
        }
        return Exit.usage
    }

    /// One field value for people.
    static func describe(_ value: FieldValue) -> String {
        switch value {
        case .string(let s): s.debugDescription
        case .int64(let i): "\(i)"
        case .double(let d): "\(d)"
        case .bool(let b): "\(b)"
        case .date(let d): d.formatted(.iso8601)
        case .bytes(let b): "<\(b.count) bytes> " + b.base64EncodedString()
        case .reference(let r): "→ \(r.recordID.recordName)" + (r.action == .deleteSelf ? " (deleteSelf)" : "")
        case .location(let l): "\(l.latitude),\(l.longitude)"
        case .list(let l): "[list of \(l.count)]"
        }
    }

    /// A record for people: a header line and one line per field.
    static func describe(_ record: Record) -> String {
        var lines = ["\(record.recordID.recordName)  (\(record.recordType), zone \(record.recordID.zoneID.zoneName)"
            + (record.recordChangeTag.map { ", tag \($0)" } ?? "") + ")"]
        if let parent = record.parent { lines.append("  parent: \(parent.recordID.recordName)") }
        if let share = record.share { lines.append("  share: \(share.recordID.recordName)") }
        for key in record.allKeys { lines.append("  \(key) = \(describe(record.fields[key]!))") }
        return lines.joined(separator: "\n")
    }

    /// A participant for people: ID, role, permission, status, then name, email (or phone) and user
    /// record name as far as they are known.
    static func describe(_ participant: ParticipantInfo) -> String {
        let who =
            participant.displayName == nil && participant.emailAddress == nil && participant.userRecordName == nil
            ? participant.who
            : PersonName.describe(
                userRecordName: participant.userRecordName, displayName: participant.displayName,
                email: participant.emailAddress ?? participant.phoneNumber)
        return "\(participant.participantID)  \(participant.role.rawValue)  \(participant.permission.rawValue)  "
            + "\(participant.acceptanceStatus.rawValue)  \(who)"
    }

    static func describe(_ share: ShareInfo) -> String {
        var lines = [
            "share \(share.shareName) in zone \(share.zoneName)"
                + (share.rootRecordName.map { " (root \($0))" } ?? " (whole zone)"),
            "  url: \(share.url ?? "-")",
            "  public permission: \(share.publicPermission.rawValue)",
        ]
        if let owner = share.ownerName { lines.insert("  owner: \(owner)", at: 1) }
        if let title = share.title { lines.append("  title: \(title)") }
        if let type = share.shareType { lines.append("  type: \(type)") }
        if let thumbnail = share.thumbnailImageData { lines.append("  thumbnail: \(thumbnail.count) bytes") }
        if share.allowsAccessRequests { lines.append("  allows access requests") }
        lines.append("  participants:")
        lines += share.participants.map {
            "    " + describe($0) + ($0.participantID == share.currentUserParticipantID ? "  (you)" : "")
        }
        if !share.blocked.isEmpty {
            lines.append("  blocked (`share unblock --user NAME` lifts a block):")
            lines += share.blocked.map { "    \($0.userRecordName)" + ($0.displayName.map { "  \($0)" } ?? "") }
        }
        if let requesters = share.requesters, !requesters.isEmpty {
            lines.append("  requesters:")
            lines += requesters.map { "    \($0.userRecordName)  \($0.displayName ?? "-")" }
        }
        return lines.joined(separator: "\n")
    }
}

/// Runs `body` on the node of `options.homePath`, reached through the ShareSync library (a container
/// connected to the daemon's control socket), and closes the connection after it: every command that
/// drives a node takes this path, so the CLI and an app go through the same API.
func onNode<T>(_ options: NodeOptions, _ body: (Container) async throws -> T) async throws -> T {
    let container = try await Container.connected(home: options.homePath)
    do {
        let result = try await body(container)
        await container.close()
        return result
    } catch {
        await container.close()
        throw error
    }
}

/// Runs `body` on the node (see ``onNode(_:_:)``) and prints its result: as JSON with `--json`, else as
/// `human` renders it. A failure is printed and becomes the command's exit code. A result that
/// `failingIf` turns into an error (one that says the work is not done) is printed, then that error
/// is, as a failure (exit 65).
func runOnNode<T: Encodable>(
    _ options: NodeOptions, human: (T) -> String, failingIf failure: (T) -> ShareSyncError? = { _ in nil },
    _ body: (Container) async throws -> T
) async throws {
    let result: T
    do {
        result = try await onNode(options, body)
    } catch {
        throw Output.fail(error)
    }
    Output.emit(result, json: options.json, human: human)
    if let failure = failure(result) { throw Output.fail(failure) }
}

/// Sends one control request to the node through the library's `Container` and prints its result. For
/// commands whose output is that request's answer as it is (`zone create`, `record list`, `changes`,
/// `leave`, `owner address`, …): the library's `Database` methods send these same requests to the same
/// handler, so the CLI and the library do not drift apart; they only reshape the answer into CloudKit's
/// types, which would change the CLI's documented JSON.
func callNode<T: Codable & Sendable>(
    _ options: NodeOptions, _ request: ControlRequest, as type: T.Type, human: (T) -> String
) async throws {
    try await runOnNode(options, human: human) { try await $0.send(request, as: T.self) }
}

extension Participant.Permission: ExpressibleByArgument {
    /// No automatic "(values: …)" list: it would offer `unknown` and `none` where they are refused; each
    /// option's help names the values it accepts.
    public static var allValueStrings: [String] { [] }
}
extension SavePolicy: ExpressibleByArgument {}
extension ParticipantSync.ConflictChoice: ExpressibleByArgument {}
