import Foundation
import ShareSyncCore
import Testing

/// `Rule`'s constants and protocol.md's "Rules" list are the same set, and no source passes a rule
/// as a string literal (a misspelt rule cannot compile).
@Suite struct RuleTests {
    static var root: URL {
        var url = URL(fileURLWithPath: #filePath)
        for _ in 0..<3 { url.deleteLastPathComponent() }
        return url
    }

    /// `name` → raw value of every `public static let name = Rule(rawValue: "…")` in Rule.swift.
    static func constants() throws -> [String: String] {
        let source = try String(contentsOf: root.appending(path: "Sources/ShareSyncCore/Rule.swift"), encoding: .utf8)
        var found: [String: String] = [:]
        for line in source.split(separator: "\n") {
            let text = line.trimmingCharacters(in: .whitespaces)
            guard text.hasPrefix("public static let "), let open = text.range(of: "Rule(rawValue: \""),
                let close = text[open.upperBound...].firstIndex(of: "\"")
            else { continue }
            let name = text.dropFirst("public static let ".count).prefix { $0 != " " }
            found[String(name)] = String(text[open.upperBound..<close])
        }
        return found
    }

    /// The backquoted names in the bullet lines of protocol.md's "Rules" section.
    static func documented() throws -> [String] {
        let text = try String(contentsOf: root.appending(path: "protocol.md"), encoding: .utf8)
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        guard let start = lines.firstIndex(of: "#### Rules") else { return [] }
        var names: [String] = []
        var inBullet = false
        for line in lines[(start + 1)...] {
            if line.hasPrefix("#") { break }
            if line.hasPrefix("- ") { inBullet = true } else if !line.hasPrefix("  ") { inBullet = false }
            guard inBullet else { continue }
            let parts = line.split(separator: "`", omittingEmptySubsequences: false)
            names += stride(from: 1, to: parts.count, by: 2).map { String(parts[$0]) }
        }
        return names
    }

    @Test func everyConstantIsSpelledAsItsNameAndListedInProtocolMdOnce() throws {
        let constants = try Self.constants()
        #expect(constants.count > 100)
        for (name, raw) in constants { #expect(name == raw, "Rule.\(name) is spelt \(raw) on the wire") }
        let documented = try Self.documented()
        #expect(Set(documented) == Set(constants.keys), """
            only in Rule.swift: \(Set(constants.keys).subtracting(documented).sorted()); \
            only in protocol.md: \(Set(documented).subtracting(constants.keys).sorted())
            """)
        let repeated = Dictionary(grouping: documented, by: { $0 }).filter { $0.value.count > 1 }.keys.sorted()
        #expect(repeated.isEmpty, "listed twice in protocol.md: \(repeated)")
    }

    @Test func noSourcePassesARuleAsAStringLiteral() throws {
        let sources = Self.root.appending(path: "Sources")
        let files = FileManager.default.enumerator(at: sources, includingPropertiesForKeys: nil)?
            .compactMap { $0 as? URL }.filter { $0.pathExtension == "swift" && $0.lastPathComponent != "Rule.swift" } ?? []
        #expect(files.count > 50)
        var offenders: [String] = []
        for file in files {
            let text = try String(contentsOf: file, encoding: .utf8)
            for (number, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated()
            where line.contains("rule: \"") || line.contains("rule == \"") {
                offenders.append("\(file.lastPathComponent):\(number + 1)")
            }
        }
        #expect(offenders.isEmpty, "rules as string literals: \(offenders)")
    }

    @Test func aRuleFromAPeerIsKeptAsSentAndPrintedInTheErrorDescription() {
        let error = ShareSyncError(.invalidArguments, "newer owner", rule: Rule(rawValue: "someFutureRule"))
        #expect(error.rule?.rawValue == "someFutureRule")
        #expect(error.rule != .recordSize)
        #expect(error.description == "invalidArguments: newer owner; rule someFutureRule")
        #expect(ShareSyncError(.limitExceeded, "big", rule: .recordSize).rule == Rule(rawValue: "recordSize"))
    }
}
