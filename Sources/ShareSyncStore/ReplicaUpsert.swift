import Foundation
import GRDB
import GRDBSQLite

/// The replica's upsert of one page's records, bound through SQLite's C API on GRDB's cached
/// statement.
///
/// Measured reason (GRDB binds for every other statement): `Statement.execute(arguments:)` boxes each
/// of the five arguments into a `DatabaseValue`, copies the JSON into SQLite, and goes through GRDB's
/// per-statement bookkeeping, for every record. Here owner and zone are bound once per page, the
/// record's name and type per row, and its JSON without a copy (`SQLITE_STATIC`: the bytes outlive the
/// one step that reads them, and the binding is cleared before they go). The replica's apply of 100k
/// records in pages of 400 (`sharesync-bench store`) went from 204-221k to 246-276k records/s.
///
/// The statement is only stepped inside the write transaction GRDB opened, so nothing GRDB tracks is
/// bypassed that the store uses: it registers no GRDB transaction observer (commits are announced by
/// `CommitObservers`), and a failed step throws the same `DatabaseError` GRDB would, which
/// `withStoreErrors` turns into a ``ShareSyncError``.
struct ReplicaUpsert: ~Copyable {
    private let statement: SQLiteStatement
    private let connection: SQLiteConnection

    /// Prepares `statement` (`INSERT … (owner, zone, name, type, json) VALUES (?, ?, ?, ?, ?)`) for the
    /// records of `owner`'s zone `zone`.
    init(_ statement: Statement, owner: String, zone: String, in db: Database) throws {
        self.statement = statement.sqliteStatement
        self.connection = db.sqliteConnection!
        sqlite3_reset(self.statement)
        sqlite3_clear_bindings(self.statement)
        try bindText(1, owner)
        try bindText(2, zone)
    }

    /// Inserts or replaces one record.
    func run(name: String, type: String, json: Data) throws {
        try bindText(3, name)
        try bindText(4, type)
        let result = json.withUnsafeBytes { bytes -> Int32 in
            defer {
                sqlite3_reset(statement)
                sqlite3_bind_null(statement, 5)  // the bytes are not ours to keep pointing at
            }
            // An empty blob binds through its own call: a nil pointer would bind NULL.
            let bound =
                bytes.isEmpty
                ? sqlite3_bind_zeroblob(statement, 5, 0)
                : sqlite3_bind_blob(statement, 5, bytes.baseAddress, Int32(bytes.count), nil)
            guard bound == SQLITE_OK else { return bound }
            return sqlite3_step(statement)
        }
        guard result == SQLITE_DONE else { throw error(result) }
    }

    /// Leaves the cached statement reset with nothing bound, as GRDB expects to find it.
    deinit {
        sqlite3_reset(statement)
        sqlite3_clear_bindings(statement)
    }

    /// Binds `value` as text, copied, with its exact UTF-8 length (a name may hold a NUL character,
    /// which a C string would end at).
    private func bindText(_ index: Int32, _ value: String) throws {
        var value = value
        let result = value.withUTF8 { utf8 in
            // An empty string may have no buffer; a nil pointer would bind NULL.
            sqlite3_bind_text(statement, index, utf8.baseAddress ?? ("" as StaticString).utf8Start, Int32(utf8.count), SQLITE_TRANSIENT)
        }
        try check(result)
    }

    private func check(_ result: Int32) throws {
        guard result == SQLITE_OK else { throw error(result) }
    }

    private func error(_ result: Int32) -> DatabaseError {
        DatabaseError(resultCode: ResultCode(rawValue: result), message: String(cString: sqlite3_errmsg(connection)))
    }
}

/// SQLite's `SQLITE_TRANSIENT` destructor: SQLite copies the bound value at once.
private let SQLITE_TRANSIENT = unsafeBitCast(-1, to: sqlite3_destructor_type.self)
