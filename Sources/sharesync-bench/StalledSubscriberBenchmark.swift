import Foundation
import ShareSyncCore
import ShareSyncNode

#if canImport(Glibc)
import Glibc
#endif

// `sharesync-bench stalled [--records N]`: the owner's memory with a subscriber that stops reading
// (issue 15, observation 7). An owner daemon and a participant daemon; the participant accepts the
// share, then is stopped with SIGSTOP (its socket is no longer read, as a hung or overloaded peer's);
// the bench writes N records (default 100,000) to the owner in batches of 400 and samples the owner's
// resident memory before, during and after. The owner keeps at most one push per subscriber in memory
// and closes a subscriber that reads nothing for 60 s; after that the participant is resumed with
// SIGCONT and the time until its replica holds every record is measured.

/// VmRSS (current resident set) of a process in MB.
func currentRSS(pid: Int32) -> Double {
    guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return .nan }
    for line in status.split(separator: "\n") where line.hasPrefix("VmRSS:") {
        let kb = line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first.flatMap { Double($0) }
        return (kb ?? .nan) / 1024
    }
    return .nan
}

func runStalledSubscriberBenchmark(count: Int) async throws {
    let root = FileManager.default.temporaryDirectory.appending(path: "sharesync-stalled-\(getpid())").path
    try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: root) }
    let owner = try NodeDaemon(name: "owner", root: root)
    let participant = try NodeDaemon(name: "participant", root: root)
    try owner.start()
    try participant.start()
    defer {
        kill(participant.pid, SIGCONT)
        participant.stop()
        owner.stop()
    }
    let url = try await populate(Results(), owner: owner, count: 1)
    try sharesync(["accept", url, "--home", participant.home, "--json"])
    let before = currentRSS(pid: owner.pid)
    kill(participant.pid, SIGSTOP)
    print(String(format: "owner RSS before the writes (participant stopped): %.1f MB", before))

    let zone = RecordZone.ID(zoneName: "Topics")
    let client = try await ControlClient.connect(path: owner.controlPath)
    var peakDuring = before
    let t0 = now()
    for start in stride(from: 1, to: count + 1, by: 400) {
        let records = (start..<min(start + 400, count + 1)).map { DataSet.record($0, total: count + 1, zone: zone) }
        _ = try await client.call(.recordImport(zone: "Topics", records: records), as: ImportResult.self)
        peakDuring = max(peakDuring, currentRSS(pid: owner.pid))
    }
    await client.close()
    let writeSeconds = now() - t0
    print(String(format: "wrote %d records in %.1f s; owner RSS during the writes, highest sample: %.1f MB", count, writeSeconds, peakDuring))
    let afterWrites = currentRSS(pid: owner.pid)
    print(String(format: "owner RSS right after the writes: %.1f MB", afterWrites))
    // Past the owner's 60 s write deadline for the stalled subscriber.
    let wait = max(0, 65 - (now() - t0))
    try await Task.sleep(for: .seconds(wait))
    let afterDeadline = currentRSS(pid: owner.pid)
    print(String(format: "owner RSS 65 s after the stall began: %.1f MB (peak of the run, VmHWM: %.1f MB)",
                 afterDeadline, owner.peakRSSMegabytes))

    kill(participant.pid, SIGCONT)
    let t1 = now()
    var held = 0
    while now() - t1 < 600 {
        let zones = try await participant.call(.sharedZoneList, as: [SharedZoneInfo].self)
        held = zones.first(where: { $0.zoneName == "Topics" })?.records ?? 0
        if held >= count + 2 { break }  // the records, the first one and the share record
        try await Task.sleep(for: .milliseconds(200))
    }
    print(String(format: "participant resumed: its replica holds %d records after %.1f s", held, now() - t1))
}
