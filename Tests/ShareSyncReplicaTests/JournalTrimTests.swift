import Foundation
import Testing

import ShareSyncCore
@testable import ShareSyncStore

/// The shared database's change journal past its capacity of deletions: the oldest deletions go first,
/// every live record keeps its entry (the journal from 0 is still the whole content), and tokens from
/// before the dropped deletions are marked expired. Live records never count against the capacity: a
/// replica larger than it keeps its deletions, and its tokens, like a small one.
@Suite("Trimming the replica's change journal")
struct JournalTrimTests {
    @Test("past its capacity of deletions the journal drops the oldest, keeps the live records, and expires older tokens", arguments: Storage.allCases)
    func trimsOldestDeletionsFirst(storage: Storage) throws {
        try withReplica(storage) { replica in
            let owner = alice.ownerName
            let first = try (0..<8).map { try fetchedRecord("n\($0)", ["title": .string("n\($0)")], tag: "1") }
            try replica.apply(page(saving: first, token: token(1)), owner: owner)
            let start = try replica.journalChanges(capacity: 4).position
            #expect(start.sequence == 9)  // the zone and 8 records
            #expect(start.expiredBelow == 0)

            try replica.apply(page(deleting: (0..<3).map { "n\($0)" }, token: token(2)), owner: owner)
            let afterDeletes = try replica.journalChanges(capacity: 4).position
            let deletions = try replica.journalEntries(after: start.sequence, through: afterDeletes.sequence)
            #expect(deletions.map(\.kind) == Array(repeating: .deleted, count: 3))
            #expect(afterDeletes.expiredBelow == 0)  // 3 deletions: within capacity

            try replica.apply(page(deleting: (3..<6).map { "n\($0)" }, token: token(3)), owner: owner)
            let second = try (0..<8).map { try fetchedRecord("m\($0)", ["title": .string("m\($0)")], tag: "2") }
            try replica.apply(page(saving: second, token: token(4)), owner: owner)
            let end = try replica.journalChanges(capacity: 4).position
            // 6 deletions, 2 over: the 2 oldest go (n0, n1), the 4 others stay.
            #expect(end.expiredBelow == deletions[1].sequence)
            #expect(start.sequence < end.expiredBelow)  // a token from before them is expired
            let all = try replica.journalEntries(after: 0, through: end.sequence)
            #expect(Set(all.filter { $0.kind == .deleted }.compactMap(\.recordName)) == ["n2", "n3", "n4", "n5"])
            let live = Set(all.filter { $0.kind == .changed }.compactMap(\.recordName))
            #expect(live == Set(["n6", "n7"] + (0..<8).map { "m\($0)" }))
            #expect(all.filter { $0.kind == .zoneAdded }.count == 1)
            // A token at or after the trimmed deletions still reads what followed it.
            let since = try replica.journalEntries(after: end.expiredBelow, through: end.sequence)
            #expect(Set(since.compactMap(\.recordName)) == Set((2..<6).map { "n\($0)" } + (0..<8).map { "m\($0)" }))
        }
    }

    @Test("entries trimmed after a reader checked its token expire that read instead of going missing", arguments: Storage.allCases)
    func aTrimBetweenTheCheckAndTheReadExpiresTheRead(storage: Storage) throws {
        try withReplica(storage) { replica in
            let owner = alice.ownerName
            let notes = try (0..<8).map { try fetchedRecord("n\($0)", ["title": .string("n\($0)")], tag: "1") }
            try replica.apply(page(saving: notes, token: token(1)), owner: owner)
            let reader = try replica.journalChanges(capacity: 4).position  // a reader's token, valid here
            try replica.apply(page(deleting: (0..<3).map { "n\($0)" }, token: token(2)), owner: owner)
            let checked = try replica.journalChanges(capacity: 4).position  // the reader checks: not expired
            #expect(reader.sequence >= checked.expiredBelow)
            // Before it reads its entries, another reader's call trims the oldest deletions.
            try replica.apply(page(deleting: (3..<8).map { "n\($0)" }, token: token(3)), owner: owner)
            #expect(try replica.journalChanges(capacity: 4).position.expiredBelow > reader.sequence)
            let error = try #require(#expect(throws: ShareSyncError.self) {
                _ = try replica.journalEntries(after: reader.sequence, through: checked.sequence)
            })
            #expect(error.code == .changeTokenExpired)
            #expect(try replica.journalEntries(after: 0, through: checked.sequence).count > 0, "a read of everything does not expire")
        }
    }

    @Test("a replica with more records than the capacity keeps its deletions, and its tokens stay valid", arguments: Storage.allCases)
    func liveRecordsDoNotCountAgainstTheCapacity(storage: Storage) throws {
        try withReplica(storage) { replica in
            let owner = alice.ownerName
            let records = try (0..<12).map { try fetchedRecord("n\($0)", ["title": .string("n\($0)")], tag: "1") }
            try replica.apply(page(saving: records, token: token(1)), owner: owner)
            let start = try replica.journalChanges(capacity: 4).position
            try replica.apply(page(deleting: ["n0", "n1"], token: token(2)), owner: owner)
            let end = try replica.journalChanges(capacity: 4).position
            #expect(end.expiredBelow == 0)  // nothing dropped: a token from before the deletions still works
            let since = try replica.journalEntries(after: start.sequence, through: end.sequence)
            #expect(since.map(\.kind) == [.deleted, .deleted])
            #expect(Set(since.compactMap(\.recordName)) == ["n0", "n1"])
            let all = try replica.journalEntries(after: 0, through: end.sequence)
            #expect(all.filter { $0.kind == .changed }.count == 10)
        }
    }

    @Test("migration v9: deletions journaled by an older version are counted and trimmed, oldest first")
    func upgradedJournalTrimsItsDeletions() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path("shared.sqlite")
        let o = alice.ownerName
        // A journal in use (from before v8, which then installs its triggers) that saw the zone, three
        // records deleted (entries 2, 3, 4) and one live record.
        let live = try fetchedRecord("live", ["title": .string("live")], tag: "1")
        try ReplicaSchema.createOlderFile(
            path: path, upTo: "replica-v7-query-indexes",
            sql: """
                \(try olderFileRows(holding: live))
                INSERT INTO replicaFeedState (id, epoch, scanned) VALUES (1, 'old', 1);
                INSERT INTO replicaFeedSeen (owner, zone, name, tag) VALUES ('\(o)', 'Topics', '', ''), ('\(o)', 'Topics', 'live', '1');
                INSERT INTO replicaFeedEntry (owner, zone, name, kind) VALUES
                    ('\(o)', 'Topics', '', 'zoneAdded'), ('\(o)', 'Topics', 'd1', 'deleted'),
                    ('\(o)', 'Topics', 'd2', 'deleted'), ('\(o)', 'Topics', 'd3', 'deleted'), ('\(o)', 'Topics', 'live', 'changed');
                """)
        let replica = try SharedDatabaseReplica(path: path)
        try replica.apply(page(deleting: ["live"], token: token(2)), owner: o)
        let end = try replica.journalChanges(capacity: 2).position
        // Four deletions now, two over: d1 and d2 go, so tokens before entry 3 expire.
        #expect(end.expiredBelow == 3)
        let entries = try replica.journalEntries(after: 0, through: end.sequence)
        #expect(entries.filter { $0.kind == .deleted }.compactMap(\.recordName) == ["d3", "live"])
    }
}
