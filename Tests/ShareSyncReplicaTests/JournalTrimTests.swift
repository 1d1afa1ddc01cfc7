import Foundation
import Testing

import ShareSyncCore
@testable import ShareSyncStore

/// The shared database's change journal past its capacity: the oldest deletions go first, every live
/// record keeps its entry (the journal from 0 is still the whole content), and tokens from before
/// the dropped deletions are marked expired.
@Suite("Trimming the replica's change journal")
struct JournalTrimTests {
    func tagged(_ name: String, _ tag: String) throws -> Record {
        var record = try fetchedRecord(name, ["title": .string(name)])
        record.recordChangeTag = tag
        return record
    }

    @Test("past its capacity the journal drops the oldest deletions, keeps the live records, and expires older tokens", arguments: Storage.allCases)
    func trimsOldestDeletionsFirst(storage: Storage) throws {
        try withReplica(storage) { replica in
            let owner = alice.ownerName
            let first = try (0..<8).map { try tagged("n\($0)", "1") }
            try replica.apply(page(saving: first, token: token(1)), owner: owner)
            let start = try replica.journalChanges(capacity: 10).position
            #expect(start.sequence == 9)  // the zone and 8 records
            #expect(start.expiredBelow == 0)

            try replica.apply(page(deleting: (0..<6).map { "n\($0)" }, token: token(2)), owner: owner)
            let afterDeletes = try replica.journalChanges(capacity: 10).position
            let deletions = try replica.journalEntries(after: start.sequence, through: afterDeletes.sequence)
            #expect(deletions.map(\.kind) == Array(repeating: .deleted, count: 6))
            #expect(afterDeletes.expiredBelow == 0)  // 9 entries: within capacity

            let second = try (0..<8).map { try tagged("m\($0)", "2") }
            try replica.apply(page(saving: second, token: token(3)), owner: owner)
            let end = try replica.journalChanges(capacity: 10).position
            // 17 entries, 7 over: all 6 deletions go (live records are never dropped).
            #expect(end.expiredBelow == deletions.last?.sequence)
            #expect(start.sequence < end.expiredBelow)  // a token from before them is expired
            let all = try replica.journalEntries(after: 0, through: end.sequence)
            #expect(!all.contains { $0.kind == .deleted })
            let live = Set(all.filter { $0.kind == .changed }.compactMap(\.recordName))
            #expect(live == Set(["n6", "n7"] + (0..<8).map { "m\($0)" }))
            #expect(all.filter { $0.kind == .zoneAdded }.count == 1)
            // A token at or after the trimmed deletions still reads what followed it.
            let since = try replica.journalEntries(after: end.expiredBelow, through: end.sequence)
            #expect(Set(since.compactMap(\.recordName)) == Set((0..<8).map { "m\($0)" }))
        }
    }
}
