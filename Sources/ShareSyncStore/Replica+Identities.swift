import Foundation
import GRDB
import ShareSyncCore

extension SharedDatabaseReplica {
    /// Every share record in the replica (of every owner), read without the other records.
    public func shareRecords() throws(ShareSyncError) -> [ShareSyncCore.Record] {
        try read { db in
            try Data.fetchAll(
                db,
                sql: """
                    SELECT r.json FROM replicaRecord r JOIN replicaZone z ON z.id = r.zoneKey
                    WHERE r.type = ? ORDER BY z.owner, z.zone, r.name
                    """,
                arguments: [Record.shareRecordType])
                .map { try ShareSyncCore.Record(jsonData: $0) }
        }
    }
}
