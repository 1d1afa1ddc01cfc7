import Foundation
import ShareSyncCore

/// One field of `sharesync record save`: `key=type:value`.
///
/// | type | value |
/// | --- | --- |
/// | `string` | any text |
/// | `int64` | a whole number |
/// | `double` | a number |
/// | `bool` | `true` or `false` |
/// | `date` | ISO 8601 (`2026-11-21T10:00:00Z`, or `2026-11-21` for midnight UTC) or seconds since 1970 |
/// | `bytes` | base64 |
/// | `reference` | the name of a record in the same zone, optionally followed by `:deleteSelf` (deleting that record deletes this one) or `:none` (the default); a name holding a colon takes its action (`a:b:none`), and another suffix is refused |
/// | `location` | `LAT,LON` in degrees |
public struct FieldAssignment: Sendable, Hashable, Codable {
    public static let types = ["string", "int64", "double", "bool", "date", "bytes", "reference", "location"]

    public var key: String
    public var type: String
    public var value: String

    public init(key: String, type: String, value: String) {
        self.key = key
        self.type = type
        self.value = value
    }

    /// Parses `key=type:value`, checking the value against its type.
    public init(parsing text: String) throws(ShareSyncError) {
        guard let equals = text.firstIndex(of: "="), equals != text.startIndex else {
            throw Self.invalid("field \(text.debugDescription) is not key=type:value")
        }
        let rest = text[text.index(after: equals)...]
        guard let colon = rest.firstIndex(of: ":") else {
            throw Self.invalid("field \(text.debugDescription) is not key=type:value (types: \(Self.types.joined(separator: ", ")))")
        }
        self.init(key: String(text[..<equals]), type: String(rest[..<colon]), value: String(rest[rest.index(after: colon)...]))
        _ = try fieldValue(in: .default)
    }

    /// The value, for a record in `zoneID`.
    public func fieldValue(in zoneID: RecordZone.ID) throws(ShareSyncError) -> FieldValue {
        func bad(_ what: String) -> ShareSyncError { Self.invalid("field \(key): \(value.debugDescription) is not \(what)") }
        switch type {
        case "string":
            return .string(value)
        case "int64":
            guard let v = Int64(value) else { throw bad("an int64") }
            return .int64(v)
        case "double":
            guard let v = Double(value), v.isFinite else { throw bad("a finite double") }
            return .double(v)
        case "bool":
            switch value.lowercased() {
            case "true", "yes", "1": return .bool(true)
            case "false", "no", "0": return .bool(false)
            default: throw bad("true or false")
            }
        case "date":
            if let seconds = Double(value), seconds.isFinite { return .date(Date(timeIntervalSince1970: seconds)) }
            let formatter = ISO8601DateFormatter()
            if let date = formatter.date(from: value) { return .date(date) }
            formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
            if let date = formatter.date(from: value) { return .date(date) }
            // A calendar date alone (2026-01-01) is midnight UTC of that day.
            formatter.formatOptions = [.withFullDate]
            if value.count == 10, let date = formatter.date(from: value) { return .date(date) }
            throw bad("an ISO 8601 date (2026-11-21 or 2026-11-21T10:00:00Z) or seconds since 1970")
        case "bytes":
            guard let data = Data(base64Encoded: value) else { throw bad("base64") }
            return .bytes(data)
        case "reference":
            // NAME, NAME:deleteSelf or NAME:none, the action in any case (`:deleteself` was once taken
            // as part of the name). A name may itself hold colons, but then the action must be given:
            // `milk:delete`, a mistyped action, was taken as a plain reference to a record named
            // "milk:delete", and the cascade was lost without a word.
            var name = value
            var action = Record.Reference.Action.none
            if let colon = value.lastIndex(of: ":") {
                let suffix = value[value.index(after: colon)...]
                switch suffix.lowercased() {
                case "deleteself":
                    action = .deleteSelf
                    name = String(value[..<colon])
                case "none":
                    name = String(value[..<colon])
                default:
                    throw Self.invalid(
                        "field \(key): \(String(suffix).debugDescription) in \(value.debugDescription) is not an action (deleteSelf or none); "
                            + "to name a record whose name holds a colon, give the action: \(value):none")
                }
            }
            guard !name.isEmpty else { throw bad("a record name, optionally followed by :deleteSelf or :none") }
            return .reference(Record.Reference(recordID: Record.ID(recordName: name, zoneID: zoneID), action: action))
        case "location":
            let parts = value.split(separator: ",").map { Double($0.trimmingCharacters(in: .whitespaces)) }
            guard parts.count == 2, let lat = parts[0], let lon = parts[1], (-90...90).contains(lat),
                (-180...180).contains(lon)
            else { throw bad("LAT,LON in degrees") }
            return .location(Location(latitude: lat, longitude: lon))
        default:
            throw Self.invalid("field \(key): unknown type \(type.debugDescription) (types: \(Self.types.joined(separator: ", ")))")
        }
    }

    static func invalid(_ message: String) -> ShareSyncError {
        ShareSyncError(.invalidArguments, message, rule: .fieldSyntax)
    }
}
