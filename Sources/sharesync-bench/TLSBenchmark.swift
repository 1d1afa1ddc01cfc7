import Foundation
import Logging
import NIOCore
import ShareSyncCore
import ShareSyncNode
import ShareSyncStore
import ShareSyncWire

// `sharesync-bench tls`: what TLS costs, against the loopback cleartext debug mode on the same
// in-process owner server (127.0.0.1, cleartext allowed, so both modes reach the same code):
// connection setup (TCP + TLS + framing handshake + Ed25519 challenge-response, until `welcome`),
// p50/p99 over BENCH_CONNECTIONS connections (default 300), and the initial fetch of a zone of
// BENCH_RECORDS Topic/Note records (default 50,000) in pages of 400, records/s (best of 3).
func runTLSBenchmark() async throws {
    let environment = ProcessInfo.processInfo.environment
    let connections = Int(environment["BENCH_CONNECTIONS"] ?? "") ?? 300
    let total = Int(environment["BENCH_RECORDS"] ?? "") ?? 50_000
    let owner = NodeIdentity.generate()
    let database = try PrivateDatabase(inMemoryOwnerName: owner.userRecordName)
    let zone = RecordZone.ID(zoneName: "Bench")
    _ = try database.saveZone(RecordZone(zoneID: zone))
    let records = DataSet.records(total, zone: zone)
    for start in stride(from: 0, to: records.count, by: 400) {
        _ = try database.modifyRecords(saving: Array(records[start..<min(start + 400, records.count)]), savePolicy: .allKeys).get()
    }
    var share = Share(recordZoneID: zone)
    share.publicPermission = .readOnly
    _ = try database.modifyRecords(saving: [share.record]).get()
    var logger = Logger(label: "bench")
    logger.logLevel = .error
    let server = try await OwnerServer.start(
        database: database, identity: owner, configuration: OwnerServer.Configuration(allowCleartext: true), logger: logger)
    database.setShareURLBase(ShareURLBase(host: "127.0.0.1", port: server.port, ownerFingerprint: owner.fingerprint))
    let url = try require(Share(try database.fetchRecord(share.recordID))?.url)

    print("| transport | connect + authenticate p50 ms | p99 ms | initial fetch of \(total) records, records/s |")
    print("| --- | ---: | ---: | ---: |")
    for (label, mode) in [("TLS 1.3", TransportSecurity.Mode.tls), ("cleartext (loopback debug mode)", .cleartextOnLoopback)] {
        let participant = NodeIdentity.generate()
        var samples: [Double] = []
        for i in 0..<(connections + 20) {
            let start = now()
            let connection = try await OwnerConnection.connect(url: url, identity: participant, security: mode)
            if i >= 20 { samples.append((now() - start) * 1000) }
            await connection.close()
        }
        let connection = try await OwnerConnection.connect(url: url, identity: participant, security: mode)
        try await connection.acceptShare(url: url)
        var best = 0.0
        for _ in 0..<3 {
            let start = now()
            var token: ServerChangeToken?
            var count = 0
            repeat {
                let page = try await connection.fetchZoneChanges(zoneName: "Bench", since: token, resultsLimit: 400)
                count += page.changedRecords.count
                token = page.changeToken
                if !page.moreComing { break }
            } while true
            best = max(best, Double(count) / (now() - start))
        }
        await connection.close()
        print(String(format: "| %@ | %.2f | %.2f | %.0f |", label, percentile(samples, 50), percentile(samples, 99), best))
    }
    try await server.shutdown()
    var setup: [Double] = []
    for _ in 0..<200 {
        let start = now()
        _ = try TransportSecurity.clientContext(try owner.tlsCredentials())
        setup.append((now() - start) * 1000)
    }
    print(String(format: "making a certificate and a TLS client context: p50 %.2f ms", percentile(setup, 50)))
}

private struct MissingShareURL: Error {}

private func require<T>(_ value: T?) throws -> T {
    guard let value else { throw MissingShareURL() }
    return value
}
