import Foundation
import Logging

/// `--log-format json`: one JSON object per line on standard error, with the time, level, label,
/// message, source and every metadata key (`connection.id`, `peer`, `user`, `owner`, `zone`, `request`…):
///
/// ```
/// {"label":"sharesync.node","level":"info","message":"node running","metadata":{"listen":"127.0.0.1:7420",…},"source":"ShareSyncNode","time":"2026-11-24T09:00:00.000Z"}
/// ```
///
/// Hand-written: swift-log ships only the text `StreamLogHandler`, and none of the packages this project
/// may use writes JSON lines.
struct JSONLogHandler: LogHandler {
    let label: String
    var logLevel: Logger.Level
    var metadata: Logger.Metadata = [:]
    var metadataProvider: Logger.MetadataProvider?

    init(label: String, level: Logger.Level) {
        self.label = label
        self.logLevel = level
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    private static let lock = NSLock()
    nonisolated(unsafe) private static let formatter: ISO8601DateFormatter = {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter
    }()

    func log(event: LogEvent) {
        var merged = metadata
        if let provided = metadataProvider?.get() { merged.merge(provided) { _, new in new } }
        if let extra = event.metadata { merged.merge(extra) { _, new in new } }
        var object: [String: Any] = [
            "label": label, "level": event.level.rawValue, "message": "\(event.message)", "source": event.source,
        ]
        if !merged.isEmpty { object["metadata"] = merged.mapValues(Self.json) }
        Self.lock.lock()
        defer { Self.lock.unlock() }
        object["time"] = Self.formatter.string(from: Date())
        guard var data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes]) else {
            return
        }
        data.append(UInt8(ascii: "\n"))
        FileHandle.standardError.write(data)
    }

    private static func json(_ value: Logger.Metadata.Value) -> Any {
        switch value {
        case .string(let s): s
        case .stringConvertible(let c): c.description
        case .array(let a): a.map(json)
        case .dictionary(let d): d.mapValues(json)
        }
    }
}
