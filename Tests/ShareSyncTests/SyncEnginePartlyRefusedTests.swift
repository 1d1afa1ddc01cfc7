import Foundation
@testable import ShareSync
@testable import ShareSyncNode
import Synchronization
import Testing

private final class Counter: Sendable {
    let count = Atomic<Int>(0)
}

/// A send the participant's node cuts into several requests (the owner takes at most 4 items per
/// request), of which the owner refuses the second as a whole: the third was never sent.
@Suite struct SyncEnginePartlyRefusedTests {
    @Test("the items of a request the owner refused are reported failed; those never sent stay pending and go again")
    func aSendRefusedPartWay() async throws {
        let folder = "/tmp/ss-api-" + UUID().uuidString.prefix(8).lowercased()
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let ownerIdentity = try Container.createHome(
            at: folder + "/alice", displayName: "Alice", listen: HostAndPort(host: "127.0.0.1", port: 0))
        var limits = Limits()
        limits.maximumItemsPerRequest = 4
        let alice = try await Container.embedded(home: folder + "/alice", controlSocket: false, ownerLimits: limits)
        do {
            try await runTheSend(alice, ownerName: ownerIdentity.userRecordName)
        } catch {
            await alice.close()
            throw error
        }
        await alice.close()
    }

    private func runTheSend(_ alice: Container, ownerName: String) async throws {
        try await withNode(.embedded, name: "Bob") { bob in
            let db = alice.privateDatabase
            let zoneID = RecordZone.ID(zoneName: "Topics")
            try await saveTopic(in: db, zone: zoneID)
            let share = try await db.createShare(forZone: zoneID)
            try await bob.join(share, of: db, permission: .readWrite)
            let sharedZone = RecordZone.ID(zoneName: "Topics", ownerName: ownerName)
            func id(_ name: String) -> Record.ID { Record.ID(recordName: name, zoneID: sharedZone) }

            let store = AppStore()
            let (engine, events) = store.startEngine(bob.container.sharedDatabase, automatic: false)
            for i in 0..<12 {
                var note = Record(recordType: "Note", recordID: id("n\(i)"))
                note["title"] = .string("note \(i)")
                store.edit(note)
            }
            engine.state.add(pendingRecordZoneChanges: (0..<12).map { .saveRecord(id("n\($0)")) })

            // The owner takes the first request (n0-n3), refuses the second (n4-n7) as a whole, and
            // takes every request after it.
            guard case .embedded(let running) = alice.transport else {
                Issue.record("not an embedded node")
                return
            }
            let registry = running.server.registry
            let requests = Counter()
            registry.injectedRefusalsHeldFor.store(1, ordering: .relaxed)
            registry.injectedRefusals.withLock {
                $0["modifyRecords"] = ShareSyncError(.permissionFailure, "refused as a whole (injected)", rule: .readOnlyParticipant)
            }
            registry.onWriteRequest.withLock {
                $0 = { if requests.count.wrappingAdd(1, ordering: .relaxed).newValue == 3 { registry.injectedRefusals.withLock { $0 = [:] } } }
            }
            for _ in 0..<5 where !engine.state.pendingRecordZoneChanges.isEmpty {
                try await engine.sendChanges()
            }
            registry.onWriteRequest.withLock { $0 = nil }
            #expect(engine.state.pendingRecordZoneChanges.isEmpty)
            await engine.stop()
            await events.value

            let ownerZone = RecordZone.ID(zoneName: "Topics")
            var onOwner: [String] = []
            for i in 0..<12 where (try? await db.record(for: Record.ID(recordName: "n\(i)", zoneID: ownerZone))) != nil {
                onOwner.append("n\(i)")
            }
            // Before the engine kept them, n8-n11 (never sent) were reported failed with the refusal.
            #expect(onOwner == ["n0", "n1", "n2", "n3", "n8", "n9", "n10", "n11"])
            let failed = store.sentRecordZoneChanges.flatMap(\.failedRecordSaves)
            #expect(failed.map(\.record.recordID.recordName).sorted() == ["n4", "n5", "n6", "n7"])
            #expect(failed.allSatisfy { $0.error.code == .permissionFailure }, "\(failed.map(\.error))")
            let saved = store.sentRecordZoneChanges.flatMap(\.savedRecords).map(\.recordID.recordName)
            #expect(Set(saved) == Set(onOwner))
            #expect(requests.count.load(ordering: .relaxed) == 3)
        }
    }
}
