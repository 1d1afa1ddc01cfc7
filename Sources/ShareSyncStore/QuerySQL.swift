import Foundation
import GRDB
import ShareSyncCore

/// A ``Query`` as SQL over a record table whose `json` column holds the record's JSON form: the
/// conditions become a `WHERE` clause on `json_extract` of the fields, the sort descriptors an
/// `ORDER BY`. SQLite evaluates them while it walks the zone's records of the query's type (the type
/// index), or in the private database the parent's children for `parent ==` (the parent index; the
/// replica walks the type index for those too): no record is decoded unless it matches.
struct QuerySQL {
    /// Conditions after `WHERE` (each starting with ` AND `).
    var conditions = ""
    var arguments = StatementArguments()
    /// The `ORDER BY` list (ending with the record name, so the order is total).
    var order = ""

    /// - Parameters:
    ///   - table: the record table (named in subqueries, where `json` alone is `json_each`'s own column).
    ///   - parent: the SQL expression for the parent's record name (a column, or a `json_extract`).
    init(_ query: Query, table: String, parent: String) {
        for condition in query.predicate {
            let (expression, single) = Self.expression(condition.key, for: condition.value, parent: parent)
            switch condition.comparator {
            case .equals: append("\(expression) = ?", Self.sqlValue(single))
            case .notEquals: append("\(expression) != ?", Self.sqlValue(single))
            case .lessThan: append("\(expression) < ?", Self.sqlValue(single))
            case .lessThanOrEquals: append("\(expression) <= ?", Self.sqlValue(single))
            case .greaterThan: append("\(expression) > ?", Self.sqlValue(single))
            case .greaterThanOrEquals: append("\(expression) >= ?", Self.sqlValue(single))
            case .beginsWith:
                // substr, not LIKE: case-sensitive, and no wildcard characters to escape.
                let prefix = condition.value.stringValue ?? ""
                append("substr(\(expression), 1, ?) = ?", prefix.unicodeScalars.count, prefix)
            case .contains:
                let element = if case .reference = condition.value { "json_extract(je.value, '$.recordName')" } else { "je.value" }
                conditions += " AND EXISTS (SELECT 1 FROM json_each(\(table).json, ?) AS je WHERE \(element) = ?)"
                _ = arguments.append(contentsOf: [Self.fieldPath(condition.key), Self.sqlValue(condition.value)])
            case .in:
                let values = if case .list(let list) = condition.value { list.elements } else { [condition.value] }
                let marks = Array(repeating: "?", count: values.count).joined(separator: ", ")
                conditions += " AND \(expression) IN (\(marks))"
                _ = arguments.append(contentsOf: StatementArguments(values.map(Self.sqlValue)))
            }
        }
        var order: [String] = []
        for descriptor in query.sortDescriptors {
            let direction = descriptor.ascending ? "ASC" : "DESC"
            switch descriptor.key {
            case Query.SystemKey.creationDate: order.append("json_extract(json, '$.created.timestamp') \(direction)")
            case Query.SystemKey.modificationDate: order.append("json_extract(json, '$.modified.timestamp') \(direction)")
            case Query.SystemKey.recordName: order.append("name \(direction)")
            default:
                order.append("json_extract(json, ?) \(direction)")
                orderArguments.append(Self.fieldPath(descriptor.key))
            }
        }
        order.append("name ASC")
        self.order = order.joined(separator: ", ")
    }

    /// The arguments of the `ORDER BY` (they follow the `WHERE` clause's and the caller's own).
    var orderArguments: [String] = []

    private mutating func append(_ sql: String, _ values: (any DatabaseValueConvertible)?...) {
        conditions += " AND " + sql
        for value in values { _ = arguments.append(contentsOf: [value]) }
    }

    /// The JSON path of a field's value.
    static func fieldPath(_ key: String) -> String { "$.fields.\"\(key)\".value" }

    /// The SQL expression for `key` compared with `value` (references compare by record name), and the
    /// single value compared (the first of an `in` list, for its type).
    private static func expression(_ key: String, for value: FieldValue, parent: String) -> (String, FieldValue) {
        let single: FieldValue = if case .list(let list) = value, let first = list.first { first } else { value }
        switch key {
        case Query.SystemKey.parent: return (parent, single)
        case Query.SystemKey.creationDate: return ("json_extract(json, '$.created.timestamp')", single)
        case Query.SystemKey.modificationDate: return ("json_extract(json, '$.modified.timestamp')", single)
        case Query.SystemKey.recordName: return ("name", single)
        default:
            // The key passed validation (letters, digits, `_`): safe inside a quoted path literal.
            let path = fieldPath(key).replacingOccurrences(of: "'", with: "''")
            if case .reference = single { return ("json_extract(json, '\(path).recordName')", single) }
            return ("json_extract(json, '\(path)')", single)
        }
    }

    /// A value as `json_extract` gives it back: dates in milliseconds, booleans as 0 or 1, references as
    /// their record name.
    static func sqlValue(_ value: FieldValue) -> (any DatabaseValueConvertible)? {
        switch value {
        case .string(let v): v
        case .int64(let v): v
        case .double(let v): v
        case .bool(let v): v ? 1 : 0
        case .date(let v): Millis.from(v)  // clamped: a date past Int64's milliseconds trapped here
        case .reference(let r): r.recordID.recordName
        case .bytes, .location, .list: nil
        }
    }
}

extension PrivateDatabase {
    /// The records of a zone that match a query, in its order, a page at a time (at most
    /// `resultsLimit`, capped to ``QueryResults/maximumResultsLimit``), like `CKQueryOperation`.
    /// ``ShareSyncError/Code/zoneNotFound`` if the zone does not exist, `invalidArguments` (rule
    /// `querySyntax`) for a malformed query.
    public func records(
        matching query: Query, inZoneWith zoneID: RecordZone.ID = .default, resultsLimit: Int = QueryResults.maximumResultsLimit,
        cursor: QueryResults.Cursor? = nil
    ) throws(ShareSyncError) -> QueryResults {
        try query.validate(limits: limits)
        _ = try fetchZone(zoneID)
        let sql = QuerySQL(query, table: "record", parent: "parent")
        // Without statistics SQLite walks the primary key to save the sort by name; name the index that
        // narrows most instead: the parent's when the query asks for a parent, else the type's.
        let index = query.predicate.contains { $0.key == Query.SystemKey.parent && $0.comparator == .equals } ? "record_parent" : "record_type"
        let limit = max(1, min(resultsLimit, QueryResults.maximumResultsLimit))
        let offset = max(0, cursor?.offset ?? 0)
        var arguments: StatementArguments = [zoneID.zoneName, query.recordType]
        _ = arguments.append(contentsOf: sql.arguments)
        _ = arguments.append(contentsOf: StatementArguments(sql.orderArguments))
        _ = arguments.append(contentsOf: [limit + 1, offset])
        let rows = try read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT name, json FROM record INDEXED BY \(index) WHERE zone = ? AND type = ?\(sql.conditions)
                    ORDER BY \(sql.order) LIMIT ? OFFSET ?
                    """,
                arguments: arguments)
        }
        var records: [ShareSyncCore.Record] = []
        records.reserveCapacity(min(rows.count, limit))
        for row in rows.prefix(limit) {
            let json: Data = row["json"]
            do {
                records.append(try decodeStored(json, type: query.recordType, zone: zoneID.zoneName, name: row["name"]))
            } catch {
                throw ShareSyncError(.internalError, "a stored record does not decode: \(error)")
            }
        }
        return QueryResults(records: records, cursor: rows.count > limit ? QueryResults.Cursor(offset: offset + limit) : nil)
    }
}

extension SharedDatabaseReplica {
    /// The SQL expression for a replicated record's parent's record name, which `parent ==` compares.
    static let parentExpression = "json_extract(json, '$.parent.recordName')"

    /// The records of a shared zone in the replica that match a query, like
    /// ``PrivateDatabase/records(matching:inZoneWith:resultsLimit:cursor:)``, with the same comparisons.
    /// The zone's owner is the ID's ``RecordZone/ID/ownerName``; a zone not shared with this node is
    /// `zoneNotFound`. SQLite walks the zone's records of the query's type (index `replicaRecord_type`,
    /// also for `parent ==`: see migration `replica-v7-query-indexes` for why there is no parent index).
    public func records(
        matching query: Query, inZoneWith zoneID: RecordZone.ID, resultsLimit: Int = QueryResults.maximumResultsLimit,
        cursor: QueryResults.Cursor? = nil
    ) throws(ShareSyncError) -> QueryResults {
        try query.validate()
        let limit = max(1, min(resultsLimit, QueryResults.maximumResultsLimit))
        let offset = max(0, cursor?.offset ?? 0)
        let (sql, arguments) = Self.querySQL(query, inZoneWith: zoneID, limit: limit + 1, offset: offset)
        let found: [Data]? = try read { db in
            guard
                try Bool.fetchOne(
                    db, sql: "SELECT 1 FROM replicaZone WHERE owner = ? AND zone = ?",
                    arguments: [zoneID.ownerName, zoneID.zoneName]) ?? false
            else { return nil }
            return try Data.fetchAll(db, sql: sql, arguments: arguments)
        }
        guard let found else {
            throw ShareSyncError(
                .zoneNotFound, "zone \(zoneID.zoneName) of \(zoneID.ownerName) is not shared with this node", zoneID: zoneID)
        }
        var records: [ShareSyncCore.Record] = []
        for json in found.prefix(limit) {
            do {
                records.append(try ShareSyncCore.Record(jsonData: json))
            } catch {
                throw ShareSyncError(.internalError, "a replicated record does not decode: \(error)")
            }
        }
        return QueryResults(records: records, cursor: found.count > limit ? QueryResults.Cursor(offset: offset + limit) : nil)
    }

    /// The statement of ``records(matching:inZoneWith:resultsLimit:cursor:)`` and its arguments (the
    /// tests read its query plan). It names the type index: without statistics SQLite may walk the
    /// primary key instead, to save the sort by name.
    static func querySQL(
        _ query: Query, inZoneWith zoneID: RecordZone.ID, limit: Int, offset: Int
    ) -> (sql: String, arguments: StatementArguments) {
        let sql = QuerySQL(query, table: "replicaRecord", parent: parentExpression)
        var arguments: StatementArguments = [zoneID.ownerName, zoneID.zoneName, query.recordType]
        _ = arguments.append(contentsOf: sql.arguments)
        _ = arguments.append(contentsOf: StatementArguments(sql.orderArguments))
        _ = arguments.append(contentsOf: [limit, offset])
        return (
            """
            SELECT json FROM replicaRecord INDEXED BY replicaRecord_type
            WHERE zoneKey = (SELECT id FROM replicaZone WHERE owner = ? AND zone = ?) AND type = ?\(sql.conditions)
            ORDER BY \(sql.order) LIMIT ? OFFSET ?
            """,
            arguments
        )
    }
}
