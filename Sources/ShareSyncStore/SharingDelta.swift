import ShareSyncCore

/// What one write transaction changed that share membership and the participants' views depend on,
/// zone by zone. The item writer (``WriteContext/store(_:)``, ``WriteContext/delete(zone:name:)`` and
/// the sharing checks) fills it; ``WriteContext/settleSharing()`` reads it once, after every item.
/// A value type, so rolling back an item or a try restores it with the rest of the context.
struct SharingDelta {
    /// The share a record belonged to before the transaction first changed it.
    enum ShareBefore: Hashable {
        /// The record was in no share (or did not exist).
        case unshared
        /// The record was in this share.
        case share(String)

        init(_ name: String?) { self = name.map(ShareBefore.share) ?? .unshared }

        /// The share's name, or nil.
        var name: String? {
            if case .share(let name) = self { return name }
            return nil
        }
    }

    /// One zone's part of the delta.
    struct Zone {
        /// Records saved or deleted.
        var touched: Set<String> = []
        /// The share each record belonged to before it was first changed (noted once, then kept).
        var shareBefore: [String: ShareBefore] = [:]
        /// Records whose share membership, and their descendants', must be recomputed.
        var membershipDirty: Set<String> = []
        /// Every record of the zone must be recomputed (a zone-wide share was created or removed).
        var wholeZoneDirty = false
        /// Shares saved or deleted.
        var sharesChanged: Set<String> = []
    }

    private(set) var zones: [String: Zone] = [:]
    /// The zones ``settleSharing`` visits: those with a record touched, a membership to recompute or a
    /// share changed (noting a share-before alone does not count).
    private(set) var zonesToSettle: Set<String> = []

    subscript(zone: String) -> Zone { zones[zone] ?? Zone() }

    mutating func touch(zone: String, name: String) {
        zones[zone, default: Zone()].touched.insert(name)
        zonesToSettle.insert(zone)
    }

    /// Whether the record's share before this transaction is already noted.
    func hasShareBefore(zone: String, name: String) -> Bool { zones[zone]?.shareBefore[name] != nil }

    /// Notes the record's share before this transaction, unless one is already noted.
    mutating func noteShareBefore(zone: String, name: String, _ share: String?) {
        guard !hasShareBefore(zone: zone, name: name) else { return }
        zones[zone, default: Zone()].shareBefore[name] = ShareBefore(share)
    }

    mutating func markMembershipDirty(zone: String, _ names: some Sequence<String>) {
        zones[zone, default: Zone()].membershipDirty.formUnion(names)
        zonesToSettle.insert(zone)
    }

    mutating func markMembershipDirty(zone: String, _ name: String) { markMembershipDirty(zone: zone, CollectionOfOne(name)) }

    /// Every record of the zone must be recomputed: a zone-wide share was created or removed.
    mutating func markWholeZoneDirty(zone: String) {
        zones[zone, default: Zone()].wholeZoneDirty = true
        zonesToSettle.insert(zone)
    }

    mutating func markShareChanged(zone: String, _ name: String) {
        zones[zone, default: Zone()].sharesChanged.insert(name)
        zonesToSettle.insert(zone)
    }
}
