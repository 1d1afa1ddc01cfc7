import Foundation
import ShareSyncCore
import ShareSyncNode
import ShareSyncTestSupport
import Testing

@Suite("Pinning through the CLI: a share URL must name the owner's key")
struct OwnerPinningCLITests {
    @Test func acceptRequestAccessAndShareMetadataRefuseAURLWithoutTheOwnersFingerprint() async throws {
        let a = try E2ENode(name: "Alice")
        defer { a.stop() }
        let b = try E2ENode(name: "Bob")
        defer { b.stop() }
        try a.ok(["zone", "create", "Topics"])
        let (url, _) = try invite(b, to: "Topics", of: a)
        var parsed = try #require(ShareURL(string: url))
        parsed.ownerFingerprint = nil
        let bare = parsed.absoluteString
        #expect(!bare.contains("owner="))

        for command in [["accept", bare], ["request-access", bare]] {
            let refused = try b.run(command)
            #expect(refused.status == 65, "\(command[0]): \(refused.stdout) \(refused.stderr)")
            #expect(refused.stderr.contains("invalidArguments"), "\(refused.stderr)")
            #expect(refused.stderr.contains("ownerFingerprintMissing"), "\(refused.stderr)")
            #expect(refused.stderr.contains("owner's key fingerprint"), "\(refused.stderr)")
        }
        // The daemon's share metadata request (what `accept` shows its progress against) refuses it too.
        let client = try await ControlClient.connect(path: b.home + "/control.sock")
        do {
            _ = try await client.call(.shareMetadata(url: bare), as: ShareMetadataInfo.self)
            Issue.record("shareMetadata accepted a URL without owner=")
        } catch let error as ControlError {
            #expect(error.code == .invalidArguments)
            #expect(error.rule == .ownerFingerprintMissing)
        }
        await client.close()
        #expect(try #require(try b.ok(["zone", "list", "--shared"]) as? [Any]).isEmpty)
        // The owner never saw Bob accept: his invitation is still pending.
        let participants = try #require(try a.ok(["share", "participants", "--zone", "Topics"]) as? [[String: Any]])
        let bob = participants.first { $0["userRecordName"] as? String == b.userRecordName }
        #expect(bob?["acceptanceStatus"] as? String == "pending", "\(participants)")

        // The full URL is accepted.
        let accepted = try #require(try b.ok(["accept", url]) as? [String: Any])
        #expect(accepted["ownerName"] as? String == a.userRecordName)
    }
}
