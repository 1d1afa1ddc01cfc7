import Foundation

/// Configurable limits of a database. Each broken limit fails with a clear error naming it.
public struct Limits: Sendable, Hashable, Codable {
    /// The largest record, in bytes of its JSON form (fields and system fields). Default 1 MB.
    public var maximumRecordSize: Int = 1_000_000
    /// The most records and record IDs one request may save and delete together. Default 400.
    public var maximumItemsPerRequest: Int = 400
    /// The most participants a share may have, the owner included. Default 100.
    public var maximumParticipants: Int = 100
    /// The longest name (record, zone, record type, field), in UTF-8 bytes. Default 255.
    public var maximumNameLength: Int = 255
    /// The most results one fetch returns when the caller asks for more (or for no limit). Default 400.
    public var maximumResultsPerFetch: Int = 400
    /// The most bytes of records one answer carries: a `fetchZoneChanges` page stops before passing it
    /// (the rest follows with `moreComing`), a push ends early with `moreComing`, and a `fetchRecords` or
    /// `modifyRecords` whose records would pass it fails with ``ShareSyncError/Code/limitExceeded``
    /// before any work (rule `maximumResponseSize`). Each record counts its stored JSON size plus
    /// ``responseOverheadPerItem``. Kept well under the frame limit (16 MiB), and never below
    /// ``maximumRecordSize``, so a single legal record always fits. Default 4 MiB.
    public var maximumResponseSize: Int = 4 * 1024 * 1024

    /// What each item adds to an answer besides its stored JSON, for ``maximumResponseSize``: its zone ID
    /// as the caller sees it, its share reference, separators. A bound, not a measurement.
    public static let responseOverheadPerItem = 512

    /// The default limits.
    public init() {}
}

extension Array {
    /// The elements in order, in batches of at most `maximumCount` elements whose `size`s add up to at
    /// most `maximumBytes`, except that an element larger than that on its own makes a batch of one: how
    /// a client splits a write to fit the owner's item count and response size, and how `record import`
    /// splits a file to fit the control socket's lines.
    public func batched(maximumCount: Int, maximumBytes: Int, size: (Element) -> Int) -> [[Element]] {
        var batches: [[Element]] = []
        var current: [Element] = []
        var bytes = 0
        for element in self {
            let elementSize = size(element)
            if !current.isEmpty && (current.count >= maximumCount || bytes + elementSize > maximumBytes) {
                batches.append(current)
                current = []
                bytes = 0
            }
            current.append(element)
            bytes += elementSize
        }
        if !current.isEmpty { batches.append(current) }
        return batches
    }
}
