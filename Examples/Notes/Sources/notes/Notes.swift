import Foundation
import ShareSync
import Synchronization

/// `notes`: a notes app on ShareSync, with a command-line UI.
///
///     notes --home DIR [--name NAME] [--connected] [--auto]
///
/// It opens the node of its home (in process; with `--connected`, through the `sharesync run` daemon
/// of that home), syncs its private and shared databases with two sync engines, and reads commands,
/// one per line, on standard input:
///
///     whoami                          this node's user record name
///     topic NAME TITLE…               a new topic
///     note TOPIC NAME TEXT…           a new note in a topic
///     edit NAME TEXT…                 change a note's text (yours, or one shared with you)
///     share TOPIC USER [readOnly]     share a topic with someone; prints the URL to send them
///     accept URL                      accept a topic someone shared with you
///     sync                            send your edits, fetch everyone else's (merging conflicts)
///     list                            your topics and notes, and those shared with you
///     quit
///
/// Each answer is one or more lines, then `.`; errors start with `error:`. When two people edit the
/// same note, the one who syncs second gets the server's version in a `serverRecordChanged` failure,
/// and the app merges the two texts (`theirs + mine`) and saves again.
@main
struct Notes {
    static func main() async {
        var arguments = Array(CommandLine.arguments.dropFirst())
        func option(_ name: String) -> String? {
            guard let index = arguments.firstIndex(of: name), index + 1 < arguments.count else { return nil }
            defer { arguments.removeSubrange(index...(index + 1)) }
            return arguments[index + 1]
        }
        func flag(_ name: String) -> Bool {
            guard let index = arguments.firstIndex(of: name) else { return false }
            arguments.remove(at: index)
            return true
        }
        guard let home = option("--home") else {
            FileHandle.standardError.write(Data("usage: notes --home DIR [--name NAME] [--connected] [--auto]\n".utf8))
            exit(64)
        }
        let name = option("--name") ?? "Me"
        let connected = flag("--connected")
        let automatic = flag("--auto")
        do {
            let app = try await NotesApp.open(home: home, name: name, connected: connected, automatic: automatic)
            await app.run()
        } catch {
            FileHandle.standardError.write(Data("notes: \(error)\n".utf8))
            exit(1)
        }
    }
}

/// The app: a container, a store, and a sync engine per database.
final class NotesApp: Sendable {
    static let zoneID = RecordZone.ID(zoneName: "Notes")

    let container: Container
    let store: NotesStore
    let privateEngine: SyncEngine
    let sharedEngine: SyncEngine
    /// Fetches whose events have all been handled, per engine (private, shared): a fetch's
    /// `didFetchChanges` comes after every event of the sends and fetch before it.
    private let privateFetches = Atomic<Int>(0)
    private let sharedFetches = Atomic<Int>(0)
    private let consumers: Mutex<[Task<Void, Never>]> = Mutex([])

    static func open(home: String, name: String, connected: Bool, automatic: Bool) async throws -> NotesApp {
        let container: Container
        if connected {
            container = try await Container.connected(home: home)
        } else {
            if !FileManager.default.fileExists(atPath: home) {
                try Container.createHome(at: home, displayName: name, listen: HostAndPort(host: "127.0.0.1", port: 0))
            }
            container = try await Container.embedded(home: home)
        }
        let store = NotesStore(path: home + "/notes-app.json")
        return NotesApp(container: container, store: store, automatic: automatic)
    }

    private init(container: Container, store: NotesStore, automatic: Bool) {
        self.container = container
        self.store = store
        let states = store.engineStates
        privateEngine = SyncEngine(SyncEngine.Configuration(
            database: container.privateDatabase, stateSerialization: states.private, automaticallySync: automatic
        ) { id in store.record(id) })
        sharedEngine = SyncEngine(SyncEngine.Configuration(
            database: container.sharedDatabase, stateSerialization: states.shared, automaticallySync: automatic
        ) { id in store.record(id) })
        let tasks = [(privateEngine, false), (sharedEngine, true)].map { engine, shared in
            Task { [self] in
                for await event in engine.events {
                    self.handle(event, engine: engine, shared: shared)
                    if case .didFetchChanges = event {
                        if shared { self.sharedFetches.add(1, ordering: .releasing) } else { self.privateFetches.add(1, ordering: .releasing) }
                    }
                }
            }
        }
        consumers.withLock { $0 = tasks }
    }

    // MARK: Events

    private func handle(_ event: SyncEngine.Event, engine: SyncEngine, shared: Bool) {
        switch event {
        case .stateUpdate(let state):
            store.saveEngineState(state, shared: shared)
        case .fetchedRecordZoneChanges(let changes):
            store.apply(changes)
        case .sentRecordZoneChanges(let sent):
            store.saved(sent.savedRecords)
            for failure in sent.failedRecordSaves {
                guard failure.error.code == .serverRecordChanged, var merged = failure.error.serverRecord else {
                    say("error: \(failure.record.recordID.recordName) was not saved: \(failure.error)")
                    continue
                }
                // Theirs, then mine: nobody's words are lost. The server's change tag goes with it.
                let theirs = merged["text"]?.stringValue ?? ""
                let mine = failure.record["text"]?.stringValue ?? ""
                merged["text"] = .string(theirs == mine ? mine : "\(theirs) + \(mine)")
                store.edit(merged)
                engine.state.add(pendingRecordZoneChanges: [.saveRecord(merged.recordID)])
                say("merged \(merged.recordID.recordName): \(merged["text"]?.stringValue ?? "")")
            }
            for (id, error) in sent.failedRecordDeletes { say("error: \(id.recordName) was not deleted: \(error)") }
        case .shareAccepted(let zoneID):
            say("shared with you: \(zoneID.zoneName) of \(zoneID.ownerName)")
        case .shareRemoved(let zoneID):
            store.removeZone(zoneID)
            say("no longer shared with you: \(zoneID.zoneName) of \(zoneID.ownerName)")
        default:
            break
        }
    }

    /// Writes one line at once (unbuffered: whoever drives the app reads it as it comes).
    private func say(_ line: String) { FileHandle.standardOutput.write(Data((line + "\n").utf8)) }

    // MARK: Commands

    func run() async {
        while let line = readLine() {
            let words = line.split(separator: " ", omittingEmptySubsequences: true).map(String.init)
            guard let command = words.first else { continue }
            if command == "quit" { break }
            do {
                try await perform(command, Array(words.dropFirst()))
            } catch {
                say("error: \(error)")
            }
            say(".")
        }
        await privateEngine.stop()
        await sharedEngine.stop()
        for task in consumers.withLock({ $0 }) { await task.value }
        await container.close()
    }

    private func perform(_ command: String, _ arguments: [String]) async throws {
        switch command {
        case "whoami":
            say("user \(try await container.userRecordID().recordName)")
        case "topic" where arguments.count >= 2:
            var topic = Record(recordType: "Topic", recordID: Record.ID(recordName: arguments[0], zoneID: Self.zoneID))
            topic["title"] = .string(arguments.dropFirst().joined(separator: " "))
            store.edit(topic)
            privateEngine.state.add(pendingDatabaseChanges: [.saveZone(RecordZone(zoneID: Self.zoneID))])
            privateEngine.state.add(pendingRecordZoneChanges: [.saveRecord(topic.recordID)])
            say("topic \(arguments[0])")
        case "note" where arguments.count >= 3:
            guard let topic = store.record(named: arguments[0]), topic.recordType == "Topic" else {
                throw NotesError("no topic \(arguments[0])")
            }
            var note = Record(recordType: "Note", recordID: Record.ID(recordName: arguments[1], zoneID: topic.recordID.zoneID))
            note["text"] = .string(arguments.dropFirst(2).joined(separator: " "))
            note.setParent(topic.recordID)
            store.edit(note)
            engine(for: note.recordID).state.add(pendingRecordZoneChanges: [.saveRecord(note.recordID)])
            say("note \(arguments[1])")
        case "edit" where arguments.count >= 2:
            guard var note = store.record(named: arguments[0]) else { throw NotesError("no note \(arguments[0])") }
            note["text"] = .string(arguments.dropFirst().joined(separator: " "))
            store.edit(note)
            engine(for: note.recordID).state.add(pendingRecordZoneChanges: [.saveRecord(note.recordID)])
            say("edited \(arguments[0])")
        case "share" where arguments.count >= 2:
            try await sync()  // the topic must be saved before it can be shared
            guard let topic = store.record(named: arguments[0]), topic.recordType == "Topic" else {
                throw NotesError("no topic \(arguments[0])")
            }
            let database = container.privateDatabase
            let share: Share
            if let existing = topic.share {
                share = try await database.share(withID: existing.recordID)
            } else {
                share = try await database.createShare(rootRecordID: topic.recordID, title: topic["title"]?.stringValue)
            }
            let permission: Participant.Permission = arguments.count > 2 && arguments[2] == "readOnly" ? .readOnly : .readWrite
            let invitation = try await database.invite(
                UserIdentity.LookupInfo(userRecordName: arguments[1]), permission: permission, to: share)
            say("url \(invitation.url)")
        case "accept" where arguments.count == 1:
            let accepted = try await container.accept(arguments[0], timeout: .seconds(60))
            try await sync()
            say("accepted \(accepted.title ?? "a share") from \(accepted.ownerDisplayName ?? accepted.ownerName)")
        case "sync":
            try await sync()
            say("synced")
        case "list":
            let records = store.allRecords.sorted { ($0.recordType, $0.recordID.recordName) > ($1.recordType, $1.recordID.recordName) }
            for record in records {
                let from = record.recordID.zoneID.ownerName == RecordZone.ID.currentUserDefaultName ? "" : " (shared)"
                if record.recordType == "Topic" {
                    say("topic \(record.recordID.recordName) \(record["title"]?.stringValue ?? "")\(from)")
                } else if record.recordType == "Note" {
                    say("note \(record.recordID.recordName) \(record["text"]?.stringValue ?? "")\(from)")
                }
            }
        default:
            throw NotesError("unknown command or missing arguments: \(command) \(arguments.joined(separator: " "))")
        }
    }

    /// The engine of the database a record lives in.
    private func engine(for id: Record.ID) -> SyncEngine {
        id.zoneID.ownerName == RecordZone.ID.currentUserDefaultName ? privateEngine : sharedEngine
    }

    /// Sends and fetches on both databases until nothing is pending (a merged conflict is sent in the
    /// next round), then waits until every event has been handled.
    private func sync() async throws {
        for _ in 0..<4 {
            let (privateTarget, sharedTarget) = (privateFetches.load(ordering: .acquiring) + 1, sharedFetches.load(ordering: .acquiring) + 1)
            for engine in [privateEngine, sharedEngine] {
                try await engine.sendChanges()
                try await engine.fetchChanges()
            }
            await drain(privateTarget, sharedTarget)
            if privateEngine.state.pendingRecordZoneChanges.isEmpty, sharedEngine.state.pendingRecordZoneChanges.isEmpty,
                privateEngine.state.pendingDatabaseChanges.isEmpty
            {
                return
            }
        }
    }

    /// Waits until both engines' fetches up to these counts have had every event handled (at most 10 s).
    private func drain(_ privateTarget: Int, _ sharedTarget: Int) async {
        for _ in 0..<2000 {
            if privateFetches.load(ordering: .acquiring) >= privateTarget, sharedFetches.load(ordering: .acquiring) >= sharedTarget {
                return
            }
            try? await Task.sleep(for: .milliseconds(5))
        }
    }
}

struct NotesError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
