import ArgumentParser
import Foundation
import ShareSync
import ShareSyncNode

extension RecordCommand {
    /// `sharesync record query`: a ``Query`` through the `ShareSync` library's ``Container``, as an app
    /// runs one.
    struct Query: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "query",
            abstract: "Find the records of a type in a zone that meet conditions, in an order.",
            discussion: """
                Each --where is KEY COMPARATOR TYPE:VALUE (quoted, separated by spaces). Comparators: \
                equals, notEquals, lessThan, lessThanOrEquals, greaterThan, greaterThanOrEquals, \
                beginsWith (strings, case-sensitive), contains (a list field holds the value), in (the \
                field is one of the comma-separated values). Types as in `record save`. KEY is a field, \
                or creationDate, modificationDate or recordName; --parent NAME finds the children of a \
                record. Every condition must hold. A record without the field never matches.

                --sort KEY (or KEY:desc) orders the results (records without the field first); ties \
                come in record name order. At most --limit records are shown; when more match, the \
                output ends with the --cursor to pass for the next page.

                The query runs in the node's store. With --shared it reads the replica of a zone shared \
                with this node (this node's writes not yet accepted are not applied).

                Example:
                  sharesync record query --zone Groceries --type Item --where "title beginsWith string:Mi" --sort title
                  sharesync record query --zone Groceries --type Item --parent list-1 --where "done equals bool:false"
                  sharesync record query --shared --zone Groceries --type Item --sort modificationDate:desc --limit 20
                """)
        @OptionGroup var options: NodeOptions
        @Option(help: "The zone.") var zone: String
        @Option(help: "The record type, such as Item.") var type: String
        @Option(name: .customLong("where"), help: ArgumentHelp("A condition (see above).", valueName: "key comparator type:value"))
        var conditions: [String] = []
        @Option(help: "Only the children of this record (same zone).") var parent: String?
        @Option(name: .customLong("sort"), help: ArgumentHelp("Order by a key, ascending (KEY) or descending (KEY:desc).", valueName: "key[:desc]"))
        var sorts: [String] = []
        // `.unconditional`: a negative number is a value the checks below refuse, not a missing one.
        @Option(parsing: .unconditional, help: "At most this many records (1-1000).") var limit = 100
        @Option(parsing: .unconditional, help: "Where the next page starts (printed after a page that stopped at --limit).") var cursor: Int?
        @OptionGroup var sharing: RecordCommand.SharedOptions

        func validate() throws {
            guard (1...QueryResults.maximumResultsLimit).contains(limit) else {
                throw ValidationError("--limit \(limit) is not between 1 and \(QueryResults.maximumResultsLimit)")
            }
            if let cursor, cursor < 0 { throw ValidationError("--cursor \(cursor) must not be negative") }
            do {
                try makeQuery().validate()
            } catch let error as ShareSyncError {
                throw ValidationError(error.message)
            }
        }

        /// The conditions and sort descriptors as a query.
        func makeQuery() throws -> ShareSync.Query {
            var predicate: [ShareSync.Query.Condition] = []
            for text in conditions {
                let parts = text.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: true).map(String.init)
                let comparators = ShareSync.Query.Condition.Comparator.allCases.map(\.rawValue).joined(separator: ", ")
                guard parts.count == 3, let comparator = ShareSync.Query.Condition.Comparator(rawValue: parts[1]) else {
                    throw ValidationError("--where \(text.debugDescription) is not KEY COMPARATOR TYPE:VALUE (comparators: \(comparators))")
                }
                guard let colon = parts[2].firstIndex(of: ":") else {
                    throw ValidationError("--where \(text.debugDescription): the value is not TYPE:VALUE")
                }
                let type = String(parts[2][..<colon])
                let raw = String(parts[2][parts[2].index(after: colon)...])
                let zoneID = RecordZone.ID(zoneName: zone)
                do {
                    let value: FieldValue
                    if comparator == .in {
                        let values = try raw.split(separator: ",").map {
                            try FieldAssignment(key: parts[0], type: type, value: String($0)).fieldValue(in: zoneID)
                        }
                        value = try Self.list(values, type: type)
                    } else {
                        value = try FieldAssignment(key: parts[0], type: type, value: raw).fieldValue(in: zoneID)
                    }
                    predicate.append(.field(parts[0], comparator, value))
                } catch let error as ShareSyncError {
                    throw ValidationError("--where \(text.debugDescription): \(error.message)")
                }
            }
            if let parent { predicate.append(.parent(is: Record.ID(recordName: parent, zoneID: RecordZone.ID(zoneName: zone)))) }
            let sortDescriptors = sorts.map { text -> ShareSync.Query.SortDescriptor in
                if text.hasSuffix(":desc") { return .init(key: String(text.dropLast(5)), ascending: false) }
                if text.hasSuffix(":asc") { return .init(key: String(text.dropLast(4))) }
                return .init(key: text)
            }
            return ShareSync.Query(recordType: type, predicate: predicate, sortDescriptors: sortDescriptors)
        }

        /// Single values of one type as a list value.
        static func list(_ values: [FieldValue], type: String) throws -> FieldValue {
            switch type {
            case "string": return .list(.string(values.compactMap(\.stringValue)))
            case "int64": return .list(.int64(values.compactMap(\.int64Value)))
            case "double": return .list(.double(values.compactMap(\.doubleValue)))
            case "date": return .list(.date(values.compactMap { if case .date(let d) = $0 { d } else { nil } }))
            case "reference": return .list(.reference(values.compactMap { if case .reference(let r) = $0 { r } else { nil } }))
            default: throw ValidationError("`in` takes string, int64, double, date or reference values, not \(type)")
            }
        }

        struct Page: Codable {
            var records: [Record]
            var cursor: Int?
        }

        func run() async throws {
            let query = try makeQuery()
            do {
                let container = try await Container.connected(home: options.homePath)
                let database = sharing.shared ? container.sharedDatabase : container.privateDatabase
                let zoneID = RecordZone.ID(zoneName: zone, ownerName: sharing.owner ?? RecordZone.ID.currentUserDefaultName)
                let results: QueryResults
                do {
                    results = try await database.records(
                        matching: query, inZoneWith: zoneID, resultsLimit: limit, cursor: cursor.map(QueryResults.Cursor.init(offset:)))
                    await container.close()
                } catch {
                    await container.close()
                    throw error
                }
                Output.emit(Page(records: results.records, cursor: results.cursor?.offset), json: options.json) { page in
                    var text = page.records.map(Output.describe).joined(separator: "\n")
                    if let next = page.cursor { text += (text.isEmpty ? "" : "\n") + "more: --cursor \(next)" }
                    return text
                }
            } catch {
                throw Output.fail(error)
            }
        }
    }
}
