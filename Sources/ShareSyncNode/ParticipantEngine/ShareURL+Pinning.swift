import ShareSyncCore

extension ShareURL {
    /// Parses a share URL this node is about to connect to. The URL must carry the owner's key
    /// fingerprint (`?owner=`): the connection checks that the node answering proves that key, so a
    /// URL without one is refused before anything connects (`protocol.md`, "Identities and keys").
    ///
    /// Throws `invalidArguments` with rule `shareURLSyntax` (not a share URL) or
    /// `ownerFingerprintMissing` (no `owner=`).
    static func pinned(_ string: String) throws(ShareSyncError) -> (url: ShareURL, ownerFingerprint: String) {
        guard let url = ShareURL(string: string) else {
            throw ShareSyncError(
                .invalidArguments, "not a share URL (\(ShareURL.problem(with: string) ?? "?")): \(string.prefix(200))", rule: .shareURLSyntax)
        }
        guard let fingerprint = url.ownerFingerprint?.lowercased(), !fingerprint.isEmpty else {
            throw ShareSyncError(
                .invalidArguments,
                "the share URL has no owner= part: it must carry the owner's key fingerprint so this node can verify "
                    + "whom it talks to; ask the owner for the full URL",
                rule: .ownerFingerprintMissing)
        }
        return (url, fingerprint)
    }
}
