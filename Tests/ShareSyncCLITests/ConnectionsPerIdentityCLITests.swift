import Foundation
import ShareSyncCore
import ShareSyncNode
import ShareSyncTestSupport
import ShareSyncWire
import Testing

@Suite("sharesync run --connections-per-identity")
struct ConnectionsPerIdentityCLITests {
    @Test("the owner daemon takes that many connections of one identity and refuses the next with its rule; another identity still gets in")
    func limitApplies() async throws {
        let (node, url) = try await blocking { () throws -> (E2ENode, String) in
            let node = try E2ENode(name: "Alice", runArguments: ["--connections-per-identity", "2"])
            try makeTopics(on: node)
            let share = try #require(try node.ok(["share", "create", "--zone", "Topics", "--public", "readOnly"]) as? [String: Any])
            return (node, try #require(share["url"] as? String))
        }
        defer { node.stop() }
        let bob = NodeIdentity.generate()
        var open: [OwnerConnection] = []
        for _ in 0..<2 { open.append(try await OwnerConnection.connect(url: url, identity: bob)) }
        var refusal: ShareSyncError?
        do {
            let third = try await OwnerConnection.connect(url: url, identity: bob)
            await third.close()
        } catch {
            refusal = error
        }
        #expect(refusal?.code == .requestRateLimited, "a third connection of one identity: \(String(describing: refusal))")
        #expect(refusal?.rule == .maximumConnectionsPerIdentity)
        #expect(refusal?.message.contains("2 connections") == true, "\(String(describing: refusal))")
        let carol = try await OwnerConnection.connect(url: url, identity: .generate())
        _ = try await carol.acceptShare(url: url)
        await carol.close()
        // One of Bob's goes; his next one gets its place.
        await open.removeFirst().close()
        let deadline = ContinuousClock.now + .seconds(10)
        var again: OwnerConnection?
        while again == nil, ContinuousClock.now < deadline {
            again = try? await OwnerConnection.connect(url: url, identity: bob)
            if again == nil { try await Task.sleep(for: .milliseconds(50)) }
        }
        #expect(again != nil)
        await again?.close()
        for connection in open { await connection.close() }
    }

    @Test("a value outside 1...1024 is refused before anything starts, naming the option", arguments: ["0", "1025", "many"])
    func badValues(value: String) async throws {
        try await blocking {
            let folder = try TemporaryFolder()
            defer { folder.remove() }
            let home = folder.path + "/home"
            #expect(try cli(["init", "--home", home, "--name", "Alice", "--listen", "127.0.0.1:0"]).status == 0)
            let outcome = try cli(["run", "--home", home, "--connections-per-identity", value], timeout: 30)
            #expect(outcome.status != 0)
            #expect(outcome.stderr.contains("--connections-per-identity"), "\(outcome.stderr)")
        }
    }
}
