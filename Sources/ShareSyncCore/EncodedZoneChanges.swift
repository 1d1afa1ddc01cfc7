import Foundation

/// A record as the JSON bytes a replica stores, with the ID and type read from them: what a page of
/// zone changes carries from the owner's store (or from the wire) to a participant's replica, so that
/// the bytes are stored as they came and not decoded into a ``Record`` and encoded again.
///
/// Only made by code that has read the bytes as a record (``init(_:)``, or a decoder that checked them
/// with ``JSONReader/checkedRecordIdentity()``) or that took them from the owner's store: ``json`` decodes with
/// ``Record/init(jsonData:)`` to a record with ``recordID`` and ``recordType``.
package struct EncodedRecord: Sendable, Hashable {
    /// The record's ID, as written in its JSON.
    package var recordID: Record.ID
    /// The record's type.
    package var recordType: String
    /// The record's JSON (``Record/jsonData(includingChangedKeys:)``'s form, without changed keys).
    package var json: Data

    /// A record encoded (the path every page took before pages carried bytes).
    package init(_ record: Record) throws(ShareSyncError) {
        recordID = record.recordID
        recordType = record.recordType
        json = try record.jsonData()
    }

    /// Bytes already known to be the JSON of the record `recordID` of type `recordType`.
    package init(recordID: Record.ID, recordType: String, json: Data) {
        self.recordID = recordID
        self.recordType = recordType
        self.json = json
    }

    /// The record, decoded.
    package func decoded() throws(ShareSyncError) -> Record { try Record(jsonData: json) }
}

/// A ``ZoneChanges`` page whose changed records are ``EncodedRecord``s: how the participant's sync
/// engine carries a page from the owner to the replica.
package struct EncodedZoneChanges: Sendable {
    /// One entry of the page.
    package enum Change: Sendable, Hashable {
        case changed(EncodedRecord)
        case deleted(DeletedRecord)
    }

    package var zoneID: RecordZone.ID
    package var changes: [Change]
    package var changeToken: ServerChangeToken
    package var moreComing: Bool

    package init(zoneID: RecordZone.ID, changes: [Change], changeToken: ServerChangeToken, moreComing: Bool) {
        self.zoneID = zoneID
        self.changes = changes
        self.changeToken = changeToken
        self.moreComing = moreComing
    }

    /// A page of records, each encoded.
    package init(_ page: ZoneChanges) throws(ShareSyncError) {
        zoneID = page.zoneID
        changeToken = page.changeToken
        moreComing = page.moreComing
        changes = []
        changes.reserveCapacity(page.changes.count)
        for change in page.changes {
            switch change {
            case .changed(let record): changes.append(.changed(try EncodedRecord(record)))
            case .deleted(let deleted): changes.append(.deleted(deleted))
            }
        }
    }

    /// The page with each record decoded.
    package func decoded() throws(ShareSyncError) -> ZoneChanges {
        var records: [RecordChange] = []
        records.reserveCapacity(changes.count)
        for change in changes {
            switch change {
            case .changed(let record): records.append(.changed(try record.decoded()))
            case .deleted(let deleted): records.append(.deleted(deleted))
            }
        }
        return ZoneChanges(zoneID: zoneID, changes: records, changeToken: changeToken, moreComing: moreComing)
    }

    /// How many records the page changes.
    package var changedCount: Int { changes.count { if case .changed = $0 { true } else { false } } }
    /// How many records the page deletes.
    package var deletedCount: Int { changes.count - changedCount }
}
