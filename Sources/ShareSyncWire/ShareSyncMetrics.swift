import CoreMetrics
import ShareSyncCore
import Synchronization

/// The metrics a node records through swift-metrics. They go wherever the process bootstrapped
/// `MetricsSystem` (`sharesync run --metrics` exports them to Prometheus); without a bootstrap they cost
/// next to nothing. An app that embeds a node bootstraps its own metrics system before opening it.
///
/// | name | type | labels |
/// | --- | --- | --- |
/// | `sharesync_frames_total` | counter | `direction` (`in`, `out`) |
/// | `sharesync_wire_bytes_total` | counter | `direction`: bytes of lines on the wire (compressed) |
/// | `sharesync_payload_bytes_total` | counter | `direction`: bytes of frames before compression |
/// | `sharesync_pushes_total` | counter | |
/// | `sharesync_requests_total` | counter | `channel` (`owner`, `control`), `request` |
/// | `sharesync_request_duration_seconds` | histogram | `channel`, `request` |
/// | `sharesync_errors_total` | counter | `channel`, `code` (a ``ShareSyncError/Code``) |
/// | `sharesync_conflicts_total` | counter | `side` (`owner`: saves refused as `serverRecordChanged`; `participant`: this node's saves to shared zones refused as `serverRecordChanged`, sent at once or from the outbox) |
///
/// The daemon adds gauges it reads when scraped (see `MetricsEndpoint`).
public enum ShareSyncMetrics {
    private static let framesIn = Counter(label: "sharesync_frames_total", dimensions: [("direction", "in")])
    private static let framesOut = Counter(label: "sharesync_frames_total", dimensions: [("direction", "out")])
    private static let wireIn = Counter(label: "sharesync_wire_bytes_total", dimensions: [("direction", "in")])
    private static let wireOut = Counter(label: "sharesync_wire_bytes_total", dimensions: [("direction", "out")])
    private static let payloadIn = Counter(label: "sharesync_payload_bytes_total", dimensions: [("direction", "in")])
    private static let payloadOut = Counter(label: "sharesync_payload_bytes_total", dimensions: [("direction", "out")])
    private static let pushes = Counter(label: "sharesync_pushes_total")
    private static let wireTotal = Atomic<Int>(0)
    private static let payloadTotal = Atomic<Int>(0)
    private static let labelled = Mutex<[String: Labelled]>([:])

    private struct Labelled: Sendable {
        var counter: Counter?
        var timer: Timer?
    }

    /// A frame received: its line's bytes (with the newline) and its payload's.
    public static func frameReceived(wireBytes: Int, payloadBytes: Int) {
        framesIn.increment()
        wireIn.increment(by: Int64(wireBytes))
        payloadIn.increment(by: Int64(payloadBytes))
        wireTotal.add(wireBytes, ordering: .relaxed)
        payloadTotal.add(payloadBytes, ordering: .relaxed)
    }

    /// A frame sent.
    public static func frameSent(wireBytes: Int, payloadBytes: Int) {
        framesOut.increment()
        wireOut.increment(by: Int64(wireBytes))
        payloadOut.increment(by: Int64(payloadBytes))
        wireTotal.add(wireBytes, ordering: .relaxed)
        payloadTotal.add(payloadBytes, ordering: .relaxed)
    }

    /// Bytes on the wire per byte of payload, both directions, since the process started (1 before any frame).
    public static var compressionRatio: Double {
        let payload = payloadTotal.load(ordering: .relaxed)
        return payload == 0 ? 1 : Double(wireTotal.load(ordering: .relaxed)) / Double(payload)
    }

    /// A push written to a subscriber.
    public static func pushSent() { pushes.increment() }

    /// A request answered on a channel (`owner` or `control`), with how long it took and, if it was
    /// refused, its error code.
    public static func request(channel: String, _ name: String, duration: Duration, error: ShareSyncError.Code?) {
        let key = channel + "\u{0}" + name
        let metrics = labelled.withLock { cache -> Labelled in
            if let hit = cache[key] { return hit }
            let made = Labelled(
                counter: Counter(label: "sharesync_requests_total", dimensions: [("channel", channel), ("request", name)]),
                timer: Timer(label: "sharesync_request_duration_seconds", dimensions: [("channel", channel), ("request", name)]))
            cache[key] = made
            return made
        }
        metrics.counter?.increment()
        let (seconds, attoseconds) = duration.components
        metrics.timer?.recordNanoseconds(seconds * 1_000_000_000 + attoseconds / 1_000_000_000)
        if let error { countError(channel: channel, error) }
    }

    /// An error answered on a channel.
    public static func countError(channel: String, _ code: ShareSyncError.Code) {
        counter("sharesync_errors_total", [("channel", channel), ("code", code.rawValue)]).increment()
    }

    /// Conflicts: saves this owner refused with `serverRecordChanged` (`owner`), or this node's saves to
    /// shared zones that an owner refused so (`participant`), whether sent at once or from the outbox.
    public static func conflicts(side: String, _ count: Int = 1) {
        guard count > 0 else { return }
        counter("sharesync_conflicts_total", [("side", side)]).increment(by: Int64(count))
    }

    private static func counter(_ label: String, _ dimensions: [(String, String)]) -> Counter {
        let key = label + dimensions.map { "\u{0}\($0.0)=\($0.1)" }.joined()
        return labelled.withLock { cache in
            if let counter = cache[key]?.counter { return counter }
            let counter = Counter(label: label, dimensions: dimensions)
            cache[key] = Labelled(counter: counter, timer: nil)
            return counter
        }
    }
}
