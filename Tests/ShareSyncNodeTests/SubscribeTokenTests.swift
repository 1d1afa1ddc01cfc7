import Foundation
import ShareSyncCore
import ShareSyncNode
import ShareSyncStore
import ShareSyncTestSupport
import ShareSyncWire
import Testing

/// What a `subscribe` and a fetch answer for a token a client should not send: one from the middle of
/// a fetch, and one with a character no token has.
@Suite("Subscription tokens")
struct SubscribeTokenTests {
    @Test("a subscribe with a token from the middle of a fetch is refused; the completed fetch's token subscribes")
    func midFetchToken() async throws {
        let owner = try await TestOwner.start()
        for i in 0..<3 { try owner.saveNote("n\(i)", title: "t\(i)") }
        let (b, _, connection) = try await owner.acceptedParticipant()

        // A second zone shared with B, so that the database feed from nil has two pages of one zone.
        let library = RecordZone.ID(zoneName: "Library")
        _ = try owner.db.saveZone(RecordZone(zoneID: library))
        var share = Share(recordZoneID: library)
        try share.addParticipant(Participant(lookupInfo: .init(userRecordName: b.userRecordName), permission: .readOnly))
        let saved = try #require(Share(try owner.db.modifyRecords(saving: [share.record]).get()[0]))
        try await connection.acceptShare(url: try #require(saved.url))

        // The database feed from nil, one zone a page, and the zone feed from nil, one record a page.
        let zones = try await connection.fetchDatabaseChanges(since: nil, resultsLimit: 1)
        #expect(zones.moreComing)
        let first = try await connection.fetchZoneChanges(zoneName: "Topics", since: nil, resultsLimit: 1)
        #expect(first.moreComing)
        for token in [zones.changeToken, first.changeToken] {
            let refused = await expectShareSyncError { _ = try await connection.subscribe(since: token) }
            #expect(refused?.code == .invalidArguments)
            #expect(refused?.rule == .subscribeTokenMidFetch)
            #expect(refused?.message.contains("moreComing") == true, "\(refused?.message ?? "")")
        }
        var page = first
        var rounds = 0
        while page.moreComing, rounds < 20 {
            page = try await connection.fetchZoneChanges(zoneName: "Topics", since: page.changeToken, resultsLimit: 1)
            rounds += 1
        }
        #expect(!page.moreComing)

        // The refusal left the connection able to subscribe, from the completed fetch's token.
        let stream = try await connection.subscribe(since: page.changeToken)
        try owner.saveNote("after", title: "pushed")
        let push = try await withTimeout(10) {
            for await push in stream where push.zoneChanges.contains(where: { $0.changedRecords.contains { $0.recordID.recordName == "after" } }) {
                return push
            }
            throw TimeoutError()
        }
        #expect(push.zoneChanges.count == 1)
        await connection.close()
        try await owner.stop()
    }

    @Test("a token with a space before it is refused as malformed, naming the space, not as an unknown version")
    func tokenWithSpace() async throws {
        let owner = try await TestOwner.start()
        let (_, _, connection) = try await owner.acceptedParticipant()
        let token = try await connection.fetchDatabaseChanges(since: nil).changeToken
        for odd in [" " + token.stringValue, token.stringValue + "\n", token.stringValue + "é"] {
            let refused = await expectShareSyncError {
                _ = try await connection.fetchDatabaseChanges(since: ServerChangeToken(stringValue: odd))
            }
            #expect(refused?.code == .invalidArguments)
            #expect(refused?.rule == .changeTokenFormat, "\(refused?.message ?? "")")
            #expect(refused?.message.contains("which no token has") == true, "\(refused?.message ?? "")")
        }
        let spaced = await expectShareSyncError {
            _ = try await connection.fetchDatabaseChanges(since: ServerChangeToken(stringValue: " " + token.stringValue))
        }
        #expect(spaced?.message.contains("a space (U+0020)") == true)
        let fed = await expectShareSyncError {
            _ = try await connection.fetchDatabaseChanges(since: ServerChangeToken(stringValue: token.stringValue + "\n"))
        }
        #expect(fed?.message.contains("a line feed (U+000A)") == true, "\(fed?.message ?? "")")
        // Made up or mangled: malformed (not "another database", which would make the holder fetch everything).
        let parts = token.stringValue.split(separator: ".").map(String.init)
        // (A database id of digits only has no upper case: a letter past f then.)
        let upper = parts[1].uppercased() == parts[1] ? "g" + parts[1].dropFirst() : parts[1].uppercased()
        for made in ["2.x.y", "2.0123456789abcdef.y", "2.\(upper).\(parts[2])", "2.\(parts[1]).\(parts[2].dropLast())"] {
            let refused = await expectShareSyncError {
                _ = try await connection.fetchDatabaseChanges(since: ServerChangeToken(stringValue: made))
            }
            #expect(refused?.code == .invalidArguments && refused?.rule == .changeTokenFormat, "\(made): \(String(describing: refused))")
        }
        // A well-formed token of another database: expired, fetch again from nil.
        let other = await expectShareSyncError {
            _ = try await connection.fetchDatabaseChanges(since: ServerChangeToken(stringValue: "2.0123456789abcdef.\(parts[2])"))
        }
        #expect(other?.code == .changeTokenExpired && other?.rule == .changeTokenDatabase, "\(String(describing: other))")
        // The token as given still works.
        #expect(try await connection.fetchDatabaseChanges(since: token).changedZoneIDs.isEmpty)
        await connection.close()
        try await owner.stop()
    }
}
