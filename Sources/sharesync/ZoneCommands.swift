import ArgumentParser
import Foundation
import ShareSync
import ShareSyncNode

struct ZoneCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "zone",
        abstract: "Create, list and delete zones of your private database.",
        discussion: """
            Example:
              sharesync zone create Groceries
              sharesync zone list --json
            """,
        subcommands: [Create.self, List.self, Delete.self])

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "create",
            abstract: "Create a zone (nothing changes if it exists).",
            discussion: "Example:\n  sharesync zone create Groceries")
        @OptionGroup var options: NodeOptions
        @Argument(help: "The zone's name.") var name: String

        func run() async throws {
            try await callNode(options, .zoneCreate(name: name), as: ZoneInfo.self) {
                $0.created == false ? "zone \($0.zoneName) already exists" : "created zone \($0.zoneName)"
            }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "list",
            abstract: "List the zones, the default zone first (with --shared: the zones shared with you, by owner).",
            discussion: "Example:\n  sharesync zone list --json\n  sharesync zone list --shared")
        @OptionGroup var options: NodeOptions
        @Flag(help: "List the zones others share with this node: owner, zone, record count.") var shared = false

        func run() async throws {
            if shared {
                try await callNode(options, .sharedZoneList, as: [SharedZoneInfo].self) {
                    $0.isEmpty
                        ? "no zones are shared with this node"
                        : $0.map { "\($0.owner)  \($0.zoneName)  \($0.records) records" }.joined(separator: "\n")
                }
                return
            }
            try await callNode(options, .zoneList, as: [ZoneInfo].self) { $0.map(\.zoneName).joined(separator: "\n") }
        }
    }

    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "delete",
            abstract: "Delete a zone, its records and its shares.",
            discussion: "Example:\n  sharesync zone delete Groceries")
        @OptionGroup var options: NodeOptions
        @Argument(help: "The zone's name.") var name: String

        func run() async throws {
            try await runOnNode(options) { _ in "deleted zone \(name)" } _: { [name] in
                try await $0.privateDatabase.deleteRecordZone(withID: RecordZone.ID(zoneName: name))
                return Done()
            }
        }
    }
}

struct RecordCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "record",
        abstract: "Save, read, list, delete and import records.",
        discussion: """
            With --shared, a command works on a zone someone shares with this node: reads come from the \
            local replica (they work while the owner is offline), writes go to the owner (or wait in the \
            outbox while it is unreachable). --owner picks the owner when several share a zone of that name: \
            their user record name, or their name or email when no other owner has it.

            Example:
              sharesync record save --zone Groceries --type Item --name milk --field title=string:Milk --field count=int64:2
              sharesync record get --zone Groceries --name milk
              sharesync record list --shared --zone Groceries
              sharesync record import --zone Groceries --file items.jsonl
            """,
        subcommands: [Save.self, Get.self, Delete.self, List.self, Query.self, Import.self])

    /// --shared and --owner.
    struct SharedOptions: ParsableArguments {
        @Flag(help: "Work on a zone shared with this node (the replica) rather than the private database.")
        var shared = false
        @Option(help: "With --shared: the owner, by user record name, name or email (needed when several owners share the zone name).")
        var owner: String?

        func validate() throws {
            if owner != nil, !shared { throw ValidationError("--owner goes with --shared") }
        }
    }

    static func describe(_ result: SharedWriteResult) -> String {
        if result.leavesShare == true {
            return switch result.outcome {
            case .sent: "sent: you left the share (a participant deleting a share record leaves it); its records leave this node"
            case .queued: "queued: you leave the share (a participant deleting a share record leaves it) once the owner is reached; `sharesync outbox` lists it"
            }
        }
        return switch result.outcome {
        case .sent: "sent" + (result.record.map { ": saved " + Output.describe($0) } ?? "")
        case .queued: "queued (not sent now: the owner is not connected, or earlier writes to it wait); `sharesync outbox` lists it until the owner accepts it"
        }
    }

    /// A shared record for people, marked when it is this node's own write not yet accepted.
    static func describe(_ shared: SharedRecord) -> String {
        var lines = Output.describe(shared.record).split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        if let marker = shared.marker { lines[0] += "  " + marker }
        return lines.joined(separator: "\n")
    }

    struct Save: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "save",
            abstract: "Create a record, or set fields of an existing one (other fields are kept).",
            discussion: """
                Each --field is KEY=TYPE:VALUE. Types: string, int64, double, bool, date (ISO 8601, \
                2026-11-21T10:00:00Z or 2026-11-21 for midnight UTC, or seconds since 1970), bytes (base64), reference (a record name in the same zone, with an \
                optional action: NAME:deleteSelf deletes this record when NAME is deleted, and NAME must \
                exist (referenceViolation otherwise), NAME:none (the default) leaves it and may name any \
                record; a NAME holding a colon takes its action, a:b:none), location (LAT,LON). --type is needed only to create a record: \
                an existing record keeps its type.

                Save policies, as CloudKit has them (--policy):
                  changedKeys               set the given fields over the stored record, keep the others
                                            (the default in your private database)
                  ifServerRecordUnchanged   save only if the record has not changed since you read it
                                            (the default with --shared, and with --if-tag)
                  allKeys                   replace the record by the one sent (last writer wins)
                --if-tag TAG saves against a change tag you know (`record get` shows it): if the record \
                changed since, the save fails with serverRecordChanged and shows the stored record (exit \
                65; with --json, the error's "serverRecord"). In your private database, \
                ifServerRecordUnchanged without --if-tag saves only a record that does not exist yet.

                With --shared, the record sent is this node's copy (its pending write, else the \
                replica's record) with the fields set, and its change tag (or --if-tag). If the owner's \
                record changed since, the save fails with serverRecordChanged and shows the owner's \
                record (exit 65); a write queued while the owner was offline stays in `sharesync outbox` \
                as a conflict instead. --policy changedKeys or allKeys make the last writer win.

                Example:
                  sharesync record save --zone Groceries --type Item --name milk --parent list-1 \\
                    --field title=string:Milk --field done=bool:false --field at=location:48.85,2.35
                  sharesync record save --zone Groceries --type Note --name note-1 --field item=reference:milk:deleteSelf
                  sharesync record save --zone Groceries --name milk --field done=bool:true --if-tag 3mxnrfqpdu6h9
                  sharesync record save --shared --zone Groceries --name milk \\
                    --field 'title=string:Oat milk' --policy changedKeys
                """)
        @OptionGroup var options: NodeOptions
        @Option(help: "The record's zone.") var zone: String
        @Option(help: "The record's type, such as Item (needed only to create a record).") var type: String?
        @Option(help: "The record's name, unique in its zone.") var name: String
        @Option(help: "The parent record's name (same zone; it must exist): the record joins its parent's share.") var parent: String?
        @Option(name: .customLong("field"), help: ArgumentHelp("A field to set.", valueName: "key=type:value"))
        var fields: [String] = []
        @OptionGroup var sharing: SharedOptions
        @Option(help: ArgumentHelp(
            "ifServerRecordUnchanged, changedKeys or allKeys (see above).", valueName: "policy"))
        var policy: SavePolicy?
        @Option(name: .customLong("if-tag"), help: ArgumentHelp(
            "Save only if the record's change tag is still TAG (else serverRecordChanged).", valueName: "tag"))
        var ifTag: String?

        func validate() throws {
            var keys: Set<String> = []
            for field in fields {
                let assignment: FieldAssignment
                do { assignment = try FieldAssignment(parsing: field) } catch { throw ValidationError(error.message) }
                // Given twice, the last one used to win in silence.
                guard keys.insert(assignment.key).inserted else {
                    throw ValidationError("--field \(assignment.key.debugDescription) is given twice: give each field once")
                }
            }
            if let ifTag {
                if ifTag.isEmpty { throw ValidationError("--if-tag must not be empty") }
                if let policy, policy != .ifServerRecordUnchanged {
                    throw ValidationError("--if-tag goes with --policy ifServerRecordUnchanged, not \(policy.rawValue)")
                }
            }
        }

        func run() async throws {
            let assignments = fields.map { try! FieldAssignment(parsing: $0) }
            if sharing.shared {
                try await callNode(
                    options,
                    .sharedRecordSave(
                        owner: sharing.owner, zone: zone, type: type, name: name, parent: parent, fields: assignments,
                        policy: policy, ifTag: ifTag),
                    as: SharedWriteResult.self, human: RecordCommand.describe)
                return
            }
            try await callNode(
                options,
                .recordSave(
                    zone: zone, type: type, name: name, parent: parent, fields: assignments, policy: policy, ifTag: ifTag),
                as: Record.self
            ) { "saved " + Output.describe($0) }
        }
    }

    struct Get: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "get",
            abstract: "Show one record.",
            discussion: """
                With --shared, a write of this node the owner has not accepted yet shows in place of the \
                replica's record, marked [pending] (JSON: "pending": true) or [conflict] (JSON: \
                "conflict": true; see `sharesync outbox`), with its outbox ID.

                Example:
                  sharesync record get --zone Groceries --name milk --json
                  sharesync record get --shared --zone Groceries --name milk
                """)
        @OptionGroup var options: NodeOptions
        @Option(help: "The record's zone.") var zone: String
        @Option(help: "The record's name.") var name: String
        @OptionGroup var sharing: SharedOptions

        func run() async throws {
            if sharing.shared {
                try await callNode(
                    options, .sharedRecordGet(owner: sharing.owner, zone: zone, name: name), as: SharedRecord.self,
                    human: RecordCommand.describe)
                return
            }
            try await runOnNode(options, human: Output.describe) { [zone, name] in
                try await $0.privateDatabase.record(for: Record.ID(recordName: name, zoneID: RecordZone.ID(zoneName: zone)))
            }
        }
    }

    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "delete",
            abstract: "Delete a record (and the records whose deleteSelf references point at it).",
            discussion: "Example:\n  sharesync record delete --zone Groceries --name milk")
        @OptionGroup var options: NodeOptions
        @Option(help: "The record's zone.") var zone: String
        @Option(help: "The record's name.") var name: String
        @OptionGroup var sharing: SharedOptions

        func run() async throws {
            if sharing.shared {
                try await callNode(
                    options, .sharedRecordDelete(owner: sharing.owner, zone: zone, name: name), as: SharedWriteResult.self,
                    human: RecordCommand.describe)
                return
            }
            try await runOnNode(options) { _ in "deleted record \(name)" } _: { [zone, name] in
                try await $0.privateDatabase.deleteRecord(withID: Record.ID(recordName: name, zoneID: RecordZone.ID(zoneName: zone)))
                return Done()
            }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "list",
            abstract: "List the records of a zone (with --shared: of a zone shared with this node).",
            discussion: """
                With --shared, writes of this node the owner has not accepted yet show in place of the \
                replica's records, marked as `record get` marks them.

                --jsonl prints one record per line, in the compact JSON form `record import` reads, \
                leaving out share records (they are not imported: shares are made with `share create`): \
                an export that `record import` takes back as it is.

                Example:
                  sharesync record list --zone Groceries --json
                  sharesync record list --zone Groceries --jsonl > groceries.jsonl
                  sharesync record list --shared --zone Groceries
                """)
        @OptionGroup var options: NodeOptions
        @Option(help: "The zone.") var zone: String
        @OptionGroup var sharing: SharedOptions
        @Flag(help: "One record per line, as `record import` reads them (JSON Lines), without share records.")
        var jsonl = false

        func validate() throws {
            if jsonl, options.json { throw ValidationError("--jsonl and --json are two output forms: give one") }
        }

        /// Records asked for per request: the daemon answers a listing in pages, so that a large zone
        /// never makes one answer of hundreds of megabytes.
        static let pageSize = 1_000

        func run() async throws {
            let (owner, zone) = (sharing.owner, zone)
            if sharing.shared, jsonl {
                // The zone as this node shows it: its own writes not yet accepted included, the records
                // it deletes left out, and no share records.
                try await runOnNode(options, human: Self.jsonLines) { node in
                    try await Self.allPages(name: \.record.recordID.recordName) { after in
                        try await node.send(.sharedRecordList(owner: owner, zone: zone, after: after, limit: Self.pageSize), as: [SharedRecord].self)
                    }.filter { !$0.deleted && $0.record.recordType != Record.shareRecordType }.map(\.record)
                }
                return
            }
            if sharing.shared {
                try await runOnNode(options, human: { (records: [SharedRecord]) in records.map(RecordCommand.describe).joined(separator: "\n") }) { node in
                    try await Self.allPages(name: \.record.recordID.recordName) { after in
                        try await node.send(.sharedRecordList(owner: owner, zone: zone, after: after, limit: Self.pageSize), as: [SharedRecord].self)
                    }
                }
                return
            }
            if jsonl {
                try await runOnNode(options, human: Self.jsonLines) { node in
                    try await Self.allPages(name: \.recordID.recordName) { after in
                        try await node.send(.recordList(zone: zone, after: after, limit: Self.pageSize), as: [Record].self)
                    }.filter { $0.recordType != Record.shareRecordType }
                }
                return
            }
            try await runOnNode(options, human: { (records: [Record]) in records.map(Output.describe).joined(separator: "\n") }) { node in
                try await Self.allPages(name: \.recordID.recordName) { after in
                    try await node.send(.recordList(zone: zone, after: after, limit: Self.pageSize), as: [Record].self)
                }
            }
        }

        /// Records as JSON Lines: each the compact form of `record get --json`.
        static func jsonLines(_ records: [Record]) -> String {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
            return records.compactMap { try? encoder.encode($0) }.map { String(decoding: $0, as: UTF8.self) }.joined(separator: "\n")
        }

        /// Every page, each asked for after the last name of the one before, until one comes back empty.
        static func allPages<T>(name: (T) -> String, _ page: (String?) async throws -> [T]) async throws -> [T] {
            var all: [T] = []
            var after: String?
            while true {
                let next = try await page(after)
                guard let last = next.last else { return all }
                all += next
                after = name(last)
            }
        }
    }

    struct Import: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "import",
            abstract: "Save many records into a zone of your private database from a JSON Lines file.",
            discussion: """
                Each line is one record in the JSON form `record get --json` prints (`record list --jsonl` \
                writes a zone that way); only recordName, \
                recordType, fields and parent matter (the zone is --zone, and an existing record of that \
                name is replaced). Records are sent to the daemon in batches of at most --batch-size \
                records and at most 3 MiB of JSON; each batch is one transaction: all of its records are \
                saved, or none. The output says which batches committed. Records are saved by name, so \
                running the same import again after a failure saves nothing twice; --skip N leaves out \
                the first N records (those of the batches already committed). Use --file - for standard \
                input. A deleteSelf reference is taken as it is, even to a record that is not there (yet): \
                a line may name a record of a later batch.

                --policy says what happens to a record already there: allKeys (the default) replaces it, \
                changedKeys sets the line's fields over it (others kept), and ifServerRecordUnchanged \
                saves a line only if its recordChangeTag is the stored record's (a line without one must \
                be a new record): otherwise the batch fails with serverRecordChanged, showing the stored \
                record, and nothing of it is saved.

                Example:
                  sharesync record import --zone Groceries --file items.jsonl
                  sharesync record import --zone Groceries --file edited.jsonl --policy ifServerRecordUnchanged
                  echo '{"recordName":"milk","recordType":"Item","fields":{"title":{"type":"STRING","value":"Milk"}}}' | sharesync record import --zone Groceries --file -
                """)
        @OptionGroup var options: NodeOptions
        @Option(help: "The zone (created if needed).") var zone: String
        @Option(help: ArgumentHelp("The JSON Lines file, or - for standard input.", valueName: "path")) var file: String
        @Option(help: ArgumentHelp("allKeys (default), changedKeys or ifServerRecordUnchanged (see above).", valueName: "policy"))
        var policy: SavePolicy?
        @Option(parsing: .unconditional, help: "Records per batch (one transaction each).") var batchSize = 2000
        @Option(parsing: .unconditional, help: "Leave out the first N records of the file (to resume after the batches that committed).")
        var skip = 0

        /// The most bytes of record JSON in one batch: a control line is at most 4 MiB, and a record of the
        /// largest legal size (1 MB) always fits in a batch of its own.
        static let batchBytes = 3 * 1024 * 1024

        func validate() throws {
            guard (1...10_000).contains(batchSize) else { throw ValidationError("--batch-size must be 1...10000") }
            guard skip >= 0 else { throw ValidationError("--skip must be 0 or more") }
        }

        func run() async throws {
            let data: Data
            if file == "-" {
                data = FileHandle.standardInput.readDataToEndOfFile()
            } else {
                do {
                    data = try Data(contentsOf: URL(fileURLWithPath: file))
                } catch {
                    throw Output.usage("cannot read \(file): \(Self.reason(error, path: file))")
                }
            }
            var records: [Record] = []
            var lineOfName: [String: Int] = [:]
            // Split on the byte 0x0A: as Characters, a "\r\n" pair is one, and a file with Windows line
            // ends read as one line.
            for (number, line) in data.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).enumerated() {
                let text = String(decoding: line, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
                if text.isEmpty { continue }
                do {
                    guard var object = try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any] else {
                        throw ShareSyncError(.invalidArguments, "not a JSON object")
                    }
                    object["zoneID"] = ["zoneName": zone]
                    // Only a save against a known tag looks at the line's tag.
                    if policy != .ifServerRecordUnchanged { object.removeValue(forKey: "recordChangeTag") }
                    // The record reader the node uses: a line of the wrong shape is named by its path
                    // ("expected … at fields"), not Foundation's error domain and code.
                    records.append(try Record(jsonData: try JSONSerialization.data(withJSONObject: object)))
                } catch {
                    let problem = (error as? ShareSyncError)?.message ?? "not valid JSON (one JSON object per line)"
                    throw Output.usage("\(file) line \(number + 1): not a record: \(problem)")
                }
                // Found here, with their lines, rather than as a failed batch: a share record (shares are
                // made with `share create`), and a name given twice (which one won depended on --batch-size).
                let record = records[records.count - 1]
                if record.recordType == Record.shareRecordType {
                    throw Output.usage("\(file) line \(number + 1): \(record.recordID.recordName) is a share record; shares are not imported (see `share create`)")
                }
                if let first = lineOfName.updateValue(number + 1, forKey: record.recordID.recordName) {
                    throw Output.usage("\(file) lines \(first) and \(number + 1) both hold record \(record.recordID.recordName): give each record once")
                }
            }
            // Past the end is a mistake (a resume from another file, a typo): nothing would be saved.
            guard skip <= records.count else {
                throw Output.usage("--skip \(skip) is past the end of \(file): it holds \(records.count) records")
            }
            let batches = Self.batches(Array(records.dropFirst(skip)), maximumCount: batchSize, maximumBytes: Self.batchBytes)
            var saved = 0
            var committed = 0
            do {
                try await onNode(options) { container in
                    // The default zone always exists (and creating it is refused).
                    if !RecordZone.ID(zoneName: zone).isDefaultZone {
                        try await container.privateDatabase.save(RecordZone(zoneID: RecordZone.ID(zoneName: zone)))
                    }
                    for (number, batch) in batches.enumerated() {
                        saved += try await container.send(.recordImport(zone: zone, records: batch, policy: policy), as: ImportResult.self).saved
                        committed = number + 1
                        if !options.json {
                            let first = skip + saved - batch.count + 1
                            print("batch \(committed) of \(batches.count): records \(first)-\(skip + saved) committed")
                        }
                    }
                }
                Output.emit(ImportResult(saved: saved, batches: batches.count), json: options.json) {
                    "imported \($0.saved) record\($0.saved == 1 ? "" : "s") into zone \(zone) in \(batches.count) batch\(batches.count == 1 ? "" : "es")"
                }
            } catch {
                let failed = committed < batches.count ? batches[committed].count : 0
                // The container's calls throw ShareSyncError (control errors come through as one).
                let code = (error as? ShareSyncError)?.code
                var progress = committed == 0
                    ? "no batch committed: no record of this import was saved"
                    : "batches 1-\(committed) of \(batches.count) committed (records \(skip + 1)-\(skip + saved)); batch "
                        + "\(committed + 1) (records \(skip + saved + 1)-\(skip + saved + failed)) and those after it were not "
                        + "saved: run the same command with --skip \(skip + saved) to resume"
                if code == .networkFailure || code == .operationCancelled {
                    // The node went away while it worked on the batch: whether it was saved is not known.
                    progress = (committed == 0 ? "no batch before it was committed" : "batches 1-\(committed) of \(batches.count) "
                        + "committed (records \(skip + 1)-\(skip + saved))") + "; whether batch \(committed + 1) (records "
                        + "\(skip + saved + 1)-\(skip + saved + failed)) was saved is not known, as the connection to the node "
                        + "ended before its answer: check the zone, then resume with --skip \(skip + saved) (it was not saved) "
                        + "or --skip \(skip + saved + failed) (it was)"
                }
                // With --json, one JSON object on standard error (as the root help promises): the progress
                // goes into its message. Before, a plain line followed the JSON.
                if options.json, var failure = error as? ShareSyncError {
                    failure.message += " (\(progress))"
                    throw Output.fail(failure)
                }
                let exit = Output.fail(error)
                Output.error(progress)
                throw exit
            }
        }

        /// Why `path` could not be read, in a few words (not Foundation's error domain and code).
        static func reason(_ error: any Error, path: String) -> String {
            var isDirectory: ObjCBool = false
            if !FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) { return "no such file" }
            if isDirectory.boolValue { return "it is a folder" }
            if !FileManager.default.isReadableFile(atPath: path) { return "permission denied" }
            return (error as NSError).localizedDescription
        }

        /// Records in order, in batches of at most `maximumCount` records and (but for a single record)
        /// `maximumBytes` bytes of JSON.
        static func batches(_ records: [Record], maximumCount: Int, maximumBytes: Int) -> [[Record]] {
            records.batched(maximumCount: maximumCount, maximumBytes: maximumBytes) { (try? $0.jsonData().count) ?? 0 }
        }
    }
}
