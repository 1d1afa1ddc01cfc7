import Foundation
import GRDB
import ShareSyncCore

// The outbox: writes made on the participant, kept on disk until the owner's node accepts them, so a
// restart or a lost connection never drops one. The sync engine sends an owner's operations in id
// order and removes each once it has its result.

extension SharedDatabaseReplica {
    /// Adds a write to the end of the owner's outbox and returns it with its assigned ``OutboxOperation/id``.
    /// Saved records keep their ``Record/changedKeys``.
    @discardableResult
    public func enqueue(owner: String, operation: OutboxOperation) throws(ShareSyncError) -> OutboxOperation {
        var operation = operation
        operation.id = 0
        let json = try Self.encode(operation)
        operation.id = try write { db in
            try requireOwner(db, owner)
            try db.execute(sql: "INSERT INTO replicaOutbox (owner, json) VALUES (?, ?)", arguments: [owner, json])
            return db.lastInsertedRowID
        }
        return operation
    }

    /// The owner's pending writes, oldest first.
    public func pendingOperations(owner: String) throws(ShareSyncError) -> [OutboxOperation] {
        try read { db in
            try Row.fetchAll(db, sql: "SELECT id, json FROM replicaOutbox WHERE owner = ? ORDER BY id", arguments: [owner])
                .map { row in
                    var operation = try Self.decode(row["json"])
                    operation.id = row["id"]
                    return operation
                }
        }
    }

    /// Removes a write from the outbox (once the owner's node answered it). Removing an ID that is not
    /// there does nothing.
    public func removeOperation(id: Int64) throws(ShareSyncError) {
        try write { db in
            try db.execute(sql: "DELETE FROM replicaOutbox WHERE id = ?", arguments: [id])
        }
    }

    static func encode(_ operation: OutboxOperation) throws(ShareSyncError) -> Data {
        do {
            return try JSONCoding.encoder(includingChangedKeys: true).encode(operation)
        } catch {
            throw ShareSyncError(.invalidArguments, "the operation cannot be encoded as JSON: \(error)", rule: "recordJSON")
        }
    }

    static func decode(_ data: Data) throws(ShareSyncError) -> OutboxOperation {
        do {
            return try JSONCoding.decoder().decode(OutboxOperation.self, from: data)
        } catch {
            throw ShareSyncError(.internalError, "a stored outbox operation is unreadable: \(JSONErrors.describe(error))")
        }
    }
}
