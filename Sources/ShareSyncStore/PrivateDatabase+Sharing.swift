import Foundation
import GRDB
import ShareSyncCore
import Synchronization

/// Where share URLs point: the owner node's advertised address and key fingerprint.
public struct ShareURLBase: Sendable, Hashable {
    public var host: String
    public var port: Int
    public var ownerFingerprint: String?

    public init(host: String, port: Int, ownerFingerprint: String? = nil) {
        self.host = host
        self.port = port
        self.ownerFingerprint = ownerFingerprint
    }
}

extension PrivateDatabase {
    /// Sets the address and fingerprint that share URLs carry. URLs are computed when read, so a node
    /// that moves keeps its shares' tokens and hands out its new address.
    public func setShareURLBase(_ base: ShareURLBase) {
        urlBase.withLock { $0 = base }
        generation.add(1, ordering: .releasing)
    }

    /// The container identifier of this database, as ``ShareMetadata`` reports it.
    public var containerIdentifier: String { "sharesync.\(ownerName)" }

    /// The shared database of a participant: what this owner shares with them, filtered to their view.
    public func sharedDatabase(for caller: Caller) -> SharedDatabaseView {
        SharedDatabaseView(database: self, caller: caller)
    }

    /// A stored record as `viewer` sees it: in a shared view the zone carries the owner's name, and a
    /// share shows only the participants the viewer may see, with its URL.
    func present(_ record: Record, to viewer: String, zoneID: RecordZone.ID, in db: Database) -> Record {
        var record = zoneID == record.recordID.zoneID ? record : record.relocated(to: zoneID)
        guard var share = Share(record) else { return record }
        let seesAll = viewer == ownerName || AccessPolicy.isAcceptedAdministrator(viewer, of: share)
        share = AccessPolicy.visibleShare(share, to: viewer, isOwner: viewer == ownerName)
        record = share.record
        // Who changed the share last is one of its participants or requesters (an accept, a leave, an
        // access request): shown only to those who see them all; others see the owner.
        if !seesAll, let last = record.lastModifiedUserRecordID, last.recordName != viewer {
            record.lastModifiedUserRecordID = Record.ID(recordName: ownerName)
        }
        let token = try? String.fetchOne(
            db.cachedStatement(sql: "SELECT token FROM share WHERE zone = ? AND name = ?"),
            arguments: [zoneID.zoneName, record.recordID.recordName])
        if let token {
            let base = urlBase.withLock { $0 }
            record.shareState?.url = ShareURL(
                host: base.host, port: base.port, token: token, ownerFingerprint: base.ownerFingerprint
            ).absoluteString
        }
        return record
    }

    /// The JSON of ``present(_:to:zoneID:in:)`` of a stored record, byte for byte, without decoding
    /// it: a stored record's JSON ends with its zone ID, the one thing presenting changes for a record
    /// that is not a share, so the stored bytes are kept up to it and the viewer's zone ID is written
    /// after. Share records (presented per viewer) and any JSON naming a zone elsewhere (a reference
    /// stored with an explicit zone, which presenting would drop) go the long way. Measured
    /// (`sharesync-bench suite --only initial-sync`): the owner's CPU for serving an initial sync
    /// from about 27 % in decoding and encoding records to a few percent.
    func presentedJSON(
        _ stored: Data, name: String, type: String, to viewer: String, splice: ZoneIDSplice, in db: Database
    ) throws -> Data {
        if type != Record.shareRecordType, let spliced = splice.apply(stored) { return spliced }
        let record = try decodeStored(stored, type: type, zone: splice.zoneID.zoneName, name: name)
        return try present(record, to: viewer, zoneID: splice.zoneID, in: db).jsonData()
    }

    /// Replaces the zone ID a stored record's JSON ends with by the one a participant sees.
    struct ZoneIDSplice {
        let zoneID: RecordZone.ID
        /// How stored JSON of a record of this zone ends, and how the presented JSON ends.
        private let storedTail: [UInt8]
        private let presentedTail: [UInt8]
        private static let zoneIDKey: [UInt8] = Array(#""zoneID""#.utf8)

        init(_ zoneID: RecordZone.ID) {
            self.zoneID = zoneID
            func tail(owner: String) -> [UInt8] {
                var writer = JSONWriter(capacity: 96)
                writer.raw(#","zoneID":{"ownerRecordName":"#)
                writer.string(owner)
                writer.raw(#","zoneName":"#)
                writer.string(zoneID.zoneName)
                writer.raw("}}")
                return writer.bytes
            }
            storedTail = tail(owner: RecordZone.ID.currentUserDefaultName)
            presentedTail = tail(owner: zoneID.ownerName)
        }

        /// The stored JSON with the presented zone ID in place of the stored one, or nil if it does
        /// not end with the stored zone ID or names a zone anywhere else. Works on the raw bytes
        /// (Data's generic collection methods cost more than decoding the record).
        func apply(_ stored: Data) -> Data? {
            let tail = storedTail
            let splices = stored.withUnsafeBytes { (bytes: UnsafeRawBufferPointer) -> Bool in
                guard bytes.count > tail.count else { return false }
                let bodyCount = bytes.count - tail.count
                guard memcmp(bytes.baseAddress! + bodyCount, tail, tail.count) == 0 else { return false }
                // No `"zoneID"` in the body: a key only (a quote inside a string is escaped).
                // memchr finds each `z` (rare in JSON punctuation), then the bytes around it are compared.
                let base = bytes.baseAddress!.assumingMemoryBound(to: UInt8.self)
                var from = 1
                while from < bodyCount, let hit = memchr(base + from, Int32(UInt8(ascii: "z")), bodyCount - from) {
                    let i = base.distance(to: hit.assumingMemoryBound(to: UInt8.self))
                    if i + Self.zoneIDKey.count - 1 <= bodyCount, memcmp(base + i - 1, Self.zoneIDKey, Self.zoneIDKey.count) == 0 { return false }
                    from = i + 1
                }
                return true
            }
            guard splices else { return nil }
            var json = Data(capacity: stored.count - tail.count + presentedTail.count)
            stored.withUnsafeBytes { json.append($0.bindMemory(to: UInt8.self).baseAddress!, count: stored.count - tail.count) }
            json.append(contentsOf: presentedTail)
            return json
        }
    }


    /// The zone ID under which participants see a zone.
    func sharedZoneID(_ name: String) -> RecordZone.ID { RecordZone.ID(zoneName: name, ownerName: ownerName) }

    // MARK: URLs, metadata, accepting, requesting access

    /// What a user may learn from a share URL, like `CKFetchShareMetadataOperation`.
    ///
    /// An uninvited user of a private share that does not take access requests gets
    /// ``ShareSyncError/Code/participantMayNeedVerification``, exactly as for a URL that names no share.
    public func fetchShareMetadata(url: String, for caller: Caller, shouldFetchRootRecord: Bool = false) throws(ShareSyncError)
        -> ShareMetadata
    {
        try read { db in
            let (parsed, zone, share) = try resolve(url, db)
            let me = match(caller, in: share, invitation: parsed.invitation)
            if caller.userRecordName != ownerName, me == nil, let spent = spentLink(share, invitation: parsed.invitation) {
                throw spent
            }
            let role: Participant.Role
            let permission: Participant.Permission
            let status: Participant.AcceptanceStatus
            var mayRead = true
            if caller.userRecordName == ownerName {
                (role, permission, status) = (.owner, .readWrite, .accepted)
            } else if let me, me.acceptanceStatus != .removed {
                (role, permission, status) = (me.role, AccessPolicy.effectivePermission(of: me, in: share), me.acceptanceStatus)
            } else if isBlocked(caller, share) {
                throw Self.notInvited
            } else if share.publicPermission != .none {
                (role, permission, status) = (.publicUser, share.publicPermission, .unknown)
            } else if share.allowsAccessRequests {
                (role, permission, status) = (.unknown, .none, .unknown)
                mayRead = false
            } else {
                throw Self.notInvited
            }
            let zoneID = caller.userRecordName == ownerName ? RecordZone.ID(zoneName: zone) : sharedZoneID(zone)
            var visible = Share(present(share.record, to: caller.userRecordName, zoneID: zoneID, in: db))!
            if !mayRead {
                visible.updateState {
                    $0.participants = $0.participants.filter { $0.role == .owner }
                    $0.requesters = []
                    $0.blockedIdentities = []
                }
            }
            var root: Record?
            if shouldFetchRootRecord, mayRead, let rootID = share.rootRecordID,
                let json = try Data.fetchOne(db, sql: "SELECT json FROM record WHERE zone = ? AND name = ?", arguments: [zone, rootID.recordName])
            {
                root = present(try Record(jsonData: json), to: caller.userRecordName, zoneID: zoneID, in: db)
            }
            let participantCount = mayRead
                ? share.participants.filter { $0.acceptanceStatus != .removed }.count : nil
            let ownerIdentity = self.ownerIdentity
            let count = mayRead
                ? try Int.fetchOne(
                    db, sql: "SELECT COUNT(*) FROM record WHERE zone = ? AND shareName = ?",
                    arguments: [zone, share.recordID.recordName]) : nil
            return ShareMetadata(
                share: visible, containerIdentifier: containerIdentifier,
                ownerIdentity: ownerIdentity,
                hierarchicalRootRecordID: share.rootRecordID.map { Record.ID(recordName: $0.recordName, zoneID: zoneID) },
                rootRecord: root, participantRole: role, participantPermission: permission, participantStatus: status,
                recordCount: count, participantCount: participantCount)
        }
    }

    /// Accepts a share, like `CKAcceptSharesOperation`: an invited participant (by identity, or by
    /// their invitation link) becomes accepted; on a public share, anyone with the URL joins as a
    /// public user with the share's public permission. The share's zone then appears in the caller's
    /// shared database.
    @discardableResult
    public func acceptShare(url: String, as caller: Caller) throws(ShareSyncError) -> ShareMetadata {
        try write { db in
            let (parsed, _, existing) = try resolve(url, db)
            guard caller.userRecordName != ownerName else { return }
            var share = existing
            var ctx = try WriteContext(db: db, database: self, actor: caller.userRecordName)
            if isBlocked(caller, share) { throw Self.notInvited }
            let limit = limits.maximumParticipants
            var failure: ShareSyncError?
            let matched = match(caller, in: share, invitation: parsed.invitation)
            if matched == nil, let spent = spentLink(share, invitation: parsed.invitation) { throw spent }
            let now = ctx.now
            share.updateState { state in
                if let me = matched,
                    let i = state.participants.firstIndex(where: { $0.participantID == me.participantID })
                {
                    if state.participants[i].acceptanceStatus == .removed {
                        failure = ShareSyncError(
                            .permissionFailure, "you left this share; the owner must invite you again", rule: .leftShare)
                        return
                    }
                    state.participants[i].userIdentity.userRecordName = caller.userRecordName
                    // A link binding someone who had left: their old entry goes (one entry per identity).
                    let bound = state.participants[i].participantID
                    state.participants.removeAll {
                        $0.participantID != bound && $0.role != .owner && $0.acceptanceStatus == .removed
                            && $0.userIdentity.userRecordName == caller.userRecordName
                    }
                    guard let j = state.participants.firstIndex(where: { $0.participantID == bound }) else { return }
                    // Their own name, as they give it at their first accept (nobody else sets it, and
                    // accepting again changes nothing: ``WriteContext/normalize(_:existing:)``).
                    if state.participants[j].userIdentity.displayName == nil {
                        state.participants[j].userIdentity.displayName = caller.displayName
                    }
                    state.participants[j].acceptanceStatus = .accepted
                    // The secret stays, spent: the link now admits only this user (see `spentLink`).
                } else if state.publicPermission != .none {
                    guard state.participants.count < limit else {
                        failure = ShareSyncError(
                            .tooManyParticipants, "the share already has \(limit) participants", rule: .maximumParticipants)
                        return
                    }
                    state.participants.append(Participant(
                        participantID: UUID().uuidString, userIdentity: caller.identity, role: .publicUser,
                        permission: state.publicPermission, acceptanceStatus: .accepted, dateAddedToShare: now,
                        isApprovedRequester: false, isOneTimeURLParticipant: false, invitationToken: nil))
                } else {
                    failure = Self.notInvited
                }
            }
            if let failure { throw failure }
            // Accepting again what is already accepted (another device of the same person, a retried
            // accept) changes nothing: no write, so no change reaches the share's other participants.
            if share == existing { return }
            _ = try ctx.storeShareState(share)
            try ctx.settleSharing()
            try ctx.finish()
        }
        return try fetchShareMetadata(url: ShareURL(string: url)?.shareURL.absoluteString ?? url, for: caller)
    }

    /// Asks the owner for access to a share that allows access requests.
    public func requestAccess(url: String, as caller: Caller) throws(ShareSyncError) {
        try write { db in
            let existing: Share
            do {
                (_, _, existing) = try resolve(url, db)
            } catch let error as ShareSyncError where error.rule == .notInvited {
                throw Self.takesNoRequests
            }
            guard existing.allowsAccessRequests, !isBlocked(caller, existing) else { throw Self.takesNoRequests }
            if AccessPolicy.acceptedParticipant(caller.userRecordName, in: existing) != nil { return }
            var share = existing
            var ctx = try WriteContext(db: db, database: self, actor: caller.userRecordName)
            let now = ctx.now
            guard !share.requesters.contains(where: { $0.userRecordName == caller.userRecordName }) else { return }
            // Any key may ask: without a bound, enough keys grew the share record to the record size
            // limit, and then neither the owner nor an administrator could save the share again.
            guard share.requesters.count < Share.maximumRequesters else {
                throw ShareSyncError(
                    .limitExceeded,
                    "the share already holds \(Share.maximumRequesters) access requests waiting for an answer; ask the owner directly",
                    rule: .maximumRequesters)
            }
            share.updateState { $0.requesters.append(AccessRequester(userIdentity: caller.identity, requestDate: now)) }
            _ = try ctx.storeShareState(share)
            try ctx.settleSharing()
            try ctx.finish()
        }
    }

    /// The refusal of an access request: the same for a share that takes none (or none from this
    /// caller) as for a URL that names no share, so that it tells a guesser nothing. It used to be
    /// ``notInvited``'s, which spoke of invitations to someone asking for one.
    static var takesNoRequests: ShareSyncError {
        ShareSyncError(
            .participantMayNeedVerification,
            "there is no share at this URL that takes access requests from you; ask its owner to invite you",
            rule: .notInvited)
    }

    static var notInvited: ShareSyncError {
        ShareSyncError(
            .participantMayNeedVerification,
            "there is no share at this URL that you are invited to; ask the owner to invite you (or use your invitation link)",
            rule: .notInvited)
    }

    /// The shares of a zone (the zone-wide one and hierarchy shares), by record name: read from the
    /// share index, without reading the zone's other records. ``ShareSyncError/Code/zoneNotFound`` if
    /// the zone does not exist.
    public func fetchShares(in zoneID: RecordZone.ID) throws(ShareSyncError) -> [Share] {
        _ = try fetchZone(zoneID)
        let zone = self.zoneID(zoneID.zoneName)
        return try read { db in
            try Data.fetchAll(
                db,
                sql: """
                    SELECT record.json FROM share JOIN record ON record.zone = share.zone AND record.name = share.name
                    WHERE share.zone = ? ORDER BY share.name
                    """,
                arguments: [zoneID.zoneName]
            ).compactMap { Share(present(try Record(jsonData: $0), zoneID: zone, in: db)) }
        }
    }

    private func resolve(_ url: String, _ db: Database) throws -> (ShareURL, String, Share) {
        guard let parsed = ShareURL(string: url) else {
            throw ShareSyncError(
                .invalidArguments, "not a share URL (\(ShareURL.problem(with: url) ?? "?")): \(url.prefix(200))", rule: .shareURLSyntax)
        }
        guard let row = try Row.fetchOne(db, sql: "SELECT zone, name FROM share WHERE token = ?", arguments: [parsed.token]),
            let json = try Data.fetchOne(
                db, sql: "SELECT json FROM record WHERE zone = ? AND name = ?", arguments: [row["zone"], row["name"]]),
            let share = Share(try Record(jsonData: json))
        else { throw Self.notInvited }
        return (parsed, row["zone"], share)
    }

    /// The participant `caller` is in `share`: the pending one whose invitation link they use, else the
    /// one that is their identity. A link admits whom it was made for (SharingRules.md, "Identity and
    /// accepting"): an invitation addressed to a user record name only that user; for anyone else the
    /// link matches nothing, so they get the answer of the uninvited and the invitation stays unspent.
    /// An invitation by email or phone, or a one-time URL participant, binds whoever uses the link first.
    /// Someone who already takes part (not left) is their own participant whatever link they use, so a
    /// link for someone else stays unspent and nobody is in a share twice.
    private func match(_ caller: Caller, in share: Share, invitation: String?) -> Participant? {
        let byIdentity = share.participants.first { $0.role != .owner && $0.isIdentity(of: caller) }
        if let byIdentity, byIdentity.acceptanceStatus != .removed { return byIdentity }
        if let invitation,
            let p = share.participants.first(where: { $0.invitationToken == invitation && $0.acceptanceStatus == .pending }),
            p.addressedUserRecordName.map({ $0 == caller.userRecordName }) ?? true
        {
            return p
        }
        return byIdentity
    }

    /// The answer to someone using an invitation link that another identity already used: a private
    /// share's link that was bound to its first user admits nobody else (SharingRules.md, "Identity and
    /// accepting"). Only the holder of the secret gets this answer, so it reveals nothing to others.
    /// A link addressed to a user record name was never anyone else's to use, spent or not: they get
    /// the answer of the uninvited (`notInvited`), as protocol.md says. Before, once its user had
    /// accepted, anyone else was told it was spent, "the first person who used it".
    private func spentLink(_ share: Share, invitation: String?) -> ShareSyncError? {
        guard let invitation, share.publicPermission == .none,
            share.participants.contains(where: {
                // (Addressed as invited: the lookup info's name. A bound entry has a user record name too.)
                $0.invitationToken == invitation && $0.acceptanceStatus != .pending && $0.userIdentity.lookupInfo?.userRecordName == nil
            })
        else { return nil }
        return ShareSyncError(
            .participantMayNeedVerification,
            "this invitation link was already used by someone else: it admits only the first person who used it; ask the owner for a new one",
            rule: .invitationSpent)
    }

    private func isBlocked(_ caller: Caller, _ share: Share) -> Bool {
        share.blockedIdentities.contains { $0.userRecordName == caller.userRecordName }
    }
}
