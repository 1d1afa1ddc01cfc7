// The fuzz driver of issue 10, two programs from one file:
//
// - Built with `-sanitize=fuzzer -DFUZZING` (fuzz/run.sh), it is a libFuzzer binary. SwiftPM links an
//   executable's `main` to the symbol `sharesync_fuzz_main` (`--defsym`), so that symbol is defined
//   here and hands over to libFuzzer's `LLVMFuzzerRunDriver` after picking the target named by
//   SHARESYNC_FUZZ_TARGET; `fuzzerTestOneInput` runs one input through it, and a broken invariant
//   traps, which libFuzzer reports as a crash and saves.
// - Built normally, it replays files: `sharesync-fuzz TARGET FILE...` runs each file (or each file in
//   a directory) through the target and exits 1 if any fails.
import Foundation
import ShareSyncFuzzing

#if FUZZING

nonisolated(unsafe) private var selectedTarget: FuzzTarget?

typealias Arguments = UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>

@_silgen_name("LLVMFuzzerRunDriver")
func LLVMFuzzerRunDriver(
    _ argc: UnsafeMutablePointer<CInt>, _ argv: Arguments,
    _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt
) -> CInt

@_cdecl("sharesync_fuzz_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    let name = ProcessInfo.processInfo.environment["SHARESYNC_FUZZ_TARGET"] ?? ""
    guard let target = FuzzTarget(rawValue: name) else {
        let names = FuzzTarget.allCases.map(\.rawValue).joined(separator: ", ")
        FileHandle.standardError.write(Data("sharesync-fuzz: set SHARESYNC_FUZZ_TARGET to one of: \(names)\n".utf8))
        exit(2)
    }
    selectedTarget = target
    var count = argc
    var arguments = argv
    return LLVMFuzzerRunDriver(&count, &arguments, fuzzerTestOneInput)
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzerTestOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard let target = selectedTarget else { return 0 }
    let bytes = UnsafeRawBufferPointer(start: data, count: data == nil ? 0 : size)
    do {
        try target.run(bytes)
    } catch {
        fatalError("\(target.rawValue): \(error)")
    }
    return 0
}

#else

@main
struct ReplayDriver {
    static func main() {
        let arguments = CommandLine.arguments.dropFirst()
        guard let name = arguments.first, let target = FuzzTarget(rawValue: name), arguments.count > 1 else {
            let names = FuzzTarget.allCases.map(\.rawValue).joined(separator: "|")
            FileHandle.standardError.write(Data("usage: sharesync-fuzz \(names) FILE_OR_DIRECTORY...\n".utf8))
            exit(2)
        }
        var failures = 0
        var count = 0
        for path in arguments.dropFirst() {
            for file in files(at: path) {
                count += 1
                guard let data = FileManager.default.contents(atPath: file) else {
                    print("\(file): cannot read")
                    failures += 1
                    continue
                }
                do {
                    try target.run(data)
                } catch {
                    print("\(file): \(error)")
                    failures += 1
                }
            }
        }
        print("sharesync-fuzz \(target.rawValue): \(count) inputs, \(failures) failures")
        exit(failures == 0 ? 0 : 1)
    }

    /// The file itself, or the regular files in a directory (sorted).
    static func files(at path: String) -> [String] {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), isDirectory.boolValue else { return [path] }
        let names = (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []
        return names.sorted().map { path + "/" + $0 }.filter { !$0.hasSuffix("/.gitkeep") }
    }
}

#endif
