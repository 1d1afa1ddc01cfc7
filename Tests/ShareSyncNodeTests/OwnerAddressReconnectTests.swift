import Foundation
import ShareSyncCore
#if canImport(Glibc)
import Glibc
#endif
import ShareSyncStore
import ShareSyncWire
import Testing
@testable import ShareSyncNode

/// `owner address` on a participant that is connected: the engine leaves the old address and
/// connects at the new one at once (as its help says), rather than going on over the old connection.
@Suite("owner address while connected")
struct OwnerAddressReconnectTests {
    @Test("the connection to the old address ends and the engine follows the owner at the new one; a dead address shows at once")
    func anAddressSetByHandTakesEffectAtOnce() async throws {
        let owner = try await TestOwner.start()
        let b = try TestParticipant()
        defer { b.remove() }
        let sync = try await b.startFollowing(owner)
        let log = EventLog(sync)
        let ownerName = owner.identity.userRecordName
        let bName = b.identity.userRecordName
        #expect(owner.server.connectedIdentities.contains(bName))

        // The same owner, also reachable at a second port; the first stays up.
        let failures = { log.count { if case .disconnected(_, _?, _) = $0 { true } else { false } } }
        let failuresBefore = failures()
        let second = try await owner.restartServer(port: 0)
        // It advertises where it is: the participant hears that address in its welcome.
        second.setAdvertisedAddress(WireAddress(host: "127.0.0.1", port: second.port), announce: false)
        try sync.setOwnerAddress(owner: ownerName, host: "127.0.0.1", port: second.port)
        try await eventually("connected at the new address only", timeout: .seconds(15)) {
            second.connectedIdentities.contains(bName) && !owner.server.connectedIdentities.contains(bName)
                && sync.status(owner: ownerName) == .following
        }
        // A reconnection asked for is not a failure: the connection it ended reports none.
        #expect(failures() == failuresBefore, "\(log.all)")
        try await eventually("the reconnection's event (no error, no wait)") {
            log.count { if case .disconnected(_, nil, .zero) = $0 { true } else { false } } >= 1
        }
        try owner.saveNote("after-move", title: "arrives over the new connection")
        try await expectReplicaMatches(sync, owner)

        // A mistyped address (nothing listens on port 1) shows now, not at the next disconnection, and
        // is not covered up by the address the owner announced (before, the link fell back on it and
        // followed the owner as if the typo worked).
        try await eventually("the announced address heard") {
            (try? sync.replica.announcedAddress(owner: ownerName))?.port == second.port
        }
        try sync.setOwnerAddress(owner: ownerName, host: "127.0.0.1", port: 1)
        try await eventually("the link fails at the dead address", timeout: .seconds(15)) {
            !second.connectedIdentities.contains(bName)
                && [.networkFailure, .networkUnavailable].contains(sync.lastFailure(owner: ownerName)?.code)
        }
        #expect(sync.status(owner: ownerName) != .following)

        await sync.stop()
        try await second.shutdown()
        try await owner.stop()
    }
    @Test("an address set by hand while the engine is still connecting to one that never answers is used at once")
    func aNewAddressCutsShortAnAttemptUnderWay() async throws {
        let (owner, b, sync, silent) = try await participantConnectingToASilentAddress()
        defer { b.remove(); silent.close() }
        let ownerName = owner.identity.userRecordName
        let log = EventLog(sync)

        // The right address, set while that attempt is under way, is used now, not 60 s later.
        let started = ContinuousClock.now
        try sync.setOwnerAddress(owner: ownerName, host: "127.0.0.1", port: owner.server.port)
        try await expectEventually(sync, "following at the right address", timeout: 120) {
            sync.status(owner: ownerName) == .following
        }
        // Well under the attempt's 60-s connect timeout, with room for a starved full test run.
        #expect(ContinuousClock.now - started < .seconds(50), "the attempt to the silent address ran to its timeout")
        try owner.saveNote("after-the-fix", title: "arrives")
        try await expectReplicaMatches(sync, owner)
        // A given-up attempt is not a failure: no disconnection reported one.
        #expect(log.count { if case .disconnected(_, _?, _) = $0 { true } else { false } } == 0, "\(log.all)")
        await sync.stop()
        try await owner.stop()
    }

    @Test("stopping the engine while it connects to an address that never answers returns at once")
    func stopCutsShortAnAttemptUnderWay() async throws {
        let (owner, b, sync, silent) = try await participantConnectingToASilentAddress()
        defer { b.remove(); silent.close() }
        let started = ContinuousClock.now
        await sync.stop()
        #expect(ContinuousClock.now - started < .seconds(50), "stop waited for the attempt's 60-s timeout")
        try await owner.stop()
    }
}

/// An owner, and a participant that followed it and was then pointed at an address where nothing
/// answers: its link is connecting there, its attempt waiting in its TCP connect for the 60-s connect
/// timeout of the tests' engines.
private func participantConnectingToASilentAddress() async throws
    -> (owner: TestOwner, b: TestParticipant, sync: ParticipantSync, silent: SilentListener)
{
    let owner = try await TestOwner.start()
    let b = try TestParticipant()
    let sync = try await b.startFollowing(owner)
    let ownerName = owner.identity.userRecordName
    let silent = try SilentListener()
    try sync.setOwnerAddress(owner: ownerName, host: "127.0.0.1", port: silent.port)
    try await eventually("the link left the owner and is connecting to the silent address", timeout: .seconds(30)) {
        sync.status(owner: ownerName) == .connecting && !owner.server.connectedIdentities.contains(b.identity.userRecordName)
    }
    try await Task.sleep(for: .milliseconds(300))  // well inside the attempt
    #expect(sync.status(owner: ownerName) == .connecting)
    return (owner, b, sync, silent)
}

/// A TCP port on 127.0.0.1 where a connection is never made: it listens and never accepts, and a
/// connection of its own fills its queue of one, so the kernel drops the SYNs of every other client
/// (as a host that went away does): their TCP connects wait for their connect timeout.
final class SilentListener: Sendable {
    let fd: Int32
    let filler: Int32
    let port: Int

    init() throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        try #require(fd >= 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
                bind(fd, pointer, length) == 0 && listen(fd, 0) == 0 && getsockname(fd, pointer, &length) == 0
            }
        }
        if !bound { Glibc.close(fd) }
        try #require(bound)
        self.fd = fd
        self.port = Int(UInt16(bigEndian: address.sin_port))
        filler = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        let connected = filler >= 0 && withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(filler, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
        if !connected { close() }
        try #require(connected)
    }

    func close() {
        Glibc.close(filler)
        Glibc.close(fd)
    }
}
