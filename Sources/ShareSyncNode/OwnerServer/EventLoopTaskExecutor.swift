import NIOCore

/// Runs tasks on an event loop group's threads instead of Swift's cooperative pool.
///
/// The owner server's tasks (its accepting task, and under it every connection's task and child tasks)
/// prefer this executor, so the server keeps answering whatever else its process does with the
/// cooperative pool: an app that embeds the owner and blocks a cooperative thread, or a test process
/// whose synchronous tests wait for child processes (seen: with both cooperative threads of a 2-core
/// machine held, a server on the pool answered no `hello` for over a second, and clients with a 1 s
/// idle timeout gave up). The connection's I/O runs on the same threads, so a task reading or writing
/// its channel rarely changes thread. Database work still goes to the server's thread pool.
final class EventLoopTaskExecutor: TaskExecutor {
    private let group: any EventLoopGroup

    init(_ group: any EventLoopGroup) { self.group = group }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        group.next().execute { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}
