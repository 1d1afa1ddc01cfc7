import Foundation
import Testing

@testable import ShareSyncCore

@Suite("ShareSyncError")
struct ShareSyncErrorTests {
    @Test("the description names the code, the message, the record, the zone and the rule")
    func descriptionHasContext() {
        let recordID = Record.ID(recordName: "note-1", zoneID: topicsZone)
        let error = ShareSyncError(.serverRecordChanged, "the record changed on the server", recordID: recordID, rule: Rule(rawValue: "changeTag"))
        let text = error.description
        #expect(text.contains("serverRecordChanged"))
        #expect(text.contains("the record changed on the server"))
        #expect(text.contains("note-1"))
        #expect(text.contains("Topics"))
        #expect(text.contains("changeTag"))
        #expect(text == "serverRecordChanged: the record changed on the server; record note-1; zone Topics; rule changeTag")
    }

    @Test("without context the description is the code and the message")
    func descriptionWithoutContext() {
        #expect(ShareSyncError(.unknownItem, "no such record").description == "unknownItem: no such record")
        #expect("\(ShareSyncError(.limitExceeded, "too big"))" == "limitExceeded: too big")
    }

    @Test("an error about a record is also about the record's zone, unless a zone is given")
    func zoneFromRecord() {
        let recordID = Record.ID(recordName: "note-1", zoneID: topicsZone)
        #expect(ShareSyncError(.unknownItem, "gone", recordID: recordID).zoneID == topicsZone)
        let other = RecordZone.ID(zoneName: "Other")
        #expect(ShareSyncError(.unknownItem, "gone", recordID: recordID, zoneID: other).zoneID == other)
    }

    @Test("errors can be matched on their code")
    func matchOnCode() {
        func fail() throws { throw ShareSyncError(.zoneNotFound, "no zone Topics", zoneID: topicsZone) }
        do {
            try fail()
            Issue.record("expected an error")
        } catch let error as ShareSyncError where error.code == .zoneNotFound {
            #expect(error.zoneID == topicsZone)
        } catch {
            Issue.record("unexpected \(error)")
        }
    }

    @Test("a conflict carries the server record and partial failures carry per-item errors")
    func conflictAndPartialFailure() {
        let server = savedRecord(fields: ["title": "Server"])
        let conflict = ShareSyncError(.serverRecordChanged, "changed", recordID: server.recordID, serverRecord: server)
        let partial = ShareSyncError(.partialFailure, "1 of 2 failed", partialErrors: ["note-1": conflict])
        #expect(partial.partialErrors?["note-1"]?.serverRecord?["title"] == "Server")
        // Given by name (as a peer sends them), the errors that name their record are there by ID too.
        #expect(partial.partialErrorsByItemID == [server.recordID: conflict])
    }

    @Test("per-item errors given by ID are there by name too; two zones' records of one name stay apart by ID")
    func partialErrorsByItemID() {
        let inTopics = Record.ID(recordName: "note-1", zoneID: topicsZone)
        let inLists = Record.ID(recordName: "note-1", zoneID: RecordZone.ID(zoneName: "Lists"))
        let conflict = ShareSyncError(.serverRecordChanged, "changed", recordID: inTopics)
        let gone = ShareSyncError(.unknownItem, "gone", recordID: inLists)
        let partial = ShareSyncError(.partialFailure, "2 of 2 failed", partialErrorsByItemID: [inTopics: conflict, inLists: gone])
        #expect(partial.partialErrorsByItemID?[inTopics]?.code == .serverRecordChanged)
        #expect(partial.partialErrorsByItemID?[inLists]?.code == .unknownItem)
        #expect(partial.partialErrors?.count == 1)
        #expect(ShareSyncError(.unknownItem, "gone").partialErrorsByItemID == nil)
    }
}
