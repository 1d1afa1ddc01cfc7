import Foundation
import Logging
import ShareSyncCore
import ShareSyncStore

/// Carries out control requests on the owner's private database (see ``ControlRequest``).
///
/// Every operation goes through the same `PrivateDatabase` API an app would use, so the sharing
/// rules of `SharingRules.md` apply unchanged; refusals come back as ``ControlError``.
public struct ControlHandler: Sendable {
    public let database: PrivateDatabase
    /// What `status` reports; set by the daemon once the server is bound.
    public let status: @Sendable () -> NodeStatus
    /// The participant side: `nil` refuses its requests with `serviceUnavailable`.
    public let participant: ParticipantSync?
    /// The change feeds: `nil` refuses `changes` with `serviceUnavailable`.
    public let feeds: NodeChangeFeeds?
    let logger: Logger

    public init(
        database: PrivateDatabase, participant: ParticipantSync? = nil, feeds: NodeChangeFeeds? = nil,
        status: @escaping @Sendable () -> NodeStatus, logger: Logger
    ) {
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
                .invalidArguments, "not a control request: \(error)", rule: "controlSyntax"))))
        }
        do throws(ShareSyncError) {
            let response = try await handle(request)
            logger.debug("control request", metadata: ["request": "\(Self.commandName(request))"])
            return response
        } catch {
            logger.info(
                "control request refused",
                metadata: ["request": "\(Self.commandName(request))", "error.code": "\(error.code.rawValue)"])
            return Self.encode(ControlResponse<Done>(error: ControlError(error)))
        }
    }

    /// The request's command, without its arguments (which may hold hundreds of records).
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

    func handle(_ request: ControlRequest) async throws(ShareSyncError) -> Data {
        func ok<T: Codable & Sendable>(_ value: T) -> Data { Self.encode(ControlResponse(result: value)) }
        switch request {
        case .shareMetadata, .sharedShareGet, .sharedShareEdit, .accept, .leave, .sharedZoneList, .sharedRecordList, .sharedRecordGet, .sharedRecordSave,
            .sharedRecordDelete, .outboxList, .outboxResolve, .outboxDiscard:
            return try await handleParticipant(request)
        case .changes(let shared, let since, let waitSeconds):
            guard let feeds else { throw Self.unavailable("change feeds") }
            let wait = waitSeconds.map { Duration.milliseconds(Int64(max(0, min($0, 600)) * 1000)) }
            return ok(try await feeds.changes(shared: shared, since: since, wait: wait))
        case .currentChangeToken(let shared):
            guard let feeds else { throw Self.unavailable("change feeds") }
            return ok(ChangesPage(changes: [], token: try feeds.currentToken(shared: shared)))
        case .recordImport(let zone, let records):
            let zoneID = RecordZone.ID(zoneName: zone)
            let moved = records.map { record in
                var copy = Record(recordType: record.recordType, recordID: Record.ID(recordName: record.recordID.recordName, zoneID: zoneID))
                for key in record.allKeys { copy[key] = record.fields[key] }
                if let parent = record.parent { copy.setParent(Record.ID(recordName: parent.recordID.recordName, zoneID: zoneID)) }
                return copy
            }
            // The whole request is one transaction: all of its records or none (the line limit bounds it).
            let result = try database.importRecords(moved)
            try check(result)
            return ok(ImportResult(saved: result.saveResults.count))
        case .status:
            var status = status()
            if let counts = try participant?.replica.outboxCounts() {
                status.outbox = OutboxCounts(
                    pending: counts[.pending] ?? 0, conflicts: counts[.conflict] ?? 0, refused: counts[.refused] ?? 0)
            }
            return ok(status)
        case .zoneCreate(let name):
            let zone = try database.saveZone(RecordZone(zoneName: name))
            return ok(ZoneInfo(zoneName: zone.zoneID.zoneName))
        case .zoneList:
            return ok(try database.fetchAllZones().map { ZoneInfo(zoneName: $0.zoneID.zoneName) })
        case .zoneDelete(let name):
            try database.deleteZone(RecordZone.ID(zoneName: name))
            return ok(Done())
        case .recordSave(let zone, let type, let name, let parent, let fields):
            return ok(try saveRecord(zone: zone, type: type, name: name, parent: parent, fields: fields))
        case .recordGet(let zone, let name):
            return ok(try database.fetchRecord(Record.ID(recordName: name, zoneID: RecordZone.ID(zoneName: zone))))
        case .recordDelete(let zone, let name):
            let id = Record.ID(recordName: name, zoneID: RecordZone.ID(zoneName: zone))
            _ = try database.fetchRecord(id)  // deleting a missing record would succeed silently
            try check(database.modifyRecords(deleting: [id]))
            return ok(Done())
        case .recordList(let zone):
            return ok(try records(in: zone))
        case .shareCreate(let zone, let root, let title, let publicPermission, let allowsAccessRequests, let thumbnail, let shareType):
            var share: Share
            let zoneID = RecordZone.ID(zoneName: zone)
            if let root {
                share = Share(rootRecord: try database.fetchRecord(Record.ID(recordName: root, zoneID: zoneID)))
            } else {
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
            var participant: Participant
            if oneTime == true {
                guard lookup.isEmpty else {
                    throw ShareSyncError(
                        .invalidArguments, "a one-time URL participant has no email, phone or user: whoever uses the link first becomes them",
                        rule: "oneTimeURLParticipant")
                }
                participant = Participant.oneTimeURLParticipant(permission: permission)
                participant.role = role ?? .privateUser
            } else {
                participant = Participant(lookupInfo: lookup, permission: permission, role: role ?? .privateUser)
            }
            guard participant.role == .privateUser || participant.role == .administrator else {
                throw ShareSyncError(
                    .invalidArguments, "an invited participant's role is privateUser or administrator, not \(participant.role.rawValue)",
                    rule: "participantRole")
            }
            try share.addParticipant(participant)
            let saved = try save(share)
            let key = participant.identityKey
            guard let stored = saved.participants.first(where: { $0.participantID == participant.participantID })
                ?? saved.participants.first(where: { $0.role != .owner && key != nil && $0.identityKey == key })
            else { throw ShareSyncError(.internalError, "the invited participant is missing from the saved share") }
            return ok(ParticipantInfo(stored, in: saved))
        case .shareSetRole(let zone, let name, let participantID, let role):
            var share = try findShare(zone: zone, name: name)
            try share.setRole(role, forParticipantID: participantID)
            let saved = try save(share)
            return ok(ParticipantInfo(try participant(participantID, in: saved), in: saved))
        case .shareSetProperties(let zone, let name, let title, let thumbnail, let shareType, let clear):
            var share = try findShare(zone: zone, name: name)
            for key in clear ?? [] {
                switch key {
                case "title": share.title = nil
                case "thumbnail": share.thumbnailImageData = nil
                case "type": share.shareType = nil
                default:
                    throw ShareSyncError(
                        .invalidArguments, "cannot clear \(key.prefix(40).debugDescription): the properties are title, thumbnail and type",
                        rule: "shareProperty")
                }
            }
            if let title { share.title = title }
            if let thumbnail { share.thumbnailImageData = thumbnail }
            if let shareType { share.shareType = shareType }
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
        }
    }

    // MARK: Records

    func saveRecord(zone: String, type: String, name: String, parent: String?, fields: [FieldAssignment])
        throws(ShareSyncError) -> Record
    {
        let zoneID = RecordZone.ID(zoneName: zone)
        let id = Record.ID(recordName: name, zoneID: zoneID)
        var record = Record(recordType: type, recordID: id)
        for field in fields { record[field.key] = try field.fieldValue(in: zoneID) }
        if let parent { record.setParent(Record.ID(recordName: parent, zoneID: zoneID)) }
        let result = try database.modifyRecords(saving: [record], savePolicy: .changedKeys)
        try check(result)
        guard case .success(let saved)? = result.saveResults[id] else {
            throw ShareSyncError(.internalError, "record \(name) was not saved", recordID: id)
        }
        return saved
    }

    func records(in zone: String) throws(ShareSyncError) -> [Record] {
        var token: ServerChangeToken?
        var records: [Record] = []
        repeat {
            let page = try database.fetchZoneChanges(RecordZone.ID(zoneName: zone), since: token)
            records += page.changedRecords
            token = page.changeToken
            if !page.moreComing { break }
        } while true
        return records.sorted { $0.recordID.recordName < $1.recordID.recordName }
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
            let record = try database.fetchRecord(Record.ID(recordName: name, zoneID: zoneID))
            guard let share = Share(record) else {
                throw ShareSyncError(
                    .invalidArguments, "record \(name) is a \(record.recordType), not a share", recordID: record.recordID,
                    rule: "notAShare")
            }
            return share
        }
        let shares = try records(in: zone).compactMap(Share.init)
        switch shares.count {
        case 0:
            throw ShareSyncError(.unknownItem, "zone \(zone) has no share; create one with `sharesync share create`", zoneID: zoneID)
        case 1:
            return shares[0]
        default:
            let names = shares.map(\.recordID.recordName).joined(separator: ", ")
            throw ShareSyncError(
                .invalidArguments, "zone \(zone) has \(shares.count) shares (\(names)); name one with --share", zoneID: zoneID,
                rule: "ambiguousShare")
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
