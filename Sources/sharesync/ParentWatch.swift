import Foundation

/// Stops a daemon whose starter is gone: when `SHARESYNC_EXIT_WITH_PARENT` holds a process ID, `run`
/// watches that process and, once it has exited, stops as on SIGTERM (exit 0, control socket removed).
///
/// The test support's `ChildProcess` sets it to the test process's ID for every program it starts,
/// and the variable passes to the daemons those programs start in turn (the demo's scripts). Before,
/// a test run that died (a crash, or SIGPIPE from `swift test | head`) left its daemons running for
/// good. Not `PR_SET_PDEATHSIG`: that fires when the *thread* that started the child ends, and the
/// test process starts children from pool threads that come and go.
enum ParentWatch {
    static let variable = "SHARESYNC_EXIT_WITH_PARENT"

    /// Starts the watch if the environment asks for one (an unreadable value is ignored): once the
    /// process is gone, `stop` runs (it asks the service group for its graceful shutdown, which it
    /// takes even before it runs). Cancel the task when the daemon stops otherwise.
    static func start(environment: [String: String], stop: @escaping @Sendable () async -> Void) -> Task<Void, Never>? {
        guard let value = environment[variable], let watched = pid_t(value), watched > 0 else { return nil }
        return Task.detached {
            // `kill(pid, 0)` fails with ESRCH once the process is gone (EPERM: it lives, as another user's).
            while kill(watched, 0) == 0 || errno == EPERM {
                do { try await Task.sleep(for: .milliseconds(200)) } catch { return }
            }
            await stop()
        }
    }
}
