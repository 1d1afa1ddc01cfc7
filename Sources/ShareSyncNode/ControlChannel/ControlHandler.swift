import Foundation
import Logging
import ShareSyncCore
import ShareSyncStore
import ShareSyncWire
import Synchronization

/// Carries out control requests on the owner's private database (see ``ControlRequest``).
///
/// Every operation goes through the same `PrivateDatabase` API an app would use, so the sharing
/// rules of `SharingRules.md` apply unchanged; refusals come back as ``ControlError``.
public struct ControlHandler: Sendable {
    public let database: PrivateDatabase
    /// What `status` reports; set by the daemon once the server is bound.
    public let status: @Sendable () throws(ShareSyncError) -> NodeStatus
    /// The participant side: `nil` refuses its requests with `serviceUnavailable`.
    public let participant: ParticipantSync?
    /// The change feeds: `nil` refuses `changes` with `serviceUnavailable`.
    public let feeds: NodeChangeFeeds?
    /// Carries out `advertise` (the daemon's: settings, share URLs, the owner server's announcement);
    /// `nil` refuses it with `serviceUnavailable`.
    public let advertise: (@Sendable (_ address: HostAndPort, _ listen: HostAndPort?) throws(ShareSyncError) -> AdvertiseResult)?
    let logger: Logger

    public init(
        database: PrivateDatabase, participant: ParticipantSync? = nil, feeds: NodeChangeFeeds? = nil,
        status: @escaping @Sendable () throws(ShareSyncError) -> NodeStatus,
        advertise: (@Sendable (_ address: HostAndPort, _ listen: HostAndPort?) throws(ShareSyncError) -> AdvertiseResult)? = nil,
        logger: Logger
    ) {
        self.advertise = advertise
        self.database = database
        self.participant = participant
        self.feeds = feeds
        self.status = status
        self.logger = logger
    }

    /// Answers one request line with one response line (without the newline).
    public func respond(toLine line: Data) async -> Data {
        let request: ControlRequest
        do {
            request = try ControlRequest.fastDecode(line) ?? JSONDecoder().decode(ControlRequest.self, from: line)
        } catch {
            return Self.encode(ControlResponse<Done>(error: ControlError(ShareSyncError(
                .invalidArguments, "not a control request: \(error)", rule: .controlSyntax))))
        }
        let start = ContinuousClock.now
        let name = Self.commandName(line: line) ?? Self.commandName(request)
        // A number per request, so its log lines can be told from another's.
        let id = Self.requestNumbers.add(1, ordering: .relaxed).newValue
        var logger = logger
        logger[metadataKey: "request.id"] = "\(id)"
        do throws(ShareSyncError) {
            let response = try await handle(request, logger: logger)
            logger.debug("control request", metadata: ["request": "\(name)"])
            ShareSyncMetrics.request(channel: "control", name, duration: ContinuousClock.now - start, error: nil)
            return response
        } catch {
            logger.info(
                "control request refused",
                metadata: ["request": "\(name)", "error.code": "\(error.code.rawValue)"])
            ShareSyncMetrics.request(channel: "control", name, duration: ContinuousClock.now - start, error: error.code)
            return Self.encode(ControlResponse<Done>(error: ControlError(error)))
        }
    }

    /// Each zone of the replica with its owner's link state, lag and outbox.
    func replicaStatuses(_ participant: ParticipantSync) throws(ShareSyncError) -> [ReplicaStatus] {
        let replica = participant.replica
        var outbox: [String: [OutboxOperation.State: Int]] = [:]
        for (owner, operation) in try replica.outboxOperations() {
            outbox[owner + "\u{0}" + operation.zoneName, default: [:]][operation.state, default: 0] += 1
        }
        let identities = try Self.ownerIdentities(replica)
        return try replica.allZones().map { (zoneID: RecordZone.ID) throws(ShareSyncError) -> ReplicaStatus in
            let owner = zoneID.ownerName
            let state = participant.status(owner: owner)
            let counts = outbox[owner + "\u{0}" + zoneID.zoneName] ?? [:]
            let lag = participant.syncLag(owner: owner)?.inSeconds
            return ReplicaStatus(
                ownerName: owner, ownerDisplayName: identities[owner]?.displayName, zoneName: zoneID.zoneName,
                state: Self.linkState(state), connected: Self.isConnected(state),
                lastSync: participant.lastSynced(owner: owner), lagSeconds: lag,
                records: try replica.recordCount(owner: owner, zoneName: zoneID.zoneName),
                pending: counts[.pending] ?? 0, conflicts: counts[.conflict] ?? 0, refused: counts[.refused] ?? 0,
                lastError: participant.lastFailure(owner: owner).map(ControlError.init))
        }
    }

    /// A link's state as `status` names it (`stopped` for an owner with no link).
    static func linkState(_ state: ParticipantSync.LinkStatus?) -> String { state.map { "\($0)" } ?? "stopped" }

    /// Whether a link in `state` has the owner connected.
    static func isConnected(_ state: ParticipantSync.LinkStatus?) -> Bool { state == .syncing || state == .following }

    /// Each owner of the replica with its link, whether or not the replica holds a zone of theirs.
    func ownerStatuses(_ participant: ParticipantSync) throws(ShareSyncError) -> [OwnerLinkStatus] {
        let replica = participant.replica
        let identities = try Self.ownerIdentities(replica)
        var zones: [String: Int] = [:]
        for zoneID in try replica.allZones() { zones[zoneID.ownerName, default: 0] += 1 }
        var statuses: [OwnerLinkStatus] = []
        for owner in try replica.owners() {
            let state = participant.status(owner: owner.ownerName)
            statuses.append(OwnerLinkStatus(
                ownerName: owner.ownerName, ownerDisplayName: identities[owner.ownerName]?.displayName,
                address: HostAndPort(host: owner.host, port: owner.port), state: Self.linkState(state),
                connected: Self.isConnected(state), zones: zones[owner.ownerName] ?? 0,
                synced: try replica.databaseChangeToken(owner: owner.ownerName) != nil,
                lastError: participant.lastFailure(owner: owner.ownerName).map(ControlError.init)))
        }
        return statuses
    }

    private static let requestNumbers = Atomic<UInt64>(0)

    /// The request's command, without its arguments (which may hold hundreds of records).
    /// The command of a request line: its object's first key (`{"zoneCreate":…` is `zoneCreate`), read off
    /// the bytes without reflecting on the decoded request.
    static func commandName(line: Data) -> String? {
        guard let open = line.firstIndex(of: UInt8(ascii: "\"")) else { return nil }
        let start = line.index(after: open)
        guard let close = line[start...].firstIndex(of: UInt8(ascii: "\"")), close - start <= 64 else { return nil }
        let name = line[start..<close]
        guard name.allSatisfy({ ($0 >= 65 && $0 <= 90) || ($0 >= 97 && $0 <= 122) }) else { return nil }
        return String(decoding: name, as: UTF8.self)
    }

    static func commandName(_ request: ControlRequest) -> String {
        Mirror(reflecting: request).children.first?.label ?? String(describing: request)
    }

    static func encode<T>(_ response: ControlResponse<T>) -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .iso8601
        do {
            return try encoder.encode(response)
        } catch {
            return Data(#"{"ok":false,"error":{"code":"internalError","message":"cannot encode the response"}}"#.utf8)
        }
    }

    func handle(_ request: ControlRequest, logger: Logger) async throws(ShareSyncError) -> Data {
        func ok<T: Codable & Sendable>(_ value: T) -> Data { Self.encode(ControlResponse(result: value)) }
        switch request {
        case .shareMetadata, .requestAccess, .sharedShareGet, .sharedShareEdit, .accept, .leave, .sharedZoneList, .sharedRecordList, .sharedRecordGet, .sharedRecordSave,
            .sharedRecordDelete, .sharedRecordModify, .outboxList, .outboxResolve, .outboxDiscard:
            return try await handleParticipant(request, logger: logger)
        case .recordModify(let saving, let deleting, let policy, let atomically):
            let result = try database.modifyRecords(
                saving: saving,
                deleting: deleting.map { Record.ID(recordName: $0.recordName, zoneID: RecordZone.ID(zoneName: $0.zoneName)) },
                savePolicy: policy ?? .ifServerRecordUnchanged, atomically: atomically ?? true)
            var modified = ModifyResult()
            modified.add(result)
            return ok(modified)
        case .recordQuery(let shared, let owner, let zone, let query, let limit, let cursor):
            if let limit, limit < 1 {
                throw ShareSyncError(.invalidArguments, "limit \(limit) must be at least 1", rule: .limitRange)
            }
            let results: QueryResults
            if shared {
                guard let participant else { throw Self.unavailable("the shared database") }
                let zoneID = try sharedZone(owner: owner, zone: zone, in: participant.replica)
                results = try participant.replica.records(
                    matching: query, inZoneWith: zoneID, resultsLimit: limit ?? QueryResults.maximumResultsLimit,
                    cursor: cursor.map(QueryResults.Cursor.init(offset:)))
            } else {
                guard owner == nil else {
                    throw ShareSyncError(
                        .invalidArguments, "owner names a shared zone's owner: use it with shared true", rule: .ownerWithSharedZone)
                }
                results = try database.records(
                    matching: query, inZoneWith: RecordZone.ID(zoneName: zone),
                    resultsLimit: limit ?? QueryResults.maximumResultsLimit, cursor: cursor.map(QueryResults.Cursor.init(offset:)))
            }
            let page = QueryPage(records: results.records, cursor: results.cursor?.offset)
            return page.fastResponse() ?? ok(page)
        case .changes(let shared, let since, let waitSeconds, let zone, let owner, let limit):
            guard let feeds else { throw Self.unavailable("change feeds") }
            let wait = waitSeconds.map { Duration.milliseconds(Int64(max(0, min($0, 600)) * 1000)) }
            let owner = shared ? try Self.resolveOwner(owner, in: feeds.replica) : owner
            return ok(try await feeds.changes(shared: shared, since: since, wait: wait, zone: zone, owner: owner, limit: limit))
        case .databaseChanges(let shared, let since, let limit):
            guard let feeds else { throw Self.unavailable("change feeds") }
            return ok(try feeds.databaseChanges(shared: shared, since: since, limit: limit))
        case .currentChangeToken(let shared):
            guard let feeds else { throw Self.unavailable("change feeds") }
            return ok(ChangesPage(changes: [], token: try feeds.currentToken(shared: shared)))
        case .recordImport(let zone, let records, let policy):
            let zoneID = RecordZone.ID(zoneName: zone)
            let moved = records.map { record in
                var copy = Record(recordType: record.recordType, recordID: Record.ID(recordName: record.recordID.recordName, zoneID: zoneID))
                for key in record.allKeys { copy[key] = record.fields[key] }
                if let parent = record.parent { copy.setParent(Record.ID(recordName: parent.recordID.recordName, zoneID: zoneID)) }
                // Only a save against a known tag looks at it.
                if policy == .ifServerRecordUnchanged { copy.recordChangeTag = record.recordChangeTag }
                return copy
            }
            // The whole request is one transaction: all of its records or none (the line limit bounds it).
            let result = try database.importRecords(moved, savePolicy: policy ?? .allKeys)
            try check(result)
            return ok(ImportResult(saved: result.saveResults.count))
        case .advertise(let host, let port, let listen):
            guard let advertise else { throw Self.unavailable("advertising an address") }
            guard HostName.isValid(host), (1...65535).contains(port) else {
                throw ShareSyncError(
                    .invalidArguments,
                    "\(HostAndPort(host: host, port: port)) is not an address participants can reach (a DNS name or an IP "
                        + "address, port 1-65535)",
                    rule: .advertisedAddress)
            }
            if let listen, !HostName.isValid(listen.host) || !(0...65535).contains(listen.port) {
                throw ShareSyncError(
                    .invalidArguments, "\(listen) is not an address to listen on (port 0-65535)", rule: .advertisedAddress)
            }
            return ok(try advertise(HostAndPort(host: host, port: port), listen))
        case .ownerAddress(let owner, let host, let port):
            guard let participant else { throw Self.unavailable("the shared database") }
            // A display name or email address names the owner too, as --owner does elsewhere.
            let owner = try Self.resolveOwner(owner, in: participant.replica) ?? owner
            try participant.setOwnerAddress(owner: owner, host: host, port: port)
            return ok(Done())
        case .backup(let path, let shared):
            guard path.hasPrefix("/") else {
                throw ShareSyncError(
                    .invalidArguments, "the copy's path \(path.debugDescription) is not absolute (the daemon's directory is not yours)")
            }
            if shared == true {
                guard let participant else { throw Self.unavailable("the shared database") }
                return ok(BackupResult(path: path, bytes: try participant.replica.backup(to: path)))
            }
            return ok(BackupResult(path: path, bytes: try database.backup(to: path)))
        case .status:
            var status = try status()
            if let participant {
                // Each part on its own: one that cannot be read is named in `errors`, the others are shown.
                func part<T>(_ what: String, _ read: () throws(ShareSyncError) -> T) -> T? {
                    do {
                        return try read()
                    } catch {
                        var failure = error
                        failure.message = "the replica's \(what) could not be read: " + failure.message
                        status.errors = (status.errors ?? []) + [ControlError(failure)]
                        return nil
                    }
                }
                status.outbox = part("outbox") { () throws(ShareSyncError) in
                    let counts = try participant.replica.outboxCounts()
                    return OutboxCounts(pending: counts[.pending] ?? 0, conflicts: counts[.conflict] ?? 0, refused: counts[.refused] ?? 0)
                }
                status.replicas = part("zones") { () throws(ShareSyncError) in try replicaStatuses(participant) }
                status.owners = part("owners") { () throws(ShareSyncError) in try ownerStatuses(participant) }
            }
            return ok(status)
        case .zoneCreate(let name):
            let zoneID = RecordZone.ID(zoneName: name)
            guard !zoneID.isDefaultZone else {
                throw ShareSyncError(
                    .invalidArguments, "\(name) is the default zone: it always exists and cannot be created",
                    zoneID: zoneID, rule: .defaultZone)
            }
            let existed = try database.fetchAllZones().contains { $0.zoneID.zoneName == name }
            let zone = try database.saveZone(RecordZone(zoneID: zoneID))
            return ok(ZoneInfo(zoneName: zone.zoneID.zoneName, created: !existed))
        case .zoneList:
            return ok(try database.fetchAllZones().map { ZoneInfo(zoneName: $0.zoneID.zoneName) })
        case .zoneDelete(let name):
            try database.deleteZone(RecordZone.ID(zoneName: name))
            return ok(Done())
        case .recordSave(let zone, let type, let name, let parent, let fields, let policy, let ifTag):
            return ok(try saveRecord(
                zone: zone, type: type, name: name, parent: parent, fields: fields, policy: policy, ifTag: ifTag))
        case .recordGet(let zone, let name):
            return ok(try database.fetchRecord(Record.ID(recordName: name, zoneID: RecordZone.ID(zoneName: zone))))
        case .recordDelete(let zone, let name):
            let id = Record.ID(recordName: name, zoneID: RecordZone.ID(zoneName: zone))
            try check(database.modifyRecords(deleting: [id]))  // a missing record is unknownItem
            return ok(Done())
        case .recordList(let zone, let after, let limit):
            let paging = try ListPaging(after: after, limit: limit)
            return ok(try paging.collect(zone: zone, name: \.recordID.recordName) { after throws(ShareSyncError) in
                try database.records(inZone: zone, after: after, limit: paging.limit, byteBudget: ListPaging.pageBytes)
            })
        case .shareCreate(let zone, let root, let title, let publicPermission, let allowsAccessRequests, let thumbnail, let shareType):
            var share: Share
            let zoneID = RecordZone.ID(zoneName: zone)
            if let root {
                share = Share(rootRecord: try database.fetchRecord(Record.ID(recordName: root, zoneID: zoneID)))
            } else {
                // Said plainly: saving a second zone-wide share under the same record name was a
                // conflict with the first (serverRecordChanged, "changed on the server since it was
                // fetched"), which did not say the zone is shared.
                if case .success? = try database.fetchRecords([Record.ID(recordName: Share.zoneShareRecordName, zoneID: zoneID)]).first?.value {
                    throw ShareSyncError(
                        .alreadyShared,
                        "zone \(zone) is already shared as a whole (share \(Share.zoneShareRecordName)); `sharesync share show --zone \(zone)` shows it",
                        zoneID: zoneID, rule: .oneSharePerRecord)
                }
                share = Share(recordZoneID: zoneID)
            }
            share.title = title
            share.thumbnailImageData = thumbnail
            share.shareType = shareType
            share.publicPermission = publicPermission
            share.allowsAccessRequests = allowsAccessRequests
            return ok(ShareInfo(try save(share)))
        case .shareGet(let zone, let name):
            return ok(ShareInfo(try findShare(zone: zone, name: name)))
        case .shareInvite(let zone, let name, let lookup, let permission, let role, let oneTime):
            var share = try findShare(zone: zone, name: name)
            if lookup.userRecordName == database.ownerName {
                throw ShareSyncError(
                    .invalidArguments, "\(database.ownerName) is you, the owner: always a participant, never invited",
                    recordID: share.recordID, rule: .oneOwner)
            }
            var participant: Participant
            if oneTime == true {
                guard lookup.isEmpty else {
                    throw ShareSyncError(
                        .invalidArguments, "a one-time URL participant has no email, phone or user: whoever uses the link first becomes them",
                        rule: .oneTimeURLParticipant)
                }
                participant = Participant.oneTimeURLParticipant(permission: permission)
                participant.role = role ?? .privateUser
            } else {
                participant = Participant(lookupInfo: lookup, permission: permission, role: role ?? .privateUser)
            }
            guard participant.role == .privateUser || participant.role == .administrator else {
                throw ShareSyncError(
                    .invalidArguments, "an invited participant's role is privateUser or administrator, not \(participant.role.rawValue)",
                    rule: .participantRole)
            }
            if let existing = try share.alreadyInvited(participant, role: role) { return ok(ParticipantInfo(existing, in: share)) }
            let invited = try share.addParticipant(participant).participantID
            let saved = try save(share)
            guard let stored = saved.participants.first(where: { $0.participantID == invited }) else {
                throw ShareSyncError(.internalError, "the invited participant is missing from the saved share")
            }
            return ok(ParticipantInfo(stored, in: saved))
        case .shareSetRole(let zone, let name, let participantID, let role):
            var share = try findShare(zone: zone, name: name)
            try share.setRole(role, forParticipantID: participantID)
            let saved = try save(share)
            return ok(ParticipantInfo(try participant(participantID, in: saved), in: saved))
        case .shareSetProperties(let zone, let name, let title, let thumbnail, let shareType, let clear, let allowsAccessRequests):
            var share = try findShare(zone: zone, name: name)
            for key in clear ?? [] {
                switch key {
                case "title": share.title = nil
                case "thumbnail": share.thumbnailImageData = nil
                case "type": share.shareType = nil
                default:
                    throw ShareSyncError(
                        .invalidArguments, "cannot clear \(key.prefix(40).debugDescription): the properties are title, thumbnail and type",
                        rule: .shareProperty)
                }
            }
            if let title { share.title = title }
            if let thumbnail { share.thumbnailImageData = thumbnail }
            if let shareType { share.shareType = shareType }
            if let allowsAccessRequests { share.allowsAccessRequests = allowsAccessRequests }
            return ok(ShareInfo(try save(share)))
        case .shareSetPermission(let zone, let name, let participantID, let permission):
            var share = try findShare(zone: zone, name: name)
            try share.setPermission(permission, forParticipantID: participantID)
            let saved = try save(share)
            return ok(ParticipantInfo(try participant(participantID, in: saved), in: saved))
        case .shareRemoveParticipant(let zone, let name, let participantID):
            var share = try findShare(zone: zone, name: name)
            try share.removeParticipant(try participant(participantID, in: share))
            _ = try save(share)
            return ok(Done())
        case .shareSetPublicPermission(let zone, let name, let permission):
            var share = try findShare(zone: zone, name: name)
            share.publicPermission = permission
            return ok(ShareInfo(try save(share)))
        case .shareStop(let zone, let name):
            let share = try findShare(zone: zone, name: name)
            try check(database.modifyRecords(deleting: [share.recordID]))
            return ok(Done())
        case .shareRequesters(let zone, let name):
            let share = try findShare(zone: zone, name: name)
            return ok(share.requesters.map {
                RequesterInfo(userRecordName: $0.userRecordName, displayName: $0.userIdentity.displayName, requestDate: $0.requestDate)
            })
        case .shareApprove(let zone, let name, let user, let permission):
            var share = try findShare(zone: zone, name: name)
            try share.approveRequester(try requester(user, in: share), permission: permission)
            let saved = try save(share)
            guard let stored = saved.participants.first(where: { $0.userIdentity.userRecordName == user }) else {
                throw ShareSyncError(.internalError, "the approved requester is missing from the saved share")
            }
            return ok(ParticipantInfo(stored, in: saved))
        case .shareDeny(let zone, let name, let user):
            var share = try findShare(zone: zone, name: name)
            share.denyRequesters([try requester(user, in: share)])
            _ = try save(share)
            return ok(Done())
        case .shareBlock(let zone, let name, let user):
            var share = try findShare(zone: zone, name: name)
            if let requester = share.requesters.first(where: { $0.userRecordName == user }) {
                share.blockRequesters([requester])
            } else {
                share.blockIdentities([UserIdentity(userRecordName: user)])
            }
            _ = try save(share)
            return ok(Done())
        case .shareUnblock(let zone, let name, let user):
            var share = try findShare(zone: zone, name: name)
            guard let blocked = share.blockedIdentities.first(where: { $0.userRecordName == user }) else {
                throw ShareSyncError(
                    .unknownItem,
                    "\(user) is not blocked from share \(share.recordID.recordName); `sharesync share show` lists who is",
                    recordID: share.recordID)
            }
            share.unblockIdentities([blocked])
            _ = try save(share)
            return ok(Done())
        }
    }

    // MARK: Records

    /// Saves a record of the private database under `policy` (see ``ControlRequest/recordSave(zone:type:name:parent:fields:policy:ifTag:)``).
    func saveRecord(
        zone: String, type: String?, name: String, parent: String?, fields: [FieldAssignment], policy: SavePolicy? = nil,
        ifTag: String? = nil
    ) throws(ShareSyncError) -> Record {
        let zoneID = RecordZone.ID(zoneName: zone)
        let id = Record.ID(recordName: name, zoneID: zoneID)
        try Self.checkTag(ifTag, policy: policy, recordID: id)
        let policy = policy ?? (ifTag == nil ? .changedKeys : .ifServerRecordUnchanged)
        var existing: Record?
        do {
            existing = try database.fetchRecord(id)
        } catch where error.code == .unknownItem {
            existing = nil
        }
        guard let type = type ?? existing?.recordType else {
            throw ShareSyncError(
                .unknownItem, "record \(name) does not exist in zone \(zone); give its --type to create it", recordID: id,
                rule: .typeNeeded)
        }
        var record: Record
        if policy == .ifServerRecordUnchanged, let existing, existing.recordType == type {
            // The stored record with the fields set, saved against the tag given (none: it must be new).
            record = existing
            record.recordChangeTag = ifTag
        } else {
            record = Record(recordType: type, recordID: id)
            record.recordChangeTag = ifTag
        }
        for field in fields { record[field.key] = try field.fieldValue(in: zoneID) }
        if let parent {
            let parentID = Record.ID(recordName: parent, zoneID: zoneID)
            // A parent that does not exist (a typo) took the record, and everything under it, out of
            // every share without a word; a participant's save is refused (moveOutsideShare). The
            // store keeps records whose parent was deleted; a new parent must exist.
            if existing?.parent?.recordID.recordName != parent {
                do {
                    _ = try database.fetchRecord(parentID)
                } catch where error.code == .unknownItem {
                    throw ShareSyncError(
                        .unknownItem, "parent \(parent) does not exist in zone \(zone); save it first (or check the name)",
                        recordID: id, rule: .parentNotFound)  // the record refused, as every error names it
                }
            }
            record.setParent(parentID)
        }
        let result = try database.modifyRecords(saving: [record], savePolicy: policy)
        try check(result)
        guard case .success(let saved)? = result.saveResults[id] else {
            throw ShareSyncError(.internalError, "record \(name) was not saved", recordID: id)
        }
        return saved
    }

    /// Refuses a change tag with a policy that does not look at it.
    static func checkTag(_ ifTag: String?, policy: SavePolicy?, recordID: Record.ID) throws(ShareSyncError) {
        guard let ifTag else { return }
        if ifTag.isEmpty {
            throw ShareSyncError(.invalidArguments, "the change tag must not be empty", recordID: recordID, rule: .ifTagSyntax)
        }
        if let policy, policy != .ifServerRecordUnchanged {
            throw ShareSyncError(
                .invalidArguments, "a change tag goes with the policy ifServerRecordUnchanged, not \(policy.rawValue)",
                recordID: recordID, rule: .ifTagPolicy)
        }
    }

    /// Throws the first failure of a modify request, as the error of its item.
    func check(_ result: ModifyRecordsResult) throws(ShareSyncError) {
        let failures = result.errors.filter { $0.value.code != .batchRequestFailed }
        if let (_, error) = failures.sorted(by: { $0.key < $1.key }).first { throw error }
        if let (_, error) = result.errors.sorted(by: { $0.key < $1.key }).first { throw error }
    }

    // MARK: Shares

    /// The named share of a zone, or its only share when `name` is nil.
    func findShare(zone: String, name: String?) throws(ShareSyncError) -> Share {
        let zoneID = RecordZone.ID(zoneName: zone)
        if let name {
            var record = try database.fetchRecord(Record.ID(recordName: name, zoneID: zoneID))
            // The root record's name names its share too.
            if record.recordType != Record.shareRecordType, let shareID = record.share?.recordID {
                record = try database.fetchRecord(Record.ID(recordName: shareID.recordName, zoneID: zoneID))
            }
            guard let share = Share(record) else {
                throw ShareSyncError(
                    .invalidArguments, "record \(name) is a \(record.recordType), neither a share nor a shared root record",
                    recordID: record.recordID,
                    rule: .notAShare)
            }
            return share
        }
        let shares = try database.fetchShares(in: zoneID)
        switch shares.count {
        case 0:
            throw ShareSyncError(.unknownItem, "zone \(zone) has no share; create one with `sharesync share create`", zoneID: zoneID)
        case 1:
            return shares[0]
        default:
            let names = shares.map(\.recordID.recordName).joined(separator: ", ")
            throw ShareSyncError(
                .invalidArguments, "zone \(zone) has \(shares.count) shares (\(names)); name one with --share", zoneID: zoneID,
                rule: .ambiguousShare)
        }
    }

    func save(_ share: Share) throws(ShareSyncError) -> Share {
        let result = try database.modifyRecords(saving: [share.record])
        try check(result)
        guard case .success(let saved)? = result.saveResults[share.recordID], let savedShare = Share(saved) else {
            throw ShareSyncError(.internalError, "share \(share.recordID.recordName) was not saved", recordID: share.recordID)
        }
        return savedShare
    }

    func participant(_ id: String, in share: Share) throws(ShareSyncError) -> Participant {
        guard let p = share.participants.first(where: { $0.participantID == id }) else {
            throw ShareSyncError(
                .unknownItem, "share \(share.recordID.recordName) has no participant \(id); see `sharesync share participants`",
                recordID: share.recordID)
        }
        return p
    }

    func requester(_ user: String, in share: Share) throws(ShareSyncError) -> AccessRequester {
        guard let r = share.requesters.first(where: { $0.userRecordName == user }) else {
            throw ShareSyncError(
                .unknownItem, "\(user) has not requested access to share \(share.recordID.recordName)", recordID: share.recordID)
        }
        return r
    }
}

/// How a record listing is paged (`recordList`, `sharedRecordList`): one page when the request names
/// `after` or `limit`, else the whole zone, read in pages, within ``wholeBytes``. Before, a listing
/// was one answer however large the zone: a million records made one line of hundreds of megabytes
/// in the daemon, and the client refused it past 256 MiB.
struct ListPaging {
    /// About the most JSON one page carries (at least one record).
    static let pageBytes = 4 << 20
    /// The records a page carries when the request gives no `limit`.
    static let defaultLimit = 1_000
    /// The most records a page carries.
    static let maximumLimit = 100_000
    /// The most JSON a listing asked for whole may come to.
    static let wholeBytes = 64 << 20

    let after: String?
    let limit: Int
    let whole: Bool

    init(after: String?, limit: Int?) throws(ShareSyncError) {
        if let limit, limit < 1 {
            throw ShareSyncError(.invalidArguments, "the limit must be 1 or more, not \(limit)", rule: .limitRange)
        }
        self.after = after
        self.limit = min(limit ?? Self.defaultLimit, Self.maximumLimit)
        whole = after == nil && limit == nil
    }

    /// The page asked for, or every page of the zone for a listing asked for whole. `page` reads the
    /// page after a name (nil: the first) and says how many bytes of JSON it holds.
    func collect<T>(
        zone: String, name: (T) -> String, _ page: (String?) throws(ShareSyncError) -> (records: [T], bytes: Int)
    ) throws(ShareSyncError) -> [T] {
        guard whole else { return try page(after).records }
        var all: [T] = []
        var bytes = 0
        var cursor: String?
        while true {
            let next = try page(cursor)
            guard let last = next.records.last else { return all }
            bytes += next.bytes
            guard bytes <= Self.wholeBytes else {
                throw ShareSyncError(
                    .limitExceeded,
                    "zone \(zone) holds more than \(Self.wholeBytes >> 20) MiB of records, too many for one answer: list it in pages (`limit` and `after`; `sharesync record list` does)",
                    zoneID: RecordZone.ID(zoneName: zone), rule: .listTooLarge)
            }
            all += next.records
            cursor = name(last)
        }
    }
}
