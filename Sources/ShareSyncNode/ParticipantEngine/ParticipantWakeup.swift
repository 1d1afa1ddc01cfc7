import Synchronization

/// A one-waiter wake-up signal with a bounded wait: the sync engine's way to sleep until something
/// happens (a push, a poke, an event) or a deadline passes, without polling.
///
/// A ``signal()`` with nobody waiting is remembered, so the next ``wait(upTo:)`` returns at once: a
/// waiter that checks its condition and then waits never misses a signal sent in between.
/// Cancelling the waiting task ends the wait.
final class ParticipantWakeup: Sendable {
    private struct State {
        var pending = false
        var waiter: (id: UInt64, continuation: CheckedContinuation<Void, Never>)?
        var nextID: UInt64 = 0
    }

    private let state = Mutex(State())

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
        let id = state.withLock { s in
            s.nextID += 1
            return s.nextID
        }
        let timer = Task { [weak self] in
            try? await Task.sleep(for: duration)
            self?.resume(id)
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let now = state.withLock { s -> Bool in
                    if s.pending || Task.isCancelled {
                        s.pending = false
                        return true
                    }
                    s.waiter = (id, continuation)
                    return false
                }
                if now { continuation.resume() }
            }
        } onCancel: {
            self.resume(id)
        }
        timer.cancel()
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
