import Foundation
import ShareSyncCore
@testable import ShareSyncNode
import ShareSyncStore
import Testing

// A write whose answer was lost (the connection cut after the owner committed it) is sent again from
// the outbox and answered serverRecordChanged: when the owner's record holds exactly what was written,
// it landed, and is no conflict.
@Suite("Outbox retries of writes that already landed")
struct OutboxRetryTests {
    static let zone = RecordZone.ID(zoneName: "Topics", ownerName: "_owner")

    static func note(_ title: String, tag: String?) -> Record {
        var note = Record(recordType: "Note", recordID: Record.ID(recordName: "n1", zoneID: zone))
        note["title"] = .string(title)
        note.setParent(Record.ID(recordName: "topic", zoneID: zone))
        note.recordChangeTag = tag
        return note
    }

    static func conflict(server: Record) -> ModifyRecordsResult {
        ModifyRecordsResult(
            saveResults: [server.recordID: .failure(ShareSyncError(
                .serverRecordChanged, "changed", recordID: server.recordID, serverRecord: server))],
            deleteResults: [:])
    }

    @Test func aConflictWithTheSameContentIsTheEarlierTryThatLanded() throws {
        let mine = Self.note("Milk", tag: nil)
        let operation = OutboxOperation(zoneName: "Topics", saving: [mine])
        let landed = ParticipantOwnerLink.landedAlready(operation, Self.conflict(server: Self.note("Milk", tag: "7")))
        #expect((try? landed.saveResults[mine.recordID]?.get())?.recordChangeTag == "7")
    }

    @Test func aDeletionAnsweredUnknownItemLandedAlready() throws {
        let id = Record.ID(recordName: "n1", zoneID: Self.zone)
        let other = Record.ID(recordName: "n2", zoneID: Self.zone)
        let operation = OutboxOperation(zoneName: "Topics", deleting: ["n1", "n2"])
        let answer = ModifyRecordsResult(
            saveResults: [:],
            deleteResults: [
                id: .failure(ShareSyncError(.unknownItem, "record n1 does not exist", recordID: id)),
                other: .failure(ShareSyncError(.permissionFailure, "read-only", recordID: other, rule: .readOnlyParticipant)),
            ])
        let result = ParticipantOwnerLink.landedAlready(operation, answer)
        #expect(result.errors["n1"] == nil)
        #expect(result.errors["n2"]?.code == .permissionFailure)
    }

    @Test func aConflictWithOtherContentStaysAConflict() throws {
        let mine = Self.note("Milk", tag: nil)
        let operation = OutboxOperation(zoneName: "Topics", saving: [mine])
        let result = ParticipantOwnerLink.landedAlready(operation, Self.conflict(server: Self.note("Eggs", tag: "7")))
        guard case .failure(let error)? = result.saveResults[mine.recordID] else {
            Issue.record("a real conflict was taken for a landed write")
            return
        }
        #expect(error.code == .serverRecordChanged)
    }
}
