import Foundation
import ShareSyncCore
import ShareSyncNode
import ShareSyncStore
import ShareSyncWire
import Testing

/// Replays the client lines of the transcript in `protocol.md` against a live server in `plain`
/// mode, inside TLS (with the participant's certificate) and in the loopback cleartext debug mode,
/// with the key, nonce, signature and share URL computed at run time, and checks that each server
/// line has the shape the document shows.
@Suite("protocol.md transcript")
struct TranscriptTests {
    static var protocolPath: String {
        var url = URL(fileURLWithPath: #filePath)
        for _ in 0..<3 { url.deleteLastPathComponent() }
        return url.appendingPathComponent("protocol.md").path
    }

    /// The lines of the fenced block after the "### Transcript" heading.
    static func transcript() throws -> [String] {
        let text = try String(contentsOfFile: protocolPath, encoding: .utf8)
        let section = try #require(text.range(of: "### Transcript"))
        let rest = text[section.upperBound...]
        let open = try #require(rest.range(of: "```text\n"))
        let close = try #require(rest[open.upperBound...].range(of: "\n```"))
        return rest[open.upperBound..<close.lowerBound].split(separator: "\n").map(String.init)
    }

    static func object(_ line: String) -> [String: Any]? {
        try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
    }

    static func render(_ object: [String: Any]) throws -> String {
        String(decoding: try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes]), as: UTF8.self)
    }

    @Test("the client lines of protocol.md's transcript, replayed, get answers of the documented shape", arguments: [true, false])
    func replay(overTLS: Bool) async throws {
        let lines = try Self.transcript()
        #expect(lines.count > 10)
        let owner = try await TestOwner.start(OwnerServer.Configuration(allowCleartext: !overTLS))
        let b = NodeIdentity.generate()
        let (url, _) = try owner.shareTopic(invite: [(b, .readWrite)])
        let client = try await RawClient.connect(port: owner.server.port, overTLS ? .tls(b) : .cleartext)
        let nonce = AuthTranscript.makeNonce()
        var challenge: [String: Any] = [:]
        var session: [String] = []
        for line in lines {
            if line.hasPrefix("# ") {
                if line.contains("the owner saves") { try owner.saveNote("note-1", title: "Milk") }
                session.append(line)
                continue
            }
            if line.hasPrefix("C: ") {
                var sent = String(line.dropFirst(3))
                if var object = Self.object(sent) {
                    if object["op"] as? String == "hello" {
                        object["publicKey"] = b.publicKeyBase64
                        object["nonce"] = nonce
                    }
                    if object["op"] as? String == "authenticate" {
                        object["signature"] = b.signBase64(
                            AuthTranscript.client(
                                serverNonce: challenge["nonce"] as! String, clientNonce: nonce, serverKey: challenge["publicKey"] as! String))
                    }
                    if object["url"] != nil { object["url"] = url }
                    sent = try Self.render(object)
                }
                session.append("C: " + sent)
                try await client.send(sent)
            } else if line.hasPrefix("S: ") {
                let expected = String(line.dropFirst(3))
                let got = try #require(try await client.line(10), "connection closed; expected \(expected)")
                session.append("S: " + got)
                guard let want = Self.object(expected) else {
                    #expect(got == expected)
                    continue
                }
                let actual = try #require(Self.object(got), "not JSON: \(got)")
                #expect(Set(actual.keys) == Set(want.keys), "\(got) vs \(expected)")
                for key in ["op", "push", "id"] { #expect("\(actual[key] ?? "-")" == "\(want[key] ?? "-")") }
                if let ok = want["ok"] as? [String: Any] {
                    #expect(Set((actual["ok"] as? [String: Any] ?? [:]).keys) == Set(ok.keys), "\(got)")
                }
                if actual["op"] as? String == "challenge" { challenge = actual }
            }
        }
        print("transcript session:\n" + session.joined(separator: "\n"))
        await client.close()
        try await owner.stop()
    }
}
