import NIOCore
import ShareSyncWire

#if canImport(Glibc)
import Glibc
#endif

/// A seeded generator so every run measures the same frames.
private struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    mutating func next() -> UInt64 {
        self.state &+= 0x9E37_79B9_7F4A_7C15
        var z = self.state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

private let words = (
    "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut labore "
        + "et dolore magna aliqua garden river cloud kettle paper orange window bridge meeting budget draft "
        + "review travel summer winter project launch idea recipe coffee market"
).split(separator: " ").map(String.init)

/// A "Note" record as JSON, about 200-300 bytes.
private func note(_ index: Int, rng: inout SplitMix64) -> String {
    let title = (0..<3).map { _ in words[Int(rng.next() % UInt64(words.count))] }.joined(separator: " ")
    let body = (0..<Int(8 + rng.next() % 10)).map { _ in words[Int(rng.next() % UInt64(words.count))] }.joined(separator: " ")
    return #"{"recordName":"note-\#(index)","recordType":"Note","fields":{"title":{"value":"\#(title)","type":"STRING"},"#
        + #""body":{"value":"\#(body)","type":"STRING"},"date":{"value":\#(1_700_000_000_000 + index * 977),"type":"TIMESTAMP"}},"#
        + #""parent":{"recordName":"topic-\#(index % 7)","action":"NONE"}}"#
}

private func seconds() -> Double {
    var time = timespec()
    clock_gettime(CLOCK_MONOTONIC, &time)
    return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
}

private enum Mode: String, CaseIterable {
    case plain = "plain"
    case perFrameDeflate = "deflate, new context per frame"
    case sharedDeflate = "deflate shared + escape"
    case sharedBase64 = "deflate shared + base64"

    var encoding: FrameEncoding {
        switch self {
        case .plain: .plain
        case .perFrameDeflate, .sharedDeflate: .deflate
        case .sharedBase64: .deflateBase64
        }
    }
}

private struct Result {
    var mode: Mode
    var batch: Int
    var frames: Int
    var payloadBytes: Int
    var wireBytes: Int
    var encodeMBps: Double
    var decodeMBps: Double
}

private func measure(mode: Mode, batch: Int, frames: [ByteBuffer]) throws -> Result {
    let payloadBytes = frames.reduce(0) { $0 + $1.readableBytes }
    var best = (encode: Double.infinity, decode: Double.infinity)
    var wireBytes = 0
    for _ in 0..<3 {
        var lines: [ByteBuffer] = []
        lines.reserveCapacity(frames.count)
        let start = seconds()
        var encoder = try FrameEncoder(encoding: mode.encoding)
        for frame in frames {
            if mode == .perFrameDeflate { encoder = try FrameEncoder(encoding: .deflate) }
            var line = try encoder.encode(frame)
            line.moveWriterIndex(to: line.writerIndex - 1)
            lines.append(line)
        }
        let encoded = seconds()
        var decoder = try FrameDecoder(encoding: mode.encoding)
        var check = 0
        for line in lines {
            if mode == .perFrameDeflate { decoder = try FrameDecoder(encoding: .deflate) }
            check &+= try decoder.decode(line: line).readableBytes
        }
        let decoded = seconds()
        precondition(check == payloadBytes, "round trip lost bytes")
        wireBytes = lines.reduce(0) { $0 + $1.readableBytes + 1 }
        best = (min(best.encode, encoded - start), min(best.decode, decoded - encoded))
    }
    let megabytes = Double(payloadBytes) / 1e6
    return Result(
        mode: mode, batch: batch, frames: frames.count, payloadBytes: payloadBytes, wireBytes: wireBytes,
        encodeMBps: megabytes / best.encode, decodeMBps: megabytes / best.decode
    )
}

private func pad(_ text: String, _ width: Int) -> String {
    text.count >= width ? text : text + String(repeating: " ", count: width - text.count)
}

private func format(_ value: Double, digits: Int = 1) -> String {
    let scale = Double((0..<digits).reduce(1) { acc, _ in acc * 10 })
    return "\((value * scale).rounded() / scale)"
}

/// Bytes on the wire and throughput (MB/s of payload) per encoding, for frames that carry
/// batches of 1, 10 and 100 Note records (20,000 records per run).
func runWireBenchmark() throws {
    let records = 20_000
    var rng = SplitMix64(state: 2024)
    let notes = (0..<records).map { note($0, rng: &rng) }
    var results: [Result] = []
    for batch in [1, 10, 100] {
        let frames = stride(from: 0, to: records, by: batch).map { start in
            ByteBuffer(string: "[" + notes[start..<min(start + batch, records)].joined(separator: ",") + "]")
        }
        for mode in Mode.allCases {
            results.append(try measure(mode: mode, batch: batch, frames: frames))
        }
    }
    print("wire: \(records) Note records (avg \(notes.reduce(0) { $0 + $1.utf8.count } / records) B) per run, best of 3")
    print("| batch | encoding | frames | wire bytes | bytes/record | ratio | encode MB/s | decode MB/s |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results {
        let ratio = Double(r.wireBytes) / Double(r.payloadBytes)
        print(
            "| \(r.batch) | \(pad(r.mode.rawValue, 30)) | \(r.frames) | \(r.wireBytes) | "
                + "\(format(Double(r.wireBytes) / Double(records))) | \(format(ratio, digits: 3)) | "
                + "\(format(r.encodeMBps)) | \(format(r.decodeMBps)) |"
        )
    }
    let json = results.map { r in
        #"{"batch":\#(r.batch),"encoding":"\#(r.mode.rawValue)","frames":\#(r.frames),"payloadBytes":\#(r.payloadBytes),"#
            + #""wireBytes":\#(r.wireBytes),"encodeMBps":\#(format(r.encodeMBps)),"decodeMBps":\#(format(r.decodeMBps))}"#
    }
    print(#"{"scenario":"wire","records":\#(records),"results":[\#(json.joined(separator: ","))]}"#)
}
