import Foundation
import ShareSync
import Testing

@Suite("Container.backup(to:)")
struct BackupAPITests {
    @Test("copies the private database while the node runs, embedded or connected; a relative path and an existing file are refused", arguments: bothModes)
    func backup(_ mode: Container.Mode) async throws {
        try await withNode(mode) { node in
            let db = node.container.privateDatabase
            let topic = try await saveTopic(in: db, zone: RecordZone.ID(zoneName: "Topics"))
            let copy = node.folder + "/copy.sqlite"
            let result = try await node.container.backup(to: copy)
            #expect(result.path == copy && result.bytes > 0)
            let attributes = try FileManager.default.attributesOfItem(atPath: copy)
            #expect(attributes[.size] as? Int == result.bytes && attributes[.posixPermissions] as? Int == 0o600)
            let again = await shareSyncError { _ = try await node.container.backup(to: copy) }
            #expect(again?.code == .invalidArguments && again?.message.contains("exists") == true, "\(String(describing: again))")
            let relative = await shareSyncError { _ = try await node.container.backup(to: "copy-2.sqlite") }
            #expect(relative?.code == .invalidArguments && relative?.message.contains("not absolute") == true, "\(String(describing: relative))")
            // The node goes on.
            #expect(try await db.record(for: topic.recordID)["title"] == "Groceries")
        }
    }
}
