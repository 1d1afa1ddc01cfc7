import Foundation
import ShareSync
import Testing

/// The code of the Getting Started article (ShareSync.docc/GettingStarted.md), run as it is written,
/// with temporary homes: if the article stops compiling or working, this fails.
@Suite struct GettingStartedTests {
    @Test func theArticlesTwoNodesShareAndAccept() async throws {
        let root = "/tmp/ss-gs-" + UUID().uuidString.prefix(8).lowercased()
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: root) }

        // Two nodes in one process, for the example; usually each person runs their own.
        let alice = try Container.createHome(at: root + "/alice", displayName: "Alice", listen: HostAndPort(host: "127.0.0.1", port: 0))
        let bob = try Container.createHome(at: root + "/bob", displayName: "Bob", listen: HostAndPort(host: "127.0.0.1", port: 0))
        let aliceNode = try await Container.embedded(home: root + "/alice")
        let bobNode = try await Container.embedded(home: root + "/bob")

        // Alice: a zone, a record, a share of it, an invitation for Bob.
        let zoneID = RecordZone.ID(zoneName: "Topics")
        let db = aliceNode.privateDatabase
        try await db.save(RecordZone(zoneID: zoneID))
        var topic = Record(recordType: "Topic", recordID: Record.ID(recordName: "groceries", zoneID: zoneID))
        topic["title"] = "Groceries"
        try await db.save(topic)
        let share = try await db.createShare(rootRecordID: topic.recordID, title: "Groceries")
        let invitation = try await db.invite(
            UserIdentity.LookupInfo(userRecordName: bob.userRecordName), permission: .readWrite, to: share)

        // Bob: accept the URL Alice sent, then read the shared record.
        _ = try await bobNode.accept(invitation.url)
        let sharedZone = RecordZone.ID(zoneName: "Topics", ownerName: alice.userRecordName)
        let copy = try await bobNode.sharedDatabase.record(for: Record.ID(recordName: "groceries", zoneID: sharedZone))
        #expect(copy["title"]?.stringValue == "Groceries")

        await bobNode.close()
        await aliceNode.close()
    }
}
