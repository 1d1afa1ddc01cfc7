import Foundation
import GRDB
import ShareSyncCore
import Synchronization

/// A node's private database: its owner's zones and records in SQLite, with change feeds.
///
/// One value owns the database connection, migrates the schema when it opens, and offers only
/// operations that keep the data consistent. It is `Sendable`: call it from any thread; writes are
/// serialized, reads run concurrently (WAL).
///
/// ```swift
/// let db = try PrivateDatabase(path: home.appending(path: "private.sqlite"), ownerName: me)
/// try db.saveZone(RecordZone(zoneName: "Topics"))
/// var topic = Record(recordType: "Topic", recordID: Record.ID(recordName: "t1", zoneID: zoneID))
/// topic["title"] = "Groceries"
/// let result = try db.modifyRecords(saving: [topic])
/// ```
public final class PrivateDatabase: Sendable {
    /// The user record name of the owner.
    public let ownerName: String
    /// The limits every request is checked against.
    public let limits: Limits
    /// The database's identity; change tokens carry it.
    public let databaseID: String
    /// The database's position key; ``positions`` seals with it.
    private let cipher: PositionCipher
    /// The stretches of this database's history as recorded (``PositionEpochs``), and whether this
    /// opening has begun its own, the last. Until its first write, an opening goes on in the last
    /// recorded epoch: an opening that writes nothing records nothing, and the write that would have
    /// recorded an epoch cannot fail unseen (see ``beginEpochIfNeeded(_:)``).
    private let epochState: Mutex<(epochs: PositionEpochs, begun: Bool)>

    /// Seals the positions of the change tokens this database hands out, and makes its change tags.
    var positions: EpochSealing { EpochSealing(cipher: cipher, epochs: epochs) }
    /// The stretches of this database's history, the current one last.
    var epochs: PositionEpochs { epochState.withLock { $0.epochs } }

    let writer: any DatabaseWriter
    /// Whether writes read and write rows in sets where they can: a batch's records read ahead in one
    /// query, record rows cached within a transaction, each viewer's feed rows written in one
    /// statement. Always true but in the equivalence test, which runs the row-by-row path (every
    /// lookup a statement of its own) beside it on the same operations.
    let setBasedWrites: Bool
    /// From how many records to settle in one zone membership is recomputed over the whole zone in
    /// two statements, when no record's share there depends on its parent. A zone-wide share created or
    /// removed counts as all of them; any other count is below the default (`Int.max`): a batch of
    /// 2,000 saves in a zone of a million records would scan the million. The equivalence test also
    /// runs with 1, so that the zone path meets every random case.
    let wholeZoneSettleThreshold: Int
    /// Whether a participant who enters a zone through its zone-wide share reads the zone's own feed
    /// (`viewZone.direct`): the zone's records and deletions after they entered, with no copy of
    /// the zone into `viewLog` when they accept and no `viewLog` row per change afterwards. Always
    /// true but in the equivalence test, which runs the copied feed beside it on the same operations.
    let directZoneFeeds: Bool
    /// Checkpoints the WAL away from commits (a database in a file).
    let checkpointer: BackgroundCheckpointer?
    let clock: @Sendable () -> Date
    let urlBase = Mutex(ShareURLBase(host: "localhost", port: 7420))
    let observers = CommitObservers()
    let generation = Atomic<UInt64>(0)
    let ownerDetails = Mutex<(displayName: String?, emailAddress: String?)>((nil, nil))
    /// Share records decoded lately, by zone and name, with the JSON each was decoded from (see
    /// ``decodeStored(_:type:zone:name:)``).
    private let decodedShares = Mutex<[String: (json: Data, record: Record)]>([:])

    /// A stored record, decoded. A share record is decoded once per version: a changed share goes to
    /// every connection that sees it, and share records take Foundation's decoder (about 50 % of the
    /// owner's CPU while 300 participants joined a public share, each join pushing the share to
    /// everyone connected). At most 64 shares are kept.
    func decodeStored(_ json: Data, type: String, zone: String, name: String) throws -> Record {
        guard type == Record.shareRecordType else { return try Record(jsonData: json) }
        let key = zone + "\u{0}" + name
        if let hit = decodedShares.withLock({ $0[key] }), hit.json == json { return hit.record }
        let record = try Record(jsonData: json)
        decodedShares.withLock { cache in
            if cache.count >= 64 { cache.removeAll(keepingCapacity: true) }
            cache[key] = (json, record)
        }
        return record
    }

    /// The owner's name and email as participants see them: on the owner participant of every share
    /// saved from now on, and in share metadata. A node sets them from its settings when it opens.
    public func setOwnerIdentity(displayName: String?, emailAddress: String?) {
        ownerDetails.withLock { $0 = (displayName, emailAddress) }
    }

    /// The owner's identity: user record name, and the name and email set with ``setOwnerIdentity(displayName:emailAddress:)``.
    public var ownerIdentity: UserIdentity {
        let details = ownerDetails.withLock { $0 }
        return UserIdentity(
            userRecordName: ownerName,
            lookupInfo: .init(emailAddress: details.emailAddress, phoneNumber: nil, userRecordName: ownerName),
            displayName: details.displayName)
    }

    /// Opens (or creates) a private database in a file, in WAL mode. The file is readable by its user only.
    public convenience init(
        path: String, ownerName: String, limits: Limits = Limits(), clock: @escaping @Sendable () -> Date = Date.init
    ) throws {
        try createPrivateFile(path, what: "the private database file")
        var config = Configuration()
        config.busyMode = .timeout(10)
        let checkpointer = BackgroundCheckpointer(path: path)
        checkpointer.configure(&config)
        let pool = try openDurablePool(path: path, configuration: config)
        for suffix in ["", "-wal", "-shm"] { chmod(path + suffix, 0o600) }
        try self.init(writer: pool, ownerName: ownerName, limits: limits, clock: clock, checkpointer: checkpointer)
    }

    /// Creates a database in memory, for tests and tools.
    public convenience init(
        inMemoryOwnerName ownerName: String, limits: Limits = Limits(),
        clock: @escaping @Sendable () -> Date = Date.init
    ) throws {
        try self.init(writer: DatabaseQueue(), ownerName: ownerName, limits: limits, clock: clock)
    }

    init(
        writer: any DatabaseWriter, ownerName: String, limits: Limits, clock: @escaping @Sendable () -> Date,
        setBasedWrites: Bool = true, wholeZoneSettleThreshold: Int = .max, directZoneFeeds: Bool = true,
        checkpointer: BackgroundCheckpointer? = nil
    ) throws {
        self.writer = writer
        self.directZoneFeeds = directZoneFeeds
        self.checkpointer = checkpointer
        self.setBasedWrites = setBasedWrites
        self.wholeZoneSettleThreshold = wholeZoneSettleThreshold
        self.ownerName = ownerName
        self.limits = limits
        self.clock = clock
        try Schema.migrator.migrateRefusingNewer(writer, what: "the private database")
        let key: String
        (databaseID, key) = try writer.write { db in
            var id = try String.fetchOne(db, sql: "SELECT value FROM meta WHERE key = 'databaseID'")
            if id == nil {
                id = UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased().prefix(16).description
                try db.execute(sql: "INSERT INTO meta (key, value) VALUES ('databaseID', ?), ('seq', '0'), ('horizon', '0')", arguments: [id])
                try db.execute(
                    sql: "INSERT INTO zone (name, seq) VALUES (?, 0)", arguments: [RecordZone.ID.defaultZoneName])
            }
            // Made once, by the first open of a version that seals positions (PositionCipher).
            var key = try String.fetchOne(db, sql: "SELECT value FROM meta WHERE key = 'positionKey'")
            if key == nil {
                key = PositionCipher.newKeyHex()
                try db.execute(sql: "INSERT INTO meta (key, value) VALUES ('positionKey', ?)", arguments: [key])
            }
            return (id!, key!)
        }
        let recorded = try writer.read { db in try Self.recordedEpochs(db) }
        cipher = try PositionCipher(hex: key)
        epochState = Mutex((recorded, false))
    }

    private static func recordedEpochs(_ db: Database) throws -> PositionEpochs {
        PositionEpochs(text: try String.fetchOne(db, sql: "SELECT value FROM meta WHERE key = 'positionEpochs'") ?? "")
    }

    /// Begins this opening's epoch (``PositionEpochs``), once, before its first write (and again before
    /// the first write after a ``backup(to:)``): a copy restored and written again cannot hand out the
    /// tokens and tags of the history it replaced. Called by ``write(_:)`` with the writer held, before
    /// the write's own transaction and in the same hold (a backup between the two would otherwise
    /// leave the write in the copy's epoch); the epoch is recorded in a transaction of its own (two
    /// openings at once each add theirs). If it cannot be recorded (a full disk), the write fails with
    /// that error: nothing is written outside an epoch of its own. Tokens handed out until then point
    /// at or before the position the new epoch begins at, and are sealed in an older one
    /// (``PositionEpochs/epoch(sealing:)``).
    ///
    /// Before, every opening recorded an epoch, even one that wrote nothing (a node in a restart loop
    /// grew the list without bound), and an opening whose epoch could not be recorded went on in the
    /// last one without a word.
    private func beginEpochIfNeeded(_ db: Database) throws {
        if epochState.withLock({ $0.begun }) { return }
        var epochs = PositionEpochs(text: "")
        try db.inTransaction {
            epochs = try Self.recordedEpochs(db)
            epochs.begin(at: try Self.currentSeq(db))
            try db.execute(sql: "INSERT OR REPLACE INTO meta (key, value) VALUES ('positionEpochs', ?)", arguments: [epochs.text])
            return .commit
        }
        epochState.withLock { $0 = (epochs, true) }
    }

    /// Writes a copy of the database, as it is now, to a new file at `path` (mode 0600), while it stays
    /// in use: reads go on meanwhile, writes wait until the copy is made. The copy is one SQLite file
    /// (no `-wal`), written under another name beside it (`path.partial-…`), synced, then linked to
    /// `path`: a file at `path` is always a whole copy. Returns its size in bytes.
    ///
    /// The next write after the copy begins an epoch (``PositionEpochs``) the copy does not have: if
    /// the copy is ever restored, every token and change tag of what happened after it was taken is of
    /// a history the copy does not know (`changeTokenExpired`, "restored"; `serverRecordChanged`),
    /// including the tokens handed out since in the middle of a paged fetch, which a file copy taken
    /// while the node runs cannot catch (they point at positions the copy has). Backups with no write
    /// between them add no epoch.
    ///
    /// A file at `path` is not replaced, and a name SQLite takes for a side file (ending in `-journal`,
    /// `-wal`, `-shm`) is refused: `invalidArguments`.
    public func backup(to path: String) throws(ShareSyncError) -> Int {
        try copyDatabase(of: writer, to: path) { _ in
            // Under the writer: the next write begins its epoch in the same hold of the writer as its
            // transaction (write(_:)), so none lands in the copy's epoch.
            epochState.withLock { $0.begun = false }
        }
    }

    /// Closes the database's connections (its background checkpoints stop too): its files may be
    /// copied or moved once this returns, and the database file alone holds every commit. Nothing may
    /// use the database afterwards.
    ///
    /// The WAL is checkpointed into the database file and emptied first: GRDB closes the writing
    /// connection before the readers, and the last connection to close, a reader, cannot checkpoint,
    /// so the WAL stayed beside the file (a copy of the file alone lacked its last commits).
    package func close() throws {
        checkpointer?.close()
        guard let pool = writer as? DatabasePool else { return }
        try? checkpointWhole()
        try pool.close()
    }

    /// Checkpoints the whole WAL into the database file and empties it: the file alone then holds every
    /// commit so far. A node that stops calls it (its connections stay open: a call still in flight
    /// may use them). Fails if a read holds part of the WAL for longer than the busy timeout.
    package func checkpointWhole() throws(ShareSyncError) { try checkpointWAL(of: writer) }

    /// The zone ID as this database reports it.
    func zoneID(_ name: String) -> RecordZone.ID { RecordZone.ID(zoneName: name) }

    /// Checks that a zone ID names this owner's database.
    func checkOwner(_ zoneID: RecordZone.ID) throws(ShareSyncError) {
        guard zoneID.ownerName == RecordZone.ID.currentUserDefaultName || zoneID.ownerName == ownerName else {
            throw ShareSyncError(
                .zoneNotFound, "zone \(zoneID.zoneName) of owner \(zoneID.ownerName) is not in this database",
                zoneID: zoneID)
        }
    }

    /// Calls `observer` after every committed write (on the writing thread; keep it short, for
    /// example a wake-up of a task that then reads the feeds). Returns an ID for ``removeCommitObserver(_:)``.
    public func addCommitObserver(_ observer: @escaping @Sendable () -> Void) -> UInt64 {
        observers.add(observer)
    }

    /// Stops calling an observer.
    public func removeCommitObserver(_ id: UInt64) {
        observers.remove(id)
    }

    /// Changes when a write starts and again when it ends (committed or not), and when what reads
    /// present changes (``setShareURLBase(_:)``). If it is the same after a read as it was before the
    /// read began, no write overlapped or followed the read: reading again now would give the same
    /// result. The owner's server uses it to reuse a page it read ahead.
    public var changeGeneration: UInt64 { generation.load(ordering: .acquiring) }

    /// Runs a write transaction, turning database failures into ``ShareSyncError``, then tells observers
    /// if it changed any row. A write that changed nothing (a request whose every item was refused, a
    /// caller in no share) wakes no subscription: before, each such request, which anyone with a key
    /// can send, made every subscription on the owner read for a push.
    func write<T>(_ body: (Database) throws -> T) throws(ShareSyncError) -> T {
        // The generation moves past the write before observers are told: whatever reads after
        // being woken by this commit sees a generation no read made before the commit had (the
        // owner server's PushCache relies on it).
        var changed = false
        func transaction() throws(ShareSyncError) -> T {
            generation.add(1, ordering: .releasing)
            defer { generation.add(1, ordering: .releasing) }
            return try withStoreErrors("write", path: writer.path) {
                try writer.writeWithoutTransaction { db in
                    try beginEpochIfNeeded(db)
                    var result: T?
                    try db.inTransaction {
                        let before = db.totalChangesCount
                        defer { changed = db.totalChangesCount != before }
                        result = try body(db)
                        return .commit
                    }
                    return result!
                }
            }
        }
        let result = try transaction()
        guard changed else { return result }
        checkpointer?.committed()
        observers.notify()
        return result
    }

    /// Runs a read, turning database failures into ``ShareSyncError``.
    func read<T>(_ body: (Database) throws -> T) throws(ShareSyncError) -> T {
        try withStoreErrors("read", path: writer.path) { try writer.storeRead(body) }
    }

    /// Runs `body` with every read it makes of this database (on this thread) in one read
    /// transaction: one snapshot, and one reader connection taken once. A push reads the caller's
    /// database changes and then each changed zone's page; apart, they were two transactions.
    package func readTogether<T>(_ body: () throws -> T) throws(ShareSyncError) -> T {
        try withStoreErrors("read", path: writer.path) { try writer.storeReadTogether(body) }
    }
}
