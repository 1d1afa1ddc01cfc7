import Foundation
import ShareSync
import Testing

/// Access requests and the outbox through the public API, embedded and connected: what the
/// `sharesync request-access`, `share approve|deny|block|unblock` and `outbox` commands call.
@Suite struct AccessAndOutboxTests {
    static let zoneID = RecordZone.ID(zoneName: "Topics")

    @Test(arguments: bothModes)
    func requestApproveDenyAndBlock(mode: Container.Mode) async throws {
        try await withNode(mode, name: "Alice") { alice in
            try await withNode(mode, name: "Bob") { bob in
                try await withNode(mode, name: "Carol") { carol in
                    let db = alice.container.privateDatabase
                    try await saveTopic(in: db, zone: Self.zoneID)
                    let closed = try await db.createShare(forZone: Self.zoneID, title: "Closed")
                    let closedURL = try #require(closed.url)
                    // A share that does not take requests refuses them as CloudKit does a URL one is not
                    // invited to (nothing said of the share), and records nothing.
                    let refused = await shareSyncError { try await bob.container.requestAccess(to: closedURL) }
                    #expect(refused?.code == .participantMayNeedVerification)
                    #expect(refused?.rule == .notInvited)
                    #expect(try await db.share(withID: closed.recordID).requesters.isEmpty)
                    try await db.stopSharing(closed)

                    let share = try await db.createShare(forZone: Self.zoneID, title: "Open", allowsAccessRequests: true)
                    let url = try #require(share.url)
                    let asked = try await bob.container.requestAccess(to: url)
                    #expect(asked.userRecordName == bob.userRecordName)
                    try await carol.container.requestAccess(to: url)
                    var fetched = try await db.share(withID: share.recordID)
                    #expect(Set(fetched.requesters.map(\.userIdentity.userRecordName)) == [bob.userRecordName, carol.userRecordName])

                    // Approved: Bob is a participant with the permission given, and can accept.
                    fetched = try await db.approveAccessRequest(fromUserRecordName: bob.userRecordName, permission: .readWrite, for: fetched)
                    let bobParticipant = try #require(fetched.participants.first { $0.userIdentity.userRecordName == bob.userRecordName })
                    #expect(bobParticipant.permission == .readWrite)
                    #expect(fetched.requesters.map(\.userIdentity.userRecordName) == [carol.userRecordName])
                    _ = try await bob.container.accept(url, timeout: .seconds(30))
                    let bobZone = RecordZone.ID(zoneName: "Topics", ownerName: alice.userRecordName)
                    #expect(try await bob.container.sharedDatabase.record(for: Record.ID(recordName: "topic", zoneID: bobZone))["title"] == "Groceries")

                    // Denied: Carol is no longer waiting, and is not a participant.
                    fetched = try await db.denyAccessRequest(fromUserRecordName: carol.userRecordName, for: fetched)
                    #expect(fetched.requesters.isEmpty)
                    #expect(!fetched.participants.contains { $0.userIdentity.userRecordName == carol.userRecordName })
                    // A user who did not ask cannot be approved.
                    #expect(await shareSyncError {
                        try await db.approveAccessRequest(fromUserRecordName: carol.userRecordName, for: fetched)
                    }?.code == .unknownItem)

                    // Blocked: Carol may not ask again until unblocked.
                    fetched = try await db.blockIdentity(withUserRecordName: carol.userRecordName, for: fetched)
                    #expect(fetched.blockedIdentities.map(\.userRecordName) == [carol.userRecordName])
                    #expect(await shareSyncError { try await carol.container.requestAccess(to: url) }?.rule == .notInvited)
                    #expect(try await db.share(withID: share.recordID).requesters.isEmpty)
                    fetched = try await db.unblockIdentity(withUserRecordName: carol.userRecordName, for: fetched)
                    #expect(fetched.blockedIdentities.isEmpty)
                    try await carol.container.requestAccess(to: url)
                    #expect(try await db.share(withID: share.recordID).requesters.map(\.userIdentity.userRecordName) == [carol.userRecordName])

                    // Blocking and unblocking are the owner's alone.
                    let bobsView = try await bob.container.sharedDatabase.share(withID: Record.ID(recordName: share.recordID.recordName, zoneID: bobZone))
                    #expect(await shareSyncError {
                        try await bob.container.sharedDatabase.blockIdentity(withUserRecordName: carol.userRecordName, for: bobsView)
                    }?.code == .permissionFailure)
                }
            }
        }
    }

    @Test(arguments: bothModes)
    func aWriteForAnUnreachableOwnerWaitsInTheOutboxUntilDiscarded(mode: Container.Mode) async throws {
        try await withNode(mode, name: "Alice") { alice in
            try await withNode(mode, name: "Bob") { bob in
                let db = alice.container.privateDatabase
                try await saveTopic(in: db, zone: Self.zoneID)
                try await bob.join(try await db.createShare(forZone: Self.zoneID), of: db, permission: .readWrite)
                #expect(try await bob.container.outbox().isEmpty)

                // The owner goes away; Bob's write waits in the outbox.
                await alice.container.close()
                alice.daemon?.kill()
                let shared = bob.container.sharedDatabase
                let bobZone = RecordZone.ID(zoneName: "Topics", ownerName: alice.userRecordName)
                var copy = try await shared.record(for: Record.ID(recordName: "topic", zoneID: bobZone))
                copy["title"] = "Oat milk"
                let results = try await shared.modifyRecords(saving: [copy], deleting: [])
                let queuedID = try #require(results.queued[copy.recordID])
                let items = try await bob.container.outbox()
                #expect(items.map(\.id) == [queuedID])
                #expect(items.first?.state == .pending)
                #expect(items.first?.saving.first?["title"] == "Oat milk")
                #expect(items.first?.ownerName == alice.userRecordName)

                // A pending write is not a conflict to resolve; an unknown ID is unknownItem.
                let notAConflict = await shareSyncError { try await bob.container.resolveOutboxItem(withID: queuedID, keeping: .mine) }
                #expect(notAConflict?.code == .invalidArguments)
                #expect(notAConflict?.rule == .notAConflict)
                #expect(await shareSyncError { try await bob.container.discardOutboxItem(withID: queuedID + 1000) }?.code == .unknownItem)
                #expect(try await bob.container.outbox().count == 1)

                try await bob.container.discardOutboxItem(withID: queuedID)
                #expect(try await bob.container.outbox().isEmpty)
                // Bob reads the replica's record again: his write is gone.
                #expect(try await shared.record(for: copy.recordID)["title"] == "Groceries")
            }
        }
    }
}
