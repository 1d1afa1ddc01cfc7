import GRDB
import Testing

import ShareSyncCore
@testable import ShareSyncStore

/// Which database failures a participant may send again (rule `storeFailure`), and which it may not.
@Suite("Store failures: passing or not")
struct StoreFailureRuleTests {
    @Test("a busy lock, an I/O error, a read-only file are storeFailure; a broken constraint or a damaged file are not")
    func onlyPassingFailuresAreStoreFailure() {
        func rule(_ code: ResultCode) -> Rule? {
            do {
                _ = try withStoreErrors("write", path: "/x.sqlite") { () throws -> Int in throw DatabaseError(resultCode: code) }
                return nil
            } catch {
                #expect(error.code == .internalError)
                return error.rule
            }
        }
        for code in [ResultCode.SQLITE_BUSY, .SQLITE_LOCKED, .SQLITE_IOERR, .SQLITE_READONLY, .SQLITE_CANTOPEN, .SQLITE_NOMEM] {
            #expect(rule(code) == .storeFailure, "\(code)")
        }
        for code in [ResultCode.SQLITE_CONSTRAINT, .SQLITE_CORRUPT, .SQLITE_NOTADB, .SQLITE_ERROR, .SQLITE_MISMATCH] {
            #expect(rule(code) == nil, "\(code)")
        }
    }
}
