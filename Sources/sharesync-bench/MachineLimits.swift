import CompressNIO
import Foundation
import GRDB
import NIOCore
import ShareSyncCore
import ShareSyncStore

#if canImport(Glibc)
import Glibc
#endif

// This machine's limits on the same data: a bare SQLite upsert of the rows in one transaction, the
// owner's own upsert into its record table (what its indexes cost),
// zlib deflate and inflate of the same bytes, a loopback TCP round trip of 100 bytes, and a 4 KiB
// overwrite synced to the disk.

enum MachineLimits {
    /// Rows per second of a prepared upsert of (zone, name, seq, json) in one transaction, WAL.
    static func sqliteUpsert(_ records: [ShareSyncCore.Record], directory: String) throws -> Double {
        let rows = try records.map { ($0.recordID.recordName, try $0.jsonData()) }
        let pool = try DatabasePool(path: directory + "/bare.sqlite")
        try pool.write { db in
            try db.execute(sql: "CREATE TABLE r (zone TEXT, name TEXT, seq INTEGER, json BLOB, PRIMARY KEY (zone, name))")
        }
        let t0 = now()
        try pool.write { db in
            let statement = try db.makeStatement(
                sql: "INSERT INTO r (zone, name, seq, json) VALUES ('Topics', ?, ?, ?) "
                    + "ON CONFLICT DO UPDATE SET seq = excluded.seq, json = excluded.json")
            for (i, row) in rows.enumerated() { try statement.execute(arguments: [row.0, i, row.1]) }
        }
        return Double(rows.count) / (now() - t0)
    }

    /// Rows per second of the owner's own upsert statement into its `record` table, as
    /// ``PrivateDatabase`` creates it (its schema, indexes and `synchronous = FULL`), in batches of
    /// `batch` records, each one transaction that also moves the zone's sequence, as the owner's
    /// saves do, and nothing else: no record decoding or encoding, no checks, no sharing, no change
    /// feed. What owner writes could reach on this schema; against ``sqliteUpsert(_:directory:)``,
    /// what its four secondary indexes (sequence, parent, share, type) cost.
    static func ownerSchemaUpsert(_ records: [ShareSyncCore.Record], batch: Int = 400, directory: String) throws -> Double {
        let path = directory + "/owner-schema.sqlite"
        do { _ = try PrivateDatabase(path: path, ownerName: "_owner") }  // the schema, by the store's own migrations
        let rows = try records.map {
            ($0.recordID.recordName, $0.recordType, $0.parent?.recordID.recordName, try $0.jsonData())
        }
        let pool = try DatabasePool(path: path)
        try pool.writeWithoutTransaction { db in
            try db.execute(sql: "PRAGMA synchronous = FULL")
            try db.execute(sql: "INSERT INTO zone (name, seq) VALUES ('Topics', 0)")
        }
        let t0 = now()
        var seq: Int64 = 0
        for start in stride(from: 0, to: rows.count, by: batch) {
            try pool.write { db in
                let upsert = try db.cachedStatement(
                    sql: """
                        INSERT INTO record (zone, name, type, seq, parent, json, shareName) VALUES ('Topics', ?, ?, ?, ?, ?, ?)
                        ON CONFLICT (zone, name) DO UPDATE SET type = excluded.type, seq = excluded.seq,
                            parent = excluded.parent, json = excluded.json
                        """)
                for row in rows[start..<min(start + batch, rows.count)] {
                    seq += 1
                    try upsert.execute(arguments: [row.0, row.1, seq, row.2, row.3, Share.zoneShareRecordName])
                }
                try db.cachedStatement(sql: "UPDATE zone SET seq = ? WHERE name = 'Topics'").execute(arguments: [seq])
            }
        }
        return Double(rows.count) / (now() - t0)
    }

    /// Deflate and inflate MB/s (of uncompressed bytes) and the compressed fraction: the records' JSON
    /// in chunks of `perChunk` records, one raw deflate stream (window 15) with a sync flush per chunk,
    /// as a connection does with pages. Best of 3.
    static func zlib(
        _ records: [ShareSyncCore.Record], perChunk: Int = 400, level: Int32 = -1
    ) throws -> (deflate: Double, inflate: Double, ratio: Double) {
        let allocator = ByteBufferAllocator()
        var chunks: [ByteBuffer] = []
        for start in stride(from: 0, to: records.count, by: perChunk) {
            var buffer = allocator.buffer(capacity: perChunk * 256)
            buffer.writeString("[")
            for (i, record) in records[start..<min(start + perChunk, records.count)].enumerated() {
                if i > 0 { buffer.writeString(",") }
                buffer.writeBytes(try record.jsonData())
            }
            buffer.writeString("]")
            chunks.append(buffer)
        }
        let total = chunks.reduce(0) { $0 + $1.readableBytes }
        var best = (deflate: Double.infinity, inflate: Double.infinity)
        var compressedTotal = 0
        for _ in 0..<3 {
            let compressor = try ZlibCompressor(
                algorithm: .deflate, configuration: ZlibConfiguration(windowSize: 15, compressionLevel: level))
            var compressed: [ByteBuffer] = []
            compressed.reserveCapacity(chunks.count)
            let t0 = now()
            for chunk in chunks {
                var input = chunk
                var out = allocator.buffer(capacity: compressor.maxSize(from: input))
                try compressor.deflate(from: &input, to: &out, flush: .sync)
                compressed.append(out)
            }
            let t1 = now()
            let decompressor = try ZlibDecompressor(algorithm: .deflate, windowSize: 15)
            var check = 0
            for (i, c) in compressed.enumerated() {
                var input = c
                var out = allocator.buffer(capacity: chunks[i].readableBytes + 64)
                do {
                    try decompressor.inflate(from: &input, to: &out)
                } catch let error as CompressNIOError where error == .inputBufferOverflow {}
                check += out.readableBytes
            }
            let t2 = now()
            precondition(check == total, "zlib round trip lost bytes: \(check) of \(total)")
            compressedTotal = compressed.reduce(0) { $0 + $1.readableBytes }
            best = (min(best.deflate, t1 - t0), min(best.inflate, t2 - t1))
        }
        let megabytes = Double(total) / 1e6
        return (megabytes / best.deflate, megabytes / best.inflate, Double(compressedTotal) / Double(total))
    }

    /// Latencies (ms) of writing 4 KiB over a page of an existing file and `fdatasync`ing it, as a
    /// committing SQLite writer does with the WAL at `synchronous = FULL`: what each acknowledged
    /// write pays at least for being on the disk (the owner's commit of every change).
    static func diskSyncs(_ count: Int, directory: String) throws -> [Double] {
        let path = directory + "/sync-probe"
        let fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0o600)
        guard fd >= 0 else { throw BenchError("cannot create \(path)") }
        defer {
            close(fd)
            unlink(path)
        }
        let page = [UInt8](repeating: 0x5A, count: 4096)
        let pages = 64
        for i in 0..<pages { _ = page.withUnsafeBytes { pwrite(fd, $0.baseAddress, 4096, off_t(i * 4096)) } }
        guard fsync(fd) == 0 else { throw BenchError("fsync failed") }
        var samples: [Double] = []
        samples.reserveCapacity(count)
        for i in 0..<(count + 20) {
            let t0 = now()
            _ = page.withUnsafeBytes { pwrite(fd, $0.baseAddress, 4096, off_t((i % pages) * 4096)) }
            guard fdatasync(fd) == 0 else { throw BenchError("fdatasync failed") }
            if i >= 20 { samples.append((now() - t0) * 1000) }  // the first 20 warm up
        }
        return samples
    }

    /// Round trips of a 100-byte message over loopback TCP (TCP_NODELAY, blocking sockets, an echo
    /// thread): the latencies in milliseconds.
    static func tcpRoundTrips(_ count: Int) throws -> [Double] {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, length) } }
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &length) }
        }
        guard listen(listener, 1) == 0 else { throw BenchError("listen failed") }
        let echo = Thread {
            let fd = accept(listener, nil, nil)
            var one: Int32 = 1
            setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            var buffer = [UInt8](repeating: 0, count: 100)
            while readFully(fd, &buffer) { _ = buffer.withUnsafeBytes { write(fd, $0.baseAddress, 100) } }
            close(fd)
        }
        echo.start()
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else { throw BenchError("connect failed") }
        var message = [UInt8](repeating: UInt8(ascii: "x"), count: 100)
        var samples: [Double] = []
        samples.reserveCapacity(count)
        for i in 0..<(count + 100) {
            let t0 = now()
            _ = message.withUnsafeBytes { write(fd, $0.baseAddress, 100) }
            guard readFully(fd, &message) else { throw BenchError("echo closed") }
            if i >= 100 { samples.append((now() - t0) * 1000) }  // the first 100 warm up
        }
        close(fd)
        close(listener)
        return samples
    }

    private static func readFully(_ fd: Int32, _ buffer: inout [UInt8]) -> Bool {
        var got = 0
        while got < buffer.count {
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress! + got, $0.count - got) }
            if n <= 0 { return false }
            got += n
        }
        return true
    }
}
