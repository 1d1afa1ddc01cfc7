import Foundation
import Testing

@testable import ShareSyncCore

@Suite("Share value type")
struct ShareTests {
    let root = Record(recordType: "Topic", recordID: Record.ID(recordName: "topic-1", zoneID: topicsZone))

    /// The owner's participant, as the database adds it when the share is first saved.
    static let owner = Participant(
        participantID: "owner", userIdentity: UserIdentity(userRecordName: "_owner"), role: .owner,
        permission: .readWrite, acceptanceStatus: .accepted, dateAddedToShare: date(millis: 1_700_000_000_000),
        isApprovedRequester: false, isOneTimeURLParticipant: false, invitationToken: nil)

    static func requester(_ name: String) -> AccessRequester {
        AccessRequester(
            userIdentity: UserIdentity(userRecordName: name, displayName: "User \(name)"),
            requestDate: date(millis: 1_700_000_100_000))
    }

    @Test("a zone share is a cloudkit.share record named cloudkit.zoneshare in that zone, with no root")
    func zoneShare() {
        let share = Share(recordZoneID: topicsZone)
        #expect(share.recordID == Record.ID(recordName: "cloudkit.zoneshare", zoneID: topicsZone))
        #expect(Share.zoneShareRecordName == "cloudkit.zoneshare")
        #expect(share.record.recordType == "cloudkit.share")
        #expect(share.isZoneWide)
        #expect(share.rootRecordID == nil)
    }

    @Test("a hierarchy share points at its root and lives in the root's zone")
    func hierarchyShare() {
        let share = Share(rootRecord: root)
        #expect(share.rootRecordID == root.recordID)
        #expect(share.recordID.zoneID == topicsZone)
        #expect(!share.isZoneWide)
        #expect(share.record.recordType == Record.shareRecordType)
        #expect(share.publicPermission == .none)
        #expect(share.participants.isEmpty)
        #expect(!share.allowsAccessRequests)
        #expect(share.url == nil)
    }

    @Test("a Share can be read back from its record, but not from a record of another type")
    func shareFromRecord() {
        let share = Share(rootRecord: root)
        #expect(Share(share.record) == share)
        #expect(Share(root) == nil)
    }

    @Test("adding a participant to a public share throws publicAndPrivateDoNotMix and changes nothing")
    func addToPublicShareThrows() throws {
        var share = Share(rootRecord: root)
        share.publicPermission = .readOnly
        let error = try #require(#expect(throws: ShareSyncError.self) {
            try share.addParticipant(Participant(lookupInfo: .init(emailAddress: "bob@example.com")))
        })
        #expect(error.code == .invalidArguments)
        #expect(error.rule == .publicAndPrivateDoNotMix)
        #expect(error.recordID == share.recordID)
        #expect(share.participants.isEmpty)
    }

    @Test("removing a participant from a public share throws publicAndPrivateDoNotMix")
    func removeFromPublicShareThrows() throws {
        var share = Share(rootRecord: root)
        let bob = Participant(lookupInfo: .init(emailAddress: "bob@example.com"))
        try share.addParticipant(bob)
        share.publicPermission = .readWrite
        let error = try #require(#expect(throws: ShareSyncError.self) { try share.removeParticipant(bob) })
        #expect(error.rule == .publicAndPrivateDoNotMix)
        #expect(share.participants.count == 1)
    }

    @Test("adding a participant appends it as pending with its permission")
    func addParticipant() throws {
        var share = Share(rootRecord: root)
        let bob = Participant(lookupInfo: .init(emailAddress: "bob@example.com"), permission: .readWrite)
        try share.addParticipant(bob)
        #expect(share.participants == [bob])
        #expect(share.participants[0].acceptanceStatus == .pending)
        #expect(share.participants[0].permission == .readWrite)
        #expect(share.participants[0].role == .privateUser)
    }

    @Test("adding the same email twice (any case) updates that participant rather than duplicating it")
    func sameEmailTwiceUpdates() throws {
        var share = Share(rootRecord: root)
        let first = Participant(lookupInfo: .init(emailAddress: "bob@example.com"), permission: .readOnly)
        try share.addParticipant(first)
        try share.addParticipant(
            Participant(lookupInfo: .init(emailAddress: "Bob@Example.COM"), permission: .readWrite, role: .administrator))
        #expect(share.participants.count == 1)
        #expect(share.participants[0].participantID == first.participantID)
        #expect(share.participants[0].permission == .readWrite)
        #expect(share.participants[0].role == .administrator)
    }

    @Test("adding the same user record name twice updates that participant")
    func sameUserTwiceUpdates() throws {
        var share = Share(rootRecord: root)
        try share.addParticipant(Participant(lookupInfo: .init(userRecordName: "_bob"), permission: .readOnly))
        try share.addParticipant(Participant(lookupInfo: .init(userRecordName: "_bob"), permission: .readWrite))
        try share.addParticipant(Participant(lookupInfo: .init(userRecordName: "_carol")))
        #expect(share.participants.map(\.userIdentity.userRecordName) == ["_bob", "_carol"])
        #expect(share.participants[0].permission == .readWrite)
    }

    @Test("adding the same phone number in another format updates that participant")
    func samePhoneTwiceUpdates() throws {
        var share = Share(rootRecord: root)
        try share.addParticipant(Participant(lookupInfo: .init(phoneNumber: "+1 (555) 010-0000")))
        try share.addParticipant(Participant(lookupInfo: .init(phoneNumber: "+15550100000"), permission: .readWrite))
        #expect(share.participants.count == 1)
        #expect(share.participants[0].permission == .readWrite)
    }

    @Test("adding a participant with the owner role, or the owner's identity, throws oneOwner")
    func ownerCannotBeAdded() throws {
        var share = Share(rootRecord: root)
        share.updateState { $0.participants = [Self.owner] }
        let asOwner = try #require(#expect(throws: ShareSyncError.self) {
            try share.addParticipant(Participant(lookupInfo: .init(emailAddress: "x@example.com"), role: .owner))
        })
        #expect(asOwner.rule == .oneOwner)
        let ownersIdentity = try #require(#expect(throws: ShareSyncError.self) {
            try share.addParticipant(Participant(lookupInfo: .init(userRecordName: "_owner"), permission: .readOnly))
        })
        #expect(ownersIdentity.rule == .oneOwner)
        #expect(share.participants == [Self.owner])
        #expect(share.owner == Self.owner)
    }

    @Test("removeParticipant removes that participant only; the owner cannot be removed")
    func removeParticipant() throws {
        var share = Share(rootRecord: root)
        share.updateState { $0.participants = [Self.owner] }
        let bob = Participant(lookupInfo: .init(emailAddress: "bob@example.com"))
        let carol = Participant(lookupInfo: .init(emailAddress: "carol@example.com"))
        try share.addParticipant(bob)
        try share.addParticipant(carol)
        try share.removeParticipant(bob)
        #expect(share.participants.map(\.participantID) == [Self.owner.participantID, carol.participantID])
        let error = try #require(#expect(throws: ShareSyncError.self) { try share.removeParticipant(Self.owner) })
        #expect(error.rule == .oneOwner)
        #expect(share.participants.count == 2)
    }

    @Test("setPermission changes a participant's permission; an unknown participant is unknownItem")
    func setPermission() throws {
        var share = Share(rootRecord: root)
        let bob = Participant(lookupInfo: .init(emailAddress: "bob@example.com"))
        try share.addParticipant(bob)
        try share.setPermission(.readWrite, forParticipantID: bob.participantID)
        #expect(share.participants[0].permission == .readWrite)
        let error = try #require(#expect(throws: ShareSyncError.self) { try share.setPermission(.readOnly, forParticipantID: "nobody") })
        #expect(error.code == .unknownItem)
    }

    @Test("blockRequesters removes the requester and any participant with that identity, and blocks it")
    func blockRequesters() throws {
        var share = Share(rootRecord: root)
        share.updateState { $0.participants = [Self.owner] }
        try share.addParticipant(Participant(lookupInfo: .init(userRecordName: "_bob")))
        try share.addParticipant(Participant(lookupInfo: .init(userRecordName: "_carol")))
        let bob = Self.requester("_bob")
        let dave = Self.requester("_dave")
        share.updateState { $0.requesters = [bob, dave] }

        share.blockRequesters([bob])

        #expect(share.requesters == [dave])
        #expect(share.participants.map(\.userIdentity.userRecordName) == ["_owner", "_carol"])
        #expect(share.blockedIdentities.map(\.userRecordName) == ["_bob"])
    }

    @Test("blocking the same identity twice blocks it once, and never removes the owner")
    func blockTwiceAndOwner() {
        var share = Share(rootRecord: root)
        share.updateState { $0.participants = [Self.owner] }
        share.blockIdentities([UserIdentity(userRecordName: "_bob"), UserIdentity(userRecordName: "_owner")])
        share.blockRequesters([Self.requester("_bob")])
        #expect(share.blockedIdentities.map(\.userRecordName).filter { $0 == "_bob" }.count == 1)
        #expect(share.owner == Self.owner)
    }

    @Test("denyRequesters removes the requesters without blocking them")
    func denyRequesters() {
        var share = Share(rootRecord: root)
        let bob = Self.requester("_bob")
        let dave = Self.requester("_dave")
        share.updateState { $0.requesters = [bob, dave] }
        share.denyRequesters([bob])
        #expect(share.requesters == [dave])
        #expect(share.blockedIdentities.isEmpty)
    }

    @Test("unblockIdentities lifts only those blocks")
    func unblockIdentities() {
        var share = Share(rootRecord: root)
        share.blockIdentities([UserIdentity(userRecordName: "_bob"), UserIdentity(userRecordName: "_dave")])
        let bobBlock = try! #require(share.blockedIdentities.first { $0.userRecordName == "_bob" })
        share.unblockIdentities([bobBlock])
        #expect(share.blockedIdentities.map(\.userRecordName) == ["_dave"])
    }

    @Test("approveRequester makes the requester a participant with isApprovedRequester and removes the request")
    func approveRequester() throws {
        var share = Share(rootRecord: root)
        let bob = Self.requester("_bob")
        let dave = Self.requester("_dave")
        share.updateState { $0.requesters = [bob, dave] }

        try share.approveRequester(bob, permission: .readWrite)

        #expect(share.requesters == [dave])
        let participant = try #require(share.participants.first)
        #expect(share.participants.count == 1)
        #expect(participant.isApprovedRequester)
        #expect(participant.userIdentity == bob.userIdentity)
        #expect(participant.permission == .readWrite)
        #expect(participant.role == .privateUser)
        #expect(participant.acceptanceStatus == .pending)
        #expect(participant.isIdentity(of: Caller(userRecordName: "_bob")))
    }

    @Test("approving a requester on a public share throws publicAndPrivateDoNotMix and keeps the request")
    func approveOnPublicShare() throws {
        var share = Share(rootRecord: root)
        share.publicPermission = .readOnly
        let bob = Self.requester("_bob")
        share.updateState { $0.requesters = [bob] }
        let error = try #require(#expect(throws: ShareSyncError.self) { try share.approveRequester(bob, permission: .readOnly) })
        #expect(error.rule == .publicAndPrivateDoNotMix)
        #expect(share.requesters == [bob])
    }

    @Test("title, thumbnail and share type are stored as the fields cloudkit.title, cloudkit.thumbnailImageData, cloudkit.type")
    func systemFields() throws {
        var share = Share(rootRecord: root)
        share.title = "Groceries"
        share.thumbnailImageData = Data([1, 2, 3])
        share.shareType = "com.example.topic"
        #expect(share.record["cloudkit.title"] == .string("Groceries"))
        #expect(share.record["cloudkit.thumbnailImageData"] == .bytes(Data([1, 2, 3])))
        #expect(share.record["cloudkit.type"] == .string("com.example.topic"))
        #expect(share.record.changedKeys == ["cloudkit.title", "cloudkit.thumbnailImageData", "cloudkit.type"])
        #expect(share.title == "Groceries")
        #expect(share.thumbnailImageData == Data([1, 2, 3]))
        #expect(share.shareType == "com.example.topic")

        share.title = nil
        #expect(share.record["cloudkit.title"] == nil)
        #expect(share.title == nil)
        #expect(try jsonString(share.record).contains(#""cloudkit.type":{"type":"STRING","value":"com.example.topic"}"#))
    }

    @Test("a share record round-trips through JSON with its participants, requesters, blocks and settings")
    func roundTrip() throws {
        var share = Share(rootRecord: root)
        share.updateState { $0.participants = [Self.owner] }
        share.title = "Groceries"
        try share.addParticipant(Participant(lookupInfo: .init(emailAddress: "bob@example.com"), permission: .readWrite))
        try share.addParticipant(.oneTimeURLParticipant())
        share.allowsAccessRequests = true
        share.blockIdentities([UserIdentity(userRecordName: "_eve")])
        share.updateState {
            $0.requesters = [Self.requester("_dave")]
            $0.url = "sharesync://owner.local:7420/share/tok?owner=f00d"
            $0.participants[1].invitationToken = "inv-1"
            $0.currentUserParticipantID = "owner"
        }

        let json = try jsonString(share.record, includingChangedKeys: true)
        for key in [#""rootRecord":{"recordName":"topic-1"}"#, #""publicPermission":"none""#, #""participants":["#,
            #""allowsAccessRequests":true"#, #""requesters":["#, #""blockedIdentities":["#, #""url":"sharesync://"#]
        {
            #expect(json.contains(key), "missing \(key) in \(json)")
        }

        let decodedRecord = try Record(jsonData: Data(json.utf8))
        #expect(decodedRecord == share.record)
        let decoded = try #require(Share(decodedRecord))
        #expect(decoded == share)
        #expect(decoded.participants == share.participants)
        #expect(decoded.participants.count == 3)
        #expect(decoded.owner == Self.owner)
        #expect(decoded.currentUserParticipant == Self.owner)
        #expect(decoded.participants[2].isOneTimeURLParticipant)
        #expect(decoded.requesters.map(\.userRecordName) == ["_dave"])
        #expect(decoded.blockedIdentities.map(\.userRecordName) == ["_eve"])
        #expect(decoded.allowsAccessRequests)
        #expect(decoded.title == "Groceries")
        #expect(decoded.url == share.url)
        #expect(decoded.oneTimeURL(for: decoded.participants[1].participantID)
            == "sharesync://owner.local:7420/share/tok?owner=f00d&invite=inv-1")
    }

    @Test("a zone share round-trips through JSON and stays zone-wide")
    func zoneShareRoundTrip() throws {
        var share = Share(recordZoneID: topicsZone)
        share.publicPermission = .readOnly
        let decoded = try #require(Share(Record(jsonData: share.record.jsonData())))
        #expect(decoded == share)
        #expect(decoded.isZoneWide)
        #expect(decoded.publicPermission == .readOnly)
        #expect(try !jsonString(share.record).contains("rootRecord"))
    }

    @Test("oneTimeURL is nil before the share has a URL and for participants that are not pending")
    func oneTimeURLNeedsURLAndPending() throws {
        var share = Share(rootRecord: root)
        let bob = Participant(lookupInfo: .init(emailAddress: "bob@example.com"))
        try share.addParticipant(bob)
        share.updateState { $0.participants[0].invitationToken = "inv-1" }
        #expect(share.oneTimeURL(for: bob.participantID) == nil)
        share.updateState {
            $0.url = "sharesync://owner.local:7420/share/tok"
            $0.participants[0].acceptanceStatus = .accepted
        }
        #expect(share.oneTimeURL(for: bob.participantID) == nil)
        share.updateState { $0.participants[0].acceptanceStatus = .pending }
        #expect(share.oneTimeURL(for: bob.participantID) == "sharesync://owner.local:7420/share/tok?invite=inv-1")
    }
}

@Suite("Records holding the same content")
struct SameContentTests {
    @Test("same type, fields and parent: the same content, whatever the change tag; never for share records")
    func sameContent() throws {
        let zone = RecordZone.ID(zoneName: "Topics")
        var mine = Record(recordType: "Note", recordID: Record.ID(recordName: "n", zoneID: zone))
        mine["title"] = "mine"
        mine.setParent(Record.ID(recordName: "topic", zoneID: zone))
        var server = mine
        server.recordChangeTag = "7"
        #expect(mine.holdsSameContent(as: server))
        server["title"] = "theirs"
        #expect(!mine.holdsSameContent(as: server))
        server = mine
        server.setParent(Record.ID(recordName: "other", zoneID: zone))
        #expect(!mine.holdsSameContent(as: server))
        // Two shares with the same fields (title, type) but different participants and permissions:
        // a share's save that conflicted is never taken for one that landed.
        let root = Record(recordType: "Topic", recordID: Record.ID(recordName: "topic", zoneID: zone))
        var a = Share(rootRecord: root)
        a.title = "Groceries"
        var b = a
        b.publicPermission = .readWrite
        try a.addParticipant(Participant(lookupInfo: .init(userRecordName: "_x"), permission: .readWrite))
        #expect(a.record.fields == b.record.fields)
        #expect(!a.record.holdsSameContent(as: b.record))
        #expect(!a.record.holdsSameContent(as: a.record))
    }
}
