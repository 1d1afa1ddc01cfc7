import Foundation
import NIOCore
import ShareSyncCore
import ShareSyncStore
import ShareSyncTestSupport
import ShareSyncWire
import Synchronization
import Testing

@testable import ShareSyncNode

/// An owner that serves only `fetchZoneChanges`, from pages in memory, and logs each request and each
/// decode in order: what the fetcher's pipelining is checked against.
private final class PagedOwner: PartialOwnerDatabase {
    let ownerName = "_owner"
    let limits = WireLimits()
    let pages: Int
    /// Requests for the page after this token fail with this error.
    let failingRequest: (after: Int, error: ShareSyncError)?
    /// This page fails to decode.
    let failingDecode: Int?
    let log = Mutex<[String]>([])

    init(pages: Int, failingRequest: (after: Int, error: ShareSyncError)? = nil, failingDecode: Int? = nil) {
        self.pages = pages
        self.failingRequest = failingRequest
        self.failingDecode = failingDecode
    }

    private func page(_ index: Int) -> EncodedZoneChanges {
        let zone = RecordZone.ID(zoneName: "Topics", ownerName: ownerName)
        let record = EncodedRecord(
            recordID: Record.ID(recordName: "r\(index)", zoneID: zone), recordType: "Note", json: Data("{}".utf8))
        return EncodedZoneChanges(
            zoneID: zone, changes: [.changed(record)], changeToken: ServerChangeToken(stringValue: "t\(index + 1)"),
            moreComing: index + 1 < pages)
    }

    func startFetchZoneChanges(zoneName: String, since token: ServerChangeToken?, resultsLimit: Int?)
        async throws(ShareSyncError) -> PendingZoneChanges
    {
        let index = token.map { Int($0.stringValue.dropFirst())! } ?? 0
        log.withLock { $0.append("request \(index)") }
        if let failing = failingRequest, failing.after == index { throw failing.error }
        let page = page(index)
        return PendingZoneChanges(arrived: { () async throws(ShareSyncError) -> ArrivedZoneChanges in
            ArrivedZoneChanges(continuation: (page.changeToken, page.moreComing)) { [self] () throws(ShareSyncError) in
                log.withLock { $0.append("decode \(index)") }
                if failingDecode == index { throw ShareSyncError(.invalidArguments, "page \(index) is malformed") }
                return page
            }
        })
    }
}

@Suite("Zone page fetcher")
struct ZonePageFetcherTests {
    @Test("each page's successor is requested before the page is decoded, and pages come out in order with their tokens")
    func requestsBeforeDecoding() async throws {
        let owner = PagedOwner(pages: 5)
        var fetcher = await ZonePageFetcher(owner, zoneName: "Topics", since: nil, pageSize: nil)
        var tokens: [String] = []
        while let page = try await fetcher.next() { tokens.append(page.changeToken.stringValue) }
        #expect(tokens == ["t1", "t2", "t3", "t4", "t5"])
        let log = owner.log.withLock { $0 }
        #expect(log.filter { $0.hasPrefix("request") } == (0..<5).map { "request \($0)" })
        for index in 0..<4 {
            let requested = try #require(log.firstIndex(of: "request \(index + 1)"))
            let decoded = try #require(log.firstIndex(of: "decode \(index)"))
            #expect(requested < decoded, "page \(index + 1) asked for before page \(index) was decoded: \(log)")
        }
    }

    @Test("a refused request for the next page comes out after the page before it, as when it was asked for later")
    func requestErrorAfterItsPage() async throws {
        let owner = PagedOwner(pages: 5, failingRequest: (2, ShareSyncError(.changeTokenExpired, "expired")))
        var fetcher = await ZonePageFetcher(owner, zoneName: "Topics", since: nil, pageSize: nil)
        #expect(try await fetcher.next()?.changeToken.stringValue == "t1")
        #expect(try await fetcher.next()?.changeToken.stringValue == "t2")
        let error = await #expect(throws: ShareSyncError.self) { try await fetcher.next() }
        #expect(error?.code == .changeTokenExpired)
    }

    @Test("a page that fails to decode fails its own next(), after the pages before it")
    func decodeErrorAtItsPage() async throws {
        let owner = PagedOwner(pages: 5, failingDecode: 1)
        var fetcher = await ZonePageFetcher(owner, zoneName: "Topics", since: nil, pageSize: nil)
        #expect(try await fetcher.next()?.changeToken.stringValue == "t1")
        let error = await #expect(throws: ShareSyncError.self) { try await fetcher.next() }
        #expect(error?.message == "page 1 is malformed")
    }

    @Test("a page an app's own owner hands over as records comes back from page as given, and is stored encoded")
    func recordsPageKeptAsGiven() async throws {
        let zone = RecordZone.ID(zoneName: "Topics", ownerName: "_owner")
        var record = Record(recordType: "Note", recordID: Record.ID(recordName: "n1", zoneID: zone))
        record["title"] = .string("milk")  // marks "title" as changed
        let given = ZoneChanges(zoneID: zone, changes: [.changed(record)], changeToken: ServerChangeToken(stringValue: "t1"), moreComing: false)
        let pending = PendingZoneChanges { given }
        let page = try await pending.page
        #expect(page.changedRecords == [record])
        #expect(page.changedRecords.first?.changedKeys == ["title"])
        let arrived = try await pending.arrived
        #expect(arrived.continuation?.token == given.changeToken)
        guard case .changed(let encoded)? = try arrived.page().changes.first else {
            Issue.record("expected a changed record")
            return
        }
        #expect(encoded.json == (try record.jsonData()))
    }

    @Test("the token and moreComing read ahead of the records are those of the decoded page; an error answer has none")
    func continuationMatchesDecodedPage() throws {
        var read = 0
        for seed in UInt64(1)...8 {
            var random = RandomRecords(seed: seed)
            let moreComing = seed % 2 == 0
            let zone = RecordZone.ID(zoneName: "Topics", ownerName: "_owner")
            let records = (0..<40).map { i in
                var record = Record(recordType: "Note", recordID: Record.ID(recordName: "n\(i)-" + random.string(), zoneID: zone))
                record["title"] = .string(random.string())
                record["rank"] = .int64(random.int64())
                record["tags"] = .list(.string([random.string(), random.string()]))
                if random.chance(0.5) { record.setParent(Record.ID(recordName: random.string(), zoneID: zone)) }
                return record
            }
            let page = ZoneChanges(
                zoneID: zone, changes: records.map { .changed($0) }, changeToken: ServerChangeToken(stringValue: "tok-\(seed)"), moreComing: moreComing)
            let data = try MessageCoding.encodeData(Response(id: 12, ok: ZoneChangesResult(page)))
            let frame = ByteBuffer(bytes: data)
            let decoded = try MessageCoding.decode(Response<ReceivedZoneChanges>.self, from: frame).result(ownerName: "_owner")
            let fast = JSONReader.read(data) { r throws(JSONFallback) in try Response<ReceivedZoneChanges>.readJSON(from: &r) }
            let continuation = ReceivedZoneChanges.continuation(of: frame)
            // Read ahead whenever the fast reader reads the page (one it leaves to JSONDecoder may go without).
            #expect(fast != nil)
            if fast != nil { #expect(continuation != nil, "seed \(seed)") }
            if let continuation {
                read += 1
                #expect(continuation.token == decoded.token)
                #expect(continuation.moreComing == decoded.moreComing)
                #expect(continuation.moreComing == moreComing)
            }
        }
        #expect(read == 8)
        let refused = ByteBuffer(string: #"{"error":{"code":"zoneNotFound","message":"no zone"},"id":12}"#)
        #expect(ReceivedZoneChanges.continuation(of: refused) == nil)
        let truncated = ByteBuffer(string: #"{"id":12,"ok":{"changed":[{"fields":{}"#)
        #expect(ReceivedZoneChanges.continuation(of: truncated) == nil)
    }
}
