import Foundation
import NIOPosix
import Synchronization

/// A program started by a test: its output is read while it runs, and it is killed when the test
/// ends, whatever happens (``ChildProcess/kill()``, and `deinit` as a last resort).
///
/// ```swift
/// let daemon = try ChildProcess.start(ChildProcess.sharesyncBinary(), ["run", "--home", home])
/// defer { daemon.kill() }
/// let line = try daemon.waitForLine(containing: "listening on", timeout: 30)
/// ```
public final class ChildProcess: Sendable {
    /// What a finished program left.
    public struct Outcome: Sendable {
        public var status: Int32
        public var stdout: String
        public var stderr: String
        /// Whether it exited (as opposed to dying of a signal).
        public var exited: Bool
    }

    private struct Buffers {
        var stdout = Data()
        var stderr = Data()
    }

    private let process: Process
    private let buffers = Mutex(Buffers())
    private let stdoutDone = Mutex(false)
    private let stderrDone = Mutex(false)

    private init(process: Process) { self.process = process }

    /// The process ID.
    public var pid: Int32 { process.processIdentifier }

    private static let spawning = Mutex(())

    /// Starts a program; its standard input is closed.
    public static func start(_ executable: String, _ arguments: [String], environment: [String: String]? = nil)
        throws -> ChildProcess
    {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        if let environment { process.environment = environment }
        let out = Pipe()
        let err = Pipe()
        // Children started at the same time by other tests must not inherit these pipes (they would
        // hold the write ends open and this child's output would never end). The child still gets
        // them as 1 and 2: dup2 clears close-on-exec.
        for handle in [out.fileHandleForReading, out.fileHandleForWriting, err.fileHandleForReading, err.fileHandleForWriting] {
            _ = fcntl(handle.fileDescriptor, F_SETFD, FD_CLOEXEC)
        }
        process.standardOutput = out
        process.standardError = err
        process.standardInput = FileHandle(forReadingAtPath: "/dev/null")
        let child = ChildProcess(process: process)
        // Each pipe is read to its end by a thread of its own with blocking reads (FileHandle's
        // readabilityHandler was seen to stop early on a loaded machine, cutting outputs short).
        Self.drain(out.fileHandleForReading.fileDescriptor, into: { [weak child] data in
            child?.buffers.withLock { $0.stdout.append(data) }
        }, done: { [weak child] in child?.stdoutDone.withLock { $0 = true } })
        Self.drain(err.fileHandleForReading.fileDescriptor, into: { [weak child] data in
            child?.buffers.withLock { $0.stderr.append(data) }
        }, done: { [weak child] in child?.stderrDone.withLock { $0 = true } })
        // One spawn at a time: Foundation's Process.run was seen to crash (a memmove in it) when
        // tests on several threads started children at once.
        try Self.spawning.withLock { _ in try process.run() }
        ChildRegistry.shared.add(child)
        return child
    }

    /// Runs a program to its end (killed after `timeout` seconds) and returns what it left.
    public static func run(_ executable: String, _ arguments: [String], timeout: Double = 60) throws -> Outcome {
        let child = try start(executable, arguments)
        defer { child.kill() }
        return try child.waitForExit(timeout: timeout)
    }

    /// Everything written to standard output so far.
    public var stdout: String { String(decoding: buffers.withLock { $0.stdout }, as: UTF8.self) }
    /// Everything written to standard error so far.
    public var stderr: String { String(decoding: buffers.withLock { $0.stderr }, as: UTF8.self) }
    /// Whether the program is still running.
    public var isRunning: Bool { process.isRunning }

    /// Reads `fd` until its end on a thread of its own, handing each chunk to `append`; then `done`.
    private static func drain(_ fd: Int32, into append: @escaping @Sendable (Data) -> Void, done: @escaping @Sendable () -> Void) {
        let thread = Thread {
            var buffer = [UInt8](repeating: 0, count: 65_536)
            while true {
                let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                if n > 0 {
                    append(Data(buffer[0..<n]))
                } else if n < 0 && errno == EINTR {
                    continue
                } else {
                    break
                }
            }
            done()
        }
        thread.start()
    }

    /// Waits for a complete line of standard output containing `text`; fails after `timeout` seconds
    /// or if the program exits first.
    public func waitForLine(containing text: String, timeout: Double) throws -> String {
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            let lines = stdout.split(separator: "\n", omittingEmptySubsequences: false).dropLast()
            if let line = lines.first(where: { $0.contains(text) }) { return String(line) }
            if !process.isRunning, stdoutDone.withLock({ $0 }) {
                throw ChildProcessError.exitedEarly(status: process.terminationStatus, stdout: stdout, stderr: stderr)
            }
            guard Date() < deadline else {
                throw ChildProcessError.timedOut(waitingFor: text, stdout: stdout, stderr: stderr)
            }
            Thread.sleep(forTimeInterval: 0.02)
        }
    }

    /// Waits until standard error (a daemon's log) contains `text`; returns the line. Fails after
    /// `timeout` seconds or if the program exits first.
    public func waitForErrorLine(containing text: String, timeout: Double) throws -> String {
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            let lines = stderr.split(separator: "\n", omittingEmptySubsequences: false).dropLast()
            if let line = lines.first(where: { $0.contains(text) }) { return String(line) }
            if !process.isRunning, stderrDone.withLock({ $0 }) {
                throw ChildProcessError.exitedEarly(status: process.terminationStatus, stdout: stdout, stderr: stderr)
            }
            guard Date() < deadline else {
                throw ChildProcessError.timedOut(waitingFor: text, stdout: stdout, stderr: stderr)
            }
            Thread.sleep(forTimeInterval: 0.005)
        }
    }

    /// Waits for the program to exit and its output to be read; kills it after `timeout` seconds.
    public func waitForExit(timeout: Double) throws -> Outcome {
        let deadline = Date().addingTimeInterval(timeout)
        var exitedAt: Date?
        while process.isRunning || !stdoutDone.withLock({ $0 }) || !stderrDone.withLock({ $0 }) {
            if !process.isRunning {
                // The pipes' end of file comes once the reading threads get to it, which on a loaded
                // machine can take seconds (a shorter wait here cut outputs short). Only a grandchild
                // holding the pipes open would make this wait run out.
                if let exitedAt, Date().timeIntervalSince(exitedAt) > 20 { break }
                if exitedAt == nil { exitedAt = Date() }
            }
            guard Date() < deadline else {
                kill()
                throw ChildProcessError.timedOut(waitingFor: "exit", stdout: stdout, stderr: stderr)
            }
            Thread.sleep(forTimeInterval: 0.01)
        }
        return Outcome(
            status: process.terminationStatus, stdout: stdout, stderr: stderr,
            exited: process.terminationReason == .exit)
    }

    /// Sends a signal (SIGTERM by default).
    public func signal(_ signal: Int32 = SIGTERM) {
        if process.isRunning { Foundation.kill(process.processIdentifier, signal) }
    }

    /// Kills the program (SIGKILL) if it still runs and waits for it.
    public func kill() {
        if process.isRunning {
            Foundation.kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
        ChildRegistry.shared.remove(self)
    }

    deinit {
        if process.isRunning { Foundation.kill(process.processIdentifier, SIGKILL) }
    }
}

/// Why waiting on a child failed; carries its output so the test failure shows it.
public enum ChildProcessError: Error, CustomStringConvertible {
    case timedOut(waitingFor: String, stdout: String, stderr: String)
    case exitedEarly(status: Int32, stdout: String, stderr: String)

    public var description: String {
        switch self {
        case .timedOut(let what, let out, let err):
            "timed out waiting for \(what)\n--- stdout\n\(out)\n--- stderr\n\(err)"
        case .exitedEarly(let status, let out, let err):
            "exited early with status \(status)\n--- stdout\n\(out)\n--- stderr\n\(err)"
        }
    }
}

/// Every child still running, so that a test process never leaves one behind: ``killAll()`` runs at
/// exit (registered on first use).
public final class ChildRegistry: Sendable {
    public static let shared: ChildRegistry = {
        let registry = ChildRegistry()
        atexit { ChildRegistry.shared.killAll() }
        return registry
    }()

    private let children = Mutex<[ObjectIdentifier: ChildProcess]>([:])

    func add(_ child: ChildProcess) { children.withLock { $0[ObjectIdentifier(child)] = child } }
    func remove(_ child: ChildProcess) { _ = children.withLock { $0.removeValue(forKey: ObjectIdentifier(child)) } }

    /// Kills every registered child.
    public func killAll() {
        for child in children.withLock({ Array($0.values) }) { child.kill() }
    }
}

extension ChildProcess {
    /// The built `sharesync` executable: `$SHARESYNC_BINARY`, else next to the running test bundle,
    /// else `.build/debug/sharesync` of the package that holds `filePath`.
    public static func sharesyncBinary(filePath: String = #filePath) -> String {
        let fm = FileManager.default
        if let path = ProcessInfo.processInfo.environment["SHARESYNC_BINARY"], fm.isExecutableFile(atPath: path) {
            return path
        }
        var candidates: [String] = []
        for start in [Bundle.main.bundlePath, Bundle.main.executablePath, CommandLine.arguments.first].compactMap({ $0 }) {
            var dir = (start as NSString).deletingLastPathComponent
            for _ in 0..<4 {
                candidates.append((dir as NSString).appendingPathComponent("sharesync"))
                dir = (dir as NSString).deletingLastPathComponent
            }
        }
        var dir = (filePath as NSString).deletingLastPathComponent
        while dir != "/" && !dir.isEmpty {
            if fm.fileExists(atPath: (dir as NSString).appendingPathComponent("Package.swift")) {
                candidates.append((dir as NSString).appendingPathComponent(".build/debug/sharesync"))
                break
            }
            dir = (dir as NSString).deletingLastPathComponent
        }
        func isProgram(_ path: String) -> Bool {
            var isDirectory: ObjCBool = false
            return fm.fileExists(atPath: path, isDirectory: &isDirectory) && !isDirectory.boolValue
                && fm.isExecutableFile(atPath: path)
        }
        return candidates.first(where: isProgram)
            ?? candidates.last ?? "sharesync"
    }
}

/// Threads of their own for tests that block (they wait for child processes, with `Thread.sleep` and
/// `waitUntilExit`), so that they do not hold the threads of Swift's cooperative pool, which every
/// async test of the process shares: with both threads of a 2-core machine held by such tests, the
/// rest of the run stalled for a minute or more and time-bound async tests (a 1 s idle timeout) failed.
///
/// ```swift
/// @Test func daemonStarts() async throws {
///     try await blocking {
///         let node = try E2ENode(name: "a")
///         ...
///     }
/// }
/// ```
///
/// The body runs in the test's own task (Swift Testing's task locals, such as the current test, are
/// kept), on one of three threads: at most three blocking tests run at once.
public func blocking<T>(_ body: () throws -> T) async throws -> T {
    try await withTaskExecutorPreference(BlockingTestExecutor.shared) { try body() }
}

/// The executor ``blocking(_:)`` runs on: Foundation threads of its own (8 MiB stacks), taking jobs
/// in order from one queue.
public final class BlockingTestExecutor: TaskExecutor, @unchecked Sendable {
    /// The one instance, with three threads.
    public static let shared = BlockingTestExecutor(threads: 3)
    private let condition = NSCondition()
    private var jobs: [UnownedJob] = []  // guarded by `condition`

    private init(threads: Int) {
        for index in 0..<threads {
            let thread = Thread { [unowned self] in self.work() }
            thread.name = "blocking-test-\(index)"
            thread.stackSize = 8 << 20
            thread.start()
        }
    }

    private func work() {
        while true {
            condition.lock()
            while jobs.isEmpty { condition.wait() }
            let job = jobs.removeFirst()
            condition.unlock()
            job.runSynchronously(on: asUnownedTaskExecutor())
        }
    }

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        condition.lock()
        jobs.append(job)
        condition.signal()
        condition.unlock()
    }
}
