import Foundation
@testable import ShareSync
import Testing

@Suite("Database.backup(to:)")
struct BackupAPITests {
    @Test("copies the private database while the node runs, embedded or connected; a relative path and an existing file are refused", arguments: bothModes)
    func backup(_ mode: Container.Mode) async throws {
        try await withNode(mode) { node in
            let db = node.container.privateDatabase
            let topic = try await saveTopic(in: db, zone: RecordZone.ID(zoneName: "Topics"))
            let copy = node.folder + "/copy.sqlite"
            let result = try await db.backup(to: copy)
            #expect(result.path == copy && result.bytes > 0)
            let attributes = try FileManager.default.attributesOfItem(atPath: copy)
            #expect(attributes[.size] as? Int == result.bytes && attributes[.posixPermissions] as? Int == 0o600)
            let again = await shareSyncError { _ = try await db.backup(to: copy) }
            #expect(again?.code == .invalidArguments && again?.message.contains("exists") == true, "\(String(describing: again))")
            let relative = await shareSyncError { _ = try await db.backup(to: "copy-2.sqlite") }
            #expect(relative?.code == .invalidArguments && relative?.message.contains("not absolute") == true, "\(String(describing: relative))")
            // The shared database's replica, to a file of its own.
            let replicaCopy = node.folder + "/replica-copy.sqlite"
            let replica = try await node.container.sharedDatabase.backup(to: replicaCopy)
            #expect(replica.path == replicaCopy && replica.bytes > 0)
            #expect(try FileManager.default.attributesOfItem(atPath: replicaCopy)[.posixPermissions] as? Int == 0o600)
            // The node goes on.
            #expect(try await db.record(for: topic.recordID)["title"] == "Groceries")
        }
    }
}

extension BackupAPITests {
    @Test("a node that stopped leaves private.sqlite whole, even while a task still holds the database: a copy of the file alone holds every commit")
    func stoppedNodeLeavesTheFileWhole() async throws {
        let node = try await TestNode.open(.embedded)
        defer { try? FileManager.default.removeItem(atPath: node.folder) }
        let topic = try await saveTopic(in: node.container.privateDatabase, zone: RecordZone.ID(zoneName: "Topics"))
        // Held past the stop, as a task still finishing may hold it: the database stays open.
        guard case .embedded(let running) = node.container.transport else {
            Issue.record("not an embedded node")
            return
        }
        let database = running.database, replica = running.participant.replica
        await node.container.close()
        // Before, the last commits stayed in the WAL until the process ended (a copy of the file
        // alone, taken once the node had stopped, lacked them).
        for file in ["private.sqlite-wal", "replica.sqlite-wal"] {
            let wal = try? FileManager.default.attributesOfItem(atPath: node.home + "/" + file)
            #expect(wal == nil || wal?[.size] as? Int == 0, "\(file): \(String(describing: wal?[.size]))")
        }
        // The file alone, in a home of its own (the same identity, the WAL left behind).
        let copy = node.folder + "/copy"
        try FileManager.default.createDirectory(atPath: copy, withIntermediateDirectories: true)
        for file in try FileManager.default.contentsOfDirectory(atPath: node.home)
        where !file.hasPrefix("private.sqlite-") && !file.hasSuffix(".sock") && !file.hasSuffix(".lock") {
            try FileManager.default.copyItem(atPath: node.home + "/" + file, toPath: copy + "/" + file)
        }
        let reopened = try await Container.embedded(home: copy, controlSocket: false)
        #expect(try await reopened.privateDatabase.record(for: topic.recordID)["title"] == "Groceries")
        await reopened.close()
        withExtendedLifetime((database, replica)) {}
    }
}
