import NIOCore
import NIOEmbedded
@testable import ShareSyncWire

/// A seeded generator so random splits and garbage are reproducible.
struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { self.state = seed }
    mutating func next() -> UInt64 {
        self.state &+= 0x9E37_79B9_7F4A_7C15
        var z = self.state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

private let words = [
    "alpha", "sync", "share", "record", "zone", "note", "garden", "river", "cloud", "token",
    "owner", "reader", "change", "field", "value", "kettle", "paper", "orange", "window", "bridge",
]

/// A "Note" record as JSON, about 200 bytes.
func notePayload(_ index: Int, rng: inout SplitMix64) -> String {
    let body = (0..<8).map { _ in words[Int(rng.next() % UInt64(words.count))] }.joined(separator: " ")
    return #"{"recordName":"note-\#(index)","recordType":"Note","fields":{"title":{"value":"Note \#(index)","type":"STRING"},"#
        + #""body":{"value":"\#(body)","type":"STRING"},"date":{"value":\#(1_700_000_000_000 + index),"type":"TIMESTAMP"}},"#
        + #""parent":{"recordName":"topic-1","action":"NONE"}}"#
}

func notePayloads(count: Int, seed: UInt64 = 42) -> [ByteBuffer] {
    var rng = SplitMix64(seed: seed)
    return (0..<count).map { ByteBuffer(string: notePayload($0, rng: &rng)) }
}

/// Encodes payloads into one stream of lines with a fresh encoder.
func encodeStream(
    _ payloads: [ByteBuffer], encoding: FrameEncoding, limits: FrameLimits = FrameLimits(),
    compressionLevel: Int32 = FrameEncoder.defaultCompressionLevel
) throws -> ByteBuffer {
    let encoder = try FrameEncoder(encoding: encoding, limits: limits, compressionLevel: compressionLevel)
    var out = ByteBuffer()
    for payload in payloads { try encoder.encode(payload, into: &out) }
    return out
}

/// Feeds `stream` to a fresh decoder channel in the given chunk sizes and returns what came out.
func decodeOnChannel(
    _ stream: ByteBuffer,
    encoding: FrameEncoding,
    limits: FrameLimits = FrameLimits(),
    chunks: (inout SplitMix64) -> Int,
    seed: UInt64 = 7
) throws -> [ByteBuffer] {
    let channel = EmbeddedChannel()
    try channel.pipeline.syncOperations.addHandler(FrameCodec.decoderHandler(encoding: encoding, limits: limits))
    var rng = SplitMix64(seed: seed)
    var input = stream
    var output: [ByteBuffer] = []
    while input.readableBytes > 0 {
        let size = min(max(1, chunks(&rng)), input.readableBytes)
        try channel.writeInbound(input.readSlice(length: size)!)
        while let payload = try channel.readInbound(as: ByteBuffer.self) { output.append(payload) }
    }
    _ = try channel.finish()
    return output
}

/// Decodes a stream with the pure decoder, line by line, returning payloads or the first error.
func decodeLines(_ stream: ByteBuffer, encoding: FrameEncoding, limits: FrameLimits = FrameLimits()) throws -> [ByteBuffer] {
    let decoder = try FrameDecoder(encoding: encoding, limits: limits)
    var rest = stream
    var output: [ByteBuffer] = []
    while let newline = rest.readableBytesView.firstIndex(of: 0x0A) {
        let line = rest.readSlice(length: newline - rest.readerIndex)!
        rest.moveReaderIndex(forwardBy: 1)
        output.append(try decoder.decode(line: line))
    }
    return output
}

extension ByteBuffer {
    init(hex: String) {
        var bytes: [UInt8] = []
        var index = hex.startIndex
        while index < hex.endIndex {
            let next = hex.index(index, offsetBy: 2)
            bytes.append(UInt8(hex[index..<next], radix: 16)!)
            index = next
        }
        self.init(bytes: bytes)
    }

    var hex: String { self.readableBytesView.map { $0 < 16 ? "0" + String($0, radix: 16) : String($0, radix: 16) }.joined() }
}
