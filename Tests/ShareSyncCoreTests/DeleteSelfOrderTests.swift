import Testing

@testable import ShareSyncCore

/// The order a write's saves go in: a record a `deleteSelf` reference names before the one that
/// refers to it (the owner refuses a reference to a record not saved yet).
@Suite("Saves ordered for deleteSelf targets")
struct DeleteSelfOrderTests {
    let topics = RecordZone.ID(zoneName: "Topics")

    func record(_ name: String, zone: RecordZone.ID? = nil, deleteSelf targets: [String] = [], none: [String] = []) -> Record {
        let zone = zone ?? topics
        var record = Record(recordType: "Note", recordID: Record.ID(recordName: name, zoneID: zone))
        for (i, target) in targets.enumerated() {
            record["d\(i)"] = .reference(Record.Reference(recordID: Record.ID(recordName: target, zoneID: zone), action: .deleteSelf))
        }
        for (i, target) in none.enumerated() {
            record["n\(i)"] = .reference(Record.Reference(recordID: Record.ID(recordName: target, zoneID: zone), action: .none))
        }
        return record
    }

    func names(_ records: [Record]) -> [String] { Record.orderedForDeleteSelfTargets(records).map(\.recordID.recordName) }

    @Test("targets come before their referrers; everything else keeps its order")
    func targetsFirst() {
        #expect(names([record("a"), record("b"), record("c")]) == ["a", "b", "c"])
        // Plain references do not order anything.
        #expect(names([record("a", none: ["b"]), record("b")]) == ["a", "b"])
        #expect(names([record("a", deleteSelf: ["x"]), record("b"), record("x")]) == ["x", "a", "b"])
        // A chain, given backwards, comes out target first, as long as it is.
        let chain = (0..<5_000).map { i in record("r\(i)", deleteSelf: i == 4_999 ? [] : ["r\(i + 1)"]) }
        #expect(names(chain) == (0..<5_000).reversed().map { "r\($0)" })
        // Several targets, in the order of their place in the write.
        #expect(names([record("a", deleteSelf: ["z", "y"]), record("y"), record("z")]) == ["y", "z", "a"])
        // A target that is not in the write, or in another zone of the same name, orders nothing.
        let other = RecordZone.ID(zoneName: "Other")
        #expect(names([record("a", deleteSelf: ["ghost"]), record("b", zone: other, deleteSelf: ["c"]), record("c")]) == ["a", "b", "c"])
    }

    @Test("with deleteSelf references in the write, a new parent comes before its new child too")
    func parentsFirst() {
        var child = record("x")
        child.setParent(Record.ID(recordName: "p", zoneID: topics))
        // Ordered for y's reference to x, x (a child of p) would come before p; p comes first.
        #expect(names([record("y", deleteSelf: ["x"]), record("p"), child]) == ["p", "x", "y"])
        // Without deleteSelf references, nothing moves (a write's cut stays as it was).
        #expect(names([child, record("p")]) == ["x", "p"])
    }

    @Test("a participant's write is ordered parents first without deleteSelf references too; an ordered write comes back as given")
    func parentsFirstAlways() {
        func ordered(_ records: [Record]) -> [String] { Record.orderedForTargets(records).map(\.recordID.recordName) }
        var child = record("x")
        child.setParent(Record.ID(recordName: "p", zoneID: topics))
        var grandchild = record("g")
        grandchild.setParent(Record.ID(recordName: "x", zoneID: topics))
        #expect(ordered([grandchild, record("a"), child, record("p")]) == ["p", "x", "g", "a"])
        // Already ordered (a queued write sent again): unchanged, so it is cut as it was first sent.
        let once = Record.orderedForTargets([grandchild, record("a"), child, record("y", deleteSelf: ["a"]), record("p")])
        #expect(Record.orderedForTargets(once) == once)
        #expect(Record.orderedForDeleteSelfTargets(once) == once)
        #expect(ordered([record("b"), record("a")]) == ["b", "a"])
        #expect(ordered([]) == [])
    }

    @Test("a loop of references, or a record naming itself: every record comes once")
    func loops() {
        #expect(names([record("a", deleteSelf: ["a"]), record("b")]) == ["a", "b"])
        #expect(names([record("a", deleteSelf: ["b"]), record("b", deleteSelf: ["a"])]) == ["b", "a"])
        let loop = [record("a", deleteSelf: ["b"]), record("b", deleteSelf: ["c"]), record("c", deleteSelf: ["a"]), record("d")]
        let ordered = names(loop)
        #expect(ordered.sorted() == ["a", "b", "c", "d"] && ordered.last == "d", "\(ordered)")
    }
}
