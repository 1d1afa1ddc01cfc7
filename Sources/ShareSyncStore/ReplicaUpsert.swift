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

    /// How the statement's leading parameters name the zone: the zone row's id (the live records), or
    /// the owner and the zone name (the staging area).
    enum Zone {
        case key(Int64)
        case names(owner: String, zone: String)
    }

    /// The index of the first parameter after the zone's: name, type, json follow.
    private let first: Int32

    /// Prepares `statement` (`INSERT … (zoneKey, name, type, json) VALUES (?, ?, ?, ?)`, or with owner
    /// and zone in place of zoneKey) for the records of `zone`.
    init(_ statement: Statement, zone: Zone, in db: Database) throws {
        self.statement = statement.sqliteStatement
        self.connection = db.sqliteConnection!
        sqlite3_reset(self.statement)
        sqlite3_clear_bindings(self.statement)
        switch zone {
        case .key(let key):
            first = 2
            try check(sqlite3_bind_int64(self.statement, 1, key))
        case .names(let owner, let zone):
            first = 3
            try bindText(1, owner)
            try bindText(2, zone)
        }
    }

    /// Inserts or replaces one record.
    func run(name: String, type: String, json: Data) throws {
        try bindText(first, name)
        try bindText(first + 1, type)
        let jsonIndex = first + 2
        let result = json.withUnsafeBytes { bytes -> Int32 in
            defer {
                sqlite3_reset(statement)
                sqlite3_bind_null(statement, jsonIndex)  // the bytes are not ours to keep pointing at
            }
            // An empty blob binds through its own call: a nil pointer would bind NULL.
            let bound =
                bytes.isEmpty
                ? sqlite3_bind_zeroblob(statement, jsonIndex, 0)
                : sqlite3_bind_blob(statement, jsonIndex, bytes.baseAddress, Int32(bytes.count), nil)
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
