import Crypto
import Foundation
import GRDB
import ShareSyncCore

// Sharing on the write path: saving and deleting shares, the rules that keep one record in one share,
// and (in `settleSharing`) membership and each viewer's feed. See Sources/ShareSyncCore/SharingRules.md.

extension WriteContext {
    // MARK: Lookups

    /// A share of this zone, decoded once per transaction.
    func share(zone: String, name: String) throws -> Share? {
        if let cached = cache.shareValues[zone]?[name] { return cached }
        guard try zoneShares(zone).roots[name] != nil, let record = try loadRecord(zone: zone, name: name),
            let share = Share(record)
        else { return nil }
        cache.shareValues[zone, default: [:]][name] = share
        return share
    }

    /// The zone's shares and their roots, read once per transaction.
    func zoneShares(_ zone: String) throws -> WriteCache.ZoneShares {
        if let cached = cache.shares[zone] { return cached }
        var shares = WriteCache.ZoneShares()
        for row in try Row.fetchAll(db.cachedStatement(sql: "SELECT name, root FROM share WHERE zone = ?"), arguments: [zone]) {
            shares.roots[row["name"]] = .some(row["root"] as String?)
        }
        cache.shares[zone] = shares
        return shares
    }

    func zoneShareName(_ zone: String) throws -> String? {
        try zoneShares(zone).zoneShare
    }

    func shareRooted(zone: String, at root: String) throws -> String? {
        try zoneShares(zone).share(rootedAt: root)
    }

    func zoneHasShares(_ zone: String) throws -> Bool {
        try !zoneShares(zone).roots.isEmpty
    }

    /// The share a record belongs to, computed from first principles: the zone-wide share, or the
    /// nearest share root found walking up `parent` (a root's own parent is ignored).
    func membership(zone: String, name: String) throws -> String? {
        let shares = try zoneShares(zone)
        if shares.roots.isEmpty { return nil }
        if let zoneShare = shares.zoneShare { return zoneShare }
        var current: String? = name
        var steps = 0
        while let c = current, steps < 100_000 {
            if let s = try shareRooted(zone: zone, at: c) { return s }
            current = try rowState(zone: zone, name: c)?.parent
            steps += 1
        }
        return nil
    }

    /// The share a record with this parent would belong to.
    func membership(zone: String, parent: String?) throws -> String? {
        if let zoneShare = try zoneShareName(zone) { return zoneShare }
        guard let parent else { return nil }
        return try membership(zone: zone, name: parent)
    }

    func storedShareName(zone: String, name: String) throws -> String? {
        try rowState(zone: zone, name: name)?.shareName
    }

    // MARK: Hooks of the record write path

    /// For a participant, checks a record save against the access policy. It runs before any other
    /// rule, so that no answer says anything about records outside their view.
    func authorizeSave(_ record: Record, existing: Record?) throws {
        guard !isOwner else { return }
        let zone = record.recordID.zoneID.zoneName
        let name = record.recordID.recordName
        let newParent = record.parent?.recordID.recordName
        let parentChanged = existing == nil || existing?.parent?.recordID.recordName != newParent
        let rootOf = try shareRooted(zone: zone, at: name)
        let newShare: String? = try rootOf ?? membership(zone: zone, parent: newParent)
        let write: AccessPolicy.RecordWrite
        if existing != nil {
            let oldShare = try storedShareName(zone: zone, name: name)
            write = .modify(
                in: try oldShare.flatMap { try share(zone: zone, name: $0) },
                newShare: try newShare.flatMap { try share(zone: zone, name: $0) }, isRoot: rootOf != nil,
                parentChanged: parentChanged)
        } else {
            write = .create(into: try newShare.flatMap { try share(zone: zone, name: $0) })
        }
        try AccessPolicy.checkRecordWrite(write, by: actor, recordID: record.recordID)
        // A new record whose name other records already give as their parent (their parent was
        // deleted, which leaves children in place) would take them into its share: a participant may
        // not bring records into their share that are not in it already.
        if existing == nil {
            let children = try Row.fetchAll(
                db.cachedStatement(sql: "SELECT shareName FROM record WHERE zone = ? AND parent = ?"), arguments: [zone, name])
            if children.contains(where: { ($0["shareName"] as String?) != newShare }) {
                throw AccessPolicy.outsideView(record.recordID)
            }
        }
    }

    /// Checks a record save against the sharing rules (one share per record).
    mutating func willSave(_ record: Record, existing: Record?) throws {
        let zone = record.recordID.zoneID.zoneName
        let name = record.recordID.recordName
        let newParent = record.parent?.recordID.recordName
        let parentChanged = existing == nil || existing?.parent?.recordID.recordName != newParent
        let isRoot = try shareRooted(zone: zone, at: name) != nil
        guard try zoneHasShares(zone) else {
            delta.markMembershipDirty(zone: zone, name)
            return
        }
        let newShare: String? = isRoot ? try shareRooted(zone: zone, at: name) : try membership(zone: zone, parent: newParent)
        if parentChanged, !isRoot, let target = newShare, try zoneShareName(zone) == nil {
            // A subtree holding a share root cannot move into another shared hierarchy.
            for d in try descendants(zone: zone, of: name) where try shareRooted(zone: zone, at: d) != nil {
                throw ShareSyncError(
                    .alreadyShared, "record \(d) under \(name) is the root of another share; it cannot join share \(target)",
                    recordID: record.recordID, rule: .oneSharePerRecord)
            }
        }
        if isRoot, parentChanged, let parent = newParent, try zoneShareName(zone) == nil,
            let enclosing = try membership(zone: zone, name: parent)
        {
            throw ShareSyncError(
                .alreadyShared, "record \(name) is the root of a share; it cannot move into share \(enclosing)",
                recordID: record.recordID, rule: .oneSharePerRecord)
        }

        if parentChanged { delta.markMembershipDirty(zone: zone, name) }
    }

    /// Checks a record delete against the sharing rules and (for a participant) the access policy.
    mutating func willDelete(_ record: Record) throws {
        let zone = record.recordID.zoneID.zoneName
        let name = record.recordID.recordName
        guard !isOwner else { return }
        let shareName = try storedShareName(zone: zone, name: name)
        try AccessPolicy.checkRecordWrite(
            .delete(in: try shareName.flatMap { try share(zone: zone, name: $0) }, isRoot: try shareRooted(zone: zone, at: name) != nil),
            by: actor, recordID: record.recordID)
    }

    /// A participant's delete takes with it, through `deleteSelf` references, only records they could
    /// delete themselves: a cascade that reaches any other record (outside their shares, in a share
    /// where they may only read, the root of a share) refuses the whole delete, and the answer names
    /// only the record they asked to delete. Before, the cascade deleted whatever referenced it, so a
    /// participant could delete the owner's unshared records, or the root of another share (and that
    /// share with it).
    mutating func checkCascadedDelete(_ record: Record, deleting original: Record.ID) throws {
        guard !isOwner else { return }
        let zone = record.recordID.zoneID.zoneName
        let name = record.recordID.recordName
        do {
            let shareName = try storedShareName(zone: zone, name: name)
            try AccessPolicy.checkRecordWrite(
                .delete(in: try shareName.flatMap { try share(zone: zone, name: $0) }, isRoot: try shareRooted(zone: zone, at: name) != nil),
                by: actor, recordID: record.recordID)
        } catch is ShareSyncError {
            throw ShareSyncError(
                .permissionFailure,
                "record \(original.recordName) cannot be deleted: records that reference it with deleteSelf would be deleted with it, "
                    + "and you may not delete them", recordID: original, rule: .outsideView)
        }
    }

    /// After records are deleted: a deleted root takes its share with it; children of deleted records
    /// are re-examined.
    mutating func didDelete(_ records: [Record]) throws {
        for record in records {
            let zone = record.recordID.zoneID.zoneName
            let name = record.recordID.recordName
            if let shareName = try shareRooted(zone: zone, at: name) {
                try removeShare(zone: zone, name: shareName)
            }
            for child in try String.fetchAll(db.cachedStatement(sql: "SELECT name FROM record WHERE zone = ? AND parent = ?"), arguments: [zone, name]) {
                delta.markMembershipDirty(zone: zone, child)
            }
        }
    }

    // MARK: Shares

    /// Saves a share record: creates it (owner only, with the overlap rules) or updates it (owner or
    /// administrator), normalizing participants, statuses and tokens.
    mutating func saveShare(_ record: Record, policy: SavePolicy) throws -> Record {
        let id = record.recordID
        let zone = id.zoneID.zoneName
        guard var share = Share(record) else {
            throw ShareSyncError(.invalidArguments, "a cloudkit.share record must carry share properties", recordID: id, rule: .shareRecord)
        }
        guard !id.zoneID.isDefaultZone else {
            throw ShareSyncError(.invalidArguments, "only custom zones can be shared, not the default zone", recordID: id, rule: .defaultZoneNotShareable)
        }
        for key in share.record.fields.keys where !key.hasPrefix("cloudkit.") {
            throw ShareSyncError(.invalidArguments, "a share holds only its system fields, not \(key)", recordID: id, rule: .shareFields)
        }
        let existingRecord = try loadRecord(zone: zone, name: id.recordName)
        if let existingRecord, existingRecord.recordType != Record.shareRecordType {
            if id.recordName == Share.zoneShareRecordName {
                // Saved before the name was kept for zone-wide shares.
                throw ShareSyncError(
                    .invalidArguments,
                    "record \(id.recordName) is a \(existingRecord.recordType), not a share, and the zone-wide share needs its name: "
                        + "delete that record, then share the zone", recordID: id, rule: .zoneShareName)
            }
            throw ShareSyncError(.invalidArguments, "record \(id.recordName) is not a share", recordID: id, rule: .recordTypeImmutable)
        }
        let existing = existingRecord.flatMap(Share.init)
        // Who may save it at all comes first: a read-only participant's stale copy is refused as a
        // change they may not make, not reported as a conflict (or a too-large thumbnail).
        if !isOwner, let existing { try AccessPolicy.checkMayEditShare(existing, by: actor) }
        try checkShareProperties(share)
        if let existing {
            if policy == .ifServerRecordUnchanged, existing.recordChangeTag != record.recordChangeTag {
                throw ShareSyncError(
                    .serverRecordChanged, record.recordChangeTag == nil
                        ? "share \(id.recordName) already exists on the server; this save, without a change tag, would have created it"
                        : "share \(id.recordName) changed on the server since it was fetched", recordID: id,
                    serverRecord: present(existing.record, zoneID: id.zoneID))
            }
            guard existing.rootRecordID?.recordName == share.rootRecordID?.recordName else {
                throw ShareSyncError(.invalidArguments, "a share's root cannot change", recordID: id, rule: .shareRootImmutable)
            }
            if !isOwner { try AccessPolicy.checkShareEdit(old: existing, new: share, by: actor) }
        } else {
            guard isOwner else {
                throw ShareSyncError(.permissionFailure, "only the owner can share records", recordID: id, rule: .shareCreateOwnerOnly)
            }
            try checkNewShare(share, zone: zone)
        }
        share = try normalize(share, existing: existing)
        let token = try urlToken(zone: zone, root: share.rootRecordID?.recordName)
        let stored = Record(
            recordType: Record.shareRecordType, recordID: Record.ID(recordName: id.recordName, zoneID: RecordZone.ID(zoneName: zone)),
            fields: share.record.fields, parent: nil, share: nil, creationDate: existingRecord?.creationDate ?? now,
            modificationDate: now, creatorUserRecordID: existingRecord?.creatorUserRecordID ?? Record.ID(recordName: actor),
            lastModifiedUserRecordID: Record.ID(recordName: actor), recordChangeTag: nil)
        var withState = stored
        withState.shareState = share.shareState
        withState.shareState?.url = nil
        withState.shareState?.currentUserParticipantID = nil
        _ = try withState.validate(limits: database.limits)
        let saved = try store(withState)
        if existing == nil {
            try db.execute(
                sql: "INSERT INTO share (zone, name, root, token) VALUES (?, ?, ?, ?)",
                arguments: [zone, id.recordName, share.rootRecordID?.recordName, token])
            cache.forgetShare(zone: zone, name: id.recordName)
            if let root = share.rootRecordID?.recordName, var rootRecord = try loadRecord(zone: zone, name: root) {
                rootRecord.share = Record.Reference(recordID: Record.ID(recordName: id.recordName, zoneID: RecordZone.ID(zoneName: zone)))
                _ = try store(rootRecord)
                delta.markMembershipDirty(zone: zone, root)
            } else if share.rootRecordID == nil {
                delta.markWholeZoneDirty(zone: zone)
            }
        }
        delta.markShareChanged(zone: zone, id.recordName)
        return saved
    }

    /// The share's system fields: a title and a type are strings, a thumbnail is bytes of at most
    /// ``Share/maximumThumbnailSize``, and a type is a uniform type identifier (`public.image`).
    func checkShareProperties(_ share: Share) throws {
        let id = share.recordID
        let keys = Share.SystemFieldKey.self
        for (key, value) in share.record.fields {
            switch (key, value) {
            case (keys.title, .string), (keys.shareType, .string), (keys.thumbnailImageData, .bytes):
                continue
            case (keys.title, _), (keys.shareType, _), (keys.thumbnailImageData, _):
                throw ShareSyncError(
                    .invalidArguments, "\(key) must be \(key == keys.thumbnailImageData ? "bytes" : "a string")", recordID: id,
                    rule: .shareFields)
            default:
                throw ShareSyncError(
                    .invalidArguments,
                    "a share's system fields are \(keys.title), \(keys.thumbnailImageData) and \(keys.shareType), not \(key)",
                    recordID: id, rule: .shareFields)
            }
        }
        if let data = share.thumbnailImageData, data.count > Share.maximumThumbnailSize {
            throw ShareSyncError(
                .limitExceeded,
                "the share's thumbnail is \(data.count) bytes; at most \(Share.maximumThumbnailSize) are allowed",
                recordID: id, rule: .thumbnailSize)
        }
        if let type = share.shareType {
            guard Self.isUniformTypeIdentifier(type) else {
                throw ShareSyncError(
                    .invalidArguments,
                    "share type \(type.prefix(80).debugDescription) is not a uniform type identifier (like public.image or com.example.list: letters, digits, - and ., at most 255 bytes)",
                    recordID: id, rule: .shareTypeSyntax)
            }
        }
    }

    /// Whether `type` looks like a uniform type identifier: ASCII letters, digits, `-` and `.`, not
    /// starting or ending with `.`, 1-255 bytes.
    static func isUniformTypeIdentifier(_ type: String) -> Bool {
        let bytes = Array(type.utf8)
        guard !bytes.isEmpty, bytes.count <= 255, bytes.first != UInt8(ascii: "."), bytes.last != UInt8(ascii: ".") else {
            return false
        }
        for b in bytes {
            let letter = (b >= UInt8(ascii: "a") && b <= UInt8(ascii: "z")) || (b >= UInt8(ascii: "A") && b <= UInt8(ascii: "Z"))
            let digit = b >= UInt8(ascii: "0") && b <= UInt8(ascii: "9")
            if !(letter || digit || b == UInt8(ascii: "-") || b == UInt8(ascii: ".")) { return false }
        }
        return true
    }

    /// The overlap rules for a new share.
    func checkNewShare(_ share: Share, zone: String) throws {
        let id = share.recordID
        if let root = share.rootRecordID {
            guard root.zoneID.zoneName == zone else {
                throw ShareSyncError(.invalidArguments, "a share lives in its root's zone", recordID: id, rule: .shareRootZone)
            }
            guard try loadRecord(zone: zone, name: root.recordName) != nil else {
                throw ShareSyncError(
                    .invalidArguments, "the root record \(root.recordName) must exist or be saved in the same request as its share",
                    recordID: id, rule: .shareRootExists)
            }
            if try zoneShareName(zone) != nil {
                throw ShareSyncError(.alreadyShared, "zone \(zone) is already shared as a whole", recordID: id, rule: .oneSharePerRecord)
            }
            if let other = try membership(zone: zone, name: root.recordName) {
                throw ShareSyncError(
                    .alreadyShared, "record \(root.recordName) is already part of share \(other)", recordID: root, rule: .oneSharePerRecord)
            }
            for d in try descendants(zone: zone, of: root.recordName) where try shareRooted(zone: zone, at: d) != nil {
                throw ShareSyncError(
                    .alreadyShared, "record \(d) under \(root.recordName) is the root of another share", recordID: root,
                    rule: .oneSharePerRecord)
            }
        } else {
            guard id.recordName == Share.zoneShareRecordName else {
                throw ShareSyncError(
                    .invalidArguments, "a zone-wide share's record name is \(Share.zoneShareRecordName)", recordID: id, rule: .zoneShareName)
            }
            if try zoneHasShares(zone) {
                throw ShareSyncError(
                    .alreadyShared, "zone \(zone) already has a share; a zone-wide share cannot overlap it", recordID: id,
                    rule: .oneSharePerRecord)
            }
        }
    }

    /// Applies the rules that the server, not the client, decides: the owner participant, statuses,
    /// dates, invitation secrets, public/private mixing, public users' permission (the share's
    /// publicPermission), removals when publicPermission changes, requesters, blocks and the participant
    /// limit.
    func normalize(_ proposed: Share, existing: Share?) throws -> Share {
        var share = proposed
        let id = share.recordID
        let old = existing?.participants ?? []
        let oldByID = Dictionary(old.map { ($0.participantID, $0) }, uniquingKeysWith: { a, _ in a })
        // One entry per participant: a second entry with an existing participant's ID was taken for
        // that participant (a copy naming another identity let it accept that participant's invitation).
        var seenIDs = Set<String>()
        for p in share.participants where !seenIDs.insert(p.participantID).inserted {
            throw ShareSyncError(
                .invalidArguments, "participant \(p.participantID) is listed twice", recordID: id, rule: .shareRecord)
        }
        // The roles of participants other than the owner: a public user stays one, and a private
        // participant stays private (administrator or not). Any other role escaped the rules that look
        // at roles: the public users' permission and the mixing of public and private participants.
        for p in share.participants where p.role != .owner {
            let wasPublic = oldByID[p.participantID].map { $0.role == .publicUser }
            guard [.privateUser, .administrator, .publicUser].contains(p.role), wasPublic.map({ $0 == (p.role == .publicUser) }) ?? true
            else {
                throw ShareSyncError(
                    .invalidArguments, "participant \(p.participantID) cannot have role \(p.role.rawValue)", recordID: id,
                    rule: .participantRole)
            }
        }
        let blocked = Set(share.blockedIdentities.map(\.userRecordName))
        // Adding or removing private participants needs publicPermission none.
        // (Blocking removes a participant whatever the public permission: blocked ones do not count.)
        let privateIDs = { (ps: [Participant]) in
            Set(ps.filter {
                ($0.role == .privateUser || $0.role == .administrator)
                    && !($0.userIdentity.userRecordName.map(blocked.contains) ?? false)
            }.map(\.participantID))
        }
        if share.publicPermission != .none, existing != nil, privateIDs(old) != privateIDs(share.participants) {
            throw ShareSyncError(
                .invalidArguments, "participants can be added or removed only while publicPermission is none", recordID: id,
                rule: .publicAndPrivateDoNotMix)
        }
        // A change of publicPermission removes the pending participants; a change to none also removes
        // the public users (below), as CloudKit "removes all public participants". Private participants
        // and administrators who had accepted stay: before, a change to none removed everyone but
        // the owner, so an owner who opened a share to the public and closed it again took it away
        // from the people invited first. Participants added in the same save stay: new invitations.
        let publicChanged = existing.map { $0.publicPermission != share.publicPermission } ?? false
        let ownerName = database.ownerName
        var participants: [Participant] = []
        for var p in share.participants where p.role != .owner {
            if let before = oldByID[p.participantID] {
                if publicChanged, before.acceptanceStatus == .pending { continue }
                // Only the server changes statuses and bindings, and whom an entry is for stays as it
                // was invited: an edited lookup info let a read-only administrator turn a one-time
                // URL participant it added into a second, readWrite entry for itself.
                p.acceptanceStatus = before.acceptanceStatus
                p.userIdentity.userRecordName = before.userIdentity.userRecordName
                p.userIdentity.lookupInfo = before.userIdentity.lookupInfo
                p.isOneTimeURLParticipant = before.isOneTimeURLParticipant
                p.dateAddedToShare = before.dateAddedToShare
                p.invitationToken = before.invitationToken
                if before.acceptanceStatus == .pending, before.role != .administrator, p.role == .administrator {
                    // A pending invitation made an administrator's gets a new link: administrators
                    // were shown the old one (a private user's), and one of them could have used it
                    // to become an administrator in the invitee's place.
                    p.invitationToken = Self.randomToken()
                }
                // What the server recorded, not what the writer sends: an administrator renamed a
                // read-only participant "Owner" (the name others see), and marked entries approved.
                p.userIdentity.displayName = before.userIdentity.displayName
                p.isApprovedRequester = before.isApprovedRequester
                if proposed.participants.first(where: { $0.participantID == p.participantID })?.acceptanceStatus == .pending,
                    before.acceptanceStatus == .removed, before.role != .publicUser
                {
                    p.acceptanceStatus = .pending  // re-invited after leaving
                }
            } else {
                if p.userIdentity.lookupInfo?.isEmpty ?? true, !p.isOneTimeURLParticipant, p.userIdentity.userRecordName == nil {
                    throw ShareSyncError(
                        .invalidArguments, "a participant needs an email address, a phone number or a user record name",
                        recordID: id, rule: .participantLookupInfo)
                }
                guard p.role != .publicUser else {
                    throw ShareSyncError(
                        .invalidArguments, "public participants join through the URL; they cannot be added", recordID: id,
                        rule: .publicUserJoinsByURL)
                }
                if p.userIdentity.userRecordName == ownerName { continue }
                if let name = p.addressedUserRecordName, blocked.contains(name) {
                    throw Share.blocked(name, recordID: id)
                }
                p.acceptanceStatus = .pending
                p.dateAddedToShare = now
                p.invitationToken = Self.randomToken()
                // A new entry is an approved requester only if it names someone who asked (the stored
                // requesters), and shows the name they asked under; any other entry shows no name
                // until its invitee accepts and gives their own (``PrivateDatabase/acceptShare(url:as:)``).
                let requester = p.addressedUserRecordName.flatMap { name in
                    existing?.requesters.first { $0.userRecordName == name }
                }
                p.isApprovedRequester = requester != nil
                p.userIdentity.displayName = requester?.userIdentity.displayName
            }
            if p.permission == .unknown || p.permission == .none { p.permission = .readOnly }
            if let name = p.userIdentity.userRecordName, blocked.contains(name) { continue }
            if share.publicPermission == .none, p.role == .publicUser { continue }
            if p.role == .publicUser { p.permission = share.publicPermission }
            participants.append(p)
        }
        var owner = old.first { $0.role == .owner } ?? Participant(
            participantID: UUID().uuidString, userIdentity: UserIdentity(userRecordName: ownerName, lookupInfo: .init(userRecordName: ownerName)),
            role: .owner, permission: .readWrite, acceptanceStatus: .accepted, dateAddedToShare: now,
            isApprovedRequester: false, isOneTimeURLParticipant: false, invitationToken: nil)
        // The owner's name and email as the node knows them now (participants show them).
        let ownerIdentity = database.ownerIdentity
        if let name = ownerIdentity.displayName { owner.userIdentity.displayName = name }
        if let email = ownerIdentity.lookupInfo?.emailAddress { owner.userIdentity.lookupInfo?.emailAddress = email }
        participants.insert(owner, at: 0)
        // One entry per person: a new entry for someone the share already lists (and who has not left
        // or been removed) is refused; change that participant instead. Taken, a read-only
        // administrator listed itself again with readWrite, accepted that entry, and wrote with it;
        // and removing or leaving took away one entry, while the other kept the records in view.
        // An entry invited again after leaving counts as new here.
        for p in participants where oldByID[p.participantID].map({ $0.acceptanceStatus == .removed && p.acceptanceStatus != .removed }) ?? true {
            if let other = participants.first(where: {
                $0.participantID != p.participantID && $0.acceptanceStatus != .removed && $0.isSameInvitee(as: p)
            }) {
                throw ShareSyncError(
                    .invalidArguments,
                    "participant \(p.participantID) names someone the share already lists (participant \(other.participantID)); "
                        + "change that participant instead",
                    recordID: id, rule: .alreadyParticipant)
            }
        }
        guard participants.count <= database.limits.maximumParticipants else {
            throw ShareSyncError(
                .tooManyParticipants,
                "a share may have at most \(database.limits.maximumParticipants) participants, the owner included",
                recordID: id, rule: .maximumParticipants)
        }
        let oldRequesters = Set((existing?.requesters ?? []).map(\.userRecordName))
        let keptRequesters = share.requesters.filter { oldRequesters.contains($0.userRecordName) && !blocked.contains($0.userRecordName) }
        share.updateState { state in
            state.participants = participants
            state.requesters = keptRequesters
            state.url = nil
            state.currentUserParticipantID = nil
        }
        return share
    }

    /// Deleting a share record: the owner stops sharing; a participant leaves.
    mutating func deleteShare(zone: String, name: String) throws {
        guard var share = try share(zone: zone, name: name) else { return }
        if isOwner {
            if let root = share.rootRecordID?.recordName, var rootRecord = try loadRecord(zone: zone, name: root) {
                rootRecord.share = nil
                _ = try store(rootRecord)
            }
            try removeShare(zone: zone, name: name)
            return
        }
        guard let me = AccessPolicy.acceptedParticipant(actor, in: share) else { throw AccessPolicy.outsideView(share.recordID) }
        share.updateState { state in
            if let i = state.participants.firstIndex(where: { $0.participantID == me.participantID }) {
                if state.participants[i].role == .publicUser {
                    state.participants.remove(at: i)
                } else {
                    state.participants[i].acceptanceStatus = .removed
                }
            }
        }
        _ = try storeShareState(share)
    }

    /// Removes a share and its record (its members lose it at settle time).
    mutating func removeShare(zone: String, name: String) throws {
        let root = try String?.fetchOne(db.cachedStatement(sql: "SELECT root FROM share WHERE zone = ? AND name = ?"), arguments: [zone, name]) ?? nil
        try db.cachedStatement(sql: "DELETE FROM share WHERE zone = ? AND name = ?").execute(arguments: [zone, name])
        cache.forgetShare(zone: zone, name: name)
        // What the share record's deletion took with it (records referring to it with deleteSelf)
        // goes through the same steps as any deletion: a share root among them takes its share too.
        // Dropped, such a share stayed with its root gone, and its records stayed shared.
        let deleted = try delete(zone: zone, name: name)
        try didDelete(deleted.filter { $0.recordID.recordName != name })
        if let root {
            delta.markMembershipDirty(zone: zone, root)
        } else {
            delta.markWholeZoneDirty(zone: zone)
        }
        delta.markShareChanged(zone: zone, name)
    }

    /// Stores a share's new state as the server decided it (acceptance, leaving, requests).
    mutating func storeShareState(_ share: Share) throws -> Record {
        let zone = share.recordID.zoneID.zoneName
        var record = share.record
        record.shareState?.url = nil
        record.shareState?.currentUserParticipantID = nil
        record.modificationDate = now
        record.lastModifiedUserRecordID = Record.ID(recordName: actor)
        let saved = try store(record)
        delta.markShareChanged(zone: zone, share.recordID.recordName)
        return saved
    }

    /// The stable, unguessable URL token of a share of this root (or of the whole zone): the same
    /// when the root (or zone) is shared again, as CloudKit's share URL "is stable and persists across
    /// shares and reshares of the same root record".
    func urlToken(zone: String, root: String?) throws -> String {
        let secret = try String.fetchOne(db.cachedStatement(sql: "SELECT value FROM meta WHERE key = 'urlSecret'")) ?? {
            let s = Self.randomToken() + Self.randomToken()
            try db.cachedStatement(sql: "INSERT INTO meta (key, value) VALUES ('urlSecret', ?)").execute(arguments: [s])
            return s
        }()
        let mac = HMAC<SHA256>.authenticationCode(
            for: Data("\(zone)\u{0}\(root ?? "\u{0}zone")".utf8), using: SymmetricKey(data: Data(secret.utf8)))
        return Self.base64url(Data(mac).prefix(18))
    }

    static func randomToken() -> String {
        base64url(Data(SymmetricKey(size: .bits128).withUnsafeBytes { Array($0) }))
    }

    static func base64url(_ data: Data) -> String { PositionCipher.base64url(data.base64EncodedData()) }

    /// A stored record as the owner sees it: share records get their URL.
    func present(_ record: Record, zoneID: RecordZone.ID) -> Record {
        database.present(record, to: database.ownerName, zoneID: zoneID, in: db)
    }
}
