import Foundation

/// The one error type of ShareSync, like `CKError`: a code, a message a person can act on, and context.
///
/// Match on ``code``: `catch let error as ShareSyncError where error.code == .serverRecordChanged`.
/// Conflicts carry the server's current record in ``serverRecord``; batch failures carry per-item
/// errors in ``partialErrorsByItemID`` (as `CKError.partialErrorsByItemID`) and ``partialErrors``.
public struct ShareSyncError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What went wrong, mirroring `CKError.Code` where it applies.
    public enum Code: String, Sendable, Hashable, Codable, CaseIterable {
        /// The record (or share, or participant) does not exist, or is not visible to you.
        case unknownItem
        /// The record changed on the server since you fetched it; see ``ShareSyncError/serverRecord``.
        case serverRecordChanged
        /// This item was fine, but it was part of an atomic batch in which another item failed.
        case batchRequestFailed
        /// Some items of a request failed; see ``ShareSyncError/partialErrorsByItemID``.
        case partialFailure
        /// The zone does not exist (or is not visible to you).
        case zoneNotFound
        /// The request is malformed or breaks a rule of the data model.
        case invalidArguments
        /// The request is larger than a configured limit.
        case limitExceeded
        /// A record's `deleteSelf` reference names a record that does not exist (or that you cannot
        /// see) and is not saved in the same request, as `CKError.referenceViolation`.
        case referenceViolation
        /// The change token is older than the retained history, ahead of it, or from another database;
        /// refetch from nil.
        case changeTokenExpired
        /// You are not allowed to do this.
        case permissionFailure
        /// The record or zone is already part of another share.
        case alreadyShared
        /// The share already has the maximum number of participants.
        case tooManyParticipants
        /// This identity is not invited to the share; it may need to accept with another identity.
        case participantMayNeedVerification
        /// The peer could not be authenticated.
        case notAuthenticated
        /// The network failed during the request.
        case networkFailure
        /// The node is unreachable.
        case networkUnavailable
        /// The node cannot serve the request right now.
        case serviceUnavailable
        /// Too many requests; retry after ``ShareSyncError/retryAfterSeconds``.
        case requestRateLimited
        /// The database is full.
        case quotaExceeded
        /// A bug or an unexpected failure inside ShareSync.
        case internalError
        /// The caller stopped waiting (its task was cancelled): reported on this side only, never
        /// sent. A write may still have reached the owner; fetch before retrying it.
        case operationCancelled
    }

    /// The error's code.
    public var code: Code
    /// A sentence a person can act on.
    public var message: String
    /// The record the error is about, if any.
    public var recordID: Record.ID?
    /// The zone the error is about, if any.
    public var zoneID: RecordZone.ID?
    /// For ``Code/serverRecordChanged``: the record as it is on the server now.
    public var serverRecord: Record?
    /// The rule that was broken, as a short identifier (such as `recordSize` or `readOnlyParticipant`).
    public var rule: Rule?
    /// For ``Code/partialFailure``: the error of each item that failed, by record name. Two records of
    /// the same name in different zones share one entry: ``partialErrorsByItemID`` tells them apart.
    public var partialErrors: [String: ShareSyncError]?
    /// For ``Code/partialFailure``: the error of each item that failed, by record ID, like
    /// `CKError.partialErrorsByItemID`. The other items of the request succeeded (or, in an atomic
    /// request, carry ``Code/batchRequestFailed``).
    ///
    /// ```swift
    /// catch let error as ShareSyncError where error.code == .partialFailure {
    ///     for (recordID, itemError) in error.partialErrorsByItemID ?? [:] { ... }
    /// }
    /// ```
    ///
    /// An error made from ``partialErrors`` alone (as a peer sends it) has here the items whose
    /// errors name their record (``recordID``).
    public var partialErrorsByItemID: [Record.ID: ShareSyncError]?
    /// For ``Code/requestRateLimited`` and ``Code/serviceUnavailable``: how long to wait before retrying.
    public var retryAfterSeconds: Double?

    /// Creates an error.
    public init(
        _ code: Code, _ message: String, recordID: Record.ID? = nil, zoneID: RecordZone.ID? = nil,
        serverRecord: Record? = nil, rule: Rule? = nil, partialErrors: [String: ShareSyncError]? = nil,
        retryAfterSeconds: Double? = nil, partialErrorsByItemID: [Record.ID: ShareSyncError]? = nil
    ) {
        self.code = code
        self.message = message
        self.recordID = recordID
        self.zoneID = zoneID ?? recordID?.zoneID
        self.serverRecord = serverRecord
        self.rule = rule
        // Each of the two per-item maps is the other's when only one is given.
        self.partialErrors = partialErrors ?? partialErrorsByItemID.map { byID in
            Dictionary(byID.map { ($0.key.recordName, $0.value) }, uniquingKeysWith: { first, _ in first })
        }
        self.partialErrorsByItemID = partialErrorsByItemID ?? partialErrors.map { byName in
            Dictionary(byName.values.compactMap { error in error.recordID.map { ($0, error) } }, uniquingKeysWith: { first, _ in first })
        }
        self.retryAfterSeconds = retryAfterSeconds
    }

    /// The code, the message, and the record, zone and rule it names, for people to read.
    public var description: String {
        var parts = ["\(code.rawValue): \(message)"]
        if let recordID { parts.append("record \(recordID.recordName)") }
        if let zoneID { parts.append("zone \(zoneID.zoneName)") }
        if let rule { parts.append("rule \(rule)") }
        return parts.joined(separator: "; ")
    }
}

extension ShareSyncError {
    static func invalid(_ message: String, recordID: Record.ID? = nil, zoneID: RecordZone.ID? = nil, rule: Rule)
        -> ShareSyncError
    {
        ShareSyncError(.invalidArguments, message, recordID: recordID, zoneID: zoneID, rule: rule)
    }
}
