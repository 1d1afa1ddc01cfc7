import ArgumentParser
import ShareSyncCore
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
            abstract: "Create a zone (nothing changes if it exists).",
            discussion: "Example:\n  sharesync zone create Groceries")
        @OptionGroup var options: NodeOptions
        @Argument(help: "The zone's name.") var name: String

        func run() async throws {
            try await callNode(options, .zoneCreate(name: name), as: ZoneInfo.self) { "created zone \($0.zoneName)" }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List the zones, the default zone first.",
            discussion: "Example:\n  sharesync zone list --json")
        @OptionGroup var options: NodeOptions

        func run() async throws {
            try await callNode(options, .zoneList, as: [ZoneInfo].self) { $0.map(\.zoneName).joined(separator: "\n") }
        }
    }

    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Delete a zone, its records and its shares.",
            discussion: "Example:\n  sharesync zone delete Groceries")
        @OptionGroup var options: NodeOptions
        @Argument(help: "The zone's name.") var name: String

        func run() async throws {
            try await callNode(options, .zoneDelete(name: name), as: Done.self) { _ in "deleted zone \(name)" }
        }
    }
}

struct RecordCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "record",
        abstract: "Save, read, list and delete records.",
        discussion: """
            Example:
              sharesync record save --zone Groceries --type Item --name milk --field title=string:Milk --field count=int64:2
              sharesync record get --zone Groceries --name milk
            """,
        subcommands: [Save.self, Get.self, Delete.self, List.self])

    struct Save: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create a record, or set fields of an existing one (other fields are kept).",
            discussion: """
                Each --field is KEY=TYPE:VALUE. Types: string, int64, double, bool, date (ISO 8601 or \
                seconds since 1970), bytes (base64), reference (a record name in the same zone), \
                location (LAT,LON).

                Example:
                  sharesync record save --zone Groceries --type Item --name milk --parent list-1 \\
                    --field title=string:Milk --field done=bool:false --field at=location:48.85,2.35
                """)
        @OptionGroup var options: NodeOptions
        @Option(help: "The record's zone.") var zone: String
        @Option(help: "The record's type, such as Item.") var type: String
        @Option(help: "The record's name, unique in its zone.") var name: String
        @Option(help: "The parent record's name (same zone): the record joins its parent's share.") var parent: String?
        @Option(name: .customLong("field"), help: ArgumentHelp("A field to set.", valueName: "key=type:value"))
        var fields: [String] = []

        func validate() throws {
            for field in fields {
                do { _ = try FieldAssignment(parsing: field) } catch { throw ValidationError(error.message) }
            }
        }

        func run() async throws {
            let assignments = fields.map { try! FieldAssignment(parsing: $0) }
            try await callNode(
                options, .recordSave(zone: zone, type: type, name: name, parent: parent, fields: assignments),
                as: Record.self
            ) { "saved " + Output.describe($0) }
        }
    }

    struct Get: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Show one record.",
            discussion: "Example:\n  sharesync record get --zone Groceries --name milk --json")
        @OptionGroup var options: NodeOptions
        @Option(help: "The record's zone.") var zone: String
        @Option(help: "The record's name.") var name: String

        func run() async throws {
            try await callNode(options, .recordGet(zone: zone, name: name), as: Record.self) { Output.describe($0) }
        }
    }

    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Delete a record (and the records whose deleteSelf references point at it).",
            discussion: "Example:\n  sharesync record delete --zone Groceries --name milk")
        @OptionGroup var options: NodeOptions
        @Option(help: "The record's zone.") var zone: String
        @Option(help: "The record's name.") var name: String

        func run() async throws {
            try await callNode(options, .recordDelete(zone: zone, name: name), as: Done.self) { _ in
                "deleted record \(name)"
            }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List the records of a zone (with --shared: of the shared database; not available yet).",
            discussion: "Example:\n  sharesync record list --zone Groceries --json")
        @OptionGroup var options: NodeOptions
        @Option(help: "The zone.") var zone: String?
        @Flag(help: "List what others share with this node (needs the participant sync engine).") var shared = false

        func validate() throws {
            if !shared, zone == nil { throw ValidationError("record list needs --zone (or --shared)") }
        }

        func run() async throws {
            if shared { throw ParticipantSide.notAvailable("record list --shared") }
            try await callNode(options, .recordList(zone: zone!), as: [Record].self) {
                $0.map(Output.describe).joined(separator: "\n")
            }
        }
    }
}
