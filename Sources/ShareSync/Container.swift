@_exported import ShareSyncCore
import Foundation
import Logging
import ShareSyncNode
import Synchronization

/// A node, as an app sees it: its private database, its shared database, and the shares it accepts,
/// like `CKContainer`.
///
/// Open one in either of two ways, with the same API after that:
///
/// ```swift
/// // The node runs in this process, on its home folder (no daemon):
/// let container = try await Container.embedded(home: "/var/lib/notes/alice")
/// // Or: a `sharesync run` daemon runs the node, and the app talks to it:
/// let container = try await Container.connected(home: "/var/lib/notes/alice")
///
/// var note = Record(recordType: "Note", recordID: Record.ID(recordName: "n1", zoneID: zoneID))
/// note["title"] = "Milk"
/// let saved = try await container.privateDatabase.save(note)
/// ```
///
/// An embedded container is a whole node: it serves its shares to participants on its listen address,
/// syncs the shares it accepted, and answers `sharesync` commands on the home's control socket while it
/// is open. Like a daemon, it holds the home's daemon lock: a `sharesync run` on the same home is refused
/// until ``close()``. A connected container needs the daemon to be running; if it stops, calls fail with
/// `ShareSyncError.Code.serviceUnavailable`.
public final class Container: Sendable {
    /// How the container reaches its node.
    public enum Mode: String, Sendable, Hashable {
        /// The node runs in this process.
        case embedded
        /// A `sharesync run` daemon runs it.
        case connected
    }

    private let state: Mutex<Transport>
    /// How requests reach the node (`closed` after ``close()``).
    var transport: Transport { state.withLock { $0 } }
    /// The home folder of the node (`sharesync init --home`).
    public let home: String

    /// How this container reaches its node.
    public let mode: Mode

    private init(transport: Transport, home: String) {
        self.state = Mutex(transport)
        self.mode = if case .embedded = transport { .embedded } else { .connected }
        self.home = home
    }

    /// Opens a node home (made by `sharesync init` or ``createHome(at:displayName:email:listen:advertise:)``) and runs
    /// its node in this process until ``close()``.
    ///
    /// - Parameters:
    ///   - home: the node's home folder.
    ///   - logger: where the node logs; by default nowhere (the library never prints).
    ///   - controlSocket: whether `sharesync` commands may drive this node while it runs (the home's
    ///     `control.sock`, as a daemon's).
    /// - Throws: `ShareSyncError.Code.serviceUnavailable` (rule `oneDaemonPerHome`) if a daemon or another
    ///   container runs on the home; `invalidArguments` (rule `noHome`) if the folder is not a node home.
    public static func embedded(
        home: String, logger: Logger = Logger(label: "sharesync", factory: { _ in SwiftLogNoOpLogHandler() }),
        controlSocket: Bool = true
    ) async throws(ShareSyncError) -> Container {
        try await embedded(home: home, logger: logger, controlSocket: controlSocket, ownerLimits: Limits())
    }

    /// ``embedded(home:logger:controlSocket:)`` with its private database checking requests against
    /// `ownerLimits`: tests of participants meeting an owner with lower limits use it.
    package static func embedded(
        home: String, logger: Logger = Logger(label: "sharesync", factory: { _ in SwiftLogNoOpLogHandler() }),
        controlSocket: Bool = true, ownerLimits: Limits
    ) async throws(ShareSyncError) -> Container {
        var nodeHome = try NodeHome.open(at: home)
        nodeHome.ownerLimits = ownerLimits
        let node = try await NodeService(home: nodeHome, logger: logger).start(controlSocket: controlSocket)
        return Container(transport: .embedded(node), home: nodeHome.path)
    }

    /// Connects to the `sharesync run` daemon of a node home, through its control socket.
    ///
    /// - Throws: `ShareSyncError.Code.serviceUnavailable` (rule `nodeNotRunning`) if no daemon runs on the
    ///   home; `invalidArguments` (rule `noHome`) if the folder is not a node home at all.
    public static func connected(home: String) async throws(ShareSyncError) -> Container {
        do {
            let client = try await ControlClient.connect(path: NodeHome.controlSocketPath(home: home))
            return Container(transport: .connected(client), home: home)
        } catch {
            // A wrong folder is not a stopped node: told to start it, `sharesync run` then said it is
            // not a node home.
            do {
                _ = try NodeHome.open(at: home)
            } catch where error.rule == .noHome {
                throw error
            } catch {}
            throw ShareSyncError(.serviceUnavailable, error.description, rule: .nodeNotRunning)
        }
    }

    /// Creates a node home: a new identity, empty databases and settings (what `sharesync init` does).
    ///
    /// - Parameters:
    ///   - path: the folder to create (its parent must exist).
    ///   - displayName: the name shown to the people this node shares with.
    ///   - email: the owner's email address, which others may invite them by.
    ///   - listen: where the node listens for participants (port 0: a free port, kept from then on).
    ///   - advertise: the address share URLs carry, when participants reach the node by another name.
    /// - Throws: `invalidArguments` (rule `homeExists`) if the folder already is a node home.
    @discardableResult
    public static func createHome(
        at path: String, displayName: String, email: String? = nil, listen: HostAndPort = HostAndPort(host: "0.0.0.0", port: 7420),
        advertise: HostAndPort? = nil
    ) throws(ShareSyncError) -> NodeIdentitySummary {
        let home = try NodeHome.create(
            at: path,
            settings: NodeSettings(
                displayName: displayName, email: email, phone: nil, listen: listen, advertiseHost: advertise?.host,
                advertisePort: advertise?.port))
        return NodeIdentitySummary(userRecordName: home.identity.userRecordName, fingerprint: home.identity.fingerprint)
    }

    /// Stops an embedded node (requests in progress finish first) or closes the connection to the daemon.
    /// Calls made after it fail with `ShareSyncError.Code.serviceUnavailable`.
    public func close() async {
        switch state.withLock({ t -> Transport in defer { t = .closed }; return t }) {
        case .embedded(let node): await node.stop()
        case .connected(let client): await client.close()
        case .closed: break
        }
    }

    /// The connection to the daemon (connected containers).
    var connectedClient: ControlClient? {
        if case .connected(let client) = transport { client } else { nil }
    }

    /// A transport for requests that wait (a change feed's long poll): in process the same one; for a
    /// daemon a connection of its own, since one connection answers its requests in order.
    func waitingTransport() async throws(ShareSyncError) -> Transport {
        switch transport {
        case .embedded, .closed: return transport
        case .connected:
            do {
                return .connected(try await ControlClient.connect(path: NodeHome.controlSocketPath(home: home)))
            } catch {
                throw ShareSyncError(.serviceUnavailable, error.description, rule: .nodeNotRunning)
            }
        }
    }

    /// Sends one control request and decodes its result: the path by which the `sharesync` command
    /// reaches its node for what it does beyond the calls above (a record saved from field
    /// assignments, imports in batches, change feeds as lines, addresses). Within the package only: an
    /// app has the calls above, the CLI the same ones plus these.
    package func send<T: Codable & Sendable>(_ request: ControlRequest, as type: T.Type = T.self) async throws(ShareSyncError) -> T {
        try await transport.call(request, as: type)
    }

    /// The owner's private database.
    public var privateDatabase: Database { Database(container: self, scope: .private) }

    /// The shared database: the zones and records others share with this node, as its replica holds them.
    public var sharedDatabase: Database { Database(container: self, scope: .shared) }

    /// Who the node is and where it listens, and the sync state of each share it owns (each participant:
    /// connected, last sync, pending changes) and of each zone of its shared database (connected, last
    /// sync, lag, records, outbox writes pending, in conflict and refused): what `sharesync status` shows.
    /// A part the node could not read from its own databases (a failing disk) is `nil`, and
    /// the status's `errors` names it and why; the rest is there. Check `errors` before trusting an
    /// empty list.
    public func status() async throws(ShareSyncError) -> NodeStatus {
        try await transport.call(.status)
    }

    /// The user record ID of this node's user (`CKContainer.userRecordID()`).
    public func userRecordID() async throws(ShareSyncError) -> Record.ID {
        Record.ID(recordName: try await status().userRecordName)
    }

    // MARK: Accepting shares

    /// What the share at a URL is, asked of its owner without accepting it (`CKShare.Metadata`).
    public func shareMetadata(for url: String) async throws(ShareSyncError) -> ShareMetadataInfo {
        try await transport.call(.shareMetadata(url: url))
    }

    /// Accepts a share by its URL and returns once its records are in the shared database (at most
    /// `timeout`; past it, `networkFailure`, and the share stays accepted and syncing).
    public func accept(_ url: String, timeout: Duration = .seconds(120)) async throws(ShareSyncError) -> AcceptedShare {
        try await transport.call(.accept(url: url, timeoutSeconds: timeout.inSeconds))
    }

    /// Leaves a share this node accepted: its records leave the shared database. With `locally`, at once
    /// even if the owner cannot be reached (it is told when next reached).
    public func leave(_ share: Share, locally: Bool = false) async throws(ShareSyncError) {
        let zoneID = share.recordID.zoneID
        let _: Done = try await transport.call(
            .leave(owner: zoneID.ownerName, zone: zoneID.zoneName, share: share.recordID.recordName, local: locally))
    }
}

/// A node's identity, as ``Container/createHome(at:displayName:email:listen:advertise:)`` made it.
public struct NodeIdentitySummary: Sendable, Hashable {
    /// The node's user record name: how owners know it.
    public var userRecordName: String
    /// Its key's fingerprint: what share URLs pin.
    public var fingerprint: String
}
