import Foundation
import ShareSyncCore
import ShareSyncWire

// Record JSON, Foundation's Codable path against the hand-written one: the suite's data set as the
// store holds it (system fields set), one record at a time and as fetchZoneChanges pages of 400.

private func seconds(_ body: () throws -> Void) rethrows -> Double {
    let start = now()
    try body()
    return now() - start
}

/// The suite's records as saved: creation and modification stamps, a change tag.
private func savedRecords(_ count: Int, zone: RecordZone.ID) -> [Record] {
    (0..<count).map { i in
        let r = DataSet.record(i, total: count, zone: zone)
        let stamp = Date(timeIntervalSince1970: 1_700_000_000 + Double(i) / 1000)
        return Record(
            recordType: r.recordType, recordID: r.recordID, fields: r.fields, parent: r.parent, share: nil,
            creationDate: stamp, modificationDate: stamp, creatorUserRecordID: Record.ID(recordName: "_owner"),
            lastModifiedUserRecordID: Record.ID(recordName: "_owner"), recordChangeTag: String(i, radix: 36))
    }
}

func runCodecBenchmark(count: Int) throws {
    let zone = RecordZone.ID(zoneName: "Topics", ownerName: "_owner")
    let records = savedRecords(count, zone: zone)
    var results: [(String, Double, Double)] = []

    // One record at a time, as the store writes and reads them.
    var jsons: [Data] = []
    let encodeFoundation = try seconds { for r in records { _ = try r.foundationJSONData() } }
    let encodeFast = try seconds { jsons = try records.map { try $0.jsonData() } }
    let bytes = Double(jsons.reduce(0) { $0 + $1.count })
    guard try jsons.indices.allSatisfy({ try jsons[$0] == records[$0].foundationJSONData() }) else {
        throw BenchError("the hand-written encoder differs from Foundation's")
    }
    var decoded: [Record] = []
    let decodeFoundation = try seconds { for json in jsons { _ = try Record(foundationJSONData: json) } }
    let decodeFast = try seconds { decoded = try jsons.map { try Record(jsonData: $0) } }
    guard decoded == records else { throw BenchError("the hand-written decoder differs from Foundation's") }
    results.append(("record encode, Foundation", encodeFoundation, bytes))
    results.append(("record encode, hand-written", encodeFast, bytes))
    results.append(("record decode, Foundation", decodeFoundation, bytes))
    results.append(("record decode, hand-written", decodeFast, bytes))

    // fetchZoneChanges responses of 400 records, as the owner writes them and the participant reads them.
    let pages = stride(from: 0, to: count, by: 400).enumerated().map { i, start in
        let changes = ZoneChanges(
            zoneID: zone, changes: records[start..<min(start + 400, count)].map { .changed($0) },
            changeToken: ServerChangeToken(stringValue: "1.abcdef.\(start)"), moreComing: true)
        return Response(id: i, ok: ZoneChangesResult(changes))
    }
    var frames: [Data] = []
    let pageEncodeFoundation = try seconds { for page in pages { _ = try MessageCoding.foundationEncodeData(page) } }
    let pageEncodeFast = try seconds { frames = try pages.map { try MessageCoding.encodeData($0) } }
    let pageBytes = Double(frames.reduce(0) { $0 + $1.count })
    let pageDecodeFoundation = try seconds {
        for frame in frames {
            _ = try MessageCoding.foundationDecode(MessageHead.self, from: frame)
            _ = try MessageCoding.foundationDecode(Response<ZoneChangesResult>.self, from: frame)
        }
    }
    var decodedPages: [Response<ZoneChangesResult>] = []
    let pageDecodeFast = try seconds {
        decodedPages = try frames.map { frame in
            _ = try MessageCoding.decode(MessageHead.self, from: frame)
            return try MessageCoding.decode(Response<ZoneChangesResult>.self, from: frame)
        }
    }
    guard decodedPages.map(\.ok) == pages.map(\.ok) else { throw BenchError("the hand-written page decoder differs") }
    results.append(("page of 400 encode, Foundation", pageEncodeFoundation, pageBytes))
    results.append(("page of 400 encode, hand-written", pageEncodeFast, pageBytes))
    results.append(("page of 400 decode (head, then page), Foundation", pageDecodeFoundation, pageBytes))
    results.append(("page of 400 decode (head, then page), hand-written", pageDecodeFast, pageBytes))

    print("codec benchmark: \(count) records of the suite's data set, \(Int(bytes) / count) bytes of JSON each on average")
    print("| scenario | records/s | MB/s |")
    print("| --- | ---: | ---: |")
    for (name, time, bytes) in results {
        print("| \(name) | \(String(format: "%.0f", Double(count) / time)) | \(String(format: "%.1f", bytes / time / 1e6)) |")
    }
    let json = results.map {
        "{\"scenario\":\"\($0.0)\",\"recordsPerSecond\":\(String(format: "%.0f", Double(count) / $0.1)),\"megabytesPerSecond\":\(String(format: "%.1f", $0.2 / $0.1 / 1e6))}"
    }
    print("JSON: [\(json.joined(separator: ","))]")
}
