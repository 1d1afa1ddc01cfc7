import Foundation
import GRDB
import Testing

import ShareSyncCore
@testable import ShareSyncStore

/// Which database failures a participant may send again (rule `storeFailure`), and which it may not.
@Suite("Store failures: passing or not")
struct StoreFailureRuleTests {
    @Test("a busy lock, an I/O error, a read-only file are storeFailure; a broken constraint or a damaged file are not")
    func onlyPassingFailuresAreStoreFailure() {
        func rule(_ code: ResultCode) -> Rule? {
            do {
                _ = try withStoreErrors("write", path: "/x.sqlite") { () throws -> Int in throw DatabaseError(resultCode: code) }
                return nil
            } catch {
                #expect(error.code == .internalError)
                return error.rule
            }
        }
        for code in [ResultCode.SQLITE_BUSY, .SQLITE_LOCKED, .SQLITE_IOERR, .SQLITE_READONLY, .SQLITE_CANTOPEN, .SQLITE_NOMEM] {
            #expect(rule(code) == .storeFailure, "\(code)")
        }
        for code in [ResultCode.SQLITE_CONSTRAINT, .SQLITE_CORRUPT, .SQLITE_NOTADB, .SQLITE_ERROR, .SQLITE_MISMATCH] {
            #expect(rule(code) == nil, "\(code)")
        }
    }
}

/// A database of owner `_owner` whose zone "Z" is shared as a whole with `participants` (invited, not
/// accepted); the share as saved.
private func zoneZShared(with participants: [Participant]) throws -> (PrivateDatabase, Share) {
    let database = try PrivateDatabase(inMemoryOwnerName: "_owner")
    let zoneID = RecordZone.ID(zoneName: "Z")
    _ = try database.saveZone(RecordZone(zoneID: zoneID))
    var share = Share(recordZoneID: zoneID)
    for participant in participants { try share.addParticipant(participant) }
    let saved = Share(try database.modifyRecords(saving: [share.record]).get().first { $0.recordType == Record.shareRecordType }!)!
    return (database, saved)
}

/// `modifyRecordsOnce`: a write ID's answer is kept with the write, for the newest 64 of a viewer.
@Suite("Writes applied once, in the store")
struct AppliedWriteStoreTests {
    @Test("a repeat is answered and applies nothing; a failed write is not kept; past 64 newer writes the oldest runs again")
    func keptAnswersAndTheirWindow() throws {
        let database = try PrivateDatabase(inMemoryOwnerName: "_owner")
        _ = try database.saveZone(RecordZone(zoneID: RecordZone.ID(zoneName: "Z")))
        let view = database.sharedDatabase(for: Caller(userRecordName: "_owner"))
        var answers = 0
        func save(_ id: String, _ name: String, policy: SavePolicy = .allKeys) throws -> (Data, Bool) {
            var record = Record(recordType: "Note", recordID: Record.ID(recordName: name, zoneID: RecordZone.ID(zoneName: "Z")))
            record["n"] = .int64(Int64(answers))
            return try view.modifyRecordsOnce(writeID: id, saving: [record], savePolicy: policy) { result in
                answers += 1
                return Data("\(answers):\(result.saveResults.count)".utf8)
            }
        }
        let (first, repeatedFirst) = try save("w-0", "r0")
        #expect(!repeatedFirst)
        let (again, repeated) = try save("w-0", "r0-other")
        #expect(repeated && again == first)
        #expect(throws: ShareSyncError.self) { try database.fetchRecord(Record.ID(recordName: "r0-other", zoneID: RecordZone.ID(zoneName: "Z"))) }
        // A write that applied nothing (a new record saved "if unchanged" over one that exists) is not kept.
        let (_, failedRepeat) = try save("w-failed", "r0", policy: .ifServerRecordUnchanged)
        #expect(!failedRepeat)
        #expect(try !save("w-failed", "r0", policy: .ifServerRecordUnchanged).1)
        // At least the newest 64 are kept; past 80 newer writes w-0 is forgotten and runs again.
        for i in 1...64 { _ = try save("w-\(i)", "r\(i)") }
        #expect(try save("w-1", "r1").1)
        for i in 65...80 { _ = try save("w-\(i)", "r\(i)") }
        #expect(try !save("w-0", "r0").1)
        #expect(try save("w-17", "r17").1 && save("w-80", "r80").1)
    }
}

extension AppliedWriteStoreTests {
    @Test("a participant's kept answers go once it is a participant of no share: after it leaves, and when the zone goes")
    func keptAnswersGoWithTheLastMembership() throws {
        let (database, saved) = try zoneZShared(
            with: ["_b", "_c"].map { Participant(lookupInfo: .init(userRecordName: $0), permission: .readWrite) })
        let zoneID = RecordZone.ID(zoneName: "Z")
        for user in ["_b", "_c"] {
            _ = try database.acceptShare(url: saved.url!, as: Caller(userRecordName: user))
            let view = database.sharedDatabase(for: Caller(userRecordName: user))
            let record = Record(recordType: "Note", recordID: Record.ID(recordName: "by\(user)", zoneID: RecordZone.ID(zoneName: "Z", ownerName: "_owner")))
            let (_, repeated) = try view.modifyRecordsOnce(writeID: "w-\(user)", saving: [record]) { _ in Data("ok".utf8) }
            #expect(!repeated)
        }
        func kept(_ user: String) throws -> Int {
            try database.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM appliedWrite WHERE user = ?", arguments: [user]) ?? 0 }
        }
        #expect(try kept("_b") == 1 && kept("_c") == 1)
        try database.sharedDatabase(for: Caller(userRecordName: "_b")).leaveShare(
            Record.ID(recordName: Share.zoneShareRecordName, zoneID: RecordZone.ID(zoneName: "Z", ownerName: "_owner")))
        #expect(try kept("_b") == 0, "_b left its only share")
        #expect(try kept("_c") == 1, "_c is still a participant")
        try database.deleteZone(zoneID)
        #expect(try kept("_c") == 0, "the zone, and _c's only share with it, went")
    }
}

/// An invitation names a person; someone invited by email who accepted is bound to their identity.
@Suite("Invitations of someone already in the share")
struct ReinviteTests {
    @Test("adding by email someone who accepted an invitation by that email changes them, and adds nobody")
    func emailOfAnAcceptedParticipant() throws {
        let (database, saved) = try zoneZShared(
            with: [Participant(lookupInfo: .init(emailAddress: "carol@example.org"), permission: .readWrite)])
        _ = try database.acceptShare(url: saved.url!, as: Caller(userRecordName: "_carol", verifiedEmailAddress: "carol@example.org"))
        var accepted = Share(try database.fetchRecord(saved.recordID))!
        let before = accepted.participants.count
        #expect(accepted.participants.contains { $0.userIdentity.userRecordName == "_carol" && $0.acceptanceStatus == .accepted })
        // Before, this added a second, pending participant under the same email: whoever used its
        // link was listed as carol@example.org, with the new permission.
        try accepted.addParticipant(Participant(lookupInfo: .init(emailAddress: "Carol@Example.org"), permission: .readOnly))
        #expect(accepted.participants.count == before)
        let carol = accepted.participants.first { $0.userIdentity.userRecordName == "_carol" }
        #expect(carol?.permission == .readOnly && carol?.acceptanceStatus == .accepted)
        // Someone else's email is someone else.
        try accepted.addParticipant(Participant(lookupInfo: .init(emailAddress: "dave@example.org"), permission: .readOnly))
        #expect(accepted.participants.count == before + 1)
    }

    @Test("two email addresses are two people even with one phone number; someone removed after accepting is invited afresh by email")
    func differentEmailsAndRemovedParticipants() throws {
        let (database, saved) = try zoneZShared(with: [
            Participant(lookupInfo: .init(emailAddress: "a@example.org", phoneNumber: "+1 555 0100", userRecordName: nil), permission: .readWrite),
            Participant(lookupInfo: .init(emailAddress: "b@example.org", phoneNumber: "+15550100", userRecordName: nil), permission: .readOnly),
            Participant(lookupInfo: .init(emailAddress: "carol@example.org"), permission: .readWrite),
        ])
        let emails = saved.participants.compactMap { $0.userIdentity.lookupInfo?.emailAddress }
        #expect(emails.contains("a@example.org") && emails.contains("b@example.org"), "a shared phone number made them one")
        _ = try database.acceptShare(url: saved.url!, as: Caller(userRecordName: "_carol", verifiedEmailAddress: "carol@example.org"))
        // Carol leaves: her entry stays, removed, bound to her identity.
        try database.sharedDatabase(for: Caller(userRecordName: "_carol")).leaveShare(
            Record.ID(recordName: Share.zoneShareRecordName, zoneID: RecordZone.ID(zoneName: "Z", ownerName: "_owner")))
        var accepted = Share(try database.fetchRecord(saved.recordID))!
        #expect(accepted.participants.contains { $0.userIdentity.userRecordName == "_carol" && $0.acceptanceStatus == .removed })
        let count = accepted.participants.count
        // Invited again by email (from a new node, say): a new invitation, not the old entry made
        // pending again, which only the old node's key could take.
        try accepted.addParticipant(Participant(lookupInfo: .init(emailAddress: "carol@example.org"), permission: .readWrite))
        #expect(accepted.participants.count == count + 1)
        let fresh = accepted.participants.last
        #expect(fresh?.userIdentity.userRecordName == nil && fresh?.acceptanceStatus == .pending)
        // By user record name, the removed entry comes back.
        try accepted.addParticipant(Participant(lookupInfo: .init(userRecordName: "_carol"), permission: .readOnly))
        #expect(accepted.participants.count == count + 1)
    }
}
