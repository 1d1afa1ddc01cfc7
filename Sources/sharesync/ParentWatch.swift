import Foundation

/// Stops a daemon whose starter is gone: when `SHARESYNC_EXIT_WITH_PARENT` holds a process ID, `run`
/// watches that process and, once it has exited, sends itself SIGTERM (the clean stop: exit 0, control
/// socket removed).
///
/// The test support's `ChildProcess` sets it to the test process's ID for every program it starts,
/// and the variable passes to the daemons those programs start in turn (the demo's scripts). Before,
/// a test run that died (a crash, or SIGPIPE from `swift test | head`) left its daemons running for
/// good. Not `PR_SET_PDEATHSIG`: that fires when the *thread* that started the child ends, and the
/// test process starts children from pool threads that come and go.
enum ParentWatch {
    static let variable = "SHARESYNC_EXIT_WITH_PARENT"

    /// How often the watched process is looked for.
    static let interval: useconds_t = 200_000

    /// Starts the watch if the environment asks for one; an unreadable value is ignored.
    static func start(environment: [String: String]) {
        guard let value = environment[variable], let watched = pid_t(value), watched > 0 else { return }
        let thread = Thread {
            // `kill(pid, 0)` fails with ESRCH once the process is gone (EPERM means it lives on as another user's).
            while kill(watched, 0) == 0 || errno == EPERM { usleep(interval) }
            kill(getpid(), SIGTERM)
        }
        thread.name = "parent-watch"
        thread.start()
    }
}
