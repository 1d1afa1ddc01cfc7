import NIOCore

/// Runs tasks on an event loop group's threads instead of Swift's cooperative pool.
///
/// Both ends of the owner↔participant link prefer this executor: the owner server's accepting task
/// (and under it every connection's task and child tasks), and each ``OwnerConnection``'s task. A
/// connection then keeps reading, answering and pinging whatever else its process does with the
/// cooperative pool: an app that embeds a node and blocks a cooperative thread, or a test process
/// whose synchronous tests wait for child processes (seen: with both cooperative threads of a 2-core
/// machine held, a server on the pool answered no `hello` for over a second, and clients with a 1 s
/// idle timeout gave up). The connection's I/O runs on the same threads, so a task reading or writing
/// its channel rarely changes thread. Database work still goes to thread pools of its own.
final class EventLoopTaskExecutor: TaskExecutor {
    private let group: any EventLoopGroup

    init(_ group: any EventLoopGroup) { self.group = group }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        group.next().execute { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}

extension EventLoop {
    /// Suspends for `amount` on this event loop's timer; throws `CancellationError` if the task is
    /// cancelled first.
    ///
    /// The connections' deadlines and pings use it rather than `Task.sleep`, whose wake-up goes
    /// through Swift's global executor (the cooperative pool) before reaching a task's preferred
    /// executor: with the pool's threads held, a 333 ms ping timer fired seconds late.
    func sleep(for amount: TimeAmount) async throws {
        let scheduled = scheduleTask(in: amount) {}
        do {
            try await withTaskCancellationHandler {
                try await scheduled.futureResult.get()
            } onCancel: {
                scheduled.cancel()
            }
        } catch {
            throw CancellationError()
        }
    }
}
