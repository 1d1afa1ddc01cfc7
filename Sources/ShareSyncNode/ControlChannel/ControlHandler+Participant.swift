import Foundation
import Logging
import ShareSyncCore
import ShareSyncStore

/// The participant side of the control channel: accepting and leaving shares, reading the replica, and
/// writing to shared zones through their owners (``ParticipantSync``).
extension ControlHandler {
    func handleParticipant(_ request: ControlRequest, logger: Logger) async throws(ShareSyncError) -> Data {
        func ok<T: Codable & Sendable>(_ value: T) -> Data { Self.encode(ControlResponse(result: value)) }
        guard let participant else { throw Self.unavailable("the participant sync engine") }
        let replica = participant.replica
        switch request {
        case .shareMetadata(let url):
            let metadata = try await participant.fetchShareMetadata(url: url)
            return ok(ShareMetadataInfo(
                ownerName: metadata.ownerIdentity.userRecordName ?? metadata.share.recordID.zoneID.ownerName,
                ownerDisplayName: metadata.ownerIdentity.displayName,
                ownerEmail: metadata.ownerIdentity.lookupInfo?.emailAddress,
                title: metadata.share.title, shareType: metadata.share.shareType,
                thumbnailSize: metadata.share.thumbnailImageData?.count,
                shareName: metadata.share.recordID.recordName,
                zoneName: metadata.share.recordID.zoneID.zoneName,
                rootRecordName: metadata.hierarchicalRootRecordID?.recordName,
                containerIdentifier: metadata.containerIdentifier, role: metadata.participantRole,
                permission: metadata.participantPermission, status: metadata.participantStatus,
                participantCount: metadata.participantCount, recordCount: metadata.recordCount))
        case .requestAccess(let url):
            try await participant.requestAccess(url: url)
            logger.info("access requested", metadata: ["url": "\(ShareURL(string: url).map { "\($0.host):\($0.port)" } ?? "?")"])
            return ok(AccessRequested(userRecordName: participant.identity.userRecordName))
        case .sharedShareGet(let owner, let zone, let share):
            let zoneID = try sharedZone(owner: owner, zone: zone, in: replica)
            let name: String
            if let share { name = share } else { name = try onlyShare(in: zoneID, replica: replica) }
            guard let record = try replica.fetchRecord(Record.ID(recordName: name, zoneID: zoneID)), let found = Share(record) else {
                throw ShareSyncError(
                    .unknownItem, "shared zone \(zone) holds no share \(name)", recordID: Record.ID(recordName: name, zoneID: zoneID))
            }
            return ok(ShareInfo(found, ownerName: zoneID.ownerName))
        case .sharedShareEdit(let owner, let zone, let share, let edit):
            let zoneID = try sharedZone(owner: owner, zone: zone, in: replica)
            let name: String
            if let share { name = share } else { name = try onlyShare(in: zoneID, replica: replica) }
            var changed: String?
            let saved = try await participant.editShare(owner: zoneID.ownerName, zoneName: zone, shareRecordName: name) {
                (share: inout Share) throws(ShareSyncError) in
                // Someone who may not change the share is told so first: a plain participant sees only
                // the owner and themselves, so naming anyone else was answered "no such participant".
                try AccessPolicy.checkMayEditShare(share, by: participant.identity.userRecordName)
                changed = try edit.apply(to: &share)
            }
            let info = ShareInfo(saved, ownerName: zoneID.ownerName)
            logger.info(
                "share changed through its owner", metadata: ["owner": "\(zoneID.ownerName)", "zone": "\(zone)", "share": "\(name)"])
            return ok(ShareEditResult(
                share: info, participant: changed.flatMap { id in info.participants.first { $0.participantID == id } },
                shareRecord: saved.record))
        case .accept(let url, let timeoutSeconds):
            let timeout = Duration.milliseconds(Int64(max(1, min(timeoutSeconds ?? 120, 3600)) * 1000))
            let metadata = try await participant.accept(url: url, timeout: timeout)
            let owner = metadata.ownerIdentity.userRecordName ?? metadata.share.recordID.zoneID.ownerName
            // The zone of the share accepted (a share lives in one zone), not every zone of this owner.
            let zones = try zoneInfos(
                [RecordZone.ID(zoneName: metadata.share.recordID.zoneID.zoneName, ownerName: owner)], replica: replica)
            logger.info(
                "share accepted",
                metadata: ["owner": "\(owner)", "zones": "\(zones.map(\.zoneName))", "share": "\(metadata.share.recordID.recordName)"])
            var accepted = AcceptedShare(
                ownerName: owner, title: metadata.share.title, shareName: metadata.share.recordID.recordName,
                permission: metadata.participantPermission, zones: zones)
            let ownerIdentity = metadata.share.owner?.userIdentity ?? metadata.ownerIdentity
            accepted.ownerDisplayName = metadata.ownerIdentity.displayName ?? ownerIdentity.displayName
            accepted.ownerEmail = metadata.ownerIdentity.lookupInfo?.emailAddress ?? ownerIdentity.lookupInfo?.emailAddress
            return ok(accepted)
        case .leave(let owner, let zone, let share, let local):
            let zoneID = try sharedZone(owner: owner, zone: zone, in: replica)
            let shareName: String
            if let share {
                // The share's record name, or its root record's name.
                let named = try replica.fetchRecord(Record.ID(recordName: share, zoneID: zoneID))
                shareName = named.flatMap { $0.recordType == Record.shareRecordType ? nil : $0.share?.recordID.recordName } ?? share
                // Leaving locally empties the zone at once, and the owner is told later: a name that is
                // no share here would empty it for a leave the owner then refuses.
                if local == true, try replica.fetchRecord(Record.ID(recordName: shareName, zoneID: zoneID))?.recordType != Record.shareRecordType {
                    throw ShareSyncError(
                        .unknownItem,
                        "shared zone \(zone) holds no share \(share) (nor a record shared by one); nothing was left. Name a share record or its root record; see `sharesync record list --shared`",
                        zoneID: zoneID)
                }
            } else {
                shareName = try onlyShare(in: zoneID, replica: replica)
            }
            // Writes of the zone still queued: the owner refuses them once it has the leave, which goes
            // first. Said, so that the refusals later are no surprise (before, nothing was said).
            let queued = try replica.outboxOperations(owner: zoneID.ownerName)
                .count { $0.operation.zoneName == zone && $0.operation.state == .pending }
            if local == true {
                try participant.leaveShareLocally(owner: zoneID.ownerName, zoneName: zone, shareRecordName: shareName)
                logger.info("share left locally", metadata: ["owner": "\(zoneID.ownerName)", "zone": "\(zone)", "share": "\(shareName)"])
                return ok(LeftShare(queuedWrites: queued))
            }
            try await participant.leaveShare(owner: zoneID.ownerName, zoneName: zone, shareRecordName: shareName)
            logger.info("share left", metadata: ["owner": "\(zoneID.ownerName)", "zone": "\(zone)", "share": "\(shareName)"])
            return ok(LeftShare(queuedWrites: queued))
        case .sharedZoneList:
            return ok(try zoneInfos(try replica.allZones(), replica: replica))
        case .sharedRecordList(let owner, let zone, let after, let limit):
            let zoneID = try sharedZone(owner: owner, zone: zone, in: replica)
            let edits = try participant.localEdits(owner: zoneID.ownerName, zoneName: zone)
            let paging = try ListPaging(after: after, limit: limit)
            return ok(try paging.collect(zone: zone, name: \.record.recordID.recordName) { after throws(ShareSyncError) in
                let page = try replica.records(
                    owner: zoneID.ownerName, zoneName: zone, after: after, limit: paging.limit, byteBudget: ListPaging.pageBytes)
                return (Self.shared(page.records, edits: edits, after: after), page.bytes)
            })
        case .sharedRecordGet(let owner, let zone, let name):
            let zoneID = try sharedZone(owner: owner, zone: zone, in: replica)
            let id = Record.ID(recordName: name, zoneID: zoneID)
            let edit = try participant.localEdits(owner: zoneID.ownerName, zoneName: zone)[name]
            guard let record = try replica.fetchRecord(id) ?? edit?.record else {
                throw ShareSyncError(.unknownItem, "record \(name) is not in shared zone \(zone)", recordID: id)
            }
            return ok(Self.shared(record, edit))
        case .sharedRecordSave(let owner, let zone, let type, let name, let parent, let fields, let policy, let ifTag):
            let zoneID = try sharedZone(owner: owner, zone: zone, in: replica)
            let id = Record.ID(recordName: name, zoneID: zoneID)
            try Self.checkTag(ifTag, policy: policy, recordID: id)
            // This node's copy, with its change tag: its latest pending write, else the replica's record.
            let edit = try participant.localEdits(owner: zoneID.ownerName, zoneName: zone)[name]
            var record: Record
            if let edit, edit.state == .pending, let pending = edit.record {
                record = pending
                // This write's changed keys are its own: inherited from the write before it, they made
                // `outbox resolve --keep mine` on this one put back a value the user had just given up
                // by resolving that earlier write with `theirs`.
                record.clearChangeTracking()
            } else {
                if let copy = try replica.fetchRecord(id) {
                    record = copy
                } else if let type {
                    record = Record(recordType: type, recordID: id)
                } else {
                    throw ShareSyncError(
                        .unknownItem, "record \(name) is not in shared zone \(zone); give its --type to create it",
                        recordID: id, rule: .typeNeeded)
                }
            }
            if let ifTag { record.recordChangeTag = ifTag }
            for field in fields { record[field.key] = try field.fieldValue(in: zoneID) }
            if let parent { record.setParent(Record.ID(recordName: parent, zoneID: zoneID)) }
            if let type, record.recordType != type {
                throw ShareSyncError(
                    .invalidArguments,
                    "record \(name) is a \(record.recordType); a record's type cannot change to \(type)", recordID: id,
                    rule: .recordTypeImmutable)
            }
            let outcome = try await participant.modifyRecords(
                owner: zoneID.ownerName, zoneName: zone, saving: [record], savePolicy: policy ?? .ifServerRecordUnchanged)
            switch outcome {
            case .sent(let result):
                try check(result)  // a conflict: serverRecordChanged, with the owner's record
                guard case .success(let saved)? = result.saveResults[id] else {
                    throw ShareSyncError(.internalError, "record \(name) was not saved", recordID: id)
                }
                return ok(SharedWriteResult(outcome: .sent, record: saved))
            case .queued:
                return ok(SharedWriteResult(outcome: .queued))
            }
        case .sharedRecordDelete(let owner, let zone, let name):
            let zoneID = try sharedZone(owner: owner, zone: zone, in: replica)
            let id = Record.ID(recordName: name, zoneID: zoneID)
            guard let existing = try replica.fetchRecord(id) else {
                // This node's own save of it, not accepted yet, shows in `record get --shared` but is not the
                // owner's to delete: the outbox holds it.
                let queued = try replica.outboxOperations(owner: zoneID.ownerName).first { entry in
                    entry.operation.zoneName == zone && entry.operation.saving.contains { $0.recordID.recordName == name }
                }
                let hint = queued.map { "; it is your own save, not accepted by the owner yet: `sharesync outbox discard \($0.operation.id)` drops it" } ?? ""
                throw ShareSyncError(.unknownItem, "record \(name) is not in shared zone \(zone)\(hint)", recordID: id)
            }
            // A participant deleting a share record leaves that share (as in CloudKit): said so in the result.
            let leaves: Bool? = existing.recordType == Record.shareRecordType ? true : nil
            switch try await participant.modifyRecords(owner: zoneID.ownerName, zoneName: zone, deleting: [name]) {
            case .sent(let result):
                try check(result)
                return ok(SharedWriteResult(outcome: .sent, leavesShare: leaves))
            case .queued:
                return ok(SharedWriteResult(outcome: .queued, leavesShare: leaves))
            }
        case .sharedRecordModify(let saving, let deleting, let policy, let atomically, let queue):
            // Each zone's items go to its owner as one request, in the order the zones first appear.
            var groups: [SharedModifyGroup] = []
            func group(owner: String?, zone: String) throws(ShareSyncError) -> Int {
                let zoneID = try sharedZone(owner: owner, zone: zone, in: replica)
                if let index = groups.firstIndex(where: { $0.zoneID == zoneID }) { return index }
                groups.append(SharedModifyGroup(zoneID: zoneID))
                return groups.count - 1
            }
            for record in saving {
                let index = try group(owner: record.recordID.zoneID.explicitOwnerName, zone: record.recordID.zoneID.zoneName)
                if record.recordID.zoneID == groups[index].zoneID {
                    groups[index].saving.append(record)
                } else {
                    // The owner named by the zone (or found for it): the record and its references move there.
                    var moved = record.relocated(to: groups[index].zoneID)
                    moved.markChanged(record.changedKeys, parent: record.parentChanged)
                    groups[index].saving.append(moved)
                }
            }
            for ref in deleting {
                let zoneID = RecordZone.ID(zoneName: ref.zoneName, ownerName: ref.ownerName ?? RecordZone.ID.currentUserDefaultName)
                let index = try group(owner: zoneID.explicitOwnerName, zone: ref.zoneName)
                groups[index].deleting.append(ref.recordName)
            }
            let modified = try await Self.modifyZoneByZone(groups, queue: queue ?? true) { group throws(ShareSyncError) in
                try await participant.modifyRecords(
                    owner: group.zoneID.ownerName, zoneName: group.zoneID.zoneName, saving: group.saving,
                    deleting: group.deleting, savePolicy: policy ?? .ifServerRecordUnchanged, atomically: atomically ?? true,
                    queueWhenUnreachable: queue ?? true)
            }
            return ok(modified)
        case .outboxList:
            return ok(try replica.outboxOperations().map { OutboxItem(owner: $0.owner, operation: $0.operation) })
        case .outboxResolve(let id, let keep):
            guard let after = try await participant.resolveConflict(id: id, keep: keep) else {
                return ok(OutboxResolution(id: id, outcome: keep == .theirs ? .dropped : .sent))
            }
            let owner = try replica.outboxOperation(id: id)?.owner ?? ""
            let outcome: OutboxResolution.Outcome =
                switch after.state {
                case .pending: .pending
                case .conflict: .conflict
                case .refused: .refused
                }
            return ok(OutboxResolution(id: id, outcome: outcome, item: OutboxItem(owner: owner, operation: after)))
        case .outboxDiscard(let id):
            try participant.discardOperation(id: id)
            return ok(Done())
        default:
            throw ShareSyncError(.internalError, "not a participant request: \(Self.commandName(request))")
        }
    }

    /// A replica record, or the local write that takes its place in reads.
    static func shared(_ record: Record, _ edit: ParticipantSync.LocalEdit?) -> SharedRecord {
        guard let edit else { return SharedRecord(record: record) }
        return SharedRecord(
            record: edit.record ?? record, outboxID: edit.operationID, outboxState: edit.state, deleted: edit.record == nil)
    }

    func zoneInfos(_ zoneIDs: [RecordZone.ID], replica: SharedDatabaseReplica) throws(ShareSyncError) -> [SharedZoneInfo] {
        let identities = try Self.ownerIdentities(replica)
        var infos: [SharedZoneInfo] = []
        for zoneID in zoneIDs {
            let identity = identities[zoneID.ownerName]
            infos.append(SharedZoneInfo(
                ownerName: zoneID.ownerName, zoneName: zoneID.zoneName,
                records: try replica.recordCount(owner: zoneID.ownerName, zoneName: zoneID.zoneName),
                ownerDisplayName: identity?.displayName, ownerEmail: identity?.lookupInfo?.emailAddress))
        }
        return infos
    }

    /// The owners of the shares in the replica, by user record name, with the name and email their
    /// shares give them (the share's owner participant).
    static func ownerIdentities(_ replica: SharedDatabaseReplica) throws(ShareSyncError) -> [String: UserIdentity] {
        var identities: [String: UserIdentity] = [:]
        for record in try replica.shareRecords() {
            guard let owner = Share(record)?.owner else { continue }
            let name = record.recordID.zoneID.ownerName
            if identities[name]?.displayName == nil { identities[name] = owner.userIdentity }
        }
        return identities
    }

    /// The owner a command names: a user record name, or (when exactly one owner in the replica has
    /// it) a display name or email address. Several matches are refused, listing the candidates.
    static func resolveOwner(_ text: String?, in replica: SharedDatabaseReplica) throws(ShareSyncError) -> String? {
        guard let text else { return nil }
        if try replica.owner(named: text) != nil { return text }
        let identities = try ownerIdentities(replica)
        let matches = identities.filter { _, identity in
            identity.displayName?.caseInsensitiveCompare(text) == .orderedSame
                || identity.lookupInfo?.emailAddress?.caseInsensitiveCompare(text) == .orderedSame
        }.sorted { $0.key < $1.key }
        switch matches.count {
        case 0:
            return text
        case 1:
            return matches[0].key
        default:
            let candidates = matches.map {
                PersonName.describe(userRecordName: $0.key, displayName: $0.value.displayName, email: $0.value.lookupInfo?.emailAddress)
            }
            throw ShareSyncError(
                .invalidArguments,
                "\(text.debugDescription) names several owners: \(candidates.joined(separator: "; ")); give --owner their user record name",
                rule: .ambiguousOwner)
        }
    }

    /// The shared zone named `zone`, of `owner` or of the only owner sharing a zone of that name.
    func sharedZone(owner: String?, zone: String, in replica: SharedDatabaseReplica) throws(ShareSyncError) -> RecordZone.ID {
        let owner = try Self.resolveOwner(owner, in: replica)
        let matches = try replica.allZones().filter { $0.zoneName == zone && (owner == nil || $0.ownerName == owner) }
        switch matches.count {
        case 1:
            return matches[0]
        case 0:
            let whose = owner.map { " from \($0)" } ?? ""
            throw ShareSyncError(
                .zoneNotFound, "no shared zone \(zone)\(whose) in the replica; see `sharesync zone list --shared`",
                zoneID: RecordZone.ID(zoneName: zone, ownerName: owner ?? RecordZone.ID.currentUserDefaultName))
        default:
            let owners = matches.map(\.ownerName).joined(separator: ", ")
            throw ShareSyncError(
                .invalidArguments, "several owners share a zone \(zone) (\(owners)); name one with --owner",
                rule: .ambiguousOwner)
        }
    }

    /// The record name of the only share in a replicated zone.
    func onlyShare(in zoneID: RecordZone.ID, replica: SharedDatabaseReplica) throws(ShareSyncError) -> String {
        let shares = try replica.records(owner: zoneID.ownerName, zoneName: zoneID.zoneName, ofType: Record.shareRecordType)
        switch shares.count {
        case 1:
            return shares[0].recordID.recordName
        case 0:
            throw ShareSyncError(.unknownItem, "shared zone \(zoneID.zoneName) holds no share record; name it with --share", zoneID: zoneID)
        default:
            throw ShareSyncError(
                .invalidArguments,
                "shared zone \(zoneID.zoneName) holds \(shares.count) shares (\(shares.map(\.recordID.recordName).joined(separator: ", "))); name one with --share",
                zoneID: zoneID, rule: .ambiguousShare)
        }
    }

    /// A page of a shared listing: the replica's records after `after`, each with this node's edit of
    /// it, and the records this node created that the owner has not accepted yet whose names fall in
    /// the page: after `after` and up to the replica page's last name, or all of them once the
    /// replica has no more (the next page, after the last of them, is then empty). In the byte order
    /// of the names, as the replica pages them.
    static func shared(_ records: [Record], edits: [String: ParticipantSync.LocalEdit], after: String?) -> [SharedRecord] {
        func precedes(_ a: String, _ b: String) -> Bool { a.utf8.lexicographicallyPrecedes(b.utf8) }
        var page = records.map { shared($0, edits[$0.recordID.recordName]) }
        let names = Set(records.map(\.recordID.recordName))
        let upper = records.last?.recordID.recordName
        for (name, edit) in edits where !names.contains(name) {
            guard let record = edit.record, after.map({ precedes($0, name) }) ?? true, upper.map({ !precedes($0, name) }) ?? true
            else { continue }
            page.append(shared(record, edit))
        }
        return page.sorted { precedes($0.record.recordID.recordName, $1.record.recordID.recordName) }
    }

    static func unavailable(_ what: String) -> ShareSyncError {
        ShareSyncError(.serviceUnavailable, "\(what) is not running in this daemon")
    }
}

/// What `shareMetadata` answers: the share at a URL, as its owner describes it to this node before
/// it accepts (`CKShare.Metadata`).
public struct ShareMetadataInfo: Codable, Sendable, Hashable {
    /// The owner's user record name.
    public var ownerName: String
    /// The owner's name as people know it (their node's `--name`).
    public var ownerDisplayName: String?
    /// The owner's email address, when their node has one (`--email`).
    public var ownerEmail: String? = nil
    /// `cloudkit.title`.
    public var title: String?
    /// `cloudkit.type`.
    public var shareType: String?
    /// The size of `cloudkit.thumbnailImageData`, in bytes, if the share has a thumbnail.
    public var thumbnailSize: Int?
    /// The share's record name.
    public var shareName: String
    public var zoneName: String
    /// The root record of a hierarchy share (`hierarchicalRootRecordID`); `nil` for a zone-wide share.
    public var rootRecordName: String?
    public var containerIdentifier: String?
    /// This node's role, permission and status in the share (`unknown`/`none` for someone who may only
    /// request access).
    public var role: Participant.Role
    public var permission: Participant.Permission
    public var status: Participant.AcceptanceStatus
    /// How many participants the share has, the owner included, if the owner lets this node read it.
    public var participantCount: Int?
    /// How many records an initial sync brings, if the owner lets this node read them.
    public var recordCount: Int?
}

/// The items of a shared `modifyRecords` that go to one zone's owner as one request.
struct SharedModifyGroup {
    var zoneID: RecordZone.ID
    var saving: [Record] = []
    var deleting: [String] = []

    /// The records it saves and deletes.
    var refs: [RecordRef] {
        saving.map { RecordRef($0.recordID) }
            + deleting.map { RecordRef(ownerName: zoneID.ownerName, zoneName: zoneID.zoneName, recordName: $0) }
    }
}

extension ControlHandler {
    /// Sends each zone's items (`send`), in order, and merges the results. A zone whose request is
    /// refused as a whole throws only while nothing went through yet; after that (an earlier zone's
    /// items committed by their owner, or queued), throwing would lose those results and tell the
    /// caller nothing was written, so each of the refused zone's items fails with the refusal instead,
    /// and the other zones go on. With `queue` false, a zone whose owner cannot take it now
    /// (`networkUnavailable`, `networkFailure`, `serviceUnavailable`) fails item by item too.
    static func modifyZoneByZone(
        _ groups: [SharedModifyGroup], queue: Bool,
        send: (SharedModifyGroup) async throws(ShareSyncError) -> ParticipantSync.WriteOutcome
    ) async throws(ShareSyncError) -> ModifyResult {
        var modified = ModifyResult()
        var someWentThrough = false
        for group in groups {
            let outcome: ParticipantSync.WriteOutcome
            do {
                outcome = try await send(group)
            } catch where (!queue && [.networkUnavailable, .networkFailure, .serviceUnavailable].contains(error.code)) || someWentThrough {
                modified.failed += group.refs.map { ModifyResult.Failure(record: $0, error: ControlError(error)) }
                continue
            }
            someWentThrough = true
            switch outcome {
            case .sent(let result):
                modified.add(result)
            case .queued(let operation):
                modified.queued.append(ModifyResult.Queued(outboxID: operation.id, records: group.refs))
            }
        }
        return modified
    }
}
