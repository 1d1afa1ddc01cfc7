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

    public init() {}
}
