import Foundation
import ShareSyncTestSupport
import Testing

@Suite("Invitations through the CLI: a link made for a user admits only that user")
struct InvitationCLITests {
    @Test func anInvitationForOneUserIsRefusedToAnotherAndStillAdmitsItsUser() async throws {
        try await blocking {
            let a = try E2ENode(name: "Alice")
            defer { a.stop() }
            let b = try E2ENode(name: "Bob")
            defer { b.stop() }
            let c = try E2ENode(name: "Carol")
            defer { c.stop() }
            try makeTopics(on: a)
            let (url, _) = try invite(b, to: "Topics", of: a)

            // Carol has Bob's link: she gets what anyone uninvited gets, and Bob's invitation stays pending.
            let refused = try c.run(["accept", url])
            #expect(refused.status == 65, "\(refused.stdout) \(refused.stderr)")
            #expect(refused.stderr.contains("participantMayNeedVerification"), "\(refused.stderr)")
            #expect(refused.stderr.contains("notInvited"), "\(refused.stderr)")
            #expect(try #require(try c.ok(["zone", "list", "--shared"]) as? [Any]).isEmpty)
            let participants = try #require(try a.ok(["share", "participants", "--zone", "Topics"]) as? [[String: Any]])
            #expect(!participants.contains { $0["userRecordName"] as? String == c.userRecordName }, "\(participants)")
            let bob = participants.first { $0["userRecordName"] as? String == b.userRecordName }
            #expect(bob?["acceptanceStatus"] as? String == "pending", "\(participants)")

            let accepted = try #require(try b.ok(["accept", url]) as? [String: Any])
            #expect(accepted["ownerName"] as? String == a.userRecordName)
            #expect(try b.recordNames(zone: "Topics", shared: true).contains("topic-1"))
        }
    }
}
