import Foundation
import Testing

@testable import ShareSyncCore

@Suite("Participant identity")
struct ParticipantTests {
    @Test("a participant bound to a user record name is that user and no one else")
    func boundByUserRecordName() {
        let participant = Participant(lookupInfo: .init(userRecordName: "_alice"))
        #expect(participant.isIdentity(of: Caller(userRecordName: "_alice")))
        #expect(!participant.isIdentity(of: Caller(userRecordName: "_bob")))
    }

    @Test("once bound, a verified email matching the invitation no longer makes another user the participant")
    func bindingWinsOverEmail() {
        let participant = Participant(
            lookupInfo: .init(emailAddress: "alice@example.com", phoneNumber: nil, userRecordName: "_alice"))
        #expect(!participant.isIdentity(of: Caller(userRecordName: "_mallory", verifiedEmailAddress: "alice@example.com")))
        #expect(participant.isIdentity(of: Caller(userRecordName: "_alice")))
    }

    @Test("an email invitation matches a caller whose verified email is the same, ignoring case")
    func verifiedEmailMatches() {
        let participant = Participant(lookupInfo: .init(emailAddress: "Alice@Example.com"))
        #expect(participant.isIdentity(of: Caller(userRecordName: "_a1", verifiedEmailAddress: "alice@example.COM")))
        #expect(!participant.isIdentity(of: Caller(userRecordName: "_a1", verifiedEmailAddress: "alice@example.org")))
    }

    @Test("an email invitation does not match unverified claims: user record name or display name equal to the email")
    func unverifiedClaimsDoNotMatch() {
        let participant = Participant(lookupInfo: .init(emailAddress: "alice@example.com"))
        #expect(!participant.isIdentity(of: Caller(userRecordName: "alice@example.com")))
        #expect(!participant.isIdentity(of: Caller(userRecordName: "_a1", displayName: "alice@example.com")))
        #expect(!participant.isIdentity(of: Caller(userRecordName: "_a1")))
        #expect(!participant.isIdentity(of: Caller(userRecordName: "_a1", verifiedPhoneNumber: "alice@example.com")))
    }

    @Test("a phone invitation matches a verified phone number written differently")
    func verifiedPhoneMatches() {
        let participant = Participant(lookupInfo: .init(phoneNumber: "+1 (555) 010-0000"))
        #expect(participant.isIdentity(of: Caller(userRecordName: "_a1", verifiedPhoneNumber: "+15550100000")))
        #expect(!participant.isIdentity(of: Caller(userRecordName: "_a1", verifiedPhoneNumber: "+15550100001")))
        #expect(!participant.isIdentity(of: Caller(userRecordName: "+15550100000")))
    }

    @Test("a one-time URL participant is no one until bound")
    func oneTimeURLParticipant() {
        let participant = Participant.oneTimeURLParticipant(permission: .readWrite)
        #expect(participant.isOneTimeURLParticipant)
        #expect(participant.permission == .readWrite)
        #expect(participant.acceptanceStatus == .pending)
        #expect(!participant.isIdentity(of: Caller(userRecordName: "_a1", verifiedEmailAddress: "a@example.com")))
    }

    @Test("a new participant is a pending private user with read-only permission by default")
    func defaults() {
        let participant = Participant(lookupInfo: .init(emailAddress: "bob@example.com"))
        #expect(participant.role == .privateUser)
        #expect(participant.permission == .readOnly)
        #expect(participant.acceptanceStatus == .pending)
        #expect(!participant.isApprovedRequester)
        #expect(participant.userIdentity.userRecordName == nil)
        #expect(participant.userIdentity.lookupInfo?.emailAddress == "bob@example.com")
    }

    @Test("a caller's identity carries its verified lookup info")
    func callerIdentity() {
        let caller = Caller(userRecordName: "_a1", verifiedEmailAddress: "a@example.com", displayName: "A")
        #expect(caller.identity.userRecordName == "_a1")
        #expect(caller.identity.lookupInfo == .init(emailAddress: "a@example.com", phoneNumber: nil, userRecordName: "_a1"))
        #expect(caller.identity.displayName == "A")
    }
}
