import Foundation

/// A geographic location, the value of a location field.
public struct Location: Sendable, Hashable, Codable {
    /// Latitude in degrees, from -90 to 90.
    public var latitude: Double
    /// Longitude in degrees, from -180 to 180.
    public var longitude: Double

    /// A location at `latitude` and `longitude`, in degrees.
    public init(latitude: Double, longitude: Double) {
        self.latitude = latitude
        self.longitude = longitude
    }
}

/// The value of a record field: one of the types CloudKit records hold, or a list of one of them.
public enum FieldValue: Sendable, Hashable {
    /// Text (`String`).
    case string(String)
    /// A 64-bit integer.
    case int64(Int64)
    /// A double-precision number.
    case double(Double)
    /// A Boolean.
    case bool(Bool)
    /// A point in time (kept to the millisecond).
    case date(Date)
    /// Raw bytes (`Data`), kept in the record itself (records are limited in size; see `Limits`).
    case bytes(Data)
    /// A reference to another record, like `CKRecord.Reference`.
    case reference(Record.Reference)
    /// A geographic location.
    case location(Location)
    /// A homogeneous list of values.
    case list(List)

    /// A homogeneous list of field values. Lists do not nest.
    public enum List: Sendable, Hashable {
        /// A list of strings.
        case string([String])
        /// A list of 64-bit integers.
        case int64([Int64])
        /// A list of doubles.
        case double([Double])
        /// A list of Booleans.
        case bool([Bool])
        /// A list of dates.
        case date([Date])
        /// A list of byte strings.
        case bytes([Data])
        /// A list of references.
        case reference([Record.Reference])
        /// A list of locations.
        case location([Location])

        /// The number of elements.
        public var count: Int {
            switch self {
            case .string(let v): v.count
            case .int64(let v): v.count
            case .double(let v): v.count
            case .bool(let v): v.count
            case .date(let v): v.count
            case .bytes(let v): v.count
            case .reference(let v): v.count
            case .location(let v): v.count
            }
        }
    }

    /// The references this value holds (itself, or the elements of a reference list).
    public var references: [Record.Reference] {
        switch self {
        case .reference(let r): [r]
        case .list(.reference(let rs)): rs
        default: []
        }
    }

    /// Whether this value holds a `deleteSelf` reference.
    package var hasDeleteSelfReference: Bool {
        switch self {
        case .reference(let r): r.action == .deleteSelf
        case .list(.reference(let rs)): rs.contains { $0.action == .deleteSelf }
        default: false
        }
    }
}

extension FieldValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByFloatLiteral,
    ExpressibleByBooleanLiteral
{
    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int64) { self = .int64(value) }
    public init(floatLiteral value: Double) { self = .double(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
}

extension FieldValue {
    /// The string, if this is a string value.
    public var stringValue: String? { if case .string(let v) = self { v } else { nil } }
    /// The integer, if this is an int64 value.
    public var int64Value: Int64? { if case .int64(let v) = self { v } else { nil } }
    /// The double, if this is a double value.
    public var doubleValue: Double? { if case .double(let v) = self { v } else { nil } }
    /// The Boolean, if this is a bool value.
    public var boolValue: Bool? { if case .bool(let v) = self { v } else { nil } }
    /// The date, if this is a date value.
    public var dateValue: Date? { if case .date(let v) = self { v } else { nil } }
    /// The bytes, if this is a bytes value.
    public var bytesValue: Data? { if case .bytes(let v) = self { v } else { nil } }
    /// The reference, if this is a reference value.
    public var referenceValue: Record.Reference? { if case .reference(let v) = self { v } else { nil } }
    /// The location, if this is a location value.
    public var locationValue: Location? { if case .location(let v) = self { v } else { nil } }
}
