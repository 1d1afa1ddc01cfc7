import Dispatch
import Foundation
import Testing

import ShareSyncCore
@testable import ShareSyncStore

/// `PrivateDatabase.readTogether`: the reads inside it are one read, one snapshot (what a push
/// reads: the caller's database changes, then the changed zones' pages).
@Suite("Reads together")
struct ReadTogetherTests {
    @Test("reads inside readTogether see one snapshot: a write committed between them shows only after")
    func oneSnapshot() throws {
        try withDatabase(.onDisk) { db in
            try db.saveZones([RecordZone(zoneID: topics)])
            try db.save([makeRecord("a")])
            let seen = try db.readTogether { () throws -> [Bool] in
                var seen = [try db.exists(recordID("a")), try db.exists(recordID("b"))]
                // Another thread saves b and commits while this read is open.
                let done = DispatchSemaphore(value: 0)
                let failure = ErrorBox()
                DispatchQueue.global().async {
                    do { try db.save([makeRecord("b")]) } catch { failure.error = error }
                    done.signal()
                }
                #expect(done.wait(timeout: .now() + 10) == .success, "the write waited for the read")
                #expect(failure.error == nil)
                seen.append(try db.exists(recordID("b")))
                return seen
            }
            #expect(seen == [true, false, false])
            #expect(try db.exists(recordID("b")))
        }
    }

    @Test("readTogether nests, and its reads give what reads apart give", arguments: [Storage.inMemory, .onDisk])
    func sameAnswers(storage: Storage) throws {
        try withDatabase(storage) { db in
            try db.saveZones([RecordZone(zoneID: topics)])
            try db.save((0..<30).map { makeRecord("r\($0)") })
            let apart = try db.allZoneChanges(topics, since: nil).changes
            let together = try db.readTogether {
                try db.readTogether { try db.allZoneChanges(topics, since: nil).changes }
            }
            #expect(together == apart)
            #expect(together.count == 30)
        }
    }
}

private final class ErrorBox: @unchecked Sendable {
    var error: (any Error)?
}
