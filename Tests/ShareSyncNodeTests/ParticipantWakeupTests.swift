import NIOCore
import NIOPosix
import Testing
@testable import ShareSyncNode

/// The sync engine's wake-up: a signal wakes the waiter (or the next one), a wait ends at its own
/// deadline, and cancelling the waiting task ends its wait. Real time, with the tasks on an event
/// loop (not Swift's cooperative threads, which a loaded test run keeps busy for seconds): the bounds
/// check that no wait ends early, and that each ends well within seconds.
@Suite("The sync engine's wake-up signal")
struct ParticipantWakeupTests {
    let loop = MultiThreadedEventLoopGroup.singleton.next()
    var executor: EventLoopTaskExecutor { EventLoopTaskExecutor(loop) }

    /// How long `body` took, run on the event loop.
    func elapsed(_ body: @escaping @Sendable () async -> Void) async -> Duration {
        await Task(executorPreference: executor) {
            let start = ContinuousClock.now
            await body()
            return ContinuousClock.now - start
        }.value
    }

    /// Signals `wakeup` after `delay`, from the event loop.
    func signal(_ wakeup: ParticipantWakeup, after delay: TimeAmount) -> Task<Void, Never> {
        Task(executorPreference: executor) { [loop] in
            try? await loop.sleep(for: delay)
            wakeup.signal()
        }
    }

    @Test("a signal sent before the wait makes the next wait return at once; only the next")
    func aSignalIsRemembered() async {
        let wakeup = ParticipantWakeup(eventLoop: loop)
        wakeup.signal()
        #expect(await elapsed { await wakeup.wait(upTo: .seconds(60)) } < .seconds(10))
        #expect(await elapsed { await wakeup.wait(upTo: .milliseconds(200)) } >= .milliseconds(200), "one signal woke two waits")
    }

    @Test("a signal wakes a waiter long before its deadline")
    func aSignalWakesTheWaiter() async {
        let wakeup = ParticipantWakeup(eventLoop: loop)
        let signaller = signal(wakeup, after: .milliseconds(100))
        #expect(await elapsed { await wakeup.wait(upTo: .seconds(60)) } < .seconds(10))
        await signaller.value
    }

    @Test("a wait with nothing signalled ends at its deadline, not before")
    func aWaitEndsAtItsDeadline() async {
        let wakeup = ParticipantWakeup(eventLoop: loop)
        let waited = await elapsed { await wakeup.wait(upTo: .milliseconds(300)) }
        #expect(waited >= .milliseconds(300))
        #expect(waited < .seconds(10))
    }

    @Test("a short wait after long ones ends at its own deadline (the long waits' timer is still pending)")
    func aShortWaitAfterLongOnes() async {
        let wakeup = ParticipantWakeup(eventLoop: loop)
        for _ in 0..<20 {  // long waits, each ended by a signal, as the engine's pushes end them
            let signaller = signal(wakeup, after: .zero)
            _ = await elapsed { await wakeup.wait(upTo: .seconds(60)) }
            await signaller.value
        }
        let waited = await elapsed { await wakeup.wait(upTo: .milliseconds(200)) }
        #expect(waited >= .milliseconds(200))
        #expect(waited < .seconds(10), "the short wait waited for the long waits' deadline")
    }

    @Test("waits for one deadline (a condition checked again after each signal) share one timer; a sooner deadline gets its own")
    func waitsForOneDeadlineShareATimer() async {
        let wakeup = ParticipantWakeup(eventLoop: loop)
        // Far enough that it never passes during the test: on a machine loaded enough to stretch the
        // test past a 60 s deadline (CI next to another build and test run), the timer fired and a
        // second one was scheduled.
        let deadline = loop.now + .seconds(3600)
        for _ in 0..<10 {
            let signaller = signal(wakeup, after: .zero)
            _ = await elapsed { await wakeup.wait(until: deadline) }
            await signaller.value
        }
        let shared = wakeup.timersScheduled.load(ordering: .relaxed)
        #expect(shared <= 1, "a timer per wait")
        let waited = await elapsed { await wakeup.wait(upTo: .milliseconds(100)) }
        #expect(waited >= .milliseconds(100))
        #expect(wakeup.timersScheduled.load(ordering: .relaxed) == shared + 1)
    }

    @Test("a wait that begins after a shorter one ended gets its whole duration")
    func aLaterLongerWaitIsNotCutShort() async {
        let wakeup = ParticipantWakeup(eventLoop: loop)
        // A first wait, 3 s long, ended by a signal after 50 ms: its timer stays scheduled for 3 s.
        let signaller = signal(wakeup, after: .milliseconds(50))
        let first = await elapsed { await wakeup.wait(upTo: .seconds(3)) }
        await signaller.value
        #expect(first < .seconds(3), "the signal did not end the first wait")
        // The next wait, 4 s long, begins before that timer fires and must outlast it.
        let waited = await elapsed { await wakeup.wait(upTo: .seconds(4)) }
        #expect(waited >= .seconds(4), "the earlier wait's timer ended the later wait")
        #expect(waited < .seconds(20))
    }

    @Test("cancelling the waiting task ends its wait, and the wake-up goes on working")
    func cancellingEndsTheWait() async {
        let wakeup = ParticipantWakeup(eventLoop: loop)
        let executor = self.executor
        let waited = await elapsed { [loop] in
            let waiter = Task(executorPreference: executor) { await wakeup.wait(upTo: .seconds(60)) }
            try? await loop.sleep(for: .milliseconds(50))
            waiter.cancel()
            await waiter.value
        }
        #expect(waited < .seconds(10))
        wakeup.signal()
        #expect(await elapsed { await wakeup.wait(upTo: .seconds(60)) } < .seconds(10))
    }
}
