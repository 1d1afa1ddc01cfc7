import Foundation
import GRDB

private typealias Record = ShareSyncCore.Record
import ShareSyncCore
import ShareSyncTestSupport
import Testing

@testable import ShareSyncStore

/// The set-based write path (a batch's records read ahead, record rows cached within a transaction,
/// each viewer's feed rows written in one statement, an edited row updated in place with only the
/// columns that change) against the row-by-row path it replaced: the same
/// random operations on two databases give the same answers and the same rows in every table that
/// sharing and the feeds depend on, sequence numbers included.
@Suite("Set-based writes give what row-by-row writes give")
struct SetBasedWritesTests {
    static let owner = "_owner"
    static let users = ["_u1", "_u2", "_u3"]
    static let zones = ["Alpha", "Beta"]
    static let pool = 60

    /// Two databases that take the same operations, and the share URLs each handed out (they differ:
    /// tokens are random).
    struct Pair {
        /// The set-based database here; the one reading zone feeds directly in ``DirectZoneFeedsTests``.
        let first: PrivateDatabase
        /// The row-by-row database here; the one copying every feed in ``DirectZoneFeedsTests``.
        let second: PrivateDatabase
        var urls: [(first: String, second: String)] = []

        /// `wholeZoneSettleThreshold` 1: the set-based database recomputes membership over the whole
        /// zone whenever no record's share depends on its parent, however few records changed. Both
        /// copy every viewer's feed into `viewLog` (no direct zone feeds), so that the tables compare
        /// the set-based and row-by-row writes of every feed.
        init(wholeZoneSettleThreshold: Int = .max) throws {
            try self.init(
                first: SetBasedWritesTests.database(setBasedWrites: true, wholeZoneSettleThreshold: wholeZoneSettleThreshold),
                second: SetBasedWritesTests.database(setBasedWrites: false))
        }

        init(first: PrivateDatabase, second: PrivateDatabase) throws {
            self.first = first
            self.second = second
            for z in SetBasedWritesTests.zones {
                for db in [first, second] { try db.saveZone(RecordZone(zoneID: RecordZone.ID(zoneName: z))) }
            }
        }
    }

    /// A database in memory whose clock stands still.
    static func database(setBasedWrites: Bool, wholeZoneSettleThreshold: Int = .max, directZoneFeeds: Bool = false) throws -> PrivateDatabase {
        try PrivateDatabase(
            writer: DatabaseQueue(), ownerName: owner, limits: Limits(), clock: { Date(timeIntervalSince1970: 1_700_000_000) },
            setBasedWrites: setBasedWrites, wholeZoneSettleThreshold: wholeZoneSettleThreshold, directZoneFeeds: directZoneFeeds)
    }

    /// What a request answered, without what differs between two databases by design (share URLs,
    /// participant IDs): per item, success or the error's code.
    static func outcome(_ result: Result<ModifyRecordsResult, ShareSyncError>) -> String {
        switch result {
        case .failure(let error): return "request failed: \(error.code)"
        case .success(let result):
            let saves = result.saveResults.map { id, r in
                "save \(id.recordName): " + { if case .failure(let e) = r { "\(e.code)" } else { "ok" } }()
            }
            let deletes = result.deleteResults.map { id, r in
                "delete \(id.recordName): " + { if case .failure(let e) = r { "\(e.code)" } else { "ok" } }()
            }
            return (saves + deletes).sorted().joined(separator: "\n")
        }
    }

    /// The rows of every table sharing and the feeds depend on (JSON left out: it holds random tokens).
    static func dump(_ database: PrivateDatabase) throws -> [String] {
        try database.writer.read { db in
            var lines: [String] = []
            let queries = [
                "SELECT 'record', zone, name, type, seq, parent, shareName FROM record ORDER BY zone, name",
                "SELECT 'tombstone', zone, name, type, seq FROM recordTombstone ORDER BY zone, name",
                "SELECT 'deleteSelf', zone, target, source FROM deleteSelfReference ORDER BY zone, target, source",
                "SELECT 'share', zone, name, root FROM share ORDER BY zone, name",
                "SELECT 'member', zone, share, user FROM member ORDER BY zone, share, user",
                "SELECT 'viewLog', viewer, zone, name, type, seq, present FROM viewLog ORDER BY viewer, zone, name",
                "SELECT 'viewZone', viewer, zone, seq, present, enteredSeq FROM viewZone ORDER BY viewer, zone",
                "SELECT 'zone', name, seq, createdSeq FROM zone ORDER BY name",
                "SELECT 'meta', value FROM meta WHERE key = 'seq'",
            ]
            for sql in queries {
                for row in try Row.fetchAll(db, sql: sql) { lines.append(row.description) }
            }
            return lines
        }
    }

    fileprivate static func record(_ rng: inout SplitMix64, zone: RecordZone.ID, name: String, step: Int) -> Record {
        var r = Record(recordType: name.hasPrefix("t") ? "Topic" : "Note", recordID: Record.ID(recordName: name, zoneID: zone))
        r["title"] = .string("\(name) at \(step)")
        let roll = rng.int(100)
        if roll >= 30 {
            let parent = "r\(rng.int(roll < 90 ? 10 : pool))"
            r.setParent(Record.ID(recordName: parent, zoneID: zone))
        }
        if rng.chance(0.15) {
            r["owner"] = .reference(Record.Reference(recordID: Record.ID(recordName: "r\(rng.int(pool))", zoneID: zone), action: .deleteSelf))
        }
        return r
    }

    /// Runs one random step on both databases; returns what it did and the two outcomes.
    static func step(_ pair: inout Pair, _ rng: inout SplitMix64, step: Int) throws -> (String, String, String) {
        let z = zones[rng.int(zones.count)]
        let zone = RecordZone.ID(zoneName: z)
        let names = (0..<(1 + rng.int(rng.chance(0.5) ? 40 : 5))).map { _ in "r\(rng.int(pool))" }
        let roll = rng.int(100)
        if roll < 45 {
            // The owner saves a batch (names may repeat: the second is refused as a duplicate).
            let records = names.map { record(&rng, zone: zone, name: $0, step: step) }
            let atomically = rng.chance(0.6)
            let a = Result { () throws(ShareSyncError) in try pair.first.modifyRecords(saving: records, savePolicy: .allKeys, atomically: atomically) }
            let b = Result { () throws(ShareSyncError) in try pair.second.modifyRecords(saving: records, savePolicy: .allKeys, atomically: atomically) }
            return ("owner saves \(names.count) in \(z), atomically \(atomically)", outcome(a), outcome(b))
        }
        if roll < 55 {
            let ids = Array(Set(names)).sorted().prefix(8).map { Record.ID(recordName: $0, zoneID: zone) }
            let a = Result { () throws(ShareSyncError) in try pair.first.modifyRecords(deleting: ids, atomically: false) }
            let b = Result { () throws(ShareSyncError) in try pair.second.modifyRecords(deleting: ids, atomically: false) }
            return ("owner deletes \(ids.count) in \(z)", outcome(a), outcome(b))
        }
        if roll < 68 {
            // A share of the zone or of a record, with every user invited read-write; all accept.
            let root: String? = rng.chance(0.3) ? nil : "r\(rng.int(10))"
            var answers: [String] = []
            var urls: [String] = []
            for db in [pair.first, pair.second] {
                var share: Share
                if let root {
                    guard let rootRecord = try? db.fetchRecord(Record.ID(recordName: root, zoneID: zone)) else {
                        answers.append("no root")
                        continue
                    }
                    share = Share(rootRecord: rootRecord, shareID: Record.ID(recordName: "share-\(step)", zoneID: zone))
                } else {
                    share = Share(recordZoneID: zone)
                }
                for user in users { try share.addParticipant(Participant(lookupInfo: .init(userRecordName: user), permission: .readWrite)) }
                let result = Result { () throws(ShareSyncError) in try db.modifyRecords(saving: [share.record]) }
                answers.append(outcome(result))
                if case .success(let r) = result, case .success(let saved)? = r.saveResults.values.first, let url = Share(saved)?.url {
                    urls.append(url)
                }
            }
            if urls.count == 2 {
                pair.urls.append((urls[0], urls[1]))
                for user in users where rng.chance(0.8) {
                    let a = Result { () throws(ShareSyncError) in try pair.first.acceptShare(url: urls[0], as: Caller(userRecordName: user)) }
                    let b = Result { () throws(ShareSyncError) in try pair.second.acceptShare(url: urls[1], as: Caller(userRecordName: user)) }
                    answers[0] += "; accept \(user): " + { if case .failure(let e) = a { "\(e.code)" } else { "ok" } }()
                    answers[1] += "; accept \(user): " + { if case .failure(let e) = b { "\(e.code)" } else { "ok" } }()
                }
            }
            return ("share \(root ?? "zone") in \(z)", answers[0], answers[1])
        }
        if roll < 73 {
            // Stop sharing: delete a share record (the same one in both, by name).
            let shareNames = try pair.first.writer.read { db in
                try String.fetchAll(db, sql: "SELECT name FROM share WHERE zone = ? ORDER BY name", arguments: [z])
            }
            guard let name = rng.pick(shareNames) else { return ("no share to stop", "", "") }
            let id = Record.ID(recordName: name, zoneID: zone)
            let a = Result { () throws(ShareSyncError) in try pair.first.modifyRecords(deleting: [id]) }
            let b = Result { () throws(ShareSyncError) in try pair.second.modifyRecords(deleting: [id]) }
            return ("stop share \(name)", outcome(a), outcome(b))
        }
        // A participant saves a batch through their shared database, or deletes.
        let user = users[rng.int(users.count)]
        let shared = RecordZone.ID(zoneName: z, ownerName: owner)
        let atomically = rng.chance(0.5)
        let records = names.map { record(&rng, zone: shared, name: $0, step: step) }
        let deleting = rng.chance(0.2) ? [Record.ID(recordName: "r\(rng.int(pool))", zoneID: shared)] : []
        let a = Result { () throws(ShareSyncError) in
            try pair.first.sharedDatabase(for: Caller(userRecordName: user)).modifyRecords(
                saving: records, deleting: deleting, savePolicy: .allKeys, atomically: atomically)
        }
        let b = Result { () throws(ShareSyncError) in
            try pair.second.sharedDatabase(for: Caller(userRecordName: user)).modifyRecords(
                saving: records, deleting: deleting, savePolicy: .allKeys, atomically: atomically)
        }
        return ("\(user) saves \(records.count), deletes \(deleting.count) in \(z)", outcome(a), outcome(b))
    }

    @Test("random batches of saves, deletes, shares, accepts and participant writes", arguments: [UInt64(1), 2, 3, 4])
    func equivalence(seed: UInt64) async throws {
        // Seconds of CPU: run on the blocking threads, not on the cooperative pool the async tests need.
        try await blocking {
            try run(seed: seed, pair: Pair())
        }
    }

    @Test("the same, membership recomputed over the whole zone wherever parents do not matter", arguments: [UInt64(5), 6, 7, 8])
    func equivalenceWholeZone(seed: UInt64) async throws {
        // Seconds of CPU: run on the blocking threads, not on the cooperative pool the async tests need.
        try await blocking {
            try run(seed: seed, pair: Pair(wholeZoneSettleThreshold: 1))
        }
    }

    func run(seed: UInt64, pair: Pair) throws {
        var pair = pair
        var rng = SplitMix64(seed: seed)
        var batchesWritten = 0
        var mostViewRows = 0
        for n in 1...250 {
            let (what, a, b) = try Self.step(&pair, &rng, step: n)
            try #require(a == b, "seed \(seed) step \(n): \(what): set-based answered\n\(a)\nrow by row answered\n\(b)")
            if what.hasPrefix("owner saves") || what.contains(" saves ") { batchesWritten += 1 }
            let (x, y) = (try Self.dump(pair.first), try Self.dump(pair.second))
            if x != y {
                let diff = zip(x, y).first { $0 != $1 }.map { "first difference:\n  set-based:  \($0.0)\n  row by row: \($0.1)" }
                    ?? "row counts \(x.count) and \(y.count)"
                Issue.record("seed \(seed) step \(n) (\(what)): the tables differ; \(diff)")
                return
            }
            mostViewRows = max(mostViewRows, x.count { $0.contains("viewLog") })
        }
        // The run did what it is for: batches large enough for the set-based statements, and feeds.
        #expect(batchesWritten > 50)
        #expect(mostViewRows > 100)
    }
}
