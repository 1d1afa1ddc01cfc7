import Foundation
import ShareSyncCore
import Testing

@testable import ShareSyncStore

// Helpers for the Rules*Tests suites (built only on World/Replica from Support.swift).

/// The error a throwing body fails with, or nil if it succeeds.
func failure(_ body: () throws -> Void) -> ShareSyncError? {
    do {
        try body()
        return nil
    } catch let e as ShareSyncError {
        return e
    } catch {
        return ShareSyncError(.internalError, "unexpected \(error)")
    }
}

extension ModifyRecordsResult {
    /// The per-item error of `name`, if it failed.
    func error(_ name: String) -> ShareSyncError? { errors[name] }
}

extension World {
    /// The zone as participants see it.
    var sharedZone: RecordZone.ID { RecordZone.ID(zoneName: zone.zoneName, ownerName: db.ownerName) }

    /// A record ID in the zone as participants see it.
    func sid(_ name: String) -> Record.ID { Record.ID(recordName: name, zoneID: sharedZone) }

    func view(_ user: String) -> SharedDatabaseView { db.sharedDatabase(for: Caller(userRecordName: user)) }

    /// The owner's current copy of a share.
    func currentShare(_ id: Record.ID) throws -> Share {
        try #require(Share(try db.fetchRecord(Record.ID(recordName: id.recordName, zoneID: zone))))
    }

    /// Saves a share as the owner and returns it as stored.
    @discardableResult
    func saveShare(_ share: Share) throws -> Share {
        let saved = try db.modifyRecords(saving: [share.record]).get()
        return try #require(saved.first { $0.recordType == Record.shareRecordType }.flatMap(Share.init))
    }

    /// Accepts a share as `user`.
    @discardableResult
    func accept(_ share: Share, _ user: String) throws -> ShareMetadata {
        try db.acceptShare(url: try #require(share.url), as: Caller(userRecordName: user))
    }

    /// The record names `user` can fetch through their shared database (among `names`).
    func visible(_ user: String, _ names: [String]) throws -> Set<String> {
        let results = try view(user).fetchRecords(names.map(sid))
        return Set(results.compactMap { id, r in (try? r.get()) != nil ? id.recordName : nil })
    }

    /// A record as a participant writes it (zone owned by the owner).
    func sharedRecord(_ type: String, _ name: String, parent: String? = nil, title: String = "") -> Record {
        var r = Record(recordType: type, recordID: sid(name))
        r["title"] = .string(title)
        if let parent { r.setParent(sid(parent)) }
        return r
    }

    /// Owner re-parents a record (nil: no parent).
    func reparent(_ name: String, to parent: String?) throws {
        var r = try db.fetchRecord(id(name))
        r.setParent(parent.map(id))
        _ = try db.modifyRecords(saving: [r], savePolicy: .allKeys).get()
    }

    /// A zone-wide share of the world's zone.
    func shareZone(invite: [(String, Participant.Permission)] = []) throws -> Share {
        try share(root: nil, invite: invite)
    }
}
