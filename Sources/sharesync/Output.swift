import ArgumentParser
import Foundation
import ShareSyncCore
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

    /// Turns a failure into its message on standard error and its exit code.
    static func fail(_ error: any Error) -> any Error {
        switch error {
        case let error as ControlError:
            Output.error(error.description)
            if let server = error.serverRecord {
                FileHandle.standardError.write(Data(("the owner's record:\n" + describe(server) + "\n").utf8))
            }
            return Exit.refused
        case let error as ShareSyncError:
            Output.error(error.description)
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

    /// One field value for people.
    static func describe(_ value: FieldValue) -> String {
        switch value {
        case .string(let s): s.debugDescription
        case .int64(let i): "\(i)"
        case .double(let d): "\(d)"
        case .bool(let b): "\(b)"
        case .date(let d): d.formatted(.iso8601)
        case .bytes(let b): "<\(b.count) bytes> " + b.base64EncodedString()
        case .reference(let r): "→ \(r.recordID.recordName)"
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

    static func describe(_ participant: ParticipantInfo) -> String {
        "\(participant.participantID)  \(participant.role.rawValue)  \(participant.permission.rawValue)  "
            + "\(participant.acceptanceStatus.rawValue)  \(participant.who)"
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
        if let requesters = share.requesters, !requesters.isEmpty {
            lines.append("  requesters:")
            lines += requesters.map { "    \($0.userRecordName)  \($0.displayName ?? "-")" }
        }
        return lines.joined(separator: "\n")
    }
}

/// Sends one request to the node in `options.homePath` and prints its result.
func callNode<T: Codable & Sendable>(
    _ options: NodeOptions, _ request: ControlRequest, as type: T.Type, human: (T) -> String
) async throws {
    do {
        let client = try await ControlClient.connect(path: NodeHome.controlSocketPath(home: options.homePath))
        let result = try await client.call(request, as: T.self)
        Output.emit(result, json: options.json, human: human)
    } catch {
        throw Output.fail(error)
    }
}

extension Participant.Permission: ExpressibleByArgument {}
extension SavePolicy: ExpressibleByArgument {}
extension ParticipantSync.ConflictChoice: ExpressibleByArgument {}
