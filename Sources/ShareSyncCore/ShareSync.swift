/// ShareSync: CloudKit-style sharing between nodes you run yourself.
public enum ShareSync {
    /// The version of this library.
    public static let version = "0.1.0"
}
