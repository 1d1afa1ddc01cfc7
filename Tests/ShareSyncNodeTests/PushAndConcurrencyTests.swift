import Foundation
import ShareSyncCore
import ShareSyncNode
import ShareSyncStore
import ShareSyncWire
import Testing

@Suite("Pushes and concurrent requests over TCP")
struct PushAndConcurrencyTests {
    @Test("many requests in flight on one connection each get their own response")
    func concurrentRequests() async throws {
        let owner = try await TestOwner.start()
        let b = NodeIdentity.generate()
        let (url, _) = try owner.shareTopic(invite: [(b, .readWrite)])
        for i in 0..<20 { try owner.saveNote("n\(i)", title: "t\(i)") }
        let connection = try await OwnerConnection.connect(url: url, identity: b)
        try await connection.acceptShare(url: url)
        let names = try await withTimeout(20) {
            try await withThrowingTaskGroup(of: (Int, [String]).self) { group in
                for i in 0..<40 {
                    group.addTask {
                        let fetched = try await connection.fetchRecords(zoneName: "Topics", recordNames: ["n\(i % 20)"])
                        return (i, fetched.values.compactMap { try? $0.get().recordID.recordName })
                    }
                }
                var all: [Int: [String]] = [:]
                for try await (i, names) in group { all[i] = names }
                return all
            }
        }
        #expect(names.count == 40)
        for (i, got) in names { #expect(got == ["n\(i % 20)"]) }
        await connection.close()
        try await owner.stop()
    }

    @Test("deletions and a share that stops are pushed; an expired subscription token is refused")
    func deletionsAndStops() async throws {
        let owner = try await TestOwner.start()
        let b = NodeIdentity.generate()
        let (url, shareName) = try owner.shareTopic(invite: [(b, .readWrite)])
        try owner.saveNote("doomed", title: "x")
        let connection = try await OwnerConnection.connect(url: url, identity: b)
        try await connection.acceptShare(url: url)

        let expired = await expectShareSyncError {
            _ = try await connection.subscribe(since: ServerChangeToken(stringValue: "1.0000000000000000.1"))
        }
        #expect(expired?.code == .changeTokenExpired)

        let stream = try await connection.subscribe()
        _ = try owner.db.modifyRecords(deleting: [owner.id("doomed")]).get()
        let deletion = try await withTimeout(10) {
            for await push in stream where push.zoneChanges.contains(where: { !$0.deletedRecords.isEmpty }) { return push }
            throw TimeoutError()
        }
        #expect(deletion.zoneChanges.first?.deletedRecords.map(\.recordID.recordName) == ["doomed"])

        _ = try owner.db.modifyRecords(deleting: [owner.id(shareName)]).get()
        let stop = try await withTimeout(10) {
            for await push in stream where !push.databaseChanges.deletedZoneIDs.isEmpty { return push }
            throw TimeoutError()
        }
        #expect(stop.databaseChanges.deletedZoneIDs.map(\.zoneName) == ["Topics"])
        #expect(try await connection.fetchDatabaseChanges(since: nil).changedZoneIDs.isEmpty)
        await connection.close()
        try await owner.stop()
    }

    @Test("one client's push stream is not disturbed by another client's failure")
    func isolation() async throws {
        let owner = try await TestOwner.start()
        let b = NodeIdentity.generate()
        let (url, _) = try owner.shareTopic(invite: [(b, .readWrite)], publicPermission: .none)
        let connection = try await OwnerConnection.connect(url: url, identity: b)
        try await connection.acceptShare(url: url)
        let stream = try await connection.subscribe()
        for _ in 0..<5 {
            let rude = try await RawClient.connect(port: owner.server.port, .tls(NodeIdentity.generate()))
            try await rude.send("SHARESYNC versions=1 encodings=deflate")
            _ = try await rude.line()
            try await rude.send("\u{1B}\u{9}")
            #expect(try await rude.closes())
            await rude.close()
        }
        try owner.saveNote("after", title: "x")
        let push = try await withTimeout(10) {
            for await push in stream { return push }
            throw TimeoutError()
        }
        #expect(push.zoneChanges.first?.changedRecords.map(\.recordID.recordName) == ["after"])
        await connection.close()
        try await owner.stop()
    }
}
