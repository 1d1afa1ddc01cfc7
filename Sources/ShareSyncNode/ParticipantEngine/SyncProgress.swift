/// The progress display of a long initial sync on a terminal.
public enum SyncProgress {
    static let spinner = Array("|/-\\")

    /// One line: a bar when the total is known (`expected`, from the share's metadata), else a spinner
    /// and a count.
    public static func line(received: Int, expected: Int?, tick: Int, width: Int = 30) -> String {
        guard let expected, expected > 0 else { return "\(spinner[tick % spinner.count]) syncing: \(received) records received" }
        let fraction = min(1, Double(max(0, received)) / Double(expected))
        let filled = Int((fraction * Double(width)).rounded(.down))
        return "syncing [\(String(repeating: "#", count: filled))\(String(repeating: ".", count: width - filled))] "
            + "\(min(received, expected))/\(expected) records (\(Int(fraction * 100))%)"
    }
}
