import ShareSyncNode
import Testing

@Suite("The initial-sync progress display")
struct SyncProgressTests {
    @Test("with a known total it draws a bar with the count and percentage")
    func bar() {
        #expect(SyncProgress.line(received: 0, expected: 200, tick: 0, width: 10) == "syncing [..........] 0/200 records (0%)")
        #expect(SyncProgress.line(received: 50, expected: 200, tick: 1, width: 10) == "syncing [##........] 50/200 records (25%)")
        #expect(SyncProgress.line(received: 250, expected: 200, tick: 2, width: 10) == "syncing [##########] 200/200 records (100%)")
    }

    @Test("without a total it shows a spinner and the count")
    func count() {
        #expect(SyncProgress.line(received: 7, expected: nil, tick: 1, width: 10) == "/ syncing: 7 records received")
    }
}
