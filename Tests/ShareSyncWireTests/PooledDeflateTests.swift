import Dispatch
import NIOCore
import Synchronization
import Testing
@testable import ShareSyncWire

/// The deflate and inflate streams are lent per frame from pools shared by every connection
/// (`StreamPool`): a connection goes on with its own last stream if no one used it since, else it
/// gets another, reset, primed with the connection's last bytes. These tests hold each connection's
/// lines to what the receiver reads, on both paths.
@Suite struct PooledDeflateTests {
    /// Payloads of many sizes around the history's: empty, small, exactly `historySize`, larger,
    /// and several times larger, with text that repeats across frames and random bytes that do not.
    static func mixedPayloads(count: Int, seed: UInt64) -> [ByteBuffer] {
        var rng = SplitMix64(seed: seed)
        let notes = notePayloads(count: count, seed: seed)
        let h = FrameEncoder.historySize
        return (0..<count).map { i in
            switch rng.next() % 8 {
            case 0: return ByteBuffer()
            case 1: return ByteBuffer(bytes: (0..<(Int(rng.next() % 3000) + 1)).map { _ in UInt8(truncatingIfNeeded: rng.next()) })
            case 2: return ByteBuffer(repeating: UInt8(ascii: "a") + UInt8(rng.next() % 26), count: h)
            case 3:
                var big = ByteBuffer()
                for j in 0..<(Int(rng.next() % 40) + 10) { var n = notes[(i + j) % count]; big.writeBuffer(&n) }
                return big
            default: return notes[i]
            }
        }
    }

    /// 4 connections find their own streams again; 40 (more than the pool keeps) mostly do not, so
    /// their frames mix continued streams with reset ones; without affinity every frame is reset.
    static let layouts: [(FrameEncoding, connections: Int, keepsAffinity: Bool)] = [
        (.deflate, 4, true), (.deflate, 40, true), (.deflate, 4, false), (.deflateBase64, 40, true), (.deflateBase64, 4, false),
    ]

    @Test(arguments: layouts)
    func interleavedConnectionsEachReadTheirOwnPayloads(encoding: FrameEncoding, connections: Int, keepsAffinity: Bool) throws {
        let pool = DeflaterPool(level: FrameEncoder.defaultCompressionLevel, keepsAffinity: keepsAffinity)
        let encoders = try (0..<connections).map { _ in try FrameEncoder(encoding: encoding, deflaters: pool) }
        let inflaters = InflaterPool(keepsAffinity: keepsAffinity)
        let decoders = try (0..<connections).map { _ in try FrameDecoder(encoding: encoding, inflaters: inflaters) }
        let frames = 2400 / connections
        let payloads = (0..<connections).map { Self.mixedPayloads(count: frames, seed: UInt64($0) + 7) }
        var next = [Int](repeating: 0, count: connections)
        var rng = SplitMix64(seed: 3)
        var sent = 0
        while sent < connections * frames {
            let c = Int(rng.next() % UInt64(connections))
            guard next[c] < frames else { continue }
            var line = try encoders[c].encode(payloads[c][next[c]])
            line.moveWriterIndex(to: line.writerIndex - 1)
            #expect(try decoders[c].decode(line: line) == payloads[c][next[c]], "connection \(c), frame \(next[c])")
            next[c] += 1
            sent += 1
        }
    }

    @Test(arguments: [true, false])
    func aDecoderWithoutItsOwnStreamFollowsReferences32KiBBack(keepsAffinity: Bool) throws {
        // One long-lived deflate stream (a pool of its own, always given back) whose frames repeat
        // pieces of a 24 KiB block sent earlier; the decoder's streams are reset and given the
        // connection's last 32 KiB for every frame when there is no affinity.
        let encoder = try FrameEncoder(encoding: .deflate, deflaters: DeflaterPool(level: 1))
        let decoder = try FrameDecoder(encoding: .deflate, inflaters: InflaterPool(keepsAffinity: keepsAffinity))
        var rng = SplitMix64(seed: 21)
        let block = (0..<(24 * 1024)).map { _ in UInt8(ascii: "a") + UInt8(rng.next() % 16) }
        var payloads = [ByteBuffer(bytes: block)]
        for i in 0..<40 {
            let from = Int(rng.next() % UInt64(block.count - 600))
            payloads.append(ByteBuffer(bytes: Array(block[from..<(from + 300 + i * 7)])))
        }
        var wire = 0
        for (i, payload) in payloads.enumerated() {
            var line = try encoder.encode(payload)
            wire += line.readableBytes
            line.moveWriterIndex(to: line.writerIndex - 1)
            #expect(try decoder.decode(line: line) == payload, "frame \(i)")
        }
        // The repeats cost a few bytes each: they were sent as references back, not again.
        let repeated = payloads.dropFirst().reduce(0) { $0 + $1.readableBytes }
        #expect(wire < payloads[0].readableBytes + repeated / 5, "\(wire) bytes on the wire")
    }

    @Test(arguments: [RecentBytes.Layout.ring, .contiguous])
    func recentBytesKeepExactlyTheLastBytes(layout: RecentBytes.Layout) {
        var rng = SplitMix64(seed: 8)
        for limit in [1, 7, 4096] {
            var recent = RecentBytes(limit: limit, layout: layout)
            var all: [UInt8] = []
            for _ in 0..<300 {
                let count = Int(rng.next() % UInt64(limit * 2 + 2))
                let bytes = (0..<count).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
                recent.append(ByteBuffer(bytes: bytes))
                all += bytes
                #expect(recent.contents == Array(all.suffix(limit)), "limit \(limit)")
            }
        }
    }

    @Test func connectionsEncodingOnManyThreadsAtOnceStayApart() throws {
        let threads = 6
        let payloads = (0..<threads).map { Self.mixedPayloads(count: 200, seed: UInt64($0) + 100) }
        let lines = Mutex([[ByteBuffer]](repeating: [], count: threads))
        let failures = Mutex(0)
        DispatchQueue.concurrentPerform(iterations: threads) { t in
            do {
                let encoder = try FrameEncoder(encoding: .deflate)
                let mine = try payloads[t].map { try encoder.encode($0) }
                lines.withLock { $0[t] = mine }
            } catch {
                failures.withLock { $0 += 1 }
            }
        }
        #expect(failures.withLock { $0 } == 0)
        for t in 0..<threads {
            let decoder = try FrameDecoder(encoding: .deflate)
            let sent = lines.withLock { $0[t] }
            #expect(sent.count == payloads[t].count)
            for (i, var line) in sent.enumerated() {
                line.moveWriterIndex(to: line.writerIndex - 1)
                #expect(try decoder.decode(line: line) == payloads[t][i], "thread \(t), frame \(i)")
            }
        }
    }

    @Test(arguments: [true, false])
    func aLineRefusedAsTooLongLeavesTheStreamInStep(keepsAffinity: Bool) throws {
        // Random bytes do not compress: 2,000 of them make a line over 1,500 bytes. With affinity
        // the encoder gets back the very stream that compressed them: it must not go on with it.
        let limits = FrameLimits(maximumLineLength: 1500)
        let pool = DeflaterPool(level: FrameEncoder.defaultCompressionLevel, keepsAffinity: keepsAffinity)
        let encoder = try FrameEncoder(encoding: .deflate, limits: limits, deflaters: pool)
        let decoder = try FrameDecoder(encoding: .deflate, limits: limits)
        var rng = SplitMix64(seed: 5)
        let notes = notePayloads(count: 20, seed: 5)
        for (i, note) in notes.enumerated() {
            if i % 3 == 1 {
                let noise = ByteBuffer(bytes: (0..<2000).map { _ in UInt8(truncatingIfNeeded: rng.next()) })
                #expect(throws: FrameError.self) { _ = try encoder.encode(noise) }
            }
            var line = try encoder.encode(note)
            line.moveWriterIndex(to: line.writerIndex - 1)
            #expect(try decoder.decode(line: line) == note, "frame \(i)")
        }
    }

    @Test(arguments: [true, false])
    func aPushAfterABigPageStillRefersBackIntoIt(keepsAffinity: Bool) throws {
        let pool = DeflaterPool(level: FrameEncoder.defaultCompressionLevel, keepsAffinity: keepsAffinity)
        let encoder = try FrameEncoder(encoding: .deflate, deflaters: pool)
        let decoder = try FrameDecoder(encoding: .deflate)
        var rng = SplitMix64(seed: 11)
        let note = ByteBuffer(string: notePayload(7, rng: &rng))
        var page = ByteBuffer()
        for _ in 0..<50 { var n = note; page.writeBuffer(&n) }
        let alone = try FrameEncoder(encoding: .deflate).encode(note).readableBytes
        for payload in [page, note] {
            var line = try encoder.encode(payload)
            let size = line.readableBytes
            line.moveWriterIndex(to: line.writerIndex - 1)
            #expect(try decoder.decode(line: line) == payload)
            if payload == note { #expect(size * 4 < alone, "after the page \(size) bytes, alone \(alone)") }
        }
    }
}
