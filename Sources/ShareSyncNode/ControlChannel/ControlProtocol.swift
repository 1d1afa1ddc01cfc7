import Foundation
import ShareSyncCore

/// A request on the control channel.
///
/// # The control channel
///
/// The daemon (`sharesync run`) listens on the Unix domain socket `control.sock` in its home folder
/// (mode 0600 inside a 0700 folder: only the node's user can connect). Each request is one line of
/// JSON, each response one line of JSON; a client may send several requests on one connection and
/// gets the responses in order. Request lines are at most ``ControlServer/maximumLineLength`` bytes;
/// an answer may be longer (a record of 1 MB, a page of a listing of about 4 MiB of records, a page
/// of changes), and listings of large zones come in pages (``recordList(zone:after:limit:)``).
///
/// A request is an object with one key, the command, whose value holds its arguments:
///
/// ```
/// → {"zoneCreate":{"name":"Topics"}}
/// ← {"ok":true,"result":{"zoneName":"Topics"}}
/// → {"zoneDelete":{"name":"_defaultZone"}}
/// ← {"ok":false,"error":{"code":"invalidArguments","message":"the default zone cannot be deleted","rule":"defaultZone","zoneName":"_defaultZone"}}
/// ```
///
/// The result's shape depends on the command (see the cases below for the payload type); a refused
/// operation carries a ``ControlError`` with the ``ShareSyncError`` code. A line that is not a request
/// gets `{"ok":false,"error":{"code":"invalidArguments",...}}` and the connection stays open.
public enum ControlRequest: Sendable, Hashable, Codable {
    /// → ``NodeStatus``
    case status
    /// Creates a zone; one that exists already is left as it is (`created` false). The default zone
    /// always exists and cannot be created (`invalidArguments`, rule `defaultZone`). → ``ZoneInfo``
    case zoneCreate(name: String)
    /// → `[ZoneInfo]`
    case zoneList
    /// → ``Done``
    case zoneDelete(name: String)
    /// Creates or updates a record. `type` may be omitted when the record exists (its type is kept).
    /// `policy` decides what happens to a record already there:
    /// - `changedKeys` (the default without `ifTag`): the given fields and parent are set, others kept;
    /// - `ifServerRecordUnchanged` (the default with `ifTag`): the record is saved only if its change tag
    ///   is still `ifTag` (without `ifTag`: only if no record of that name exists); otherwise it fails with
    ///   `serverRecordChanged`, whose `serverRecord` is the record as stored;
    /// - `allKeys`: the record is replaced by one holding only the given fields.
    ///
    /// `ifTag` goes with `ifServerRecordUnchanged` only. → ``Record``
    ///
    /// ```
    /// → {"recordSave":{"zone":"Topics","name":"topic-1","fields":[{"key":"title","type":"string","value":"B"}],"ifTag":"3"}}
    /// ← {"ok":false,"error":{"code":"serverRecordChanged","message":"…","recordName":"topic-1","serverRecord":{…}}}
    /// ```
    case recordSave(
        zone: String, type: String?, name: String, parent: String?, fields: [FieldAssignment], policy: SavePolicy? = nil,
        ifTag: String? = nil)
    /// → ``Record``
    case recordGet(zone: String, name: String)
    /// Deletes a record (and what its `deleteSelf` references cascade to); a record that does not
    /// exist is `unknownItem`. → ``Done``
    case recordDelete(zone: String, name: String)
    /// → `[Record]`, by name (in the byte order of their UTF-8). With `limit` or `after`, one page:
    /// the records after `after` (none: from the first), at most `limit` (default 1,000, at most
    /// 100,000) and about 4 MiB of JSON (at least one record); ask again after the last name until a
    /// page comes back empty. Without either, the whole zone, unless its records come to more than 64 MiB of JSON
    /// (`limitExceeded`, rule `listTooLarge`: page it).
    case recordList(zone: String, after: String? = nil, limit: Int? = nil)
    /// Shares a hierarchy (`root`) or the whole zone, with its title, thumbnail (image bytes, base64 in
    /// JSON, at most ``Share/maximumThumbnailSize``) and type (a uniform type identifier). → ``ShareInfo``
    case shareCreate(
        zone: String, root: String?, title: String?, publicPermission: Participant.Permission,
        allowsAccessRequests: Bool, thumbnail: Data? = nil, shareType: String? = nil)
    /// Changes a share's title, thumbnail or type (given ones are set; `clear` lists those to remove:
    /// `title`, `thumbnail`, `type`), and whether it takes access requests (`allowsAccessRequests`, if
    /// given). → ``ShareInfo``
    ///
    /// ```
    /// → {"shareSetProperties":{"zone":"Topics","title":"Groceries","shareType":"com.example.list"}}
    /// ← {"ok":true,"result":{"shareName":"cloudkit.zoneshare","title":"Groceries","shareType":"com.example.list",…}}
    /// ```
    case shareSetProperties(
        zone: String, share: String?, title: String?, thumbnail: Data?, shareType: String?, clear: [String]?,
        allowsAccessRequests: Bool? = nil)
    /// Makes a participant an administrator, or a privateUser again (owner only). → ``ParticipantInfo``
    case shareSetRole(zone: String, share: String?, participantID: String, role: Participant.Role)
    /// `share` is the share's record name; `nil` picks the zone's only share. → ``ShareInfo``
    case shareGet(zone: String, share: String?)
    /// Invites a participant by lookup info, with a permission and a role (privateUser, the default, or
    /// administrator); with `oneTime` the lookup info is empty and whoever first uses the participant's
    /// one-time URL becomes them. A user blocked from the share is refused (`invalidArguments`, rule
    /// `identityBlocked`) until `shareUnblock`. → ``ParticipantInfo`` with its invitation URL
    case shareInvite(
        zone: String, share: String?, lookup: UserIdentity.LookupInfo, permission: Participant.Permission,
        role: Participant.Role? = nil, oneTime: Bool? = nil)
    /// → ``ParticipantInfo``
    case shareSetPermission(zone: String, share: String?, participantID: String, permission: Participant.Permission)
    /// → ``Done``
    case shareRemoveParticipant(zone: String, share: String?, participantID: String)
    /// Changes the public permission (and so whether anyone with the URL may join). Public users who
    /// joined already get the new permission; pending invitations are removed, and with `none` the
    /// public users too (invited participants who had accepted stay). → ``ShareInfo``
    case shareSetPublicPermission(zone: String, share: String?, permission: Participant.Permission)
    /// Stops sharing: deletes the share. → ``Done``
    case shareStop(zone: String, share: String?)
    /// → `[RequesterInfo]`
    case shareRequesters(zone: String, share: String?)
    /// → ``ParticipantInfo``
    case shareApprove(zone: String, share: String?, userRecordName: String, permission: Participant.Permission)
    /// → ``Done``
    case shareDeny(zone: String, share: String?, userRecordName: String)
    /// Blocks a user: they may not request access or accept, and a participant with that identity is
    /// removed. → ``Done``
    case shareBlock(zone: String, share: String?, userRecordName: String)
    /// Lifts a block (`unblockIdentities`): the user may request access and be invited again; a user
    /// who is not blocked is `unknownItem`. → ``Done``
    ///
    /// ```
    /// → {"shareUnblock":{"zone":"Topics","userRecordName":"_3fa4…"}}
    /// ← {"ok":true,"result":{"done":true}}
    /// ```
    case shareUnblock(zone: String, share: String?, userRecordName: String)
    /// Saves records into a zone of the private database in one transaction: all of them or none.
    /// `policy` (default `allKeys`: each record replaces any record of that name) may be `changedKeys`
    /// (the record's fields are set on the stored record, others kept) or `ifServerRecordUnchanged` (each
    /// record's `recordChangeTag` must be the stored record's, and a record without one must be new;
    /// otherwise nothing is saved and the error is `serverRecordChanged` with the stored record).
    /// → ``ImportResult``
    case recordImport(zone: String, records: [Record], policy: SavePolicy? = nil)

    /// Saves and deletes records of the private database in one request, like `CKDatabase.modifyRecords`:
    /// each record carries its zone (`zoneID`) and, for `ifServerRecordUnchanged` (the default), its
    /// `recordChangeTag`; with `atomically` (the default) it is one transaction, all of it or none. The
    /// result has one entry per item: `saved`, `deleted`, or `failed` with that item's error (the others of
    /// a failed atomic request fail with `batchRequestFailed`). → ``ModifyResult``
    ///
    /// ```
    /// → {"recordModify":{"saving":[{"recordName":"n1","recordType":"Note","zoneID":{"zoneName":"Topics"},"fields":{"title":{"value":"Milk","type":"STRING"}}}],"deleting":[{"zoneName":"Topics","recordName":"n0"}]}}
    /// ← {"ok":true,"result":{"saved":[{"recordName":"n1","recordChangeTag":"5",…}],"deleted":[{"zoneName":"Topics","recordName":"n0"}],"failed":[]}}
    /// ```
    case recordModify(saving: [Record], deleting: [RecordRef], policy: SavePolicy? = nil, atomically: Bool? = nil)
    /// The records of a zone that match a query (``Query``), in its order, a page of at most `limit`
    /// (default and cap 1000); `cursor` (from the previous page) continues. Private database, or with
    /// `shared` the replica (`owner` may be omitted when one owner shares a zone of that name; the
    /// replica's records, this node's pending writes not applied). → ``QueryPage``
    ///
    /// ```
    /// → {"recordQuery":{"shared":false,"zone":"Topics","query":{"recordType":"Note","predicate":[{"key":"title","comparator":"beginsWith","value":{"value":"Mi","type":"STRING"}}],"sortDescriptors":[{"key":"title","ascending":true}]}}}
    /// ← {"ok":true,"result":{"records":[…]}}
    /// ```
    case recordQuery(shared: Bool, owner: String? = nil, zone: String, query: Query, limit: Int? = nil, cursor: Int? = nil)

    // MARK: Participant side (the shared database replica)

    /// What the share at a URL is, asked of its owner without accepting it (`CKShare.Metadata`): nothing
    /// is accepted or stored. → ``ShareMetadataInfo``
    ///
    /// ```
    /// → {"shareMetadata":{"url":"sharesync://127.0.0.1:7420/share/PJdd…?owner=861c…&invite=Qx…"}}
    /// ← {"ok":true,"result":{"ownerName":"_861c…","ownerDisplayName":"Alice","title":"Groceries","zoneName":"Topics","role":"privateUser","permission":"readWrite","status":"pending","participantCount":2,"recordCount":3,…}}
    /// ```
    case shareMetadata(url: String)
    /// A share this node accepted, as the owner gives its share record to this participant (from the
    /// replica): administrators see every participant and the requesters, others the owner and
    /// themselves. → ``ShareInfo``
    case sharedShareGet(owner: String?, zone: String, share: String?)
    /// Changes a share this node accepted, through its owner (administrators only; the owner refuses
    /// anyone else with `permissionFailure`). Needs the owner to be connected. → ``ShareEditResult``
    ///
    /// ```
    /// → {"sharedShareEdit":{"zone":"Topics","edit":{"remove":{"participantID":"6F1C…"}}}}
    /// ← {"ok":false,"error":{"code":"permissionFailure","message":"only the owner or an administrator can change a share","rule":"shareEditOwnerOrAdministrator",…}}
    /// ```
    case sharedShareEdit(owner: String?, zone: String, share: String?, edit: ShareEdit)
    /// Asks the owner of the share at a URL to let this node in; the owner sees the node in
    /// `shareRequesters`. A share that does not allow access requests, or blocked this user, answers
    /// `participantMayNeedVerification` (rule `notInvited`), as for a URL one is not invited to. The URL must carry the
    /// owner's fingerprint. Nothing is stored. → ``AccessRequested``
    ///
    /// ```
    /// → {"requestAccess":{"url":"sharesync://127.0.0.1:7420/share/PJdd…?owner=861c…"}}
    /// ← {"ok":true,"result":{"requested":true,"userRecordName":"_3fa4…"}}
    /// ```
    case requestAccess(url: String)
    /// Accepts a share by its URL and waits (up to `timeoutSeconds`, default 120) until its records are in
    /// the replica. → ``AcceptedShare``
    case accept(url: String, timeoutSeconds: Double?)
    /// Leaves a share; `owner` may be omitted when one owner shares a zone of that name, `share` when the
    /// zone holds one share. The owner must be reachable, unless `local` is true: then the zone leaves
    /// the replica at once and the owner is told when its node is next reached (it then marks this
    /// participant as having left). → ``LeftShare`` (its `queuedWrites` are refused by the owner once it
    /// has the leave). Once nothing of the owner is left (no zone, no queued write), the node forgets it.
    case leave(owner: String?, zone: String, share: String?, local: Bool? = nil)
    /// → `[SharedZoneInfo]`
    case sharedZoneList
    /// → `[SharedRecord]`, read from the replica (works while the owner is unreachable), with this
    /// node's own writes not yet accepted by the owner in place of the replica's version (see ``SharedRecord``)
    /// `after` and `limit` page it as for ``recordList(zone:after:limit:)`` (by name; this node's writes
    /// not yet accepted come in the page their name falls in, so a page may hold more than `limit`).
    case sharedRecordList(owner: String?, zone: String, after: String? = nil, limit: Int? = nil)
    /// → ``SharedRecord``, read from the replica, or this node's own write not yet accepted (read your
    /// own writes)
    case sharedRecordGet(owner: String?, zone: String, name: String)
    /// Saves a record in a shared zone through the owner. The record sent is this node's copy (its
    /// latest pending write, else the replica's record, else a new record) with the given fields and
    /// parent set, and that copy's change tag. `policy` (default `ifServerRecordUnchanged`, as in
    /// CloudKit) decides what happens if the owner's record changed since: `ifServerRecordUnchanged`
    /// fails with `serverRecordChanged` (error `serverRecord` holds the owner's record; a queued write
    /// stays in the outbox as a conflict, see `outboxList`); `changedKeys` writes the given fields over
    /// the owner's record; `allKeys` replaces it with this node's copy. `ifTag` sends the save against
    /// that change tag rather than the copy's (with `ifServerRecordUnchanged` only). `type` may be
    /// omitted when this node has a copy of the record. → ``SharedWriteResult``
    ///
    /// ```
    /// → {"sharedRecordSave":{"zone":"Topics","type":"Topic","name":"topic-1","fields":[{"key":"title","type":"string","value":"B"}]}}
    /// ← {"ok":false,"error":{"code":"serverRecordChanged","message":"…","recordName":"topic-1","serverRecord":{…}}}
    /// ```
    case sharedRecordSave(
        owner: String?, zone: String, type: String?, name: String, parent: String?, fields: [FieldAssignment],
        policy: SavePolicy?, ifTag: String? = nil)
    /// Deletes a record in a shared zone through the owner. → ``SharedWriteResult``
    case sharedRecordDelete(owner: String?, zone: String, name: String)
    /// Saves and deletes records in shared zones through their owners, like `recordModify`: each record's
    /// `zoneID` names its zone and owner (`ownerRecordName`; may be omitted when one owner shares a zone
    /// of that name), each zone's items go to its owner as one request (atomic per zone, as in CloudKit; more
    /// than the owner's items per request (400) or response size go as several, each atomic on its own),
    /// with `ifServerRecordUnchanged` (the default) against each record's `recordChangeTag`. A zone whose
    /// owner is not reachable is queued in the outbox: its items are listed in `queued` (with the outbox
    /// operation's id) rather than `saved` or `deleted`; with `queue` false (a caller that keeps its own
    /// pending changes and retries, like a sync engine) nothing is queued and those items fail with
    /// `networkUnavailable`. → ``ModifyResult``
    case sharedRecordModify(
        saving: [Record], deleting: [RecordRef], policy: SavePolicy? = nil, atomically: Bool? = nil, queue: Bool? = nil)

    // MARK: The outbox (writes to shared zones not yet accepted)

    /// Every write in the outbox: pending (waiting for the owner), conflict (the owner's record changed
    /// since it was read) and refused (the owner said no, e.g. `permissionFailure`). Conflicts and
    /// refusals stay until resolved with `outboxResolve` or `outboxDiscard`. → `[OutboxItem]`
    ///
    /// ```
    /// → {"outboxList":{}}
    /// ← {"ok":true,"result":[{"id":3,"ownerName":"_ab…","zoneName":"Topics","records":["topic-1"],"state":"conflict",…}]}
    /// ```
    case outboxList
    /// Resolves a write in conflict: `keep` `mine` sends it again over the owner's change tag (same
    /// fields; it may conflict again) and waits a few seconds for the answer if the owner is connected;
    /// `theirs` drops it (the owner's version stays). → ``OutboxResolution``
    ///
    /// ```
    /// → {"outboxResolve":{"id":3,"keep":"mine"}}
    /// ← {"ok":true,"result":{"id":3,"outcome":"sent"}}
    /// ```
    case outboxResolve(id: Int64, keep: ParticipantSync.ConflictChoice)
    /// Drops a write from the outbox, whatever its state (typically a refused one). → ``Done``
    ///
    /// ```
    /// → {"outboxDiscard":{"id":4}}
    /// ← {"ok":true,"result":{"done":true}}
    /// ```
    case outboxDiscard(id: Int64)

    // MARK: Change feeds

    /// The changes of the private (`shared: false`) or shared database since a token (`nil`: everything
    /// there is). With `waitSeconds`, an empty answer waits up to that long for a change. `zone` (and,
    /// shared, `owner` when several owners share a zone of that name) gives one zone's records, like
    /// `CKFetchRecordZoneChangesOperation`; `limit` makes a page of at most that many changes, with
    /// `moreComing` and the token to go on from (private database: with `zone` only). Shared tokens
    /// stay valid across daemon restarts. → ``ChangesPage``
    ///
    /// ```
    /// → {"changes":{"shared":true,"zone":"Topics","limit":2}}
    /// ← {"ok":true,"result":{"changes":[…,…],"moreComing":true,"token":"shared:1f2e3d4c:2"}}
    /// ```
    case changes(
        shared: Bool, since: String?, waitSeconds: Double?, zone: String? = nil, owner: String? = nil, limit: Int? = nil)
    /// The zones changed and deleted since a token, like `CKFetchDatabaseChangesOperation`; `limit`
    /// makes a page of at most that many zones. Tokens are those of `changes`. → ``DatabaseChangesPage``
    ///
    /// ```
    /// → {"databaseChanges":{"shared":false,"since":"private:…"}}
    /// ← {"ok":true,"result":{"changedZones":[{"zoneName":"Topics"}],"deletedZones":[],"moreComing":false,"token":"private:…"}}
    /// ```
    case databaseChanges(shared: Bool, since: String?, limit: Int? = nil)
    /// The token for "now": `changes` from it returns only later changes. → ``ChangesPage`` (no changes)
    case currentChangeToken(shared: Bool)

    // MARK: Addresses (owners that move)

    /// Sets the address this node advertises: share URLs name it from now on, every participant
    /// connected now is told at once (an `ownerAddress` push; they store it and reconnect there from
    /// then on), and later connections learn it in their `welcome`. Kept in the settings. With
    /// `listen`, the daemon listens there from its next start (it keeps listening where it is until
    /// then). → ``AdvertiseResult``
    ///
    /// ```
    /// → {"advertise":{"host":"alice.example.org","port":7421,"listen":{"host":"0.0.0.0","port":7421}}}
    /// ← {"ok":true,"result":{"advertised":{"host":"alice.example.org","port":7421},"participantsTold":2,…}}
    /// ```
    case advertise(host: String, port: Int, listen: HostAndPort?)
    /// Points an owner this node replicates at a new address, for an owner that moved while this node
    /// could not hear it announce so. The replica, its tokens and the outbox stay; the node connects
    /// there at once. → ``Done``
    case ownerAddress(owner: String, host: String, port: Int)

    // MARK: Backups

    /// Copies the private database, as it is now, to a new file at `path` (absolute; the daemon writes
    /// it, with mode 0600) while the node runs: reads go on meanwhile, writes wait until the copy is
    /// made. A node restored from the copy refuses every change token and change tag of what
    /// happened after it was taken (a participant holding one fetches again), which a copy of the
    /// files taken while the node runs cannot ensure. With `shared`, the replica instead (the shared
    /// database, its change tokens and this node's writes waiting in the outbox): restored, it catches
    /// up from those tokens. A file at `path` is not replaced, and a name SQLite takes for a side file
    /// (ending in `-journal`, `-wal`, `-shm`) is refused (`invalidArguments`). → ``BackupResult``
    ///
    /// ```
    /// → {"backup":{"path":"/var/backups/alice-private.sqlite"}}
    /// ← {"ok":true,"result":{"path":"/var/backups/alice-private.sqlite","bytes":4321280}}
    /// ```
    case backup(path: String, shared: Bool? = nil)
}

/// What `backup` wrote.
public struct BackupResult: Codable, Sendable, Hashable {
    /// The copy's path.
    public var path: String
    /// The copy's size.
    public var bytes: Int

    public init(path: String, bytes: Int) {
        self.path = path
        self.bytes = bytes
    }
}

/// What `advertise` did.
public struct AdvertiseResult: Codable, Sendable, Hashable {
    /// The address share URLs and `welcome` now carry.
    public var advertised: HostAndPort
    /// Where the daemon listens now.
    public var listening: HostAndPort
    /// Where it listens from its next start (the same, unless `listen` changed it).
    public var listenAtNextStart: HostAndPort
    /// How many authenticated connections were told with an `ownerAddress` push.
    public var participantsTold: Int

    public init(advertised: HostAndPort, listening: HostAndPort, listenAtNextStart: HostAndPort, participantsTold: Int) {
        self.advertised = advertised
        self.listening = listening
        self.listenAtNextStart = listenAtNextStart
        self.participantsTold = participantsTold
    }
}

/// A response on the control channel: `{"ok":true,"result":...}` or `{"ok":false,"error":...}`.
public struct ControlResponse<Result: Codable & Sendable>: Codable, Sendable {
    public var ok: Bool
    public var result: Result?
    public var error: ControlError?

    public init(result: Result) {
        ok = true
        self.result = result
    }

    public init(error: ControlError) {
        ok = false
        self.error = error
    }
}

/// A refused operation as the control channel carries it: a ``ShareSyncError`` flattened.
public struct ControlError: Codable, Sendable, Hashable, Error, CustomStringConvertible {
    public var code: ShareSyncError.Code
    public var message: String
    public var rule: Rule?
    public var recordName: String?
    public var zoneName: String?
    /// For `serverRecordChanged`: the owner's version of the record.
    public var serverRecord: Record?

    public init(_ error: ShareSyncError) {
        code = error.code
        message = error.message
        rule = error.rule
        recordName = error.recordID?.recordName
        zoneName = error.zoneID?.zoneName
        serverRecord = error.serverRecord
        if error.code == .partialFailure || error.code == .batchRequestFailed,
            let first = error.partialErrors?.sorted(by: { $0.key < $1.key }).first
        {
            message += " (\(first.key): \(first.value.message))"
        }
    }

    /// The error as a ``ShareSyncError``: its code, message, rule, record or zone, and server record.
    public var shareSyncError: ShareSyncError {
        let zoneID = zoneName.map { RecordZone.ID(zoneName: $0, ownerName: serverRecord?.recordID.zoneID.ownerName ?? RecordZone.ID.currentUserDefaultName) }
        return ShareSyncError(
            code, message, recordID: recordName.map { Record.ID(recordName: $0, zoneID: zoneID ?? .default) }, zoneID: zoneID,
            serverRecord: serverRecord, rule: rule)
    }

    public var description: String {
        // The same form as ShareSyncError's description: "code: message; rule X".
        var text = "\(code.rawValue): \(message)"
        if let rule { text += "; rule \(rule)" }
        return text
    }
}

/// A record named by its zone and name (and, in the shared database, its owner).
public struct RecordRef: Codable, Sendable, Hashable {
    /// The owner's user record name (shared database; may be omitted when one owner shares a zone of that name).
    public var ownerName: String?
    public var zoneName: String
    public var recordName: String

    public init(ownerName: String? = nil, zoneName: String, recordName: String) {
        self.ownerName = ownerName
        self.zoneName = zoneName
        self.recordName = recordName
    }

    /// The reference to a record ID (its owner omitted when it is the current user's default owner name).
    public init(_ id: Record.ID) {
        self.init(
            ownerName: id.zoneID.explicitOwnerName,
            zoneName: id.zoneID.zoneName, recordName: id.recordName)
    }
}

/// What `recordModify` and `sharedRecordModify` did, item by item.
public struct ModifyResult: Codable, Sendable, Hashable {
    /// Each record saved, as the database (the owner, for shared zones) now holds it.
    public var saved: [Record]
    /// Each record deleted.
    public var deleted: [RecordRef]
    /// Each item that failed, with its error (`serverRecordChanged` carries the stored record).
    public var failed: [Failure]
    /// Shared zones only: the writes waiting in the outbox because their owner was not reachable.
    public var queued: [Queued]

    public struct Failure: Codable, Sendable, Hashable {
        public var record: RecordRef
        public var error: ControlError

        public init(record: RecordRef, error: ControlError) {
            self.record = record
            self.error = error
        }
    }

    public struct Queued: Codable, Sendable, Hashable {
        /// The outbox operation (see `outboxList`).
        public var outboxID: Int64
        /// The records it saves and deletes.
        public var records: [RecordRef]

        public init(outboxID: Int64, records: [RecordRef]) {
            self.outboxID = outboxID
            self.records = records
        }
    }

    public init(saved: [Record] = [], deleted: [RecordRef] = [], failed: [Failure] = [], queued: [Queued] = []) {
        self.saved = saved
        self.deleted = deleted
        self.failed = failed
        self.queued = queued
    }

    /// Adds a store result: its saved records, deleted IDs and failures (in record name order).
    public mutating func add(_ result: ModifyRecordsResult) {
        for (id, outcome) in result.saveResults.sorted(by: { $0.key.recordName < $1.key.recordName }) {
            switch outcome {
            case .success(let record): saved.append(record)
            case .failure(let error): failed.append(Failure(record: RecordRef(id), error: ControlError(error)))
            }
        }
        for (id, outcome) in result.deleteResults.sorted(by: { $0.key.recordName < $1.key.recordName }) {
            switch outcome {
            case .success: deleted.append(RecordRef(id))
            case .failure(let error): failed.append(Failure(record: RecordRef(id), error: ControlError(error)))
            }
        }
    }
}

/// A page of `recordQuery` results.
public struct QueryPage: Codable, Sendable, Hashable {
    public var records: [Record]
    /// Present when more records match: pass it as `cursor` for the next page.
    public var cursor: Int?

    public init(records: [Record], cursor: Int?) {
        self.records = records
        self.cursor = cursor
    }
}

/// The result of a command that returns nothing else.
public struct Done: Codable, Sendable, Hashable {
    public var done: Bool = true
    public init() {}
}

/// The result of `leave`: done, and how many writes of the zone left wait in the outbox. The owner
/// refuses them once it has the leave (the outbox keeps them, refused, until they are discarded).
public struct LeftShare: Codable, Sendable, Hashable {
    public var done: Bool = true
    /// Pending writes to the zone left, still in the outbox.
    public var queuedWrites: Int

    public init(queuedWrites: Int) {
        self.queuedWrites = queuedWrites
    }
}

/// What `sharesync status` shows about the running node.
public struct NodeStatus: Codable, Sendable, Hashable {
    /// The node's user record name (`_` and its key's fingerprint).
    public var userRecordName: String
    /// The fingerprint of the node's identity key, as share URLs pin it.
    public var fingerprint: String
    /// The name the node shows to others.
    public var displayName: String
    /// Where the owner server listens.
    public var listen: HostAndPort
    /// The address share URLs give participants (`--advertise`, else `listen`).
    public var advertised: HostAndPort
    /// Participant connections to the owner server open now.
    public var connections: Int
    /// The writes to shared zones in the outbox, by state (filled in by the control handler).
    public var outbox: OutboxCounts? = nil
    /// Each share of the private database, with its participants.
    public var shares: [ShareStatus]? = nil
    /// Each zone of the shared database, with its sync state.
    public var replicas: [ReplicaStatus]? = nil
    /// Each owner the shared database knows, with its link.
    public var owners: [OwnerLinkStatus]? = nil
    /// The parts of the status that could not be read (the private database's shares, the replica's
    /// zones, owners or outbox), each error naming its part and why; those parts are `nil`, and the
    /// rest is shown. `nil` when everything was read. The CLI prints what it has, then these, and
    /// exits 65.
    public var errors: [ControlError]? = nil
}

/// A share of this node's private database, as `status` shows it.
public struct ShareStatus: Codable, Sendable, Hashable {
    /// The shared zone.
    public var zoneName: String
    /// The share record's name.
    public var shareName: String
    /// The share's title (`cloudkit.title`), if set.
    public var title: String?
    /// The shared hierarchy's root record (`nil` for a zone-wide share).
    public var rootRecordName: String?
    /// What anyone with the URL may do (`none`: invited participants only).
    public var publicPermission: Participant.Permission
    /// Participants other than the owner (invited, accepted, public users).
    public var participants: Int
    /// Of them, those who accepted.
    public var accepted: Int
    /// Of those, how many are connected now.
    public var connected: Int
    /// The sync state of each participant who accepted (and has an identity), as this owner's server
    /// knows it: whether they are connected, when they last were served changes, and how many changes
    /// wait for them. `nil` from a node that does not report it.
    public var participantSync: [ParticipantSyncStatus]?

    /// A share's status; `participantSync` is each accepted participant's sync state.
    public init(
        zoneName: String, shareName: String, title: String?, rootRecordName: String?, publicPermission: Participant.Permission,
        participants: Int, accepted: Int, connected: Int, participantSync: [ParticipantSyncStatus]? = nil
    ) {
        self.participantSync = participantSync
        self.zoneName = zoneName
        self.shareName = shareName
        self.title = title
        self.rootRecordName = rootRecordName
        self.publicPermission = publicPermission
        self.participants = participants
        self.accepted = accepted
        self.connected = connected
    }
}

/// One participant of a share, as the owner's `status` shows their sync: what the owner's server
/// served them since it started (kept in memory: after the owner restarts, `lastSync` and `pending` are
/// `nil` until the participant's node comes back and asks for changes).
public struct ParticipantSyncStatus: Codable, Sendable, Hashable {
    /// The participant's user record name (`_` and their key's fingerprint).
    public var userRecordName: String
    /// Their name, as the share has it.
    public var displayName: String?
    /// Whether their node is connected to this owner now.
    public var connected: Bool
    /// When this owner last served them changes (a page of changes, the changed zones, or a push);
    /// `nil` if it has not since it started.
    public var lastSync: Date?
    /// How many changes of the share's zone in their view they have not been served yet: records
    /// changed, added to or removed from what they see since the last position served to
    /// their node, each record once. 0 while they follow the owner's pushes; `nil` when this owner has
    /// no position for them (it restarted since they last connected) or the position is too old to count from.
    public var pending: Int?

    /// A participant's sync state.
    public init(userRecordName: String, displayName: String?, connected: Bool, lastSync: Date?, pending: Int?) {
        self.userRecordName = userRecordName
        self.displayName = displayName
        self.connected = connected
        self.lastSync = lastSync
        self.pending = pending
    }
}

/// A zone of the shared database (a share this node accepted), as `status` shows it.
public struct ReplicaStatus: Codable, Sendable, Hashable {
    /// The owner's user record name.
    public var ownerName: String
    /// The owner's name, as its shares give it (when known).
    public var ownerDisplayName: String?
    /// The zone's name in the owner's database.
    public var zoneName: String
    /// The link to the owner: `connecting`, `syncing` (catching up), `following` (connected, caught up,
    /// changes arrive as pushes), `waitingToReconnect` or `stopped`.
    public var state: String
    /// Whether the owner is connected now.
    public var connected: Bool
    /// When the replica last was caught up with the owner.
    public var lastSync: Date?
    /// How far behind the owner the replica may be: 0 while following, else the time since it last was.
    public var lagSeconds: Double?
    /// Records in the replica's zone.
    public var records: Int
    /// This node's writes to the zone waiting for the owner (in the outbox).
    public var pending: Int
    /// This node's writes to the zone the owner refused as conflicts (`serverRecordChanged`), waiting
    /// for `outbox resolve`.
    public var conflicts: Int
    /// This node's writes to the zone the owner refused for good (permissions, limits), kept until `outbox discard`.
    public var refused: Int
    /// Why the link to the owner is not following it: the failure that ended its last connection or
    /// attempt (absent while it follows).
    public var lastError: ControlError? = nil
}

/// The link to an owner known to the shared database, as `status` shows it: one per owner, including
/// owners none of whose zones the replica holds yet (an accept whose first sync never finished).
public struct OwnerLinkStatus: Codable, Sendable, Hashable {
    /// The owner's user record name.
    public var ownerName: String
    /// The owner's name, as its shares give it (when known).
    public var ownerDisplayName: String?
    /// Where the owner is reached.
    public var address: HostAndPort
    /// The link's state, as ``ReplicaStatus/state`` gives it.
    public var state: String
    /// Whether the owner is connected now.
    public var connected: Bool
    /// Zones of this owner in the replica.
    public var zones: Int
    /// Whether a first sync with the owner completed (the replica holds its database token). An owner
    /// with no zones that has synced is one whose shares were all left or revoked.
    public var synced: Bool
    /// Why the link is not following the owner, as ``ReplicaStatus/lastError``.
    public var lastError: ControlError?
}

/// How many writes to shared zones wait in the outbox, by state.
public struct OutboxCounts: Codable, Sendable, Hashable {
    /// Writes waiting to be sent or answered.
    public var pending: Int
    /// Writes the owner refused as conflicts, waiting to be resolved.
    public var conflicts: Int
    /// Writes the owner refused for good.
    public var refused: Int

    /// Counts by state.
    public init(pending: Int, conflicts: Int, refused: Int) {
        self.pending = pending
        self.conflicts = conflicts
        self.refused = refused
    }
}

/// A zone of the private database.
public struct ZoneInfo: Codable, Sendable, Hashable {
    public var zoneName: String
    /// For `zoneCreate`: whether the zone was created (false: it existed already); absent elsewhere.
    public var created: Bool?
    public init(zoneName: String, created: Bool? = nil) {
        self.zoneName = zoneName
        self.created = created
    }
}

/// A participant as the owner sees it.
public struct ParticipantInfo: Codable, Sendable, Hashable {
    public var participantID: String
    public var role: Participant.Role
    public var permission: Participant.Permission
    public var acceptanceStatus: Participant.AcceptanceStatus
    public var userRecordName: String?
    public var emailAddress: String?
    public var phoneNumber: String?
    public var displayName: String?
    /// The participant's one-time invitation link, while they have not accepted.
    public var invitationURL: String?

    /// A participant of `share`, as the control channel shows it (its one-time link from the share).
    public init(_ participant: Participant, in share: Share) {
        participantID = participant.participantID
        role = participant.role
        permission = participant.permission
        acceptanceStatus = participant.acceptanceStatus
        userRecordName = participant.userIdentity.userRecordName
        emailAddress = participant.userIdentity.lookupInfo?.emailAddress
        phoneNumber = participant.userIdentity.lookupInfo?.phoneNumber
        displayName = participant.userIdentity.displayName
        invitationURL = share.oneTimeURL(for: participant.participantID)
    }

    /// Who the participant is, for people: name, then email, phone, user record name.
    public var who: String {
        displayName ?? emailAddress ?? phoneNumber ?? userRecordName ?? "(anyone with the link)"
    }
}

/// What `requestAccess` did: the request was delivered, as this node's user.
public struct AccessRequested: Codable, Sendable, Hashable {
    /// Always `true`: a request the owner did not take is an error instead.
    public var requested: Bool
    /// Who asked: this node's user record name, as the owner's requesters list shows it.
    public var userRecordName: String

    /// A delivered request from `userRecordName`.
    public init(userRecordName: String) {
        self.requested = true
        self.userRecordName = userRecordName
    }
}

/// A user waiting for access.
public struct RequesterInfo: Codable, Sendable, Hashable {
    public var userRecordName: String
    public var displayName: String?
    public var requestDate: Date

    /// A requester of a share (`Share.requesters`).
    public init(_ requester: AccessRequester) {
        self.init(userRecordName: requester.userRecordName, displayName: requester.userIdentity.displayName, requestDate: requester.requestDate)
    }

    init(userRecordName: String, displayName: String?, requestDate: Date) {
        self.userRecordName = userRecordName
        self.displayName = displayName
        self.requestDate = requestDate
    }
}

/// A share as its reader may see it: the owner, or (``ControlRequest/sharedShareGet(owner:zone:share:)``)
/// a participant, who sees what the share record gives them.
public struct ShareInfo: Codable, Sendable, Hashable {
    public var shareName: String
    public var zoneName: String
    /// The owner's user record name (a participant's view only).
    public var ownerName: String?
    /// The root record of a hierarchy share; `nil` for a zone-wide share.
    public var rootRecordName: String?
    /// `cloudkit.title`.
    public var title: String?
    /// `cloudkit.type`: a uniform type identifier for what is shared.
    public var shareType: String?
    /// `cloudkit.thumbnailImageData` (base64 in JSON).
    public var thumbnailImageData: Data?
    public var url: String?
    public var publicPermission: Participant.Permission
    public var allowsAccessRequests: Bool
    public var participants: [ParticipantInfo]
    /// The users blocked from the share (`share block`); `share unblock` lifts a block.
    public var blocked: [BlockedInfo]
    /// The reader's own participant ID (a participant's view only).
    public var currentUserParticipantID: String?
    /// Users waiting for access, when the reader may see them (owner, administrators).
    public var requesters: [RequesterInfo]?

    /// A share as the control channel shows it; `ownerName` for a share this node accepted.
    public init(_ share: Share, ownerName: String? = nil) {
        shareName = share.recordID.recordName
        zoneName = share.recordID.zoneID.zoneName
        self.ownerName = ownerName
        rootRecordName = share.rootRecordID?.recordName
        title = share.title
        shareType = share.shareType
        thumbnailImageData = share.thumbnailImageData
        url = share.url
        publicPermission = share.publicPermission
        allowsAccessRequests = share.allowsAccessRequests
        participants = share.participants.map { ParticipantInfo($0, in: share) }
        blocked = share.blockedIdentities.map {
            BlockedInfo(userRecordName: $0.userRecordName, displayName: $0.userIdentity.displayName)
        }
        currentUserParticipantID = ownerName == nil ? nil : share.currentUserParticipant?.participantID
        requesters = share.requesters.isEmpty ? nil : share.requesters.map {
            RequesterInfo(userRecordName: $0.userRecordName, displayName: $0.userIdentity.displayName, requestDate: $0.requestDate)
        }
    }
}

/// A user blocked from a share.
public struct BlockedInfo: Codable, Sendable, Hashable {
    public var userRecordName: String
    public var displayName: String?
}

/// A change to a share's participants, as ``ControlRequest/sharedShareEdit(owner:zone:share:edit:)``
/// carries it (the participant side; the owner has a request for each).
public enum ShareEdit: Sendable, Hashable, Codable {
    /// Invites someone by lookup info (or, `oneTime`, whoever first uses the one-time URL), as a
    /// privateUser unless `role` says otherwise (only the owner may make administrators).
    case invite(lookup: UserIdentity.LookupInfo, permission: Participant.Permission, role: Participant.Role?, oneTime: Bool?)
    /// Changes a participant's permission.
    case setPermission(participantID: String, permission: Participant.Permission)
    /// Changes a participant's role (only the owner may; sent by anyone else, the owner refuses it).
    case setRole(participantID: String, role: Participant.Role)
    /// Removes a participant.
    case remove(participantID: String)
    /// Lets a requester in with a permission.
    case approve(userRecordName: String, permission: Participant.Permission)
    /// Turns a requester away (they may ask again).
    case deny(userRecordName: String)

    /// Applies the edit to `share` (as ``Share``'s methods do; the owner's database decides whether
    /// the caller may save it). Returns the ID of the participant it added or changed, if any.
    public func apply(to share: inout Share) throws(ShareSyncError) -> String? {
        switch self {
        case .invite(let lookup, let permission, let role, let oneTime):
            var participant = oneTime == true
                ? Participant.oneTimeURLParticipant(permission: permission)
                : Participant(lookupInfo: lookup, permission: permission)
            participant.role = role ?? .privateUser
            if let existing = try share.alreadyInvited(participant, role: role) { return existing.participantID }
            return try share.addParticipant(participant).participantID
        case .setPermission(let id, let permission):
            try share.setPermission(permission, forParticipantID: id)
            return id
        case .setRole(let id, let role):
            try share.setRole(role, forParticipantID: id)
            return id
        case .remove(let id):
            guard let p = share.participants.first(where: { $0.participantID == id }) else {
                throw ShareSyncError(
                    .unknownItem, "share \(share.recordID.recordName) has no participant \(id); see `sharesync share participants`",
                    recordID: share.recordID)
            }
            try share.removeParticipant(p)
            return nil
        case .approve(let user, let permission):
            try share.approveRequester(try Self.requester(user, in: share), permission: permission)
            return share.participants.first { $0.userIdentity.userRecordName == user }?.participantID
        case .deny(let user):
            share.denyRequesters([try Self.requester(user, in: share)])
            return nil
        }
    }

    static func requester(_ user: String, in share: Share) throws(ShareSyncError) -> AccessRequester {
        guard let r = share.requesters.first(where: { $0.userRecordName == user }) else {
            throw ShareSyncError(
                .unknownItem, "\(user) has not requested access to share \(share.recordID.recordName)", recordID: share.recordID)
        }
        return r
    }
}

/// What ``ControlRequest/sharedShareEdit(owner:zone:share:edit:)`` answers: the share as the owner
/// saved it (as this participant sees it), and the participant the edit added or changed.
public struct ShareEditResult: Codable, Sendable, Hashable {
    public var share: ShareInfo
    public var participant: ParticipantInfo?
    /// The share's record as the owner saved it (the replica has it once the change syncs).
    public var shareRecord: Record? = nil

    /// A change made to `share` (the participant it was about, if any) by this node's user.
    public init(share: ShareInfo, participant: ParticipantInfo?, shareRecord: Record?) {
        self.share = share
        self.participant = participant
        self.shareRecord = shareRecord
    }
}

extension Share {
    /// The participant an invitation names when they are already in the share (and have not left or
    /// been removed) with the same permission and role (`role` nil: whatever they have): inviting them
    /// again changes nothing. With another permission or role it is refused (`invalidArguments`, rule
    /// `alreadyParticipant`): it used to change both in silence (the role to privateUser when none was
    /// given), so an administrator invited again lost the role. Public users are left to the share's
    /// own rules. `nil` when the invitation names nobody in the share.
    func alreadyInvited(_ participant: Participant, role: Participant.Role?) throws(ShareSyncError) -> Participant? {
        guard participant.identityKey != nil,
            let existing = participants.first(where: {
                $0.isSameInvitee(as: participant) && $0.acceptanceStatus != .removed && $0.role != .publicUser && $0.role != .owner
            })
        else { return nil }
        guard existing.permission == participant.permission, existing.role == (role ?? existing.role) else {
            throw ShareSyncError(
                .invalidArguments,
                "they are already a participant, \(existing.permission.rawValue) and \(existing.role.rawValue): change that with "
                    + "`share permission` or `share role`",
                recordID: recordID, rule: .alreadyParticipant)
        }
        return existing
    }
}
