import Foundation

/// A query for records of one type in one zone, like `CKQuery`: a predicate (every condition must hold)
/// and sort descriptors.
///
/// ```swift
/// let query = Query(
///     recordType: "Note",
///     predicate: [.parent(is: topicID), .field("title", .beginsWith, "Mil")],
///     sortDescriptors: [.init(key: "modificationDate", ascending: false)])
/// let notes = try await container.privateDatabase.records(matching: query, inZoneWith: topicID.zoneID)
/// ```
///
/// Queries run in the store (SQLite), not by reading every record into memory: conditions and the order
/// become SQL over the stored record. A field that a record does not have never matches a condition
/// (`notEquals` included), and sorts before every value.
///
/// The JSON form (the control channel's `recordQuery`):
/// `{"recordType":"Note","predicate":[{"key":"title","comparator":"beginsWith","value":{"value":"Mil","type":"STRING"}}],"sortDescriptors":[{"key":"title","ascending":true}]}`.
public struct Query: Sendable, Hashable, Codable {
    /// The type of the records to find.
    public var recordType: String
    /// The conditions, all of which a record must meet (an empty predicate matches every record of the
    /// type, as `NSPredicate(value: true)` does).
    public var predicate: [Condition]
    /// The order of the results; records that compare equal come in record name order.
    public var sortDescriptors: [SortDescriptor]

    /// A query for records of `recordType` matching every condition of `predicate`, in the order of
    /// `sortDescriptors`.
    public init(recordType: String, predicate: [Condition] = [], sortDescriptors: [SortDescriptor] = []) {
        self.recordType = recordType
        self.predicate = predicate
        self.sortDescriptors = sortDescriptors
    }

    /// The keys a query may name besides the record's own fields.
    public enum SystemKey {
        /// The record's parent (``Record/parent``): `equals` and `notEquals` with a reference.
        public static let parent = "parent"
        /// When the record was created: comparable with a date, sortable.
        public static let creationDate = "creationDate"
        /// When the record last changed: comparable with a date, sortable.
        public static let modificationDate = "modificationDate"
        /// The record's name: comparable with a string, sortable.
        public static let recordName = "recordName"

        static let all: Set<String> = [parent, creationDate, modificationDate, recordName]
    }

    /// One condition on a record: its field (or ``SystemKey``) `key` compared with `value`.
    public struct Condition: Sendable, Hashable {
        /// How the field is compared with the value.
        public enum Comparator: String, Sendable, Hashable, Codable, CaseIterable {
            /// `key == value`.
            case equals
            /// `key != value` (a record without the field does not match).
            case notEquals
            /// `key < value`.
            case lessThan
            /// `key <= value`.
            case lessThanOrEquals
            /// `key > value`.
            case greaterThan
            /// `key >= value`.
            case greaterThanOrEquals
            /// The string field starts with the value (`BEGINSWITH`), case-sensitive.
            case beginsWith
            /// The list field holds the value (`value IN key`, as CloudKit's `ANY key == value`).
            case contains
            /// The field is one of the values of the list `value` (`key IN value`).
            case `in`
        }

        /// A field key, or one of ``Query/SystemKey``.
        public var key: String
        /// How the field compares with ``value``.
        public var comparator: Comparator
        /// The value compared with (a list for `in`).
        public var value: FieldValue

        /// The condition `key comparator value`, such as `Condition(key: "priority", .greaterThan, 3)`.
        public init(key: String, _ comparator: Comparator, _ value: FieldValue) {
            self.key = key
            self.comparator = comparator
            self.value = value
        }

        /// A condition on a field.
        public static func field(_ key: String, _ comparator: Comparator, _ value: FieldValue) -> Condition {
            Condition(key: key, comparator, value)
        }

        /// The record's parent is `recordID` (`parent == X`): the children of a record.
        public static func parent(is recordID: Record.ID) -> Condition {
            Condition(key: SystemKey.parent, .equals, .reference(Record.Reference(recordID: recordID)))
        }
    }

    /// One key of a query's order, like `NSSortDescriptor(key:ascending:)`.
    public struct SortDescriptor: Sendable, Hashable, Codable {
        /// A field key, or ``Query/SystemKey/creationDate``, ``Query/SystemKey/modificationDate`` or
        /// ``Query/SystemKey/recordName``.
        public var key: String
        /// Smallest first when true, largest first when false.
        public var ascending: Bool

        /// Sorts by `key`, smallest first unless `ascending` is false.
        public init(key: String, ascending: Bool = true) {
            self.key = key
            self.ascending = ascending
        }
    }

    /// The most conditions and sort descriptors a query may have.
    public static let maximumConditions = 32

    /// Checks the query: the type's and keys' syntax, and that each comparator fits its value. Throws
    /// ``ShareSyncError/Code/invalidArguments`` (rule `querySyntax`) naming what is wrong.
    public func validate(limits: Limits = Limits()) throws(ShareSyncError) {
        func invalid(_ message: String) -> ShareSyncError {
            ShareSyncError(.invalidArguments, "query for \(recordType): \(message)", rule: .querySyntax)
        }
        do {
            try Names.checkRecordType(recordType, limits: limits)
        } catch {
            throw invalid(error.message)
        }
        guard predicate.count <= Self.maximumConditions, sortDescriptors.count <= Self.maximumConditions else {
            throw invalid("at most \(Self.maximumConditions) conditions and \(Self.maximumConditions) sort descriptors")
        }
        for condition in predicate {
            let key = condition.key
            if !SystemKey.all.contains(key) {
                do {
                    try Names.checkFieldKey(key, limits: limits)
                } catch {
                    throw invalid(error.message)
                }
            }
            let value = condition.value
            switch (key, condition.comparator) {
            case (SystemKey.parent, .equals), (SystemKey.parent, .notEquals):
                guard case .reference = value else { throw invalid("parent is compared with a reference") }
                continue
            case (SystemKey.parent, _):
                throw invalid("parent allows equals and notEquals only")
            case (SystemKey.creationDate, _), (SystemKey.modificationDate, _):
                guard case .date = value, ![.beginsWith, .contains, .in].contains(condition.comparator) else {
                    throw invalid("\(key) is compared with a date (equals, notEquals, lessThan... greaterThanOrEquals)")
                }
                continue
            case (SystemKey.recordName, _):
                guard case .string = value, condition.comparator != .contains, condition.comparator != .in else {
                    throw invalid("recordName is compared with a string")
                }
                continue
            default:
                break
            }
            switch condition.comparator {
            case .beginsWith:
                guard case .string = value else { throw invalid("\(key) beginsWith needs a string") }
            case .in:
                guard case .list(let list) = value, list.count > 0, Self.isComparable(list.first!) else {
                    throw invalid("\(key) in needs a non-empty list of strings, numbers, booleans, dates or references")
                }
            case .equals, .notEquals, .contains:
                guard Self.isComparable(value) else {
                    throw invalid("\(key) \(condition.comparator.rawValue) needs a string, number, boolean, date or reference")
                }
            case .lessThan, .lessThanOrEquals, .greaterThan, .greaterThanOrEquals:
                switch value {
                case .string, .int64, .double, .date: break
                default: throw invalid("\(key) \(condition.comparator.rawValue) needs a string, number or date")
                }
            }
        }
        for descriptor in sortDescriptors where !SystemKey.all.contains(descriptor.key) || descriptor.key == SystemKey.parent {
            do {
                try Names.checkFieldKey(descriptor.key, limits: limits)
            } catch {
                throw invalid("sort: \(error.message)")
            }
        }
    }

    private static func isComparable(_ value: FieldValue) -> Bool {
        switch value {
        case .string, .int64, .double, .bool, .date, .reference: true
        case .bytes, .location, .list: false
        }
    }
}

/// A page of query results, like `CKQueryOperation`'s records and cursor.
public struct QueryResults: Sendable {
    /// The matching records, in the query's order.
    public var records: [Record]
    /// Where the next page starts, when more records match: pass it back to get them.
    public var cursor: Cursor?

    /// A page of `records`, with `cursor` when more match.
    public init(records: [Record], cursor: Cursor?) {
        self.records = records
        self.cursor = cursor
    }

    /// Where a query's next page starts (`CKQueryOperation.Cursor`): the number of records already
    /// returned. Records saved or deleted between pages may shift the results by that many.
    public struct Cursor: Sendable, Hashable, Codable {
        /// How many records earlier pages returned.
        public var offset: Int

        /// A cursor past the first `offset` results.
        public init(offset: Int) { self.offset = offset }
    }

    /// The largest page a query returns (`resultsLimit` is capped to it).
    public static let maximumResultsLimit = 1000
}

extension FieldValue.List {
    /// The elements, each as a single value.
    public var elements: [FieldValue] {
        switch self {
        case .string(let v): v.map(FieldValue.string)
        case .int64(let v): v.map(FieldValue.int64)
        case .double(let v): v.map(FieldValue.double)
        case .bool(let v): v.map(FieldValue.bool)
        case .date(let v): v.map(FieldValue.date)
        case .bytes(let v): v.map(FieldValue.bytes)
        case .reference(let v): v.map(FieldValue.reference)
        case .location(let v): v.map(FieldValue.location)
        }
    }

    /// The first element, as a single value.
    public var first: FieldValue? {
        switch self {
        case .string(let v): v.first.map(FieldValue.string)
        case .int64(let v): v.first.map(FieldValue.int64)
        case .double(let v): v.first.map(FieldValue.double)
        case .bool(let v): v.first.map(FieldValue.bool)
        case .date(let v): v.first.map(FieldValue.date)
        case .bytes(let v): v.first.map(FieldValue.bytes)
        case .reference(let v): v.first.map(FieldValue.reference)
        case .location(let v): v.first.map(FieldValue.location)
        }
    }
}

extension Query.Condition: Codable {
    // The value is in a record field's JSON form, `{"value": ..., "type": "STRING"}`, under the key "value".
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: DynamicKey.self)
        key = try c.decode(String.self, forKey: DynamicKey("key"))
        comparator = try c.decode(Comparator.self, forKey: DynamicKey("comparator"))
        value = try FieldValueCoding(zone: .default).decode(from: c, key: DynamicKey("value"))
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: DynamicKey.self)
        try c.encode(key, forKey: DynamicKey("key"))
        try c.encode(comparator, forKey: DynamicKey("comparator"))
        try FieldValueCoding(zone: .default).encode(value, to: &c, key: DynamicKey("value"))
    }
}
