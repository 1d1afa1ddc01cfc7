import ArgumentParser
import Foundation
import ShareSyncNode

/// `sharesync advertise`: the owner side of moving a node.
struct AdvertiseCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "advertise",
        abstract: "Change the address participants reach this node at, and tell them.",
        discussion: """
            For an owner that moves. Share URLs name the new address from now on (only their address \
            part changes), every participant connected now is told at once and reconnects there from \
            then on, and participants that connect later learn it when they do. The address is kept in \
            the settings. With --listen, the daemon listens there from its next start (it keeps \
            listening where it is until then). A participant that was offline meanwhile is repointed \
            with `sharesync owner address` or by accepting any share URL of this node.

            Example (move to a new port, then restart):
              sharesync advertise alice.example.org:7421 --listen 0.0.0.0:7421
              kill -TERM "$DAEMON_PID"    # the daemon's process ($! after `sharesync run &`)
              while kill -0 "$DAEMON_PID" 2>/dev/null; do sleep 0.1; done   # until it has stopped
              sharesync run & DAEMON_PID=$!
            """)

    @OptionGroup var options: NodeOptions

    @Argument(help: ArgumentHelp("The address participants reach this node at.", valueName: "host:port"))
    var address: String

    @Option(help: ArgumentHelp("Where the daemon listens from its next start; port 0 picks a free one.", valueName: "host:port"))
    var listen: String?

    func validate() throws {
        guard let parsed = HostAndPort(parsing: address), parsed.port > 0 else {
            throw ValidationError("\(address.debugDescription) is not HOST:PORT (port 1-65535)")
        }
        if let listen, HostAndPort(parsing: listen) == nil {
            throw ValidationError("--listen \(listen.debugDescription) is not HOST:PORT (port 0-65535)")
        }
    }

    func run() async throws {
        let parsed = HostAndPort(parsing: address)!
        try await callNode(
            options, .advertise(host: parsed.host, port: parsed.port, listen: listen.flatMap(HostAndPort.init(parsing:))),
            as: AdvertiseResult.self
        ) { result in
            var lines = ["advertising \(result.advertised); \(result.participantsTold) connected participant connection(s) told"]
            if result.listenAtNextStart != result.listening {
                lines.append("listening on \(result.listening) until the next start, then on \(result.listenAtNextStart)")
            }
            return lines.joined(separator: "\n")
        }
    }
}

/// `sharesync owner`: the owners whose shares this node replicates.
struct OwnerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "owner",
        abstract: "Manage the owners whose shares this node replicates.",
        discussion: """
            Example:
              sharesync owner address _3f2a…c9 alice.example.org:7421
            """,
        subcommands: [OwnerAddressCommand.self])
}

/// `sharesync owner address OWNER HOST:PORT`.
struct OwnerAddressCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "address",
        abstract: "Point an owner that moved at its new address, keeping the replica and the outbox.",
        discussion: """
            For an owner that moved while this node was offline (a connected node is told by the owner \
            itself). The replica, its change tokens and your queued writes stay; the node connects to \
            the new address at once (ending a connection it has to the old one, or an attempt to reach \
            it), and still checks the \
            owner's key there. Accepting any share URL of that owner also points the node at the \
            address the URL names.

            Example:
              sharesync owner address _3f2a…c9 alice.example.org:7421
            """)

    @OptionGroup var options: NodeOptions

    @Argument(
        help: ArgumentHelp(
            "The owner: their user record name (as `zone list --shared` shows it), or their display name or email address.",
            valueName: "owner"))
    var owner: String

    @Argument(help: ArgumentHelp("Where the owner's node is now.", valueName: "host:port"))
    var address: String

    func validate() throws {
        guard let parsed = HostAndPort(parsing: address), parsed.port > 0 else {
            throw ValidationError("\(address.debugDescription) is not HOST:PORT (port 1-65535)")
        }
    }

    func run() async throws {
        let parsed = HostAndPort(parsing: address)!
        try await callNode(options, .ownerAddress(owner: owner, host: parsed.host, port: parsed.port), as: Done.self) { _ in
            "owner \(owner) is now reached at \(parsed); connecting"
        }
    }
}
