import Foundation
import ShareSyncCore
import ShareSyncNode
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
}
