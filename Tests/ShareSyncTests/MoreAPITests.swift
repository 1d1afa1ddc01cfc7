import Foundation
import ShareSync
import ShareSyncTestSupport
import Testing

/// The calls the other suites leave out: zone deletion, tokens for now, status, roles, public and
/// one-time shares, stopping a share, leaving locally, and a closed container.
@Suite struct MoreAPITests {
    static let zoneID = RecordZone.ID(zoneName: "Topics")

    @Test("a connected container outlives its daemon: serviceUnavailable while it is down, and it reconnects once it is back")
    func connectedContainerReconnects() async throws {
        let node = try await TestNode.open(.connected)
        let db = node.container.privateDatabase
        try await db.save(RecordZone(zoneID: Self.zoneID))
        // A clean stop, as an operator's restart does: the daemon closes the control connection.
        node.daemon?.signal()
        _ = try await blocking { try node.daemon?.waitForExit(timeout: 30) }
        var down = await shareSyncError { _ = try await db.allRecordZones() }
        // The first call may go out before the client read the daemon's end of the connection: that
        // one fails as a cut connection, and the next finds no daemon.
        if down?.code == .networkFailure { down = await shareSyncError { _ = try await db.allRecordZones() } }
        #expect(down?.code == .serviceUnavailable, "\(String(describing: down))")
        #expect(down?.rule == .nodeNotRunning)
        let again = try ChildProcess.start(sharesync, ["run", "--home", node.home])
        defer { again.kill() }
        _ = try await blocking { try again.waitForLine(containing: "listening on", timeout: 30) }
        // Before, every call failed with networkFailure on the dead connection until the app opened a new container.
        #expect(try await db.allRecordZones().map(\.zoneID.zoneName).sorted() == ["Topics", "_defaultZone"])
        await node.close()
    }

    @Test(arguments: bothModes)
    func zonesTokensStatusAndClosing(mode: Container.Mode) async throws {
        let node = try await TestNode.open(mode)
        let db = node.container.privateDatabase
        #expect(node.container.mode == mode)
        let status = try await node.container.status()
        #expect(status.userRecordName == node.userRecordName)
        #expect(try await node.container.userRecordID().recordName == node.userRecordName)

        try await db.save(RecordZone(zoneID: Self.zoneID))
        let now = try await db.currentChangeToken()
        var note = Record(recordType: "Note", recordID: Record.ID(recordName: "n", zoneID: Self.zoneID))
        note["text"] = "x"
        try await db.save(note)
        let since = try await db.recordZoneChanges(inZoneWith: Self.zoneID, since: now)
        #expect(since.modifications.map(\.recordID.recordName) == ["n"])
        let found = try await db.records(for: [note.recordID, Record.ID(recordName: "missing", zoneID: Self.zoneID)])
        #expect((try? found[note.recordID]?.get())?["text"] == "x")
        #expect(throws: ShareSyncError.self) { try found[Record.ID(recordName: "missing", zoneID: Self.zoneID)]?.get() }

        try await db.deleteRecordZone(withID: Self.zoneID)
        #expect(try await db.allRecordZones().map(\.zoneID.zoneName) == ["_defaultZone"])
        #expect(await shareSyncError { _ = try await db.record(for: note.recordID) }?.code == .zoneNotFound)
        let deleted = try await db.databaseChanges(since: now)
        #expect(deleted.deletedZoneIDs.map(\.zoneName) == ["Topics"])
        #expect(await shareSyncError { try await db.deleteRecordZone(withID: .default) }?.code == .invalidArguments)

        await node.container.close()
        let closed = await shareSyncError { _ = try await db.allRecordZones() }
        #expect(closed?.code == .serviceUnavailable)
        await node.close()
    }

    @Test(arguments: bothModes)
    func rolesPublicOneTimeStopAndLeaveLocally(mode: Container.Mode) async throws {
        try await withNode(mode, name: "Alice") { alice in
            try await withNode(mode, name: "Bob") { bob in
                try await withNode(mode, name: "Carol") { carol in
                    let db = alice.container.privateDatabase
                    let topic = try await saveTopic(in: db, zone: Self.zoneID, title: "T")
                    var share = try await db.createShare(rootRecordID: topic.recordID)
                    #expect(share.publicPermission == .none)

                    // Properties: what someone with the URL sees before accepting.
                    share.title = "Groceries"
                    share.shareType = "com.example.list"
                    share.thumbnailImageData = Data([0x89, 0x50, 0x4E, 0x47])
                    share = try await db.saveProperties(of: share)
                    #expect(share.title == "Groceries" && share.shareType == "com.example.list" && share.thumbnailImageData?.count == 4)
                    share.thumbnailImageData = nil
                    share = try await db.saveProperties(of: share)
                    #expect(share.thumbnailImageData == nil && share.title == "Groceries")
                    // Access requests switched on and off (before, the flag was not sent: saving changed nothing).
                    share.allowsAccessRequests = true
                    share = try await db.saveProperties(of: share)
                    #expect(try await db.share(withID: share.recordID).allowsAccessRequests)
                    share.allowsAccessRequests = false
                    share = try await db.saveProperties(of: share)
                    #expect(try await !db.share(withID: share.recordID).allowsAccessRequests)
                    var tooBig = share
                    tooBig.thumbnailImageData = Data(count: Share.maximumThumbnailSize + 1)
                    #expect(await shareSyncError { _ = try await db.saveProperties(of: tooBig) }?.code == .limitExceeded)
                    #expect(try await db.share(withID: share.recordID).thumbnailImageData == nil)

                    // A one-time link admits whoever opens it first: Bob.
                    let once = try await db.inviteOneTime(permission: .readOnly, to: share)
                    #expect(once.url.contains("invite="))
                    _ = try await bob.container.accept(once.url, timeout: .seconds(30))
                    let refused = await shareSyncError { _ = try await carol.container.accept(once.url, timeout: .seconds(30)) }
                    #expect(refused != nil)

                    // Roles: Bob becomes an administrator, and back.
                    share = try await db.share(withID: share.recordID)
                    let bobID = try #require(share.participants.first { $0.userIdentity.userRecordName == bob.userRecordName }?.participantID)
                    share = try await db.setRole(.administrator, forParticipantID: bobID, in: share)
                    #expect(share.participants.first { $0.participantID == bobID }?.role == .administrator)
                    share = try await db.setRole(.privateUser, forParticipantID: bobID, in: share)
                    #expect(share.participants.first { $0.participantID == bobID }?.role == .privateUser)

                    // Public: anyone with the URL joins, read-only; Carol does.
                    share = try await db.setPublicPermission(.readOnly, for: share)
                    #expect(share.publicPermission == .readOnly)
                    let url = try #require(share.url)
                    let metadata = try await carol.container.shareMetadata(for: url)
                    #expect(metadata.permission == .readOnly)
                    #expect(metadata.title == "Groceries" && metadata.shareType == "com.example.list")
                    _ = try await carol.container.accept(url, timeout: .seconds(30))
                    let carolZones = try await carol.container.sharedDatabase.allRecordZones()
                    #expect(carolZones.count == 1)

                    // Bob leaves locally: his shared database empties at once.
                    let sharedZone = RecordZone.ID(zoneName: "Topics", ownerName: alice.userRecordName)
                    let bobShare = try await bob.container.sharedDatabase.share(withID: Record.ID(recordName: share.recordID.recordName, zoneID: sharedZone))
                    try await bob.container.leave(bobShare, locally: true)
                    #expect(try await bob.container.sharedDatabase.allRecordZones().isEmpty)

                    // Stopping the share: Carol's shared database empties at her next sync.
                    try await db.stopSharing(share)
                    #expect(await shareSyncError { _ = try await db.share(withID: share.recordID) }?.code == .unknownItem)
                    #expect(try await waitUntil { try await carol.container.sharedDatabase.allRecordZones().isEmpty })
                }
            }
        }
    }
}
