import Foundation

// The JSON form of field values follows the CloudKit Web Services record dictionary:
// `{"value": ..., "type": "STRING"}`. Types: STRING, INT64, DOUBLE, BOOLEAN, TIMESTAMP (milliseconds
// since 1970), BYTES (base64), REFERENCE (`{"recordName", "zoneID", "action"}`), LOCATION
// (`{"latitude", "longitude"}`), and `<TYPE>_LIST` with an array value.

extension FieldValue {
    /// The JSON type name of this value.
    public var typeName: String {
        switch self {
        case .string: "STRING"
        case .int64: "INT64"
        case .double: "DOUBLE"
        case .bool: "BOOLEAN"
        case .date: "TIMESTAMP"
        case .bytes: "BYTES"
        case .reference: "REFERENCE"
        case .location: "LOCATION"
        case .list(let l): l.elementTypeName + "_LIST"
        }
    }
}

extension FieldValue.List {
    var elementTypeName: String {
        switch self {
        case .string: "STRING"
        case .int64: "INT64"
        case .double: "DOUBLE"
        case .bool: "BOOLEAN"
        case .date: "TIMESTAMP"
        case .bytes: "BYTES"
        case .reference: "REFERENCE"
        case .location: "LOCATION"
        }
    }
}

/// A reference as written in JSON; the zone defaults to the zone of the record holding it.
struct JSONReference: Codable {
    var recordName: String
    var zoneID: JSONZoneID?
    var action: Record.Reference.Action?

    init(_ reference: Record.Reference, omitZone: RecordZone.ID? = nil, includeAction: Bool = true) {
        recordName = reference.recordID.recordName
        zoneID = reference.recordID.zoneID == omitZone ? nil : JSONZoneID(reference.recordID.zoneID)
        action = includeAction ? reference.action : nil
    }

    func reference(defaultZone: RecordZone.ID) -> Record.Reference {
        Record.Reference(
            recordID: Record.ID(recordName: recordName, zoneID: zoneID?.zoneID ?? defaultZone),
            action: action ?? .none)
    }
}

/// A zone ID as written in JSON: `{"zoneName", "ownerRecordName"}`.
struct JSONZoneID: Codable, Hashable {
    var zoneName: String
    var ownerRecordName: String?

    init(_ id: RecordZone.ID) {
        zoneName = id.zoneName
        ownerRecordName = id.ownerName
    }

    var zoneID: RecordZone.ID {
        RecordZone.ID(zoneName: zoneName, ownerName: ownerRecordName ?? RecordZone.ID.currentUserDefaultName)
    }
}

/// Milliseconds since 1970, the JSON form of dates.
package enum Millis {
    /// The largest date magnitude JSON and storage hold: about ±3 million years around 1970, in seconds.
    package static let maximumSeconds: Double = 1e14
    package static func from(_ date: Date) -> Int64 {
        let seconds = min(max(date.timeIntervalSince1970, -maximumSeconds), maximumSeconds)
        return seconds.isFinite ? Int64((seconds * 1000).rounded()) : 0
    }
    package static func date(_ ms: Int64) -> Date { Date(timeIntervalSince1970: Double(ms) / 1000) }
    /// A date rounded to the millisecond precision it keeps in JSON and storage.
    package static func normalize(_ date: Date) -> Date { self.date(from(date)) }
}

struct JSONLocation: Codable {
    var latitude: Double
    var longitude: Double
}

/// Encodes and decodes one field value, with the zone of the record that holds it.
struct FieldValueCoding {
    let zone: RecordZone.ID

    private enum Keys: String, CodingKey { case value, type }

    func encode(_ value: FieldValue, to container: inout KeyedEncodingContainer<DynamicKey>, key: DynamicKey) throws {
        var c = container.nestedContainer(keyedBy: Keys.self, forKey: key)
        try c.encode(value.typeName, forKey: .type)
        switch value {
        case .string(let v): try c.encode(v, forKey: .value)
        case .int64(let v): try c.encode(v, forKey: .value)
        case .double(let v): try c.encode(v, forKey: .value)
        case .bool(let v): try c.encode(v, forKey: .value)
        case .date(let v): try c.encode(Millis.from(v), forKey: .value)
        case .bytes(let v): try c.encode(v.base64EncodedString(), forKey: .value)
        case .reference(let v): try c.encode(JSONReference(v, omitZone: zone), forKey: .value)
        case .location(let v): try c.encode(JSONLocation(latitude: v.latitude, longitude: v.longitude), forKey: .value)
        case .list(let list):
            switch list {
            case .string(let v): try c.encode(v, forKey: .value)
            case .int64(let v): try c.encode(v, forKey: .value)
            case .double(let v): try c.encode(v, forKey: .value)
            case .bool(let v): try c.encode(v, forKey: .value)
            case .date(let v): try c.encode(v.map(Millis.from), forKey: .value)
            case .bytes(let v): try c.encode(v.map { $0.base64EncodedString() }, forKey: .value)
            case .reference(let v): try c.encode(v.map { JSONReference($0, omitZone: zone) }, forKey: .value)
            case .location(let v):
                try c.encode(v.map { JSONLocation(latitude: $0.latitude, longitude: $0.longitude) }, forKey: .value)
            }
        }
    }

    func decode(from container: KeyedDecodingContainer<DynamicKey>, key: DynamicKey) throws -> FieldValue {
        let c = try container.nestedContainer(keyedBy: Keys.self, forKey: key)
        let type = try c.decode(String.self, forKey: .type)
        func bytes(_ s: String) throws -> Data {
            guard let d = Data(base64Encoded: s) else {
                throw DecodingError.dataCorruptedError(forKey: .value, in: c, debugDescription: "field \(key.stringValue): BYTES value is not base64")
            }
            return d
        }
        func location(_ l: JSONLocation) -> Location { Location(latitude: l.latitude, longitude: l.longitude) }
        func integers<T: Decodable>(_ type: T.Type) throws -> T {
            do {
                return try c.decode(T.self, forKey: .value)
            } catch {
                throw DecodingError.dataCorruptedError(
                    forKey: .value, in: c,
                    debugDescription: "field \(key.stringValue): \(type == Int64.self ? "an INT64 value must be a whole number" : "an INT64_LIST value's elements must be whole numbers") from -2^63 to 2^63 - 1")
            }
        }
        // Milliseconds since 1970. A whole number past 64 bits is a date far outside the range
        // validation allows (rule `validDate`), and is reported as such rather than as a number.
        func milliseconds(_ value: Double) throws -> Date {
            guard value.isFinite, value.rounded() == value else { throw notMilliseconds() }
            return Date(timeIntervalSince1970: value / 1000)
        }
        func notMilliseconds() -> DecodingError {
            DecodingError.dataCorruptedError(
                forKey: .value, in: c, debugDescription: "field \(key.stringValue): a TIMESTAMP is whole milliseconds since 1970")
        }
        func date() throws -> Date {
            if let millis = try? c.decode(Int64.self, forKey: .value) { return Millis.date(millis) }
            guard let number = try? c.decode(Double.self, forKey: .value) else { throw notMilliseconds() }
            return try milliseconds(number)
        }
        func dates() throws -> [Date] {
            if let millis = try? c.decode([Int64].self, forKey: .value) { return millis.map(Millis.date) }
            guard let numbers = try? c.decode([Double].self, forKey: .value) else { throw notMilliseconds() }
            return try numbers.map(milliseconds)
        }
        switch type {
        case "STRING": return .string(try c.decode(String.self, forKey: .value))
        case "INT64": return .int64(try integers(Int64.self))
        case "DOUBLE": return .double(try c.decode(Double.self, forKey: .value))
        case "BOOLEAN": return .bool(try c.decode(Bool.self, forKey: .value))
        case "TIMESTAMP": return .date(try date())
        case "BYTES": return .bytes(try bytes(try c.decode(String.self, forKey: .value)))
        case "REFERENCE": return .reference(try c.decode(JSONReference.self, forKey: .value).reference(defaultZone: zone))
        case "LOCATION": return .location(location(try c.decode(JSONLocation.self, forKey: .value)))
        case "STRING_LIST": return .list(.string(try c.decode([String].self, forKey: .value)))
        case "INT64_LIST": return .list(.int64(try integers([Int64].self)))
        case "DOUBLE_LIST": return .list(.double(try c.decode([Double].self, forKey: .value)))
        case "BOOLEAN_LIST": return .list(.bool(try c.decode([Bool].self, forKey: .value)))
        case "TIMESTAMP_LIST": return .list(.date(try dates()))
        case "BYTES_LIST": return .list(.bytes(try c.decode([String].self, forKey: .value).map(bytes)))
        case "REFERENCE_LIST":
            return .list(.reference(try c.decode([JSONReference].self, forKey: .value).map { $0.reference(defaultZone: zone) }))
        case "LOCATION_LIST": return .list(.location(try c.decode([JSONLocation].self, forKey: .value).map(location)))
        default:
            throw DecodingError.dataCorruptedError(
                forKey: .type, in: c, debugDescription: "field \(key.stringValue): unknown field type \(type)")
        }
    }
}

/// A coding key for dictionaries with arbitrary keys.
struct DynamicKey: CodingKey {
    var stringValue: String
    var intValue: Int? { nil }
    init(_ s: String) { stringValue = s }
    init?(stringValue: String) { self.stringValue = stringValue }
    init?(intValue: Int) { nil }
}
