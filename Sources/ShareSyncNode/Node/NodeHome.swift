import Foundation
import ShareSyncCore
import ShareSyncStore
import ShareSyncWire

/// A host and a port, written `HOST:PORT` (`[::1]:7420` for IPv6).
public struct HostAndPort: Sendable, Hashable, Codable, CustomStringConvertible {
    public var host: String
    public var port: Int

    public init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    /// Parses `HOST:PORT` or `[V6]:PORT`; `nil` if it is not one (port 0...65535, a host
    /// ``HostName/isValid(_:)`` accepts).
    public init?(parsing text: String) {
        let host: Substring
        let port: Substring
        if text.hasPrefix("["), let close = text.firstIndex(of: "]") {
            host = text[text.index(after: text.startIndex)..<close]
            let rest = text[text.index(after: close)...]
            guard rest.hasPrefix(":") else { return nil }
            port = rest.dropFirst()
        } else {
            guard let colon = text.lastIndex(of: ":") else { return nil }
            host = text[..<colon]
            port = text[text.index(after: colon)...]
            // `::1` or `fe80::1:7420` without brackets: where the host ends is a guess; IPv6 needs them.
            guard !host.contains(":") else { return nil }
        }
        guard HostName.isValid(String(host)), let number = Int(port), (0...65535).contains(number) else { return nil }
        self.init(host: String(host), port: number)
    }

    public var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
}

/// What a node home keeps in `settings.json`: who the node's user is and where it listens.
public struct NodeSettings: Sendable, Hashable, Codable {
    /// The name shown to the people this node shares with.
    public var displayName: String
    public var email: String?
    public var phone: String?
    /// The address the owner server binds (port 0: the system picks a free one at the first start, and
    /// the node keeps it, ``boundPort``).
    public var listen: HostAndPort
    /// The port the system chose for a `listen` port of 0, kept so that the node comes back at the same
    /// address after a restart (its share URLs and its participants' stored address stay right). Used
    /// while it is free; if another program took it, the node takes a new one and keeps that.
    public var boundPort: Int?
    /// The address share URLs carry. `nil`: the listen address (or this host's name when listening on
    /// every interface). A `nil` port: the port actually bound.
    public var advertiseHost: String?
    public var advertisePort: Int?

    public init(
        displayName: String, email: String? = nil, phone: String? = nil,
        listen: HostAndPort = HostAndPort(host: "0.0.0.0", port: 7420), advertiseHost: String? = nil,
        advertisePort: Int? = nil
    ) {
        self.displayName = displayName
        self.email = email
        self.phone = phone
        self.listen = listen
        self.advertiseHost = advertiseHost
        self.advertisePort = advertisePort
    }

    /// Where share URLs point once the server is bound to `boundPort`.
    public func advertisedAddress(boundPort: Int) -> HostAndPort {
        let host = advertiseHost ?? (["0.0.0.0", "::", ""].contains(listen.host) ? ProcessInfo.processInfo.hostName : listen.host)
        return HostAndPort(host: host, port: advertisePort ?? boundPort)
    }
}

/// A node's home folder (mode 0700): everything one node keeps on disk.
///
/// | file | what |
/// | --- | --- |
/// | `identity.key` | the node's Ed25519 key (``NodeIdentity``), mode 0600 |
/// | `settings.json` | ``NodeSettings`` |
/// | `private.sqlite` | the owner's ``PrivateDatabase`` (owner name: the identity's user record name) |
/// | `replica.sqlite` | the ``SharedDatabaseReplica`` of what others share with this node |
/// | `control.sock` | the daemon's control socket (see ``ControlServer``), mode 0600, while it runs |
/// | `daemon.lock` | locked (`flock`) by the running daemon for its whole life: one daemon per home |
public struct NodeHome: Sendable {
    public static let settingsFileName = "settings.json"
    public static let privateDatabaseFileName = "private.sqlite"
    public static let replicaFileName = "replica.sqlite"
    public static let controlSocketFileName = "control.sock"

    /// The folder.
    public let path: String
    public let identity: NodeIdentity
    public var settings: NodeSettings
    /// The limits the private database checks requests against (and the owner server advertises):
    /// the defaults, but in tests of how participants cope with an owner's lower limits.
    package var ownerLimits = Limits()

    public var settingsPath: String { Self.join(path, Self.settingsFileName) }
    public var privateDatabasePath: String { Self.join(path, Self.privateDatabaseFileName) }
    public var replicaPath: String { Self.join(path, Self.replicaFileName) }
    public var controlSocketPath: String { Self.controlSocketPath(home: path) }

    /// The control socket's path in a home folder.
    public static func controlSocketPath(home: String) -> String { join(home, controlSocketFileName) }

    /// Creates a new home: the folder (0700), a new identity and the settings. Refuses a folder that
    /// already holds a key, settings or a database (``ShareSyncError/Code/invalidArguments``, rule
    /// `homeExists`): a new identity would take over the old databases' shares and outbox. If a step
    /// fails, the files it had written are removed, so that `init` can simply be run again.
    ///
    /// The settings are written first, then the key, then the databases: an `init` killed part-way
    /// (Ctrl-C, a power loss), whose clean-up never ran, leaves either a home that opens (the key and
    /// the settings are there; the databases are made when first opened) or only the settings, which
    /// the next `init` takes over. Before, the key came first: a home with a key and no settings
    /// could neither be opened nor made again without deleting files by hand.
    public static func create(at path: String, settings: NodeSettings) throws(ShareSyncError) -> NodeHome {
        let fm = FileManager.default
        let files = [NodeIdentity.keyFileName, settingsFileName, privateDatabaseFileName, replicaFileName]
        // Only the settings: an init stopped before it wrote the key (nothing else was made yet).
        let present = files.filter { fm.fileExists(atPath: join(path, $0)) }
        if let file = present.first(where: { $0 != settingsFileName }) {
            throw ShareSyncError(
                .invalidArguments, "\(path) is already a node home (it has \(file)); choose another --home",
                rule: .homeExists)
        }
        do throws(ShareSyncError) {
            let identity = NodeIdentity.generate()
            try NodeIdentity.createHome(path)
            let home = NodeHome(path: path, identity: identity, settings: settings)
            try home.saveSettings()
            try identity.save(home: path)
            // Create both databases now, so a fresh home is complete and its files get their modes.
            _ = try home.openPrivateDatabase()
            _ = try home.openReplica()
            return home
        } catch {
            for file in files + [privateDatabaseFileName, replicaFileName].flatMap({ [$0 + "-wal", $0 + "-shm"] }) {
                try? fm.removeItem(atPath: join(path, file))
            }
            throw error
        }
    }

    /// Opens an existing home; ``ShareSyncError/Code/invalidArguments`` (rule `noHome`) if there is none.
    public static func open(at path: String) throws(ShareSyncError) -> NodeHome {
        let fm = FileManager.default
        let keyPath = join(path, NodeIdentity.keyFileName)
        guard fm.fileExists(atPath: keyPath) else {
            throw ShareSyncError(
                .invalidArguments, "\(path) is not a node home (no \(NodeIdentity.keyFileName)); create it with `sharesync init`",
                rule: .noHome)
        }
        let identity = try NodeIdentity.load(path: keyPath)
        let settingsPath = join(path, settingsFileName)
        guard let data = fm.contents(atPath: settingsPath) else {
            throw ShareSyncError(.invalidArguments, "cannot read \(settingsPath)", rule: .noHome)
        }
        do {
            let settings = try JSONDecoder().decode(NodeSettings.self, from: data)
            return NodeHome(path: path, identity: identity, settings: settings)
        } catch {
            throw ShareSyncError(.invalidArguments, "\(settingsPath) is not valid: \(error)", rule: .settings)
        }
    }

    /// Writes `settings.json` (mode 0600), replacing the old file whole and syncing it to the disk
    /// (a crash while it is written leaves the old settings or the new, never a torn file).
    public func saveSettings() throws(ShareSyncError) {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        let data: Data
        do {
            data = try encoder.encode(settings)
        } catch {
            throw ShareSyncError(.internalError, "cannot encode the settings for \(settingsPath): \(error)")
        }
        // Replaced whole and synced: a crash while the settings change leaves the old ones or the new.
        try DurableFile.write(data, to: settingsPath)
    }

    /// Opens the owner's private database.
    public func openPrivateDatabase() throws(ShareSyncError) -> PrivateDatabase {
        do {
            return try PrivateDatabase(path: privateDatabasePath, ownerName: identity.userRecordName, limits: ownerLimits)
        } catch let error as ShareSyncError {
            throw error
        } catch {
            throw ShareSyncError(.internalError, "cannot open \(privateDatabasePath): \(error)")
        }
    }

    /// Opens the replica of what others share with this node.
    public func openReplica() throws(ShareSyncError) -> SharedDatabaseReplica {
        try SharedDatabaseReplica(path: replicaPath)
    }

    static func join(_ folder: String, _ file: String) -> String {
        (folder as NSString).appendingPathComponent(file)
    }
}
