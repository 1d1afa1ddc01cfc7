import Foundation
import ShareSyncCore
import Testing

@testable import ShareSyncWire

#if canImport(Glibc)
import Glibc
#endif

/// The node home's small files (key, settings) are replaced whole: the old file or the new one, with
/// its mode, never a torn or missing one, and nothing left behind.
@Suite("Durable files")
struct DurableFileTests {
    let folder = NSTemporaryDirectory() + "sharesync-durable-\(UUID().uuidString)"

    init() throws {
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
    }

    func remove() { try? FileManager.default.removeItem(atPath: folder) }

    func mode(_ path: String) throws -> Int? {
        try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int
    }

    func contents(_ path: String) -> String? {
        FileManager.default.contents(atPath: path).map { String(decoding: $0, as: UTF8.self) }
    }

    @Test("a new file gets its bytes and mode 0600, and no temporary file stays")
    func creates() throws {
        defer { remove() }
        let path = folder + "/settings.json"
        try DurableFile.write(Data("{\"a\":1}".utf8), to: path)
        #expect(contents(path) == "{\"a\":1}")
        #expect(try mode(path) == 0o600)
        #expect(!FileManager.default.fileExists(atPath: path + ".tmp"))
    }

    @Test("an existing file is replaced whole, and a readable one becomes 0600")
    func replaces() throws {
        defer { remove() }
        let path = folder + "/settings.json"
        try Data(String(repeating: "old settings ", count: 1000).utf8).write(to: URL(fileURLWithPath: path))
        chmod(path, 0o644)
        try DurableFile.write(Data("new".utf8), to: path)
        #expect(contents(path) == "new")
        #expect(try mode(path) == 0o600)
    }

    @Test("a temporary file left by a crash, readable by others, is written over and never seen")
    func staleTemporaryFile() throws {
        defer { remove() }
        let path = folder + "/identity.key"
        try Data("half a key from an earlier crash".utf8).write(to: URL(fileURLWithPath: path + ".tmp"))
        chmod(path + ".tmp", 0o644)
        try DurableFile.write(Data("key\n".utf8), to: path)
        #expect(contents(path) == "key\n")
        #expect(try mode(path) == 0o600)
        #expect(!FileManager.default.fileExists(atPath: path + ".tmp"))
    }

    @Test("a write that fails says which file and why, and leaves the old file as it was")
    func failureChangesNothing() throws {
        defer { remove() }
        let path = folder + "/settings.json"
        try Data("old".utf8).write(to: URL(fileURLWithPath: path))
        // The temporary file's name is taken by a folder: it cannot be created.
        try FileManager.default.createDirectory(atPath: path + ".tmp", withIntermediateDirectories: false)
        let error = try #require(throws: ShareSyncError.self) { try DurableFile.write(Data("new".utf8), to: path) }
        #expect(error.message.contains("cannot create \(path).tmp"))
        #expect(error.message.contains("\(path) is unchanged"))
        #expect(contents(path) == "old")
    }

    @Test("a file in a folder that does not exist is refused, naming it")
    func missingFolder() throws {
        defer { remove() }
        let path = folder + "/no-such-folder/settings.json"
        let error = try #require(throws: ShareSyncError.self) { try DurableFile.write(Data("x".utf8), to: path) }
        #expect(error.message.contains(path))
        #expect(!FileManager.default.fileExists(atPath: path))
    }

    @Test("a node's key saved again replaces the old one whole: the new identity loads back")
    func keyReplaced() throws {
        defer { remove() }
        let home = folder + "/node"
        let first = try NodeIdentity.loadOrCreate(home: home)
        let second = NodeIdentity.generate()
        try second.save(home: home)
        let loaded = try NodeIdentity.load(path: home + "/" + NodeIdentity.keyFileName)
        #expect(loaded.fingerprint == second.fingerprint)
        #expect(loaded.fingerprint != first.fingerprint)
        #expect(try mode(home + "/" + NodeIdentity.keyFileName) == 0o600)
        #expect(!FileManager.default.fileExists(atPath: home + "/" + NodeIdentity.keyFileName + ".tmp"))
    }
}
