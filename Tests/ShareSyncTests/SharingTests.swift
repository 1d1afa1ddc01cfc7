import Foundation
import ShareSync
import Testing

/// Two nodes through the public API: Alice shares a hierarchy, Bob accepts, reads, queries and writes
/// through the shared database, within what the share grants.
@Suite struct SharingTests {
    static let zoneID = RecordZone.ID(zoneName: "Topics")

    @Test(arguments: bothModes)
    func shareAcceptReadWriteAndLeave(mode: Container.Mode) async throws {
        try await withNode(mode, name: "Alice") { alice in
            try await withNode(mode, name: "Bob") { bob in
                let db = alice.container.privateDatabase
                try await db.save(RecordZone(zoneID: Self.zoneID))
                var topic = Record(recordType: "Topic", recordID: Record.ID(recordName: "topic", zoneID: Self.zoneID))
                topic["title"] = "Groceries"
                var note = Record(recordType: "Note", recordID: Record.ID(recordName: "note", zoneID: Self.zoneID))
                note["title"] = "Milk"
                note.setParent(topic.recordID)
                var secret = Record(recordType: "Note", recordID: Record.ID(recordName: "secret", zoneID: Self.zoneID))
                secret["title"] = "Not shared"
                try await db.modifyRecords(saving: [topic, note, secret], deleting: []).get()

                let share = try await db.createShare(rootRecordID: topic.recordID, title: "Groceries")
                #expect(share.rootRecordID?.recordName == "topic")
                #expect(share.title == "Groceries")
                let invitation = try await db.invite(
                    UserIdentity.LookupInfo(userRecordName: bob.userRecordName), permission: .readWrite, to: share)
                #expect(invitation.participant.permission == .readWrite)
                #expect(invitation.participant.acceptanceStatus == .pending)

                let metadata = try await bob.container.shareMetadata(for: invitation.url)
                #expect(metadata.title == "Groceries")
                #expect(metadata.permission == .readWrite)
                let accepted = try await bob.container.accept(invitation.url, timeout: .seconds(30))
                #expect(accepted.ownerName == alice.userRecordName)

                // Bob's shared database: the zone, the hierarchy, not the record outside it.
                let shared = bob.container.sharedDatabase
                let zones = try await shared.allRecordZones()
                #expect(zones.map(\.zoneID) == [RecordZone.ID(zoneName: "Topics", ownerName: alice.userRecordName)])
                let sharedZone = zones[0].zoneID
                let notes = try await shared.records(matching: Query(recordType: "Note"), inZoneWith: sharedZone)
                #expect(notes.records.map(\.recordID.recordName) == ["note"])
                let children = try await shared.records(
                    matching: Query(recordType: "Note", predicate: [.parent(is: Record.ID(recordName: "topic", zoneID: sharedZone))]),
                    inZoneWith: sharedZone)
                #expect(children.records.count == 1)
                #expect(await shareSyncError {
                    _ = try await shared.record(for: Record.ID(recordName: "secret", zoneID: sharedZone))
                }?.code == .unknownItem)

                // Bob edits the note through the owner; Alice sees it.
                var copy = try await shared.record(for: Record.ID(recordName: "note", zoneID: sharedZone))
                copy["title"] = "Oat milk"
                let saved = try await shared.save(copy)
                #expect(saved["title"] == "Oat milk")
                #expect(try await db.record(for: note.recordID)["title"] == "Oat milk")

                // A stale copy is a conflict carrying the owner's record.
                var stale = copy
                stale["title"] = "Soy milk"
                let conflict = await shareSyncError { _ = try await shared.save(stale) }
                #expect(conflict?.code == .serverRecordChanged)
                #expect(conflict?.serverRecord?["title"] == "Oat milk")

                // Bob cannot write outside the share (the owner refuses), nor reach the record.
                var intruder = Record(recordType: "Note", recordID: Record.ID(recordName: "secret", zoneID: sharedZone))
                intruder["title"] = "Overwritten"
                let refused = try await shared.modifyRecords(saving: [intruder], deleting: [], savePolicy: .allKeys)
                #expect(Self.errorCode(refused.saveResults[intruder.recordID]) == .permissionFailure)
                #expect(try await db.record(for: secret.recordID)["title"] == "Not shared")

                // Read-only now: Bob's writes are refused and change nothing.
                let bobID = try #require(invitation.share.participants.first { $0.userIdentity.userRecordName == bob.userRecordName }?.participantID)
                try await db.setPermission(.readOnly, forParticipantID: bobID, in: share)
                let ok = try await waitUntil { try await shared.share(withID: Record.ID(recordName: share.recordID.recordName, zoneID: sharedZone)).currentUserParticipant?.permission == .readOnly }
                #expect(ok)
                var again = try await shared.record(for: Record.ID(recordName: "note", zoneID: sharedZone))
                again["title"] = "Read-only write"
                let readOnly = await shareSyncError { _ = try await shared.save(again) }
                #expect(readOnly?.code == .permissionFailure)
                #expect(try await db.record(for: note.recordID)["title"] == "Oat milk")

                // Bob is not an administrator: he cannot invite.
                let sharedShare = try await shared.share(withID: Record.ID(recordName: share.recordID.recordName, zoneID: sharedZone))
                let notAdmin = await shareSyncError {
                    _ = try await shared.invite(UserIdentity.LookupInfo(emailAddress: "eve@example.org"), permission: .readWrite, to: sharedShare)
                }
                #expect(notAdmin?.code == .permissionFailure)

                // Leaving empties Bob's shared database.
                try await bob.container.leave(sharedShare)
                #expect(try await shared.allRecordZones().isEmpty)
                let after = try await db.share(withID: share.recordID)
                #expect(after.participants.first { $0.participantID == bobID }?.acceptanceStatus == .removed || after.participants.allSatisfy { $0.participantID != bobID })
            }
        }
    }

    static func errorCode(_ result: Result<Record, ShareSyncError>?) -> ShareSyncError.Code? {
        if case .failure(let error)? = result { error.code } else { nil }
    }

    @Test(arguments: bothModes)
    func administratorManagesParticipants(mode: Container.Mode) async throws {
        try await withNode(mode, name: "Alice") { alice in
            try await withNode(mode, name: "Bob") { bob in
                let db = alice.container.privateDatabase
                try await db.save(RecordZone(zoneID: Self.zoneID))
                let share = try await db.createShare(forZone: Self.zoneID, title: "Family")
                #expect(share.isZoneWide)
                let invitation = try await db.invite(
                    UserIdentity.LookupInfo(userRecordName: bob.userRecordName), permission: .readWrite, role: .administrator, to: share)
                _ = try await bob.container.accept(invitation.url, timeout: .seconds(30))
                let sharedZone = RecordZone.ID(zoneName: "Topics", ownerName: alice.userRecordName)
                let shared = bob.container.sharedDatabase
                let sharedShare = try await shared.share(withID: Record.ID(recordName: share.recordID.recordName, zoneID: sharedZone))

                // The administrator invites Carol through the owner.
                let carol = try await shared.invite(UserIdentity.LookupInfo(emailAddress: "carol@example.org"), permission: .readOnly, to: sharedShare)
                #expect(carol.participant.permission == .readOnly)
                #expect(carol.url.hasPrefix("sharesync://"))
                let owned = try await db.share(withID: share.recordID)
                #expect(owned.participants.contains { $0.userIdentity.lookupInfo?.emailAddress == "carol@example.org" })

                // And removes her again.
                let removed = try await shared.removeParticipant(withID: carol.participant.participantID, from: carol.share)
                #expect(!removed.participants.contains { $0.participantID == carol.participant.participantID && $0.acceptanceStatus != .removed })
                // Owner-only operations stay the owner's.
                #expect(await shareSyncError { try await shared.stopSharing(sharedShare) }?.code == .permissionFailure)
            }
        }
    }
}

/// Polls `condition` every 50 ms for at most `seconds`.
func waitUntil(seconds: Double = 15, _ condition: () async throws -> Bool) async throws -> Bool {
    let deadline = ContinuousClock.now + .seconds(seconds)
    while ContinuousClock.now < deadline {
        if try await condition() { return true }
        try await Task.sleep(for: .milliseconds(50))
    }
    return false
}
