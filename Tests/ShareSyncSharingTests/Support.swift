import Foundation
import ShareSyncCore
import Testing

@testable import ShareSyncStore

/// A small world: one owner database and a few users, with helpers that read feeds like a replica.
struct World {
    let db: PrivateDatabase
    let owner = Caller(userRecordName: "_owner")
    let zone = RecordZone.ID(zoneName: "Topics")

    init() throws {
        db = try PrivateDatabase(inMemoryOwnerName: "_owner")
        try db.saveZone(RecordZone(zoneID: zone))
    }

    func id(_ name: String) -> Record.ID { Record.ID(recordName: name, zoneID: zone) }

    func record(_ type: String, _ name: String, parent: String? = nil, title: String = "") -> Record {
        var r = Record(recordType: type, recordID: id(name))
        r["title"] = .string(title)
        if let parent { r.setParent(id(parent)) }
        return r
    }

    @discardableResult
    func save(_ records: Record...) throws -> [Record] {
        try db.modifyRecords(saving: records, savePolicy: .allKeys).get()
    }

    /// Shares `root` (or the zone) and returns the saved share.
    func share(root: String?, invite: [(String, Participant.Permission)] = [], publicPermission: Participant.Permission = .none)
        throws -> Share
    {
        var share: Share
        var toSave: [Record] = []
        if let root {
            let rootRecord = try db.fetchRecord(id(root))
            share = Share(rootRecord: rootRecord)
        } else {
            share = Share(recordZoneID: zone)
        }
        for (user, permission) in invite {
            try share.addParticipant(Participant(lookupInfo: .init(userRecordName: user), permission: permission))
        }
        share.publicPermission = publicPermission
        toSave.append(share.record)
        let saved = try db.modifyRecords(saving: toSave).get()
        return Share(saved.first { $0.recordType == Record.shareRecordType }!)!
    }
}

/// A participant's local copy, kept only through the shared database's feeds (tokens, small pages).
/// Like a real client it starts a zone over from nil when its token expired.
struct Replica {
    let user: Caller
    var databaseToken: ServerChangeToken?
    var zoneTokens: [String: ServerChangeToken] = [:]
    var records: [String: [String: Record]] = [:]

    init(_ name: String) { user = Caller(userRecordName: name) }

    mutating func sync(_ db: PrivateDatabase, pageSize: Int = 7) throws {
        let view = db.sharedDatabase(for: user)
        var more = true
        var changedZones: Set<String> = []
        while more {
            let changes = try view.fetchDatabaseChanges(since: databaseToken, resultsLimit: pageSize)
            for z in changes.deletedZoneIDs {
                records[z.zoneName] = nil
                zoneTokens[z.zoneName] = nil
                changedZones.remove(z.zoneName)
            }
            for z in changes.changedZoneIDs { changedZones.insert(z.zoneName) }
            databaseToken = changes.changeToken
            more = changes.moreComing
        }
        for zone in changedZones.sorted() {
            var more = true
            while more {
                let token = zoneTokens[zone]
                let fetched = Result { () throws(ShareSyncError) -> ZoneChanges in
                    try view.fetchZoneChanges(
                        RecordZone.ID(zoneName: zone, ownerName: db.ownerName), since: token, resultsLimit: pageSize)
                }
                if case .failure(let e) = fetched, e.code == .changeTokenExpired, token != nil {
                    records[zone] = nil
                    zoneTokens[zone] = nil
                    continue
                }
                let page = try fetched.get()
                if records[zone] == nil { records[zone] = [:] }
                for change in page.changes {
                    switch change {
                    case .changed(let r): records[zone, default: [:]][r.recordID.recordName] = r
                    case .deleted(let d): records[zone]?[d.recordID.recordName] = nil
                    }
                }
                zoneTokens[zone] = page.changeToken
                more = page.moreComing
            }
        }
    }

    func names(_ zone: String = "Topics") -> Set<String> { Set(records[zone]?.keys.map { $0 } ?? []) }
}
