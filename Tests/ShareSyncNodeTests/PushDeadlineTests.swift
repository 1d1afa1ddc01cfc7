import NIOCore
import NIOEmbedded
import Synchronization
import Testing
@testable import ShareSyncNode

/// A subscription's push write deadline: each push gets exactly `pushWriteTimeout` to be written, with
/// one timer per subscription rather than one per push. On an embedded event loop, whose clock moves
/// only when the test moves it.
@Suite("A push's write deadline")
struct PushDeadlineTests {
    final class Expiries: Sendable {
        let count = Mutex(0)
        let at = Mutex<[NIODeadline]>([])
    }

    func deadline(on loop: EmbeddedEventLoop, _ expiries: Expiries) -> PushDeadline {
        PushDeadline(timeout: .seconds(10), eventLoop: loop) { _ in
            expiries.count.withLock { $0 += 1 }
            expiries.at.withLock { $0.append(loop.now) }
        }
    }

    @Test("a push that waits longer than the timeout expires once, at its timeout")
    func aStalledPushExpiresOnce() {
        let loop = EmbeddedEventLoop()
        let expiries = Expiries()
        let deadline = deadline(on: loop, expiries)
        let began = loop.now
        deadline.begin()
        loop.advanceTime(by: .milliseconds(9_999))
        #expect(expiries.count.withLock { $0 } == 0, "expired before its timeout")
        loop.advanceTime(by: .milliseconds(1))
        #expect(expiries.at.withLock { $0 } == [began + .seconds(10)])
        loop.advanceTime(by: .seconds(60))
        #expect(expiries.count.withLock { $0 } == 1)
        deadline.stop()
    }

    @Test("pushes that are each written within the timeout never expire, however long they go on")
    func pushesWrittenInTimeNeverExpire() {
        let loop = EmbeddedEventLoop()
        let expiries = Expiries()
        let deadline = deadline(on: loop, expiries)
        // 100 pushes of 3 s each, back to back: 300 s of pushes, none of them late.
        for _ in 0..<100 {
            deadline.begin()
            loop.advanceTime(by: .seconds(3))
            deadline.end()
        }
        loop.advanceTime(by: .seconds(60))  // and nothing in flight
        #expect(expiries.count.withLock { $0 } == 0)
        deadline.stop()
    }

    @Test("a push that begins after others gets its whole timeout, counted from its own beginning")
    func aLaterPushGetsItsOwnTimeout() {
        let loop = EmbeddedEventLoop()
        let expiries = Expiries()
        let deadline = deadline(on: loop, expiries)
        deadline.begin()  // arms the subscription's timer for 10 s from now
        loop.advanceTime(by: .seconds(9))
        deadline.end()
        loop.advanceTime(by: .milliseconds(500))
        let began = loop.now
        deadline.begin()  // stalls
        loop.advanceTime(by: .seconds(9))  // the timer fired at 10 s, 0.5 s into this push
        #expect(expiries.count.withLock { $0 } == 0, "expired by an earlier push's deadline")
        loop.advanceTime(by: .seconds(2))
        #expect(expiries.at.withLock { $0 } == [began + .seconds(10)])
        deadline.stop()
    }

    @Test("a push in flight when the subscription stops never expires")
    func stoppedDeadlinesDoNotExpire() {
        let loop = EmbeddedEventLoop()
        let expiries = Expiries()
        let deadline = deadline(on: loop, expiries)
        deadline.begin()
        deadline.stop()
        loop.advanceTime(by: .seconds(60))
        deadline.begin()  // a push begun after the end arms nothing
        loop.advanceTime(by: .seconds(60))
        #expect(expiries.count.withLock { $0 } == 0)
    }
}
