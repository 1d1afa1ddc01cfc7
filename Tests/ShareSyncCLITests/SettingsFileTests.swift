import Foundation
import ShareSyncCore
import ShareSyncNode
import ShareSyncWire
import Testing

/// `settings.json` is rewritten at a start that keeps a chosen port and at `advertise` (an owner
/// moving): replaced whole, so a failed or interrupted write leaves settings the node starts with.
@Suite("Settings file")
struct SettingsFileTests {
    @Test("settings that cannot be written leave the old ones, and the home opens with them")
    func failedWriteKeepsTheOldSettings() throws {
        let path = NSTemporaryDirectory() + "sharesync-settings-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: path) }
        let home = try NodeHome.create(at: path, settings: NodeSettings(displayName: "Alice"))
        var moved = home
        moved.settings.advertiseHost = "alice.example"
        moved.settings.advertisePort = 7500
        try moved.saveSettings()
        #expect(try NodeHome.open(at: path).settings.advertiseHost == "alice.example")

        // The temporary file's name is taken: the next write fails before it touches settings.json.
        try FileManager.default.createDirectory(atPath: home.settingsPath + ".tmp", withIntermediateDirectories: false)
        var again = moved
        again.settings.advertiseHost = "elsewhere.example"
        let error = try #require(throws: ShareSyncError.self) { try again.saveSettings() }
        #expect(error.message.contains(home.settingsPath))
        let reopened = try NodeHome.open(at: path)
        #expect(reopened.settings == moved.settings)
        #expect(reopened.identity.fingerprint == home.identity.fingerprint)
    }

    @Test("an init whose settings cannot be written leaves no files behind, and init then succeeds")
    func failedCreateLeavesNothing() throws {
        let path = NSTemporaryDirectory() + "sharesync-settings-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: path) }
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
        let blocker = path + "/" + NodeHome.settingsFileName + ".tmp"
        try FileManager.default.createDirectory(atPath: blocker, withIntermediateDirectories: false)
        let error = try #require(throws: ShareSyncError.self) { try NodeHome.create(at: path, settings: NodeSettings(displayName: "Alice")) }
        #expect(error.message.contains(NodeHome.settingsFileName), "\(error)")
        // Before, identity.key stayed: init said "already a node home", and run could not read settings.
        #expect(try FileManager.default.contentsOfDirectory(atPath: path) == [NodeHome.settingsFileName + ".tmp"])
        try FileManager.default.removeItem(atPath: blocker)
        let home = try NodeHome.create(at: path, settings: NodeSettings(displayName: "Alice"))
        #expect(try NodeHome.open(at: path).identity.fingerprint == home.identity.fingerprint)
    }

    @Test("an init stopped after the settings and before the key is taken over by the next; a key alone is never replaced")
    func anInitStoppedPartWayIsTakenOver() throws {
        let path = NSTemporaryDirectory() + "sharesync-settings-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: path) }
        // What an init killed right after it wrote the settings leaves (its clean-up never ran).
        let first = try NodeHome.create(at: path, settings: NodeSettings(displayName: "Alice"))
        for file in try FileManager.default.contentsOfDirectory(atPath: path) where file != NodeHome.settingsFileName {
            try FileManager.default.removeItem(atPath: path + "/" + file)
        }
        #expect(throws: ShareSyncError.self) { try NodeHome.open(at: path) }
        let home = try NodeHome.create(at: path, settings: NodeSettings(displayName: "Alice again"))
        let opened = try NodeHome.open(at: path)
        #expect(opened.identity.fingerprint == home.identity.fingerprint && opened.identity.fingerprint != first.identity.fingerprint)
        #expect(opened.settings.displayName == "Alice again")
        // A key with no settings is someone's identity: init does not replace it.
        try FileManager.default.removeItem(atPath: home.settingsPath)
        for file in [NodeHome.privateDatabaseFileName, NodeHome.replicaFileName] {
            for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + "/" + file + suffix) }
        }
        let error = try #require(throws: ShareSyncError.self) { try NodeHome.create(at: path, settings: NodeSettings(displayName: "Mallory")) }
        #expect(error.rule == .homeExists && error.message.contains(NodeIdentity.keyFileName), "\(error)")
    }

    @Test("a folder that still holds a node's database is not made a new home (its shares would change hands)")
    func leftoverDatabaseIsRefused() throws {
        let path = NSTemporaryDirectory() + "sharesync-settings-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: path) }
        let home = try NodeHome.create(at: path, settings: NodeSettings(displayName: "Alice"))
        // "Resetting" a home by deleting only its key and settings.
        try FileManager.default.removeItem(atPath: path + "/identity.key")
        try FileManager.default.removeItem(atPath: home.settingsPath)
        let error = try #require(throws: ShareSyncError.self) { try NodeHome.create(at: path, settings: NodeSettings(displayName: "Mallory")) }
        #expect(error.rule == .homeExists && error.message.contains(NodeHome.privateDatabaseFileName), "\(error)")
    }

    @Test("an IPv6 address needs its brackets: without them where the host ends is a guess, and it is refused")
    func unbracketedIPv6IsNoAddress() {
        #expect(HostAndPort(parsing: "::1") == nil)
        #expect(HostAndPort(parsing: "fe80::1:7420") == nil)
        #expect(HostAndPort(parsing: "[::1]:7420") == HostAndPort(host: "::1", port: 7420))
        #expect(HostAndPort(parsing: "alice.example:7420") == HostAndPort(host: "alice.example", port: 7420))
    }
}
