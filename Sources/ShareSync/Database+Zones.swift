// Zones by ID and zone changes in batches, like `CKDatabase.recordZone(for:)`, `recordZones(for:)` and
// `modifyRecordZones(saving:deleting:)`.
extension Database {
    /// Fetches a zone by ID (`CKDatabase.recordZone(for:)`); `zoneNotFound` if the database has none of
    /// that ID.
    ///
    /// In the private database the zone's name is what counts. In the shared database the ID's
    /// `RecordZone.ID.ownerName` names the owner: the zone is found if that owner shares it with this node
    /// (a zone ID without an owner matches the only owner sharing a zone of that name; if several do, the
    /// call fails with `invalidArguments`, rule `ambiguousOwner`). The zone returned carries its owner's name.
    public func recordZone(for zoneID: RecordZone.ID) async throws(ShareSyncError) -> RecordZone {
        try Self.match(zoneID, in: try await allRecordZones()).get()
    }

    /// Fetches several zones by ID (`CKDatabase.recordZones(for:)`): each ID's zone, or its own error
    /// (`zoneNotFound`), as ``recordZone(for:)`` finds them. A request that fails as a whole (the node
    /// cannot be reached) throws.
    public func recordZones(for zoneIDs: [RecordZone.ID]) async throws(ShareSyncError) -> [RecordZone.ID: Result<RecordZone, ShareSyncError>] {
        guard !zoneIDs.isEmpty else { return [:] }
        let zones = try await allRecordZones()
        var results: [RecordZone.ID: Result<RecordZone, ShareSyncError>] = [:]
        for zoneID in zoneIDs { results[zoneID] = Self.match(zoneID, in: zones) }
        return results
    }

    /// Saves and deletes zones in one call (`CKDatabase.modifyRecordZones(saving:deleting:)`), with one
    /// result per zone: saves first, then deletes, each on its own (a failed item does not undo the others).
    ///
    /// - A save creates the zone, as ``save(_:)->RecordZone`` does; a zone that exists already succeeds as
    ///   it is. In the shared database every save fails with `invalidArguments`: its zones belong to their
    ///   owners, who create them in their private databases (CloudKit refuses it the same way).
    /// - A delete removes the zone and everything in it, as ``deleteRecordZone(withID:)`` does (in the
    ///   shared database: this node leaves the zone's share). A zone that does not exist fails with
    ///   `zoneNotFound`; the default zone cannot be deleted (`invalidArguments`).
    ///
    /// The call throws only when it fails as a whole: `serviceUnavailable` (the node cannot be reached,
    /// the container is closed) or `operationCancelled`; the items answered before that are lost with it,
    /// as with any request whose answer does not arrive: fetch the zones to see where they stand.
    public func modifyRecordZones(
        saving zonesToSave: [RecordZone], deleting zoneIDsToDelete: [RecordZone.ID]
    ) async throws(ShareSyncError) -> (
        saveResults: [RecordZone.ID: Result<RecordZone, ShareSyncError>], deleteResults: [RecordZone.ID: Result<Void, ShareSyncError>]
    ) {
        var saveResults: [RecordZone.ID: Result<RecordZone, ShareSyncError>] = [:]
        var deleteResults: [RecordZone.ID: Result<Void, ShareSyncError>] = [:]
        for zone in zonesToSave {
            do {
                saveResults[zone.zoneID] = .success(try await save(zone))
            } catch where !Self.failsTheRequest(error) {
                saveResults[zone.zoneID] = .failure(error)
            }
        }
        for zoneID in zoneIDsToDelete {
            do {
                try await deleteRecordZone(withID: zoneID)
                deleteResults[zoneID] = .success(())
            } catch where !Self.failsTheRequest(error) {
                deleteResults[zoneID] = .failure(error)
            }
        }
        return (saveResults, deleteResults)
    }

    /// Whether an error is the request's rather than an item's: the node was not reached, or the caller
    /// stopped waiting.
    private static func failsTheRequest(_ error: ShareSyncError) -> Bool {
        error.code == .serviceUnavailable || error.code == .operationCancelled
    }

    /// The zone of `zones` an ID names: same name, and same owner when the ID names one.
    private static func match(_ zoneID: RecordZone.ID, in zones: [RecordZone]) -> Result<RecordZone, ShareSyncError> {
        let owner = zoneID.explicitOwnerName
        let matches = zones.filter {
            $0.zoneID.zoneName == zoneID.zoneName && (owner == nil || $0.zoneID.explicitOwnerName == nil || $0.zoneID.ownerName == owner)
        }
        switch matches.count {
        case 1:
            return .success(matches[0])
        case 0:
            let whose = owner.map { " of \($0)" } ?? ""
            return .failure(ShareSyncError(.zoneNotFound, "there is no zone \(zoneID.zoneName)\(whose) in this database", zoneID: zoneID))
        default:
            let owners = matches.map(\.zoneID.ownerName).sorted().joined(separator: ", ")
            return .failure(ShareSyncError(
                .invalidArguments, "several owners share a zone \(zoneID.zoneName) (\(owners)): name the owner in the zone ID",
                zoneID: zoneID, rule: .ambiguousOwner))
        }
    }
}
