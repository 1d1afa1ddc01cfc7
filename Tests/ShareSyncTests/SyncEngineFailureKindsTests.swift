import Foundation
import Testing
@testable import ShareSync

/// Which failures of a whole request keep its changes pending (the store failing passes once the
/// cause is gone) and which fail them (the request itself refused).
@Suite("SyncEngine: failures that keep changes pending")
struct SyncEngineFailureKindsTests {
    @Test("a full disk, a storage error and the network keep them; a refusal of the request fails them")
    func requestFailures() {
        // Before, a full disk or a storage error on the node reported every change of the request as
        // failed and dropped it.
        #expect(SyncEngine.requestMayPass(ShareSyncError(.quotaExceeded, "the disk is full", rule: .diskFull)))
        #expect(SyncEngine.requestMayPass(ShareSyncError(.internalError, "disk I/O error")))
        #expect(SyncEngine.requestMayPass(ShareSyncError(.networkFailure, "cut")))
        #expect(!SyncEngine.requestMayPass(ShareSyncError(.zoneNotFound, "gone")))
        #expect(!SyncEngine.requestMayPass(ShareSyncError(.invalidArguments, "several owners", rule: .ambiguousOwner)))
        #expect(!SyncEngine.requestMayPass(ShareSyncError(.permissionFailure, "read-only")))
    }

    @Test("the records of a zone whose save stays pending wait for it; others, and deletions of zones, do not hold records")
    func recordsWaitForTheirZonesSave() {
        let topics = RecordZone.ID(zoneName: "Topics")
        let other = RecordZone.ID(zoneName: "Other")
        let pending: Set<SyncEngine.PendingDatabaseChange> = [.saveZone(RecordZone(zoneID: topics)), .deleteZone(other)]
        // Before, they were sent at once, failed with zoneNotFound, and were reported failed and dropped.
        #expect(SyncEngine.waitsForZoneSave(.saveRecord(Record.ID(recordName: "a", zoneID: topics)), pendingZoneChanges: pending))
        #expect(SyncEngine.waitsForZoneSave(.deleteRecord(Record.ID(recordName: "b", zoneID: topics)), pendingZoneChanges: pending))
        #expect(!SyncEngine.waitsForZoneSave(.saveRecord(Record.ID(recordName: "c", zoneID: other)), pendingZoneChanges: pending))
        #expect(!SyncEngine.waitsForZoneSave(.saveRecord(Record.ID(recordName: "a", zoneID: topics)), pendingZoneChanges: []))
    }
}

extension SyncEngineFailureKindsTests {
    @Test("retries back off: doubled for each failure in a row up to the maximum, and at least what the failure asks")
    func retryDelays() {
        func delay(_ failures: Int, retryAfter: Double? = nil) -> Duration {
            SyncEngine.retryDelay(failures: failures, base: .seconds(2), maximum: .seconds(60), retryAfter: retryAfter)
        }
        #expect(delay(1) == .seconds(2))
        #expect(delay(2) == .seconds(4))
        #expect(delay(4) == .seconds(16))
        #expect(delay(6) == .seconds(60) && delay(1000) == .seconds(60))
        #expect(delay(1, retryAfter: 30) == .seconds(30))
        #expect(delay(6, retryAfter: 30) == .seconds(60))
        #expect(delay(1, retryAfter: 1e12) == .seconds(3600) && delay(1, retryAfter: .nan) == .seconds(2))
    }
}
