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

    /// The process ID.
    public let pid: pid_t
    private let exit: ExitStatus
    private let buffers = Mutex(Buffers())
    private let stdoutDone = Mutex(false)
    private let stderrDone = Mutex(false)

    private init(pid: pid_t, exit: ExitStatus) {
        self.pid = pid
        self.exit = exit
    }

    private static let spawning = Mutex(())

    /// Starts a program; its standard input is `/dev/null`, and every descriptor of this process
    /// other than its standard output and error (two pipes read by this object) is closed in it.
    ///
    /// Spawned with `posix_spawn` rather than Foundation's `Process`: on Linux `Process.run` copies
    /// 256 bytes out of each `/proc/self/fd` directory entry, past the end of the last one, and
    /// crashed a test run with a segmentation fault (a `memmove` in it) once the test process held
    /// about 1,400 descriptors.
    public static func start(_ executable: String, _ arguments: [String], environment: [String: String]? = nil)
        throws -> ChildProcess
    {
        // Both pipes close on exec: children started at the same time by other tests must not hold
        // this child's write ends open (its output would never end). The child gets them as 1 and 2
        // through dup2, which clears close-on-exec.
        let (out, err) = try Self.spawning.withLock { _ in (try makePipe(), try makePipe()) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, out.write, 1)
        posix_spawn_file_actions_adddup2(&actions, err.write, 2)
        if let closeFrom = Self.addCloseFrom { _ = closeFrom(&actions, 3) }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        // Its own process group (as Foundation's Process does), with no signal blocked.
        var noSignals = sigset_t()
        sigemptyset(&noSignals)
        posix_spawnattr_setsigmask(&attributes, &noSignals)
        posix_spawnattr_setpgroup(&attributes, 0)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK))

        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        // Every child, and every daemon it starts in turn, learns who started it: a `sharesync run`
        // stops once this process is gone (``exitWithParentVariable``).
        var childEnvironment = environment ?? ProcessInfo.processInfo.environment
        childEnvironment[Self.exitWithParentVariable] = childEnvironment[Self.exitWithParentVariable] ?? String(getpid())
        let envp = childEnvironment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            for pointer in argv { free(pointer) }
            for pointer in envp { free(pointer) }
        }
        var pid: pid_t = 0
        // One spawn at a time: no other child of this process can be started between a pipe's
        // creation and its close-on-exec flag.
        let status = Self.spawning.withLock { _ in posix_spawn(&pid, executable, &actions, &attributes, argv, envp) }
        close(out.write)
        close(err.write)
        guard status == 0 else {
            close(out.read)
            close(err.read)
            throw ChildProcessError.spawnFailed(executable: executable, reason: String(cString: strerror(status)))
        }
        let exit = ExitStatus()
        let child = ChildProcess(pid: pid, exit: exit)
        // Each pipe is read to its end by a thread of its own with blocking reads (FileHandle's
        // readabilityHandler was seen to stop early on a loaded machine, cutting outputs short).
        Self.drain(out.read, into: { [weak child] data in
            child?.buffers.withLock { $0.stdout.append(data) }
        }, done: { [weak child] in child?.stdoutDone.withLock { $0 = true } })
        Self.drain(err.read, into: { [weak child] data in
            child?.buffers.withLock { $0.stderr.append(data) }
        }, done: { [weak child] in child?.stderrDone.withLock { $0 = true } })
        exit.reap(pid)
        ChildRegistry.shared.add(child)
        return child
    }

    /// The environment variable through which a `sharesync run` started by a test (directly, or by a
    /// script the test started) stops once the test process is gone: its value is that process's ID,
    /// which the daemon watches. A test run that died (a crash, or SIGPIPE from `swift test | head`)
    /// left dozens of daemons running for good before.
    public static let exitWithParentVariable = "SHARESYNC_EXIT_WITH_PARENT"

    /// glibc's `posix_spawn_file_actions_addclosefrom_np` (2.34 and later), which Swift's Glibc
    /// module does not declare; nil where the C library lacks it (the pipes close on exec anyway).
    private static let addCloseFrom: (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32)? = {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "posix_spawn_file_actions_addclosefrom_np") else {
            return nil
        }
        return unsafeBitCast(symbol, to: (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32).self)
    }()

    /// A pipe whose two ends close on exec (pipe2 is a GNU function Swift's Glibc module does not
    /// declare; the gap between pipe and fcntl is closed by taking `spawning`, the one lock under
    /// which this process starts children).
    private static func makePipe() throws -> (read: Int32, write: Int32) {
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else {
            throw ChildProcessError.spawnFailed(executable: "pipe", reason: String(cString: strerror(errno)))
        }
        for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        return (fds[0], fds[1])
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
    public var isRunning: Bool { exit.value == nil }

    /// Reads `fd` until its end on a thread of its own, handing each chunk to `append`; then closes
    /// it and calls `done`.
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
            close(fd)
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
            if let exited = exit.value, stdoutDone.withLock({ $0 }) {
                throw ChildProcessError.exitedEarly(status: exited.status, stdout: stdout, stderr: stderr)
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
            if let exited = exit.value, stderrDone.withLock({ $0 }) {
                throw ChildProcessError.exitedEarly(status: exited.status, stdout: stdout, stderr: stderr)
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
        while isRunning || !stdoutDone.withLock({ $0 }) || !stderrDone.withLock({ $0 }) {
            if !isRunning {
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
        guard let exited = exit.wait() else {
            throw ChildProcessError.timedOut(waitingFor: "exit", stdout: stdout, stderr: stderr)
        }
        return Outcome(status: exited.status, stdout: stdout, stderr: stderr, exited: exited.exited)
    }

    /// Sends a signal (SIGTERM by default).
    public func signal(_ signal: Int32 = SIGTERM) {
        if isRunning { Foundation.kill(pid, signal) }
    }

    /// Kills the program (SIGKILL) if it still runs and waits for it.
    public func kill() {
        if isRunning {
            Foundation.kill(pid, SIGKILL)
            exit.wait()
        }
        ChildRegistry.shared.remove(self)
    }

    deinit {
        if isRunning { Foundation.kill(pid, SIGKILL) }
    }
}

/// How a child ended, set by a thread of its own that waits for it (`waitpid`). It holds nothing of
/// the ``ChildProcess``, so that a child object can go away while its program runs.
private final class ExitStatus: Sendable {
    struct Exit {
        /// The exit status, or the number of the signal that ended the program.
        var status: Int32
        /// Whether the program exited (as opposed to dying of a signal).
        var exited: Bool
    }

    private let condition = NSCondition()
    private let result = Mutex<Exit?>(nil)

    /// How the program ended; nil while it runs.
    var value: Exit? { result.withLock { $0 } }

    /// Starts the thread that waits for `pid`.
    func reap(_ pid: pid_t) {
        let thread = Thread { [self] in
            var status: Int32 = 0
            while waitpid(pid, &status, 0) < 0 {
                guard errno == EINTR else {
                    // Not ours to wait for (reaped elsewhere): report it as killed.
                    finish(Exit(status: SIGKILL, exited: false))
                    return
                }
            }
            // WIFEXITED, WEXITSTATUS and WTERMSIG are macros Swift does not import.
            let signal = status & 0x7F
            finish(signal == 0 ? Exit(status: (status >> 8) & 0xFF, exited: true) : Exit(status: signal, exited: false))
        }
        thread.start()
    }

    private func finish(_ exit: Exit) {
        condition.lock()
        result.withLock { $0 = exit }
        condition.broadcast()
        condition.unlock()
    }

    /// Waits for the program to end, at most `timeout` seconds (a killed program ends at once; only
    /// one stuck in the kernel would make this wait run out).
    @discardableResult
    func wait(timeout: Double = 30) -> Exit? {
        let deadline = Date().addingTimeInterval(timeout)
        condition.lock()
        defer { condition.unlock() }
        while value == nil, condition.wait(until: deadline) {}
        return value
    }
}

/// Why waiting on a child failed; carries its output so the test failure shows it.
public enum ChildProcessError: Error, CustomStringConvertible {
    case timedOut(waitingFor: String, stdout: String, stderr: String)
    case exitedEarly(status: Int32, stdout: String, stderr: String)
    case spawnFailed(executable: String, reason: String)

    public var description: String {
        switch self {
        case .timedOut(let what, let out, let err):
            "timed out waiting for \(what)\n--- stdout\n\(out)\n--- stderr\n\(err)"
        case .exitedEarly(let status, let out, let err):
            "exited early with status \(status)\n--- stdout\n\(out)\n--- stderr\n\(err)"
        case .spawnFailed(let executable, let reason):
            "could not start \(executable): \(reason)"
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
/// `waitUntilExit`, or read sockets) or compute for seconds (the model-based and equivalence tests),
/// so that they do not hold the threads of Swift's cooperative pool, which every async test of the
/// process shares: with both threads of a 2-core machine held by such tests, the rest of the run
/// stalled for a minute or more and time-bound async tests (a 1 s idle timeout) failed. (A synchronous
/// `@Test` function runs on that pool too, as does `Task.detached`.)
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

/// Runs a short blocking wait whose timing a test depends on (a socket read) off Swift's cooperative
/// pool, on threads of its own, as ``blocking(_:)`` does, but not queued behind the tests that wait
/// for child processes there: in a full run on a slow day, a control-server test's wait came after
/// the request's own 120-s gate had let it go. Not for seconds of CPU: that would run beside every
/// network test of a 2-core machine.
public func computing<T>(_ body: () throws -> T) async throws -> T {
    try await withTaskExecutorPreference(BlockingTestExecutor.compute) { try body() }
}

/// The executors ``blocking(_:)`` and ``computing(_:)`` run on: each with Foundation threads of its
/// own (8 MiB stacks), taking jobs in order from one queue.
public final class BlockingTestExecutor: TaskExecutor, @unchecked Sendable {
    /// ``blocking(_:)``'s instance, with three threads.
    public static let shared = BlockingTestExecutor(threads: 3)
    /// ``computing(_:)``'s instance, with three threads.
    public static let compute = BlockingTestExecutor(threads: 3, name: "compute-test")
    private let condition = NSCondition()
    private var jobs: [UnownedJob] = []  // guarded by `condition`

    private init(threads: Int, name: String = "blocking-test") {
        for index in 0..<threads {
            let thread = Thread { [unowned self] in
                // Named where a thread dump shows it (Foundation's name stays inside Foundation here).
                try? "\(name)-\(index)".write(toFile: "/proc/thread-self/comm", atomically: false, encoding: .utf8)
                self.work()
            }
            thread.name = "\(name)-\(index)"
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
