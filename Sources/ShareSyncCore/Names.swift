/// The syntax of names, checked on every save.
///
/// - Record types and field keys: a letter, then letters, digits and `_` (ASCII), at most
///   ``Limits/maximumNameLength`` bytes. Record type `cloudkit.share` and field keys starting with
///   `cloudkit.` are the database's own.
/// - Record names: printable ASCII without spaces, not starting with `_`.
/// - Zone names: letters, digits, `_`, `-` and `.`, not starting with `_` (except `_defaultZone`).
public enum Names {
    /// Checks a record type name.
    public static func checkRecordType(_ name: String, limits: Limits, recordID: Record.ID? = nil) throws(ShareSyncError) {
        if name == Record.shareRecordType { return }
        try checkIdentifier(name, what: "record type", limits: limits, rule: .recordTypeSyntax, recordID: recordID)
    }

    /// Checks a field key.
    public static func checkFieldKey(_ key: String, limits: Limits, recordID: Record.ID? = nil) throws(ShareSyncError) {
        if key.hasPrefix("cloudkit."),
            [Share.SystemFieldKey.title, Share.SystemFieldKey.thumbnailImageData, Share.SystemFieldKey.shareType]
                .contains(key)
        {
            return
        }
        try checkIdentifier(key, what: "field key", limits: limits, rule: .fieldKeySyntax, recordID: recordID)
    }

    /// Checks a record name.
    public static func checkRecordName(_ name: String, limits: Limits, recordID: Record.ID? = nil) throws(ShareSyncError) {
        guard !name.isEmpty, name.utf8.count <= limits.maximumNameLength,
            name.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }), !name.hasPrefix("_")
        else {
            throw .invalid(
                "record name \(quoted(name)) must be 1 to \(limits.maximumNameLength) printable ASCII characters without spaces, not starting with _",
                recordID: recordID, rule: .recordNameSyntax)
        }
    }

    /// Checks a zone name.
    public static func checkZoneName(_ name: String, limits: Limits) throws(ShareSyncError) {
        if name == RecordZone.ID.defaultZoneName { return }
        guard !name.isEmpty, name.utf8.count <= limits.maximumNameLength, !name.hasPrefix("_"),
            name.utf8.allSatisfy({ isAlnum($0) || $0 == UInt8(ascii: "_") || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: ".") })
        else {
            throw .invalid(
                "zone name \(quoted(name)) must be 1 to \(limits.maximumNameLength) letters, digits, _, - or ., not starting with _",
                zoneID: RecordZone.ID(zoneName: name), rule: .zoneNameSyntax)
        }
    }

    private static func checkIdentifier(
        _ name: String, what: String, limits: Limits, rule: Rule, recordID: Record.ID? = nil
    ) throws(ShareSyncError) {
        let bytes = Array(name.utf8)
        guard let first = bytes.first, isAlpha(first), bytes.count <= limits.maximumNameLength,
            bytes.allSatisfy({ isAlnum($0) || $0 == UInt8(ascii: "_") })
        else {
            throw .invalid(
                "\(what) \(quoted(name)) must start with a letter and hold only letters, digits and _ (at most \(limits.maximumNameLength))",
                recordID: recordID, rule: rule)
        }
    }

    private static func isAlpha(_ b: UInt8) -> Bool { (b >= 65 && b <= 90) || (b >= 97 && b <= 122) }
    private static func isAlnum(_ b: UInt8) -> Bool { isAlpha(b) || (b >= 48 && b <= 57) }
    private static func quoted(_ s: String) -> String {
        let short = s.count > 40 ? String(s.prefix(40)) + "…" : s
        return "\"\(short)\""
    }
}
