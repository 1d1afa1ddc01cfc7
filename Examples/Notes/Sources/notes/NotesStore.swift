import Foundation
import ShareSync
import Synchronization

/// The app's own store: the topics and notes it knows (its copies of the records, with their change
/// tags), the ones edited here and not yet saved, and each sync engine's state. It is kept in a JSON
/// file, so the app resumes where it left off.
final class NotesStore: Sendable {
    struct Saved: Codable {
        var records: [Record.ID: StoredRecord] = [:]
        var dirty: Set<Record.ID> = []
        var privateEngine: SyncEngine.State.Serialization?
        var sharedEngine: SyncEngine.State.Serialization?
    }

    /// A record as the app keeps it: its fields as text, its parent, and the record itself (for its
    /// change tag and system fields) in the library's JSON form.
    struct StoredRecord: Codable {
        var record: Record
    }

    private let path: String
    private let state: Mutex<Saved>

    init(path: String) {
        self.path = path
        let saved = (try? Data(contentsOf: URL(fileURLWithPath: path))).flatMap { try? JSONDecoder().decode(Saved.self, from: $0) }
        state = Mutex(saved ?? Saved())
    }

    private func persist(_ saved: Saved) {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        if let data = try? encoder.encode(saved) { try? data.write(to: URL(fileURLWithPath: path), options: .atomic) }
    }

    private func update<T>(_ body: (inout Saved) -> T) -> T {
        state.withLock { saved in
            let result = body(&saved)
            persist(saved)
            return result
        }
    }

    var engineStates: (private: SyncEngine.State.Serialization?, shared: SyncEngine.State.Serialization?) {
        state.withLock { ($0.privateEngine, $0.sharedEngine) }
    }

    func saveEngineState(_ serialization: SyncEngine.State.Serialization, shared: Bool) {
        update { saved in
            if shared { saved.sharedEngine = serialization } else { saved.privateEngine = serialization }
        }
    }

    func record(_ id: Record.ID) -> Record? { state.withLock { $0.records[id]?.record } }

    /// The record of that name, in any zone (names are unique enough for a small app).
    func record(named name: String) -> Record? {
        state.withLock { saved in saved.records.values.map(\.record).first { $0.recordID.recordName == name } }
    }

    var allRecords: [Record] { state.withLock { $0.records.values.map(\.record) } }

    /// A local edit: kept, and marked dirty until an engine saves it.
    func edit(_ record: Record) {
        update { saved in
            saved.records[record.recordID] = StoredRecord(record: record)
            saved.dirty.insert(record.recordID)
        }
    }

    /// Records fetched from the database: they replace clean copies. A copy edited here stays until its
    /// save succeeds or conflicts (then the app merges).
    func apply(_ changes: SyncEngine.FetchedRecordZoneChanges) {
        update { saved in
            for record in changes.modifications where !saved.dirty.contains(record.recordID) {
                saved.records[record.recordID] = StoredRecord(record: record)
            }
            for deleted in changes.deletions { saved.records.removeValue(forKey: deleted.recordID) }
        }
    }

    /// A zone that left the shared database: its records go.
    func removeZone(_ zoneID: RecordZone.ID) {
        update { saved in
            for id in saved.records.keys where id.zoneID == zoneID { saved.records.removeValue(forKey: id) }
        }
    }

    /// Records saved: their new versions (with new change tags) are clean.
    func saved(_ records: [Record]) {
        update { saved in
            for record in records {
                saved.records[record.recordID] = StoredRecord(record: record)
                saved.dirty.remove(record.recordID)
            }
        }
    }
}
