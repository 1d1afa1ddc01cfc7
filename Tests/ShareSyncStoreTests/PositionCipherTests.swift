import Foundation
import Testing

import ShareSyncCore
@testable import ShareSyncStore

/// The byte-by-byte base64url of sealed tokens against the path it replaced: Foundation's base64 with
/// three `replacingOccurrences` each way (obviously right, and 19 % of the owner's CPU in a fan-out).
@Suite("Sealed change tokens: base64url byte by byte, as the replacingOccurrences path did")
struct PositionCipherTests {
    /// The old encoding of a sealed block.
    static func oldBase64url(_ block: [UInt8]) -> String {
        Data(block).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
    }

    /// The old decoding of a token's text (nil where it did not decode).
    static func oldDecode(_ text: Substring) -> Data? {
        Data(base64Encoded: text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/") + "==")
    }

    @Test("random blocks encode to the same text, and decode back to the same bytes", arguments: [1, 2, 3])
    func randomBlocks(seed: UInt64) {
        var random = SeededGenerator(seed: seed)
        for _ in 0..<2_000 {
            let block = (0..<16).map { _ in UInt8.random(in: 0...255, using: &random) }
            let text = PositionCipher.base64url(Data(block).base64EncodedData())
            #expect(text == Self.oldBase64url(block), "\(block)")
            #expect(text.utf8.count == 22)
            #expect(Data(base64Encoded: PositionCipher.base64(fromURL: Substring(text))) == Data(block))
        }
    }

    @Test("random 22-character texts (base64url, base64's own + / =, spaces, non-ASCII, - and _ with a combining mark) decode exactly when they did, to the same bytes", arguments: [4, 5, 6])
    func randomTexts(seed: UInt64) {
        var random = SeededGenerator(seed: seed)
        let others: [Character] = ["+", "/", "=", " ", "é", "\n", "-\u{301}", "_\u{301}"]
        let alphabet: [Character] = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") + others
        var decoded = 0
        for round in 0..<4_000 {
            // Mostly base64url characters (so that many decode); every other kind now and then.
            let text = String((0..<22).map { _ in
                alphabet[Int.random(in: 0..<(round % 4 == 0 ? alphabet.count : 64), using: &random)]
            })
            let new = Data(base64Encoded: PositionCipher.base64(fromURL: Substring(text)))
            #expect(new == Self.oldDecode(Substring(text)), "\(text)")
            if new != nil { decoded += 1 }
        }
        // Both outcomes were tried: texts that decode, and texts that do not.
        #expect(decoded > 100 && decoded < 4_000, "\(decoded)")
    }

    @Test("a cipher opens what it seals, and refuses a text that is not one of its tokens as changeTokenFormat")
    func roundTrip() throws {
        let cipher = try PositionCipher(hex: PositionCipher.newKeyHex())
        var random = SeededGenerator(seed: 7)
        for _ in 0..<1_000 {
            let position = ServerChangeToken.Position(
                sequence: Int64.random(in: 0...PositionCipher.maximumSequence, using: &random),
                scanSnapshot: Bool.random(using: &random) ? nil : Int64.random(in: 0...PositionCipher.maximumSequence, using: &random),
                epoch: UInt16.random(in: 0...0xFFFE, using: &random))
            let sealed = try cipher.seal(position)
            let bytes = try #require(Self.oldDecode(Substring(sealed)), "\(sealed)")
            #expect(sealed == Self.oldBase64url(Array(bytes)))
            let opened = try cipher.open(Substring(sealed))
            #expect(opened == position)
        }
        for text in ["", "short", String(repeating: "A", count: 22), String(repeating: "é", count: 11), "AAAAAAAAAAAAAAAAAAAA=="] {
            #expect(Self.refusal(cipher, text) == .changeTokenFormat, "\(text)")
        }
    }

    /// The rule `cipher` refuses `text` with (nil if it opens it).
    static func refusal(_ cipher: PositionCipher, _ text: String) -> Rule? {
        do {
            _ = try cipher.open(Substring(text))
            return nil
        } catch {
            return error.rule
        }
    }
}
