import Foundation
import ShareSync
import ShareSyncTestSupport
import Testing

/// The built `sharesync` binary (connected containers talk to its daemon).
let sharesync = ChildProcess.sharesyncBinary()

/// A node home opened as a container, embedded or connected to a `sharesync run` daemon started for the
/// test; ``close()`` stops everything and removes the home.
final class TestNode: Sendable {
    let folder: String
    let home: String
    let container: Container
    let daemon: ChildProcess?
    let userRecordName: String

    static func open(_ mode: Container.Mode, name: String = "Alice") async throws -> TestNode {
        // Short paths: a Unix socket path must fit in about 100 bytes.
        let folder = "/tmp/ss-api-" + UUID().uuidString.prefix(8).lowercased()
        let home = folder + "/home"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        do {
            let identity = try Container.createHome(
                at: home, displayName: name, email: "\(name.lowercased())@example.org",
                listen: HostAndPort(host: "127.0.0.1", port: 0))
            switch mode {
            case .embedded:
                let container = try await Container.embedded(home: home)
                return TestNode(folder: folder, home: home, container: container, daemon: nil, user: identity.userRecordName)
            case .connected:
                let daemon = try ChildProcess.start(sharesync, ["run", "--home", home])
                do {
                    _ = try await blocking { try daemon.waitForLine(containing: "listening on", timeout: 30) }
                    let container = try await Container.connected(home: home)
                    return TestNode(folder: folder, home: home, container: container, daemon: daemon, user: identity.userRecordName)
                } catch {
                    daemon.kill()
                    throw error
                }
            }
        } catch {
            try? FileManager.default.removeItem(atPath: folder)
            throw error
        }
    }

    private init(folder: String, home: String, container: Container, daemon: ChildProcess?, user: String) {
        self.folder = folder
        self.home = home
        self.container = container
        self.daemon = daemon
        self.userRecordName = user
    }

    func close() async {
        await container.close()
        daemon?.kill()
        try? FileManager.default.removeItem(atPath: folder)
    }
}

extension TestNode {
    /// The owner (`db`, a private database) invites this node's user to `share` with `permission` (and
    /// `role`), and this node accepts: the share's zone is then in its shared database.
    @discardableResult
    func join(
        _ share: Share, of db: Database, permission: Participant.Permission, role: Participant.Role = .privateUser
    ) async throws -> Invitation {
        let invitation = try await db.invite(
            UserIdentity.LookupInfo(userRecordName: userRecordName), permission: permission, role: role, to: share)
        _ = try await container.accept(invitation.url, timeout: .seconds(30))
        return invitation
    }
}

extension SyncEngine {
    /// Every event the engine sends until it stops, gathered by a task of its own (read its value
    /// after ``stop()``).
    func collectingEvents() -> Task<[SyncEngine.Event], Never> {
        Task {
            var all: [SyncEngine.Event] = []
            for await event in events { all.append(event) }
            return all
        }
    }
}

/// Creates `zoneID` in `db` and saves the topic record "topic" in it, titled `title`.
@discardableResult
func saveTopic(in db: Database, zone zoneID: RecordZone.ID, title: FieldValue = "Groceries") async throws -> Record {
    try await db.save(RecordZone(zoneID: zoneID))
    var topic = Record(recordType: "Topic", recordID: Record.ID(recordName: "topic", zoneID: zoneID))
    topic["title"] = title
    return try await db.save(topic)
}

/// Runs `body` with a node, closing it whatever happens.
func withNode<T>(_ mode: Container.Mode, name: String = "Alice", _ body: (TestNode) async throws -> T) async throws -> T {
    let node = try await TestNode.open(mode, name: name)
    do {
        let result = try await body(node)
        await node.close()
        return result
    } catch {
        await node.close()
        throw error
    }
}

/// The error `body` throws, as a ShareSyncError (or a failed expectation).
func shareSyncError(
    sourceLocation: SourceLocation = #_sourceLocation, _ body: () async throws -> Void
) async -> ShareSyncError? {
    do {
        try await body()
        Issue.record("expected an error", sourceLocation: sourceLocation)
        return nil
    } catch let error as ShareSyncError {
        return error
    } catch {
        Issue.record("expected a ShareSyncError, got \(error)", sourceLocation: sourceLocation)
        return nil
    }
}

extension Container.Mode: CustomTestStringConvertible {
    public var testDescription: String { rawValue }
}

let bothModes: [Container.Mode] = [.embedded, .connected]
