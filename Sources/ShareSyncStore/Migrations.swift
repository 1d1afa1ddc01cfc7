import GRDB
import ShareSyncCore

extension DatabaseMigrator {
    /// Runs the migrations `writer` lacks, after checking that no newer sharesync migrated it. GRDB
    /// ignores migrations it does not know, so an older build would open a newer file as if it were
    /// its own: serving a feed from tables a later migration stopped filling, or failing statement by
    /// statement on a column it lacks, while the node reports it is running. `what` names the file in
    /// the error (`the private database`).
    func migrateRefusingNewer(_ writer: any DatabaseWriter, what: String) throws {
        let unknown = try writer.read { db in
            let known = Set(migrations)
            return try appliedIdentifiers(db).filter { !known.contains($0) }.sorted()
        }
        guard unknown.isEmpty else {
            let file = writer.path.isEmpty || writer.path == ":memory:" ? "" : " (\(writer.path))"
            throw ShareSyncError(
                .internalError,
                "\(what)\(file) was written by a newer sharesync: it has migrations this build does not know (\(unknown.joined(separator: ", "))). Run that version or a later one; nothing was changed")
        }
        try migrate(writer)
    }
}
