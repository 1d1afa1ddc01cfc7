import Foundation
import ShareSyncCore
import Testing
@testable import ShareSyncNode

/// A shared `modifyRecords` across several zones goes to their owners zone by zone. A zone refused as
/// a whole after an earlier zone's items were committed must not throw: the caller would lose the
/// results of the committed items and think nothing was written.
@Suite("A shared modifyRecords across zones")
struct SharedModifyByZoneTests {
    private static func group(_ zone: String, owner: String = "_owner", saving names: [String]) -> SharedModifyGroup {
        let zoneID = RecordZone.ID(zoneName: zone, ownerName: owner)
        var group = SharedModifyGroup(zoneID: zoneID)
        group.saving = names.map { Record(recordType: "Note", recordID: Record.ID(recordName: $0, zoneID: zoneID)) }
        return group
    }

    private static func saved(_ group: SharedModifyGroup) -> ParticipantSync.WriteOutcome {
        var result = ModifyRecordsResult()
        for record in group.saving { result.saveResults[record.recordID] = .success(record) }
        return .sent(result)
    }

    @Test("a later zone refused as a whole fails its own items; the earlier and later zones' results are kept")
    func laterZoneRefusedAsAWhole() async throws {
        let groups = [Self.group("A", saving: ["a1", "a2"]), Self.group("B", saving: ["b1"]), Self.group("C", saving: ["c1"])]
        let modified = try await ControlHandler.modifyZoneByZone(groups, queue: true) { group throws(ShareSyncError) in
            if group.zoneID.zoneName == "B" {
                throw ShareSyncError(.zoneNotFound, "zone B is not shared with you", zoneID: group.zoneID)
            }
            return Self.saved(group)
        }
        #expect(Set(modified.saved.map(\.recordID.recordName)) == ["a1", "a2", "c1"])
        #expect(modified.failed.map(\.record.recordName) == ["b1"])
        #expect(modified.failed.first?.error.code == .zoneNotFound)
    }

    @Test("the first zone refused as a whole throws, as a single-zone request does")
    func firstZoneRefusedThrows() async throws {
        let groups = [Self.group("A", saving: ["a1"]), Self.group("B", saving: ["b1"])]
        var asked: [String] = []
        await #expect(throws: ShareSyncError.self) {
            _ = try await ControlHandler.modifyZoneByZone(groups, queue: true) { group throws(ShareSyncError) in
                asked.append(group.zoneID.zoneName)
                throw ShareSyncError(.limitExceeded, "too many items")
            }
        }
        #expect(asked == ["A"])
    }

    @Test("without queueing, a zone whose owner is unreachable fails item by item, even first")
    func unreachableOwnerWithoutQueue() async throws {
        let groups = [Self.group("A", owner: "_far", saving: ["a1"]), Self.group("B", saving: ["b1"])]
        let modified = try await ControlHandler.modifyZoneByZone(groups, queue: false) { group throws(ShareSyncError) in
            if group.zoneID.ownerName == "_far" { throw ShareSyncError(.networkUnavailable, "not connected") }
            return Self.saved(group)
        }
        #expect(modified.failed.map(\.record.recordName) == ["a1"])
        #expect(modified.failed.first?.error.code == .networkUnavailable)
        #expect(modified.saved.map(\.recordID.recordName) == ["b1"])
    }
}
