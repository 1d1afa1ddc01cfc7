import Foundation
import ShareSyncCore
import ShareSyncNode
import ShareSyncStore
import ShareSyncWire
import Testing

// The owner's server reads a zone's next page ahead while the participant stores the last one. A page
// read ahead must be exactly what a fresh read gives, and never outlive a write.

@Suite("Owner server: zone pages read ahead")
struct ReadAheadTests {
    /// Pages of the zone from no token, over the connection.
    private func fetchAll(_ connection: OwnerConnection, limit: Int) async throws -> [ZoneChanges] {
        var pages: [ZoneChanges] = []
        var token: ServerChangeToken?
        repeat {
            let page = try await connection.fetchZoneChanges(zoneName: "Topics", since: token, resultsLimit: limit)
            pages.append(page)
            token = page.changeToken
        } while pages.last!.moreComing
        return pages
    }

    @Test("pages served from the read ahead are the pages a fresh read gives, token for token")
    func sameAsFreshReads() async throws {
        let owner = try await TestOwner.start()
        let b = NodeIdentity.generate()
        try owner.saveNotes("n", count: 95)
        let (url, _) = try owner.shareTopic(invite: [(b, .readWrite)])
        let connection = try await OwnerConnection.connect(url: url, identity: b)
        try await connection.acceptShare(url: url)
        let pages = try await fetchAll(connection, limit: 10)

        let view = owner.db.sharedDatabase(for: Caller(userRecordName: b.userRecordName))
        var token: ServerChangeToken?
        for page in pages {
            let fresh = try view.fetchZoneChanges(owner.zone.inShared(of: owner), since: token, resultsLimit: 10)
            #expect(fresh.changeToken == page.changeToken)
            #expect(fresh.moreComing == page.moreComing)
            #expect(try canonical(fresh.changedRecords) == canonical(page.changedRecords))
            token = page.changeToken
        }
        #expect(pages.count == 10)  // topic, share, 95 notes
        await connection.close()
        try await owner.stop()
    }

    @Test("after the participant is removed, the page read ahead is not served: the next page is zoneNotFound")
    func revokedBetweenPages() async throws {
        let owner = try await TestOwner.start()
        let b = NodeIdentity.generate()
        try owner.saveNotes("n", count: 60)
        let (url, shareName) = try owner.shareTopic(invite: [(b, .readWrite)])
        let connection = try await OwnerConnection.connect(url: url, identity: b)
        try await connection.acceptShare(url: url)
        let first = try await connection.fetchZoneChanges(zoneName: "Topics", since: nil, resultsLimit: 10)
        #expect(first.moreComing)
        try await Task.sleep(for: .milliseconds(100))  // let the read ahead finish (it is not needed for the check)

        var share = Share(try owner.db.fetchRecord(owner.id(shareName)))!
        try share.removeParticipant(try #require(share.participants.first { $0.userIdentity.userRecordName == b.userRecordName }))
        _ = try owner.db.modifyRecords(saving: [share.record]).get()

        let error = await expectShareSyncError {
            _ = try await connection.fetchZoneChanges(zoneName: "Topics", since: first.changeToken, resultsLimit: 10)
        }
        #expect(error?.code == .zoneNotFound)
        await connection.close()
        try await owner.stop()
    }

    @Test("a record changed after the read ahead comes in its new state")
    func writeBetweenPages() async throws {
        let owner = try await TestOwner.start()
        let b = NodeIdentity.generate()
        try owner.saveNotes("n", count: 60)
        let (url, _) = try owner.shareTopic(invite: [(b, .readWrite)])
        let connection = try await OwnerConnection.connect(url: url, identity: b)
        try await connection.acceptShare(url: url)
        var pages = [try await connection.fetchZoneChanges(zoneName: "Topics", since: nil, resultsLimit: 10)]
        try await Task.sleep(for: .milliseconds(100))

        _ = try owner.db.modifyRecords(deleting: [owner.id("n30")]).get()
        try owner.saveNote("n40", title: "changed after the read ahead")
        var token = pages[0].changeToken
        while pages.last!.moreComing {
            pages.append(try await connection.fetchZoneChanges(zoneName: "Topics", since: token, resultsLimit: 10))
            token = pages.last!.changeToken
        }
        let records = pages.flatMap(\.changedRecords)
        #expect(!records.contains { $0.recordID.recordName == "n30" })
        #expect(records.last { $0.recordID.recordName == "n40" }?["title"] == "changed after the read ahead")
        await connection.close()
        try await owner.stop()
    }
}

extension RecordZone.ID {
    /// The zone as the owner's participants address it.
    fileprivate func inShared(of owner: TestOwner) -> RecordZone.ID {
        RecordZone.ID(zoneName: zoneName, ownerName: owner.identity.userRecordName)
    }
}
