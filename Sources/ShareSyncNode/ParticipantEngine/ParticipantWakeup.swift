import NIOCore
import NIOPosix
import Synchronization

/// A one-waiter wake-up signal with a bounded wait: the sync engine's way to sleep until something
/// happens (a push, a poke, an event) or a deadline passes, without polling.
///
/// A ``signal()`` with nobody waiting is remembered, so the next ``wait(upTo:)`` returns at once: a
/// waiter that checks its condition and then waits never misses a signal sent in between.
/// Cancelling the waiting task ends the wait.
///
/// Deadlines are kept by timers on an event loop, not by a task per wait. The engine waits once per
/// push it applies (with a 60 s bound), and a task that slept and was cancelled at every wait cost a
/// task, a timer and two more task switches per push: in the bench's 100-connection fan-out
/// (`sharesync-bench suite --only fan-out`, 6 interleaved pairs) the participants' CPU per change was
/// 14.7 ms with it and 11.9 ms without, and the last participant committed at p50 15.2 → 13.9 ms,
/// p99 25.2 → 22.8 ms. A timer sleeps until the earliest deadline it was asked for; when it fires it
/// ends the wait whose deadline has passed, is scheduled again for the deadline of a later wait, or
/// stops when nobody waits. A wait whose deadline comes before the current timer's schedules a timer
/// of its own. Being an event loop's timer, not `Task.sleep`, a deadline also holds when Swift's
/// cooperative threads are all busy (`Task.sleep` wakes through them).
final class ParticipantWakeup: Sendable {
    private struct Waiter {
        var id: UInt64
        var deadline: NIODeadline
        var continuation: CheckedContinuation<Void, Never>
    }

    private struct State {
        var pending = false
        var waiter: Waiter?
        var nextID: UInt64 = 0
        /// When the timer that fires soonest fires; nil when no timer is scheduled.
        var timerFires: NIODeadline?
    }

    private let state = Mutex(State())
    private let eventLoop: any EventLoop
    /// Timers scheduled so far (tests).
    let timersScheduled = Atomic<Int>(0)

    /// A wake-up whose deadlines are timers of `eventLoop`.
    init(eventLoop: any EventLoop = MultiThreadedEventLoopGroup.singleton.next()) {
        self.eventLoop = eventLoop
    }

    /// Wakes the waiter, or the next one if nobody waits now.
    func signal() {
        let continuation = state.withLock { s -> CheckedContinuation<Void, Never>? in
            guard let waiter = s.waiter else {
                s.pending = true
                return nil
            }
            s.waiter = nil
            return waiter.continuation
        }
        continuation?.resume()
    }

    /// Returns after a ``signal()``, after `duration`, or when the task is cancelled, whichever comes first.
    func wait(upTo duration: Duration) async {
        await wait(until: eventLoop.now + TimeAmount(duration))
    }

    /// Returns after a ``signal()``, at `deadline`, or when the task is cancelled, whichever comes first.
    /// A caller that waits several times for one deadline passes the same `deadline` each time, so
    /// the timer scheduled for its first wait serves them all.
    func wait(until deadline: NIODeadline) async {
        let id = state.withLock { s -> UInt64? in
            if s.pending {
                s.pending = false
                return nil
            }
            s.nextID += 1
            return s.nextID
        }
        guard let id else { return }  // signalled since the last wait: no need to suspend
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                enum Outcome { case now, waits, waitsWithNewTimer }
                let outcome = state.withLock { s -> Outcome in
                    if s.pending || Task.isCancelled {
                        s.pending = false
                        return .now
                    }
                    s.waiter = Waiter(id: id, deadline: deadline, continuation: continuation)
                    if let fires = s.timerFires, fires <= deadline { return .waits }
                    s.timerFires = deadline
                    return .waitsWithNewTimer
                }
                switch outcome {
                case .now: continuation.resume()
                case .waits: break
                case .waitsWithNewTimer: scheduleTimer(at: deadline)
                }
            }
        } onCancel: {
            self.resume(id)
        }
    }

    private func scheduleTimer(at fires: NIODeadline) {
        timersScheduled.add(1, ordering: .relaxed)
        eventLoop.scheduleTask(deadline: fires) { [weak self] in self?.timerFired(fires) }
    }

    /// The timer scheduled for `fires` fired: ends the wait whose deadline has passed, or schedules
    /// itself again for a later wait's deadline, or stops (nobody waits, or a timer that fires sooner
    /// sees to the wait).
    private func timerFired(_ fires: NIODeadline) {
        let now = eventLoop.now
        enum Next { case stop, resume(CheckedContinuation<Void, Never>), again(NIODeadline) }
        let next = state.withLock { s -> Next in
            if s.timerFires == fires { s.timerFires = nil }  // this timer was the one in charge
            guard let waiter = s.waiter else { return .stop }
            if waiter.deadline <= now {
                s.waiter = nil
                return .resume(waiter.continuation)
            }
            if let sooner = s.timerFires, sooner <= waiter.deadline { return .stop }
            s.timerFires = waiter.deadline
            return .again(waiter.deadline)
        }
        switch next {
        case .stop: break
        case .resume(let continuation): continuation.resume()
        case .again(let later): scheduleTimer(at: later)
        }
    }

    private func resume(_ id: UInt64) {
        let continuation = state.withLock { s -> CheckedContinuation<Void, Never>? in
            guard let waiter = s.waiter, waiter.id == id else { return nil }
            s.waiter = nil
            return waiter.continuation
        }
        continuation?.resume()
    }
}
