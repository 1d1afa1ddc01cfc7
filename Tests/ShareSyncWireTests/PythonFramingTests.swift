import Foundation
import NIOCore
import ShareSyncTestSupport
import Testing
@testable import ShareSyncWire

/// protocol.md's Python reference for the frame encodings (`Examples/python/sharesync_framing.py`,
/// printed whole in protocol.md) against the Swift codec: the same lines for the same payloads, each
/// reads the other's, and the same refusals with the same codes.
@Suite struct PythonFramingTests {
    static var root: URL {
        var url = URL(fileURLWithPath: #filePath)
        for _ in 0..<3 { url.deleteLastPathComponent() }
        return url
    }

    static let scriptPath = "Examples/python/sharesync_framing.py"

    static let payloads: [ByteBuffer] = (0..<40).map { index in
        // JSON of growing size with repeats (the shared context matters) and the two escaped bytes.
        let title = String(repeating: "Hello\nworld \u{1B} \(index) ", count: index % 7 + 1)
        let escaped = title.replacingOccurrences(of: "\n", with: "\\n").replacingOccurrences(of: "\u{1B}", with: "\\u001b")
        return ByteBuffer(string: #"{"recordName":"note-\#(index)","recordType":"Note","fields":{"title":{"type":"STRING","value":"\#(escaped)"}}}"#)
    } + [ByteBuffer(), ByteBuffer(string: "{}"), ByteBuffer(bytes: [0x1B, 0x0A, 0x1B, 0x1B, 0x0A, 0x0A])]

    /// Lines that break a rule, for an encoding, with the code protocol.md gives.
    static let refusals: [(name: String, encoding: FrameEncoding, lineHex: String, code: String)] = [
        // "qq4FAA==" is {} deflated; "qq4FAB==" has the same bytes with non-zero pad bits.
        ("non-zero pad bits", .deflateBase64, Array("qq4FAB==".utf8).hex, "invalidEncoding"),
        ("missing padding", .deflateBase64, Array("qq4FAA".utf8).hex, "invalidEncoding"),
        ("not base64", .deflateBase64, Array("qq4F*A==".utf8).hex, "invalidEncoding"),
        ("bad escape", .deflate, "1b03", "invalidEncoding"),
        // {} deflated with Z_FINISH: a block marked final.
        ("final block", .deflate, "ab ae 05 00".replacingOccurrences(of: " ", with: ""), "inflateFailed"),
        ("not deflate", .deflate, "ffffffff", "inflateFailed"),
    ]

    @Test("protocol.md prints the reference file byte for byte")
    func protocolShowsTheFile() throws {
        let script = try String(contentsOf: Self.root.appendingPathComponent(Self.scriptPath), encoding: .utf8)
        let text = try String(contentsOf: Self.root.appendingPathComponent("protocol.md"), encoding: .utf8)
        let section = try #require(text.range(of: "#### Python reference"))
        let open = try #require(text[section.upperBound...].range(of: "```python\n"))
        let close = try #require(text[open.upperBound...].range(of: "\n```\n"))
        #expect(String(text[open.upperBound..<close.lowerBound]) + "\n" == script)
    }

    @Test("the Python reference and the Swift codec write the same lines, read each other's and refuse the same lines")
    func sameBytesAndRefusals() async throws {
        try await blocking {
            let encodings: [FrameEncoding] = [.deflate, .deflateBase64, .plain]
            let plainable = Self.payloads.filter { !$0.readableBytesView.contains(0x0A) }
            func payloads(_ encoding: FrameEncoding) -> [ByteBuffer] { encoding == .plain ? plainable : Self.payloads }
            // Encoders with pools of their own: one gets its stream back every frame (one long-lived
            // stream), the other never does (each frame reset and primed with 4 KiB of history).
            func swiftStream(_ encoding: FrameEncoding, keepsAffinity: Bool) throws -> String {
                let pool = DeflaterPool(level: FrameEncoder.defaultCompressionLevel, keepsAffinity: keepsAffinity)
                let encoder = try FrameEncoder(encoding: encoding, deflaters: pool)
                var out = ByteBuffer()
                for payload in payloads(encoding) { try encoder.encode(payload, into: &out) }
                return out.readableBytesView.hex
            }
            var swiftStreams: [String: String] = [:]
            var swiftPerFrame: [String: String] = [:]
            for encoding in encodings {
                swiftStreams[encoding.rawValue] = try swiftStream(encoding, keepsAffinity: true)
                swiftPerFrame[encoding.rawValue] = try swiftStream(encoding, keepsAffinity: false)
            }
            let input: [String: Any] = [
                "payloads": Self.payloads.map { $0.readableBytesView.hex },
                "plainPayloads": plainable.map { $0.readableBytesView.hex },
                "swift": swiftStreams,
                "swiftPerFrame": swiftPerFrame,
                "refusals": Self.refusals.map { ["encoding": $0.encoding.rawValue, "line": $0.lineHex] },
            ]
            let driver = """
                import importlib.util, json, sys
                spec = importlib.util.spec_from_file_location("framing", sys.argv[1])
                f = importlib.util.module_from_spec(spec); spec.loader.exec_module(f)
                data = json.loads(open(sys.argv[2]).read())
                out = {"encoded": {}, "perFrame": {}, "decoded": {}, "decodedPerFrame": {}, "refused": []}
                for enc in ["deflate", "deflate-base64", "plain"]:
                    e = f.Encoder(enc)
                    items = data["plainPayloads"] if enc == "plain" else data["payloads"]
                    out["encoded"][enc] = "".join(e.encode(bytes.fromhex(p)).hex() for p in items)
                    e = f.Encoder(enc, history=4096)
                    out["perFrame"][enc] = "".join(e.encode(bytes.fromhex(p)).hex() for p in items)
                    d = f.Decoder(enc)
                    lines = bytes.fromhex(data["swift"][enc]).split(b"\\n")[:-1]
                    out["decoded"][enc] = [d.decode(line).hex() for line in lines]
                    d = f.Decoder(enc)
                    lines = bytes.fromhex(data["swiftPerFrame"][enc]).split(b"\\n")[:-1]
                    out["decodedPerFrame"][enc] = [d.decode(line).hex() for line in lines]
                for r in data["refusals"]:
                    try:
                        f.Decoder(r["encoding"]).decode(bytes.fromhex(r["line"])); out["refused"].append("accepted")
                    except f.FrameError as error:
                        out["refused"].append(error.code)
                big = f.Encoder("deflate").encode(b"0" * 5000)[:-1]
                try:
                    f.Decoder("deflate", max_frame=4096).decode(big); out["bomb"] = "accepted"
                except f.FrameError as error:
                    out["bomb"] = error.code
                print(json.dumps(out))
                """
            let inputFile = FileManager.default.temporaryDirectory.appendingPathComponent("framing-\(UUID().uuidString).json")
            try JSONSerialization.data(withJSONObject: input).write(to: inputFile)
            defer { try? FileManager.default.removeItem(at: inputFile) }
            let outcome = try ChildProcess.run(
                "/usr/bin/env", ["python3", "-c", driver, Self.root.appendingPathComponent(Self.scriptPath).path, inputFile.path],
                timeout: 60)
            try #require(outcome.status == 0, "\(outcome.stderr)")
            let result = try #require(try JSONSerialization.jsonObject(with: Data(outcome.stdout.utf8)) as? [String: Any])
            let encoded = try #require(result["encoded"] as? [String: String])
            let decoded = try #require(result["decoded"] as? [String: [String]])
            let perFrame = try #require(result["perFrame"] as? [String: String])
            let decodedPerFrame = try #require(result["decodedPerFrame"] as? [String: [String]])
            for encoding in encodings {
                // Byte for byte: Python's lines are Swift's lines.
                #expect(encoded[encoding.rawValue] == swiftStreams[encoding.rawValue], "\(encoding)")
                // Python reads Swift's lines, and Swift reads Python's.
                #expect(decoded[encoding.rawValue] == payloads(encoding).map { $0.readableBytesView.hex }, "\(encoding)")
                let fromPython = try decodeLines(ByteBuffer(hex: encoded[encoding.rawValue] ?? ""), encoding: encoding)
                #expect(fromPython == payloads(encoding), "\(encoding)")
                // The same for frames each compressed by a fresh stream primed with 4 KiB of history.
                #expect(perFrame[encoding.rawValue] == swiftPerFrame[encoding.rawValue], "\(encoding), per frame")
                #expect(decodedPerFrame[encoding.rawValue] == payloads(encoding).map { $0.readableBytesView.hex }, "\(encoding), per frame")
                let fromPythonPerFrame = try decodeLines(ByteBuffer(hex: perFrame[encoding.rawValue] ?? ""), encoding: encoding)
                #expect(fromPythonPerFrame == payloads(encoding), "\(encoding), per frame")
            }
            // Both refuse the same lines with the codes protocol.md names.
            let refused = try #require(result["refused"] as? [String])
            for (refusal, pythonCode) in zip(Self.refusals, refused) {
                #expect(pythonCode == refusal.code, "Python, \(refusal.name)")
                let decoder = try FrameDecoder(encoding: refusal.encoding)
                do throws(FrameError) {
                    _ = try decoder.decode(line: ByteBuffer(hex: refusal.lineHex))
                    Issue.record("Swift accepted: \(refusal.name)")
                } catch {
                    #expect(error.code.rawValue == refusal.code, "Swift, \(refusal.name)")
                }
            }
            #expect(result["bomb"] as? String == "frameTooLarge")
        }
    }
}

extension Sequence where Element == UInt8 {
    fileprivate var hex: String { map { String(format: "%02x", $0) }.joined() }
}
