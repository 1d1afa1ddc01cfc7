import GRDB
import ShareSyncCore

/// The items of one `modifyRecords` (records to save, shares last, then records to delete) applied
/// through a ``WriteContext``, with the outcome of each. A batch runs its items either each in a
/// savepoint of its own, so that a failing item leaves no trace and the others go on, or all in the
/// caller's savepoint, where the first error ends the run. ``AtomicBatch`` and ``IndependentBatch``
/// decide which, and what is kept.
struct ItemBatch {
    var ctx: WriteContext
    let saving: [Record]
    let deleting: [Record.ID]
    let savePolicy: SavePolicy
    private(set) var saveOutcomes: [Record.ID: Result<Record, ShareSyncError>] = [:]
    private(set) var deleteOutcomes: [Record.ID: Result<Void, ShareSyncError>] = [:]

    init(ctx: WriteContext, saving: [Record], deleting: [Record.ID], savePolicy: SavePolicy) {
        self.ctx = ctx
        // Shares are applied after ordinary records, so a share can be saved in the same batch as its root.
        // (Without shares the array is taken as it is: records are large values, and copying a batch
        // of them costs more than a write statement.)
        // A record a deleteSelf reference names is saved before the record that refers to it (the
        // reference's check then sees whether it was saved: `checkDeleteSelfTargets`), and a new
        // parent before its new children (a participant's new child is in a hierarchy share's view
        // only once its parent is: before, a request with the child first refused it, `outsideView`).
        if saving.contains(where: { $0.recordType == Record.shareRecordType }) {
            self.saving = Record.orderedForTargets(saving.filter { $0.recordType != Record.shareRecordType })
                + saving.filter { $0.recordType == Record.shareRecordType }
        } else {
            self.saving = Record.orderedForTargets(saving)
        }
        self.deleting = deleting
        self.savePolicy = savePolicy
    }

    /// Whether an item failed in the last run.
    var hasFailure: Bool {
        saveOutcomes.values.contains { if case .failure = $0 { true } else { false } }
            || deleteOutcomes.values.contains { if case .failure = $0 { true } else { false } }
    }

    /// Forgets the outcomes of a run that was rolled back, and the context's memory of it.
    mutating func rollBack(to start: WriteContext) {
        ctx.rollBack(to: start)
        saveOutcomes = [:]
        deleteOutcomes = [:]
    }

    /// Turns every item that succeeded into `batchRequestFailed`: an atomic batch in which another
    /// item failed keeps nothing.
    mutating func failSucceededItems() {
        let batchFailed = { (id: Record.ID) in
            ShareSyncError(.batchRequestFailed, "not saved: another item of this atomic request failed", recordID: id)
        }
        for (id, outcome) in saveOutcomes { if case .success = outcome { saveOutcomes[id] = .failure(batchFailed(id)) } }
        for (id, outcome) in deleteOutcomes { if case .success = outcome { deleteOutcomes[id] = .failure(batchFailed(id)) } }
    }

    /// Runs every item once, `authorize` first for each: in a savepoint of its own when `perItem`,
    /// else directly (an error is thrown and ends the run). A record named twice fails each time
    /// with `duplicateItem`, and nothing of it is applied.
    mutating func run(in db: Database, perItem: Bool, authorize: (inout WriteContext) throws -> Void) throws {
        // A record named more than once (saved twice, saved and deleted) fails every time, before anything
        // of it is applied. Before, its first item was applied and the next refused: an answer keyed by
        // record name then said both "saved" and "duplicateItem" of one record.
        let duplicates = Self.duplicates(saving.map(\.recordID) + deleting)
        if saving.count >= ItemBatch.prefetchThreshold { try ctx.prefetch(saving) }
        saveOutcomes.reserveCapacity(saving.count)
        for record in saving {
            // Tried (saved or not, or refused as named twice), it is no longer to come later in this request.
            defer {
                if ctx.requestSaves?.isEmpty == false { ctx.requestSaves?[record.recordID.zoneID.zoneName]?.remove(record.recordID.recordName) }
            }
            guard !duplicates.contains(record.recordID) else {
                saveOutcomes[record.recordID] = .failure(Self.duplicate(record.recordID))
                continue
            }
            var saved: Record?
            let policy = savePolicy
            if let error = try attempt(in: db, perItem: perItem, { ctx in
                try authorize(&ctx)
                saved = try ctx.save(record, policy: policy)
            }) {
                saveOutcomes[record.recordID] = .failure(error)
            } else {
                saveOutcomes[record.recordID] = .success(saved!)
            }
        }
        for id in deleting {
            guard !duplicates.contains(id) else {
                deleteOutcomes[id] = .failure(Self.duplicate(id))
                continue
            }
            if let error = try attempt(in: db, perItem: perItem, { ctx in
                try authorize(&ctx)
                try ctx.deleteRecord(id)
            }) {
                deleteOutcomes[id] = .failure(error)
            } else {
                deleteOutcomes[id] = .success(())
            }
        }
    }

    /// From how many records a batch reads them ahead (below it, one statement each costs less).
    static let prefetchThreshold = 4

    /// The IDs that appear more than once in `ids`.
    private static func duplicates(_ ids: [Record.ID]) -> Set<Record.ID> {
        var seen: Set<Record.ID> = []
        var twice: Set<Record.ID> = []
        for id in ids where !seen.insert(id).inserted { twice.insert(id) }
        return twice
    }

    private static func duplicate(_ id: Record.ID) -> ShareSyncError {
        ShareSyncError(.invalidArguments, "record \(id.recordName) appears twice in one request", recordID: id, rule: .duplicateItem)
    }

    /// Runs one item; returns its error when it runs in its own savepoint (rolled back, with the
    /// context restored), else lets the error through.
    private mutating func attempt(in db: Database, perItem: Bool, _ body: (inout WriteContext) throws -> Void) throws -> ShareSyncError? {
        guard perItem else {
            try body(&ctx)
            return nil
        }
        var failure: ShareSyncError?
        let before = ctx
        var ctx = self.ctx
        try db.inSavepoint {
            do {
                try body(&ctx)
                return .commit
            } catch let error as ShareSyncError {
                failure = error
                return .rollback
            }
        }
        if failure != nil { ctx.rollBack(to: before) }
        self.ctx = ctx
        return failure
    }

    /// The saved records as stored after every change of the batch: a share saved in the same
    /// request changes its root's `share` field, so then they are read back.
    mutating func presentedOutcomes() throws -> ModifyRecordsResult {
        let sharesSaved = saving.contains { $0.recordType == Record.shareRecordType }
        // In place, and only what presenting changes (a share, a record in another zone ID form): a
        // copy of a batch's outcomes costs more than the rest of presenting them.
        for id in Array(saveOutcomes.keys) {
            guard case .success(let saved)? = saveOutcomes[id] else { continue }
            if sharesSaved, let stored = try ctx.loadRecord(zone: id.zoneID.zoneName, name: id.recordName) {
                saveOutcomes[id] = .success(ctx.present(stored, zoneID: id.zoneID))
            } else if saved.recordType == Record.shareRecordType || saved.recordID.zoneID != id.zoneID {
                saveOutcomes[id] = .success(ctx.present(saved, zoneID: id.zoneID))
            }
        }
        return ModifyRecordsResult(saveResults: saveOutcomes, deleteResults: deleteOutcomes)
    }
}

/// How a batch's items are kept: ``AtomicBatch`` (all or none) or ``IndependentBatch`` (each on its own).
protocol BatchStrategy {
    /// Runs the batch in `db` and settles sharing. Returns whether what succeeded is kept: false
    /// when nothing of the batch is (its outcomes then say why).
    static func apply(_ batch: inout ItemBatch, in db: Database, authorize: (inout WriteContext) throws -> Void) throws -> Bool
}

/// `atomically: true`: every item or none. The first try runs everything in one savepoint, with no
/// savepoint per item; almost every request succeeds this way. If anything fails, that try is rolled
/// back and the batch runs again item by item, to give each failing item its own error, and then is
/// rolled back too, every other item failing with `batchRequestFailed`.
enum AtomicBatch: BatchStrategy {
    static func apply(_ batch: inout ItemBatch, in db: Database, authorize: (inout WriteContext) throws -> Void) throws -> Bool {
        let start = batch.ctx
        var firstTryFailed = false
        try db.inSavepoint {
            do {
                try batch.run(in: db, perItem: false, authorize: authorize)
                if batch.hasFailure {  // duplicates fail without throwing
                    firstTryFailed = true
                    return .rollback
                }
                try batch.ctx.settleSharing()
                return .commit
            } catch is ShareSyncError {
                firstTryFailed = true
                return .rollback
            }
        }
        guard firstTryFailed else { return true }
        batch.rollBack(to: start)
        var failed = false
        try db.inSavepoint {
            try batch.run(in: db, perItem: true, authorize: authorize)
            failed = batch.hasFailure
            if !failed { try batch.ctx.settleSharing() }
            return failed ? .rollback : .commit
        }
        if failed { batch.failSucceededItems() }
        return !failed
    }
}

/// `atomically: false`: each item is kept or refused on its own, each in a savepoint of its own.
enum IndependentBatch: BatchStrategy {
    static func apply(_ batch: inout ItemBatch, in db: Database, authorize: (inout WriteContext) throws -> Void) throws -> Bool {
        try batch.run(in: db, perItem: true, authorize: authorize)
        try batch.ctx.settleSharing()
        return true
    }
}
