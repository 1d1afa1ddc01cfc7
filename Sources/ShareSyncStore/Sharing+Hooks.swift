import Foundation
import GRDB
import ShareSyncCore

// Temporary: sharing is added in the next step.
extension WriteContext {
    mutating func saveShare(_ record: Record, policy: SavePolicy) throws -> Record {
        throw ShareSyncError(.invalidArguments, "shares are not supported yet", recordID: record.recordID)
    }
    func willSave(_ record: Record, existing: Record?) throws {}
    func willDelete(_ record: Record) throws {}
    func didDelete(_ records: [Record]) throws {}
    func settleSharing() throws {}
    func willDeleteZone(_ name: String) throws {}
    func present(_ record: Record, zoneID: RecordZone.ID) -> Record { record }
}

extension PrivateDatabase {
    func compactSharedViews(_ db: Database, upTo: Int64) throws {}
}
