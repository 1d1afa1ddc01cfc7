import Foundation
import ShareSyncFuzzing
import Testing

/// Every seed in `fuzz/corpus/<target>/` and every input libFuzzer ever crashed on, saved by
/// `fuzz/run.sh` in `fuzz/crashes/<target>/`, run through its fuzz target in the ordinary build: a
/// crash found once stays a regression test.
@Suite("Fuzz corpus and crashes")
struct FuzzRegressionTests {
    static let fuzzDirectory = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("fuzz")

    static func inputs(of target: FuzzTarget, in folder: String) -> [URL] {
        let directory = fuzzDirectory.appendingPathComponent(folder).appendingPathComponent(target.rawValue)
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []
        return names.filter { !$0.hasPrefix(".") }.sorted().map { directory.appendingPathComponent($0) }
    }

    @Test("every seed and every saved crash runs through its target without a failure", arguments: FuzzTarget.allCases)
    func corpusAndCrashes(target: FuzzTarget) throws {
        let seeds = Self.inputs(of: target, in: "corpus")
        #expect(!seeds.isEmpty, "no seeds in fuzz/corpus/\(target.rawValue)")
        for file in seeds + Self.inputs(of: target, in: "crashes") {
            let data = try Data(contentsOf: file)
            #expect(throws: Never.self, "\(file.lastPathComponent)") { try target.run(data) }
        }
    }

    @Test("empty and one-byte inputs are harmless", arguments: FuzzTarget.allCases)
    func tinyInputs(target: FuzzTarget) throws {
        try target.run([UInt8]())
        for byte in [0x00, 0x0A, 0x1B, 0x7B, 0x80, 0xFF] as [UInt8] { try target.run([byte]) }
    }
}
