import Foundation
import Testing

import ShareSyncCore
@testable import ShareSyncStore
import ShareSyncTestSupport

/// A push is applied in one transaction that skips what its parts would write twice: a changed zone
/// that comes with a page is made known by the page (one statement stores its token and names its
/// row), and the database changes' own token is not stored before the push's replaces it. Here two
/// replicas get the same random pushes; one applies them whole, the other applies their parts one
/// by one through the public calls (the database changes, each page, then the push's token), the
/// path whose meaning is plain. After every push both must hold the same owners' tokens, zones,
/// zone tokens and records, and journal the same entries.
@Suite("Pushes against their parts applied one by one")
struct PushApplyEquivalenceTests {
    @Test("random pushes leave the same replica and journal either way", arguments: [1, 2, 3, 4, 5])
    func pushesMatchTheirParts(seed: UInt64) async throws {
        // Seconds of CPU: run on the blocking threads, not on the cooperative pool the async tests need.
        try await blocking {
            try withReplica(.onDisk) { whole in
                try withReplica(.inMemory) { parts in
                    // Both journal from the start, so that every trigger's note is compared.
                    _ = try whole.journalChanges()
                    _ = try parts.journalChanges()
                    var random = SeededGenerator(seed: seed)
                    var tokens: Int64 = 0
                    let owners = [alice, bob]
                    let zones = ["Topics", "Lists", "Trips", "Notes"]
                    func nextToken(_ owner: OwnerInfo) -> ServerChangeToken {
                        tokens += 1
                        return token(tokens, of: owner)
                    }
                    func randomPage(_ zoneID: RecordZone.ID, _ owner: OwnerInfo) throws -> ZoneChanges {
                        let saving = try (0..<Int.random(in: 0...3, using: &random)).map { _ in
                            var record = try fetchedRecord("r\(Int.random(in: 0..<6, using: &random))", in: zoneID, ["n": .int64(tokens)])
                            record.recordChangeTag = "t\(tokens)-\(Int.random(in: 0..<1000, using: &random))"
                            return record
                        }
                        let deleting = (0..<Int.random(in: 0...2, using: &random)).map { _ in "r\(Int.random(in: 0..<6, using: &random))" }
                            .filter { name in !saving.contains { $0.recordID.recordName == name } }
                        return page(zoneID, saving: saving, deleting: Array(Set(deleting)).sorted(), token: nextToken(owner))
                    }
                    var pushes = 0
                    var pagedAndDeleted = 0
                    var mostZones = 0
                    for step in 0..<250 {
                        let owner = owners.randomElement(using: &random)!
                        let roll = Int.random(in: 0..<100, using: &random)
                        if roll < 8 {
                            // A zone left locally: pushes and pages for it must leave it out, both ways.
                            let leave = PendingLeave(owner: owner.ownerName, zoneName: zones.randomElement(using: &random)!, shareName: "s")
                            for replica in [whole, parts] {
                                try replica.leaveLocally(leave)
                                try replica.purgeZone(owner: leave.owner, zoneName: leave.zoneName)
                            }
                            continue
                        }
                        if roll < 14 {
                            let leave = PendingLeave(owner: owner.ownerName, zoneName: zones.randomElement(using: &random)!, shareName: "s")
                            for replica in [whole, parts] { try replica.removePendingLeave(leave) }
                            continue
                        }
                        // A push: some zones deleted, some changed, pages for some of the changed ones
                        // (a zone may be deleted and changed again in the same push).
                        let shuffled = zones.shuffled(using: &random).map { zone($0, of: owner) }
                        let deleted = Array(shuffled.prefix(Int.random(in: 0...1, using: &random)))
                        var changed = Array(shuffled.dropFirst(deleted.count).prefix(Int.random(in: 0...3, using: &random)))
                        if let again = deleted.first, Bool.random(using: &random) { changed.append(again) }
                        let paged = try changed.filter { _ in Int.random(in: 0..<4, using: &random) > 0 }.map { try randomPage($0, owner) }
                        pagedAndDeleted += paged.contains { deleted.contains($0.zoneID) } ? 1 : 0
                        let database = DatabaseChanges(
                            changedZoneIDs: changed, deletedZoneIDs: deleted, changeToken: nextToken(owner), moreComing: false)
                        let pushToken = nextToken(owner)

                        try whole.apply(databaseChanges: database, zoneChanges: paged, token: pushToken, owner: owner.ownerName)
                        try parts.apply(databaseChanges: database, owner: owner.ownerName)
                        for zonePage in paged { try parts.apply(zonePage, owner: owner.ownerName) }
                        try parts.apply(
                            databaseChanges: DatabaseChanges(changedZoneIDs: [], deletedZoneIDs: [], changeToken: pushToken, moreComing: false),
                            owner: owner.ownerName)
                        pushes += 1
                        mostZones = max(mostZones, try whole.allZones().count)

                        #expect(try ReplicaSnapshot(whole) == ReplicaSnapshot(parts), "step \(step)")
                        #expect(try whole.databaseChangeToken(owner: owner.ownerName) == pushToken, "step \(step)")
                        let a = try whole.journalChanges().position.sequence
                        let b = try parts.journalChanges().position.sequence
                        #expect(
                            try JournalEquivalenceTests.entries(whole).map(\.description)
                                == JournalEquivalenceTests.entries(parts).map(\.description), "step \(step) (\(a), \(b))")
                    }
                    // The random pushes reached the cases that matter.
                    #expect(pushes > 150)
                    #expect(pagedAndDeleted > 0)
                    #expect(mostZones > 3)
                }
            }
        }
    }
}
