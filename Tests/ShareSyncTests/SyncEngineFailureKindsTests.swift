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
}
