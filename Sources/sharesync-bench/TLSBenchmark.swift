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
// p50/p99 over --connections connections (default 300), and the initial fetch of a zone of
// --records Topic/Note records (default 50,000) in pages of 400, records/s (best of 5, the two
// transports taking turns); change
// latency, the owner's save of one record until a subscribed participant holds its push, p50/p99
// over --changes saves (default 500); and fan-out, --fan-out-identities identities (default
// 50) with two subscribed connections each: the owner saves one record at a time (--fan-out-changes,
// default 500) and waits until every connection holds it, p50/p99 of that wait (the transports
// taking turns in five rounds).
// The last line is TLS's cost on each, in percent.
func runTLSBenchmark(_ counts: TransportCounts) async throws {
    let rows = try await measureTransports(counts)
    print("| transport | connect + authenticate p50 ms | p99 ms | initial fetch of \(counts.records) records, records/s | change latency p50 ms | p99 ms | fan-out to \(counts.fanOutIdentities * 2) connections, until the last holds a change, p50 ms | p99 ms |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for row in rows {
        print(String(
            format: "| %@ | %.2f | %.2f | %.0f | %.3f | %.3f | %.3f | %.3f |", row.label, row.connectP50, row.connectP99,
            row.initialFetch, row.latencyP50, row.latencyP99, row.fanOutP50, row.fanOutP99))
    }
    let (tls, clear) = (rows[0], rows[1])
    print(String(
        format: "TLS's cost: initial fetch %+.1f %%, change latency p50 %+.1f %% (p99 %+.1f %%), fan-out p50 %+.1f %% (p99 %+.1f %%) (positive = TLS slower)",
        tls.initialFetchCost(against: clear), tls.latencyCost(against: clear), (tls.latencyP99 / clear.latencyP99 - 1) * 100,
        tls.fanOutCost(against: clear), (tls.fanOutP99 / clear.fanOutP99 - 1) * 100))
    let owner = NodeIdentity.generate()
    var setup: [Double] = []
    for _ in 0..<200 {
        let start = now()
        _ = try TransportSecurity.clientContext(try owner.tlsCredentials())
        setup.append((now() - start) * 1000)
    }
    print(String(format: "making a certificate and a TLS client context: p50 %.2f ms", percentile(setup, 50)))
}

/// How much `measureTransports` does (the `tls` command's defaults; the suite uses fewer).
struct TransportCounts {
    var connections = 300
    var records = 50_000
    var latencySamples = 500
    var fanOutIdentities = 50
    var fanOutChanges = 500
}

/// The figures of both transports, TLS first, on one in-process owner server (see the top of this file).
func measureTransports(_ counts: TransportCounts) async throws -> [TransportFigures] {
    let (connections, total) = (counts.connections, counts.records)
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

    let (latencySamples, fanOutIdentities, fanOutChanges) = (counts.latencySamples, counts.fanOutIdentities, counts.fanOutChanges)
    // The same identities in both transports, all members of the share before anything is measured:
    // every save costs the owner a view-log row per member, so both runs must see the same members.
    let participant = NodeIdentity.generate()
    let fanOutMembers = (0..<fanOutIdentities).map { _ in NodeIdentity.generate() }
    for identity in [participant] + fanOutMembers {
        let connection = try await OwnerConnection.connect(url: url, identity: identity)
        _ = try await connection.acceptShare(url: url)
        await connection.close()
    }
    // In the order of the rows (TLS first): every section below indexes its figures by it.
    let transports = [("TLS 1.3", TransportSecurity.Mode.tls), ("cleartext (loopback debug mode)", .cleartextOnLoopback)]
    var rows: [TransportFigures] = []
    for (label, mode) in transports {
        var figures = TransportFigures(label: label)
        var samples: [Double] = []
        for i in 0..<(connections + 20) {
            let start = now()
            let connection = try await OwnerConnection.connect(url: url, identity: participant, security: mode)
            if i >= 20 { samples.append((now() - start) * 1000) }
            await connection.close()
        }
        figures.connectP50 = percentile(samples, 50)
        figures.connectP99 = percentile(samples, 99)

        progress(String(format: "%@: connect p50 %.2f ms", label, figures.connectP50))
        rows.append(figures)
    }

    // Fan-out, as the suite measures it: 2 subscribed connections for each of N identities; the owner
    // saves one record at a time and waits until every connection holds it (the time of the last
    // arrival, p50/p99 over M saves). The transports take turns, in rounds of M/5 saves each, so
    // that neither runs only first (on the smaller database, on colder caches) or only while the
    // machine is busier: with all of TLS's saves before all of cleartext's, TLS came out 0 to 15 %
    // slower from one run to the next.
    let rounds = 5
    var fanOut: [[Double]] = [[], []]
    var saved = 0
    for round in 0..<rounds {
        for (index, (label, mode)) in transports.enumerated() {
            let (arrivals, arrived) = AsyncStream<(String, Double)>.makeStream()
            var subscribers: [OwnerConnection] = []
            var readers: [Task<Void, Never>] = []
            let prefix = "fan-\(label.prefix(3))-\(round)-"
            for identity in fanOutMembers {
                for _ in 0..<2 {
                    let subscriber = try await OwnerConnection.connect(url: url, identity: identity, security: mode)
                    let stream = try await subscriber.subscribe()
                    subscribers.append(subscriber)
                    readers.append(timeArrivals(stream) { name, time in
                        if name.hasPrefix(prefix) { arrived.yield((name, time)) }
                    })
                }
            }
            var arrivalIterator = arrivals.makeAsyncIterator()
            let warmUp = 2
            for i in 0..<(max(1, fanOutChanges / rounds) + warmUp) {
                let record = note(named: "\(prefix)\(i)", index: total + saved, zone: zone)
                saved += 1
                let start = now()
                _ = try database.modifyRecords(saving: [record], savePolicy: .allKeys).get()
                var count = 0
                var last = start
                while count < subscribers.count, let (name, time) = await arrivalIterator.next() {
                    guard name == record.recordID.recordName else { continue }
                    count += 1
                    last = max(last, time)
                }
                if i >= warmUp { fanOut[index].append((last - start) * 1000) }
            }
            for subscriber in subscribers { await subscriber.close() }
            for reader in readers { await reader.value }
            arrived.finish()
        }
    }
    for index in rows.indices {
        rows[index].fanOutP50 = percentile(fanOut[index], 50)
        rows[index].fanOutP99 = percentile(fanOut[index], 99)
        progress(String(format: "%@: fan-out p50 %.3f ms", rows[index].label, rows[index].fanOutP50))
    }
    // The initial fetch, the transports taking turns (best of 5 each), so that neither has the warmer
    // caches.
    var fetchConnections: [OwnerConnection] = []
    for (_, mode) in transports {
        fetchConnections.append(try await OwnerConnection.connect(url: url, identity: participant, security: mode))
    }
    for _ in 0..<5 {
        for (index, connection) in fetchConnections.enumerated() {
            let start = now()
            var token: ServerChangeToken?
            var count = 0
            repeat {
                let page = try await connection.fetchZoneChanges(zoneName: "Bench", since: token, resultsLimit: 400)
                count += page.changedRecords.count
                token = page.changeToken
                if !page.moreComing { break }
            } while true
            rows[index].initialFetch = max(rows[index].initialFetch, Double(count) / (now() - start))
        }
    }
    for connection in fetchConnections { await connection.close() }

    // Change latency, both transports at once so that neither runs on a bigger database or a warmer
    // cache: the participant holds one subscribed connection of each kind; the owner saves one record
    // at a time, and each connection's wait for its push is a sample of its transport.
    let (latencyArrivals, latencyArrived) = AsyncStream<(Int, String, Double)>.makeStream()
    var latencyConnections: [OwnerConnection] = []
    var latencyReaders: [Task<Void, Never>] = []
    for (index, (_, mode)) in transports.enumerated() {
        let connection = try await OwnerConnection.connect(url: url, identity: participant, security: mode)
        let stream = try await connection.subscribe()
        latencyConnections.append(connection)
        latencyReaders.append(timeArrivals(stream) { name, time in latencyArrived.yield((index, name, time)) })
    }
    var arrivals = latencyArrivals.makeAsyncIterator()
    var latencies: [[Double]] = [[], []]
    for i in 0..<(latencySamples + 20) {
        let record = note(named: "latency-\(i)", index: total + i, zone: zone)
        let start = now()
        _ = try database.modifyRecords(saving: [record], savePolicy: .allKeys).get()
        // By name: the push's IDs carry the owner's name, the owner's own write the default owner.
        var waiting: Set<Int> = [0, 1]
        while !waiting.isEmpty, let (index, name, time) = await arrivals.next() {
            guard name == record.recordID.recordName, waiting.remove(index) != nil else { continue }
            if i >= 20 { latencies[index].append((time - start) * 1000) }
        }
    }
    for connection in latencyConnections { await connection.close() }
    for reader in latencyReaders { await reader.value }
    latencyArrived.finish()
    for index in rows.indices {
        rows[index].latencyP50 = percentile(latencies[index], 50)
        rows[index].latencyP99 = percentile(latencies[index], 99)
    }
    try await server.shutdown()
    return rows
}

private struct MissingShareURL: Error {}

/// A task that reads a subscription's pushes and reports each changed record's name with the time its
/// push arrived.
private func timeArrivals(
    _ stream: AsyncStream<OwnerConnection.Push>, _ report: @escaping @Sendable (String, Double) -> Void
) -> Task<Void, Never> {
    Task {
        for await push in stream {
            let time = now()
            for zoneChanges in push.zoneChanges {
                for record in zoneChanges.changedRecords { report(record.recordID.recordName, time) }
            }
        }
    }
}

/// A Note of the data set under another name.
private func note(named name: String, index: Int, zone: RecordZone.ID) -> Record {
    let template = DataSet.note(index, topic: 0, zone: zone)
    var record = Record(recordType: template.recordType, recordID: .init(recordName: name, zoneID: zone))
    for (key, value) in template.fields { record[key] = value }
    record.parent = template.parent
    return record
}

/// One transport's row of the `tls` table.
struct TransportFigures {
    var label: String
    var connectP50 = 0.0, connectP99 = 0.0
    var initialFetch = 0.0
    var latencyP50 = 0.0, latencyP99 = 0.0
    var fanOutP50 = 0.0, fanOutP99 = 0.0

    /// How much slower this transport is than `other`, in percent (negative: faster).
    func initialFetchCost(against other: TransportFigures) -> Double { (other.initialFetch / initialFetch - 1) * 100 }
    func latencyCost(against other: TransportFigures) -> Double { (latencyP50 / other.latencyP50 - 1) * 100 }
    func fanOutCost(against other: TransportFigures) -> Double { (fanOutP50 / other.fanOutP50 - 1) * 100 }
}

private func require<T>(_ value: T?) throws -> T {
    guard let value else { throw MissingShareURL() }
    return value
}
