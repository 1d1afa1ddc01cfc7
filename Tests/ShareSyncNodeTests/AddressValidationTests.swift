import Foundation
import Logging
import ShareSyncCore
import ShareSyncStore
import Synchronization
import Testing
@testable import ShareSyncNode

/// An address a node advertises, or a participant stores for an owner, is a host a share URL and a
/// connection can use: before, `advertise 'alice.example.org/x:7421'` was saved, made share URLs that
/// no `accept` could parse, and was announced to every connected participant, who followed it.
@Suite("Addresses are checked before they are used")
struct AddressValidationTests {
    @Test("HOST:PORT refuses a host with a slash, a space or brackets where they do not belong")
    func parsing() {
        #expect(HostAndPort(parsing: "alice.example.org:7421") == HostAndPort(host: "alice.example.org", port: 7421))
        #expect(HostAndPort(parsing: "[::1]:7420") == HostAndPort(host: "::1", port: 7420))
        for bad in ["alice.example.org/x:7421", "alice example.org:7421", "a?b:1", "[[::1]]:1", ":7420"] {
            #expect(HostAndPort(parsing: bad) == nil, "\(bad)")
        }
    }

    @Test("the control channel refuses to advertise a host that is not one, and an owner address that is not one")
    func controlRefusals() async throws {
        let b = try TestParticipant()
        defer { b.remove() }
        let replica = try SharedDatabaseReplica(path: b.replicaPath)
        try replica.setOwner(OwnerInfo(ownerName: "_o", host: "127.0.0.1", port: 7420, fingerprint: "f00d"))
        let sync = ParticipantSync(replica: replica, identity: b.identity)
        let advertised = Mutex(0)
        let status = try JSONDecoder().decode(
            NodeStatus.self,
            from: Data(#"{"userRecordName":"_b","fingerprint":"00","displayName":"B","listen":{"host":"127.0.0.1","port":1},"advertised":{"host":"127.0.0.1","port":1},"connections":0}"#.utf8))
        let handler = ControlHandler(
            database: try PrivateDatabase(inMemoryOwnerName: "_b"), participant: sync, status: { status },
            advertise: { address, _ in
                advertised.withLock { $0 += 1 }
                return AdvertiseResult(advertised: address, listening: address, listenAtNextStart: address, participantsTold: 0)
            },
            logger: Logger(label: "test"))
        func refusal(_ line: String) async -> ControlError? {
            do {
                _ = try ControlResponse<Done>.result(of: await handler.respond(toLine: Data(line.utf8)))
                return nil
            } catch {
                return error as? ControlError
            }
        }
        let advertise = await refusal(#"{"advertise":{"host":"alice.example.org/x","port":7421}}"#)
        #expect(advertise?.rule == .advertisedAddress)
        #expect(advertised.withLock { $0 } == 0, "nothing advertised")
        let owner = await refusal(#"{"ownerAddress":{"owner":"_o","host":"a b","port":7420}}"#)
        #expect(owner?.rule == .ownerAddress)
        #expect(try replica.owner(named: "_o")?.host == "127.0.0.1")
        await sync.stop()
    }
}
