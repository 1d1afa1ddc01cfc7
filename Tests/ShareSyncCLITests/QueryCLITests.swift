import Foundation
import ShareSyncTestSupport
import Testing

/// `sharesync record query`: conditions, order, pages, and bad arguments.
@Suite struct QueryCLITests {
    @Test func queryFindsSortsAndPages() async throws {
        try await blocking {
            let node = try RunningNode()
            defer { node.stop() }
            #expect(try node.run(["zone", "create", "Groceries"]).status == 0)
            #expect(try node.run(["record", "save", "--zone", "Groceries", "--type", "List", "--name", "list"]).status == 0)
            let items: [(String, String, Int)] = [("milk", "Milk", 3), ("mint", "Mint", 1), ("bread", "Bread", 2), ("tea", "Tea", 5)]
            for (name, title, rank) in items {
                let saved = try node.run([
                    "record", "save", "--zone", "Groceries", "--type", "Item", "--name", name, "--parent", "list",
                    "--field", "title=string:\(title)", "--field", "rank=int64:\(rank)",
                ])
                #expect(saved.status == 0, "\(saved.stderr)")
            }
            let found = try #require(
                try node.json(["record", "query", "--zone", "Groceries", "--type", "Item", "--where", "title beginsWith string:Mi", "--sort", "rank"])
                    as? [String: Any])
            let names = (found["records"] as? [[String: Any]])?.compactMap { $0["recordName"] as? String }
            #expect(names == ["mint", "milk"])
            #expect(found["cursor"] == nil)

            let page = try #require(
                try node.json(["record", "query", "--zone", "Groceries", "--type", "Item", "--parent", "list", "--sort", "rank:desc", "--limit", "3"])
                    as? [String: Any])
            #expect((page["records"] as? [[String: Any]])?.compactMap { $0["recordName"] as? String } == ["tea", "milk", "bread"])
            #expect(page["cursor"] as? Int == 3)
            let human = try node.run(["record", "query", "--zone", "Groceries", "--type", "Item", "--where", "rank in int64:1,5", "--sort", "rank", "--limit", "1"])
            #expect(human.status == 0)
            #expect(human.stdout.contains("mint"))
            #expect(human.stdout.contains("more: --cursor 1"))
        }
    }

    @Test func badQueriesAreUsageErrorsAndAStoppedNodeIsUnreachable() async throws {
        try await blocking {
            let node = try RunningNode()
            defer { node.stop() }
            let badComparator = try node.run(["record", "query", "--zone", "Z", "--type", "Item", "--where", "title startsWith string:M"])
            #expect(badComparator.status == 64)
            #expect(badComparator.stderr.contains("startsWith") || badComparator.stderr.contains("COMPARATOR"))
            let badValue = try node.run(["record", "query", "--zone", "Z", "--type", "Item", "--where", "rank lessThan int64:abc"])
            #expect(badValue.status == 64)
            #expect(badValue.stderr.contains("int64"))
            let badFit = try node.run(["record", "query", "--zone", "Z", "--type", "Item", "--where", "title beginsWith int64:3"])
            #expect(badFit.status == 64)
            #expect(badFit.stderr.contains("beginsWith needs a string"))
            let missingZone = try node.run(["record", "query", "--zone", "Nowhere", "--type", "Item", "--json"])
            #expect(missingZone.status == 65)
            #expect(missingZone.stderr.contains("zoneNotFound"))
            node.daemon.kill()
            _ = try node.daemon.waitForExit(timeout: 10)
            let stopped = try node.run(["record", "query", "--zone", "Z", "--type", "Item", "--json"])
            #expect(stopped.status == 69)
            #expect(stopped.stderr.contains("nodeNotRunning"))
        }
    }
}
