import Foundation
import ShareSyncCore
import ShareSyncTestSupport
import Testing

@testable import ShareSyncStore

// A randomized, model-based test of sharing. A seeded PRNG drives thousands of random steps by one
// owner and several participants: saves, deletes, re-parents, shares, invitations, accepts (by
// invitation, by a one-time URL, or joining a public share), permission changes, roles,
// administrators' edits of the share, one-time URLs, publicPermission changes, blocks and unblocks,
// removals, leaves, stops, and participants' writes. After every step:
//   - the owner's database (read through its own feed from nil) equals the model, nobody is in a
//     share twice, and each share has the model's number of unbound one-time participants;
//   - every participant's shared database, read back through the feeds from their last tokens
//     (small pages), equals the view computed from first principles: the records of each zone whose
//     share (nearest share root walking up `parent`, or the zone-wide share) the user has accepted,
//     plus those share records; zones where the user sees nothing are absent; an administrator sees
//     every participant of the share, anyone else only the owner and themselves.
// Every attempted write is checked against the permission rules of SharingRules.md.

/// SplitMix64: small, seedable, the same on every platform.
struct SplitMix64 {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    mutating func int(_ n: Int) -> Int { Int(next() % UInt64(n)) }
    mutating func chance(_ p: Double) -> Bool { Double(next() >> 11) / Double(1 << 53) < p }
    mutating func pick<T>(_ xs: [T]) -> T? { xs.isEmpty ? nil : xs[int(xs.count)] }
}

/// The model of one zone: its records (title and parent name) and its shares.
struct ModelZone {
    struct Rec: Equatable { var title: String; var parent: String? }
    struct Member: Equatable {
        var permission: Participant.Permission
        var status: Participant.AcceptanceStatus
        var role: Participant.Role = .privateUser
    }
    /// A one-time URL participant: pending until someone uses its link, then a member like any other.
    struct OneTime: Equatable { var share: String; var url: String; var permission: Participant.Permission; var boundTo: String? }
    struct Shr: Equatable {
        var name: String
        var root: String?
        var members: [String: Member]
        var publicPermission: Participant.Permission = .none
        var blocked: Set<String> = []
    }

    var records: [String: Rec] = [:]
    var shares: [String: Shr] = [:]
    /// One-time URL participants by participant ID (those of stopped shares are dropped).
    var oneTime: [String: OneTime] = [:]

    /// A share goes (stopped, or its root deleted), and its one-time links with it.
    mutating func dropShare(_ name: String) {
        shares[name] = nil
        oneTime = oneTime.filter { $0.value.share != name }
    }

    /// The pending one-time participants of a share.
    func pendingOneTime(_ share: String) -> Int { oneTime.values.filter { $0.share == share && $0.boundTo == nil }.count }

    /// A bound one-time link goes with the participant it bound (removed, blocked, or dropped by a
    /// publicPermission change): it admits nobody as that participant any more.
    mutating func dropOrphanedLinks() {
        oneTime = oneTime.filter { _, link in
            guard let share = shares[link.share] else { return false }
            return link.boundTo.map { share.members[$0] != nil } ?? true
        }
    }

    var zoneShare: String? { shares.values.first { $0.root == nil }?.name }
    func shareRooted(at name: String) -> String? { shares.values.first { $0.root == name }?.name }

    /// First principles: the zone-wide share, or the nearest share root walking up `parent`
    /// (a root's own parent is ignored; a missing record ends the walk).
    func membership(of name: String) -> String? {
        if let z = zoneShare { return z }
        var current: String? = name
        var steps = 0
        while let c = current, steps < 10_000 {
            if let s = shareRooted(at: c) { return s }
            current = records[c]?.parent
            steps += 1
        }
        return nil
    }

    func membership(parent: String?) -> String? {
        if let z = zoneShare { return z }
        return parent.flatMap { membership(of: $0) }
    }

    func descendants(of name: String) -> Set<String> {
        var out: Set<String> = []
        var frontier = [name]
        while let n = frontier.popLast() {
            for (k, r) in records where r.parent == n && !out.contains(k) {
                out.insert(k)
                frontier.append(k)
            }
        }
        return out
    }

    func wouldCycle(_ name: String, parent: String?) -> Bool {
        var current = parent
        var steps = 0
        while let c = current, steps < 10_000 {
            if c == name { return true }
            current = records[c]?.parent
            steps += 1
        }
        return false
    }

    func accepted(_ user: String, _ share: String?) -> Member? {
        guard let share, let m = shares[share]?.members[user], m.status == .accepted else { return nil }
        return m
    }

    func writable(_ user: String, _ share: String?) -> Bool { accepted(user, share)?.permission == .readWrite }

    /// What `user` sees of this zone: record name → (title, parent) for records, and share records.
    func view(for user: String) -> (records: [String: Rec], shares: [String: Member])? {
        let seen = Set(shares.keys.filter { accepted(user, $0) != nil })
        guard !seen.isEmpty else { return nil }
        var recs: [String: Rec] = [:]
        for (name, r) in records where membership(of: name).map(seen.contains) == true { recs[name] = r }
        var shrs: [String: Member] = [:]
        for s in seen { shrs[s] = shares[s]!.members[user]! }
        return (recs, shrs)
    }
}

/// What the model expects of one attempted write.
struct Expectation {
    /// The codes the database may answer with (nil: success).
    var allowed: [ShareSyncError.Code?]
    var description: String
    /// Answers that would leak what is outside the participant's view (see `ModelBasedTests.cycleLeak`
    /// and friends): failures, reported with which leak it is.
    var known: [ShareSyncError.Code: String] = [:]
}

/// One run of the model-based test.
struct ModelRun {
    static let owner = "_owner"
    static let users = ["_u1", "_u2", "_u3", "_u4"]
    static let zones = ["Alpha", "Beta"]
    static let poolSize = 30

    let seed: UInt64
    var rng: SplitMix64
    let db: PrivateDatabase
    var model: [String: ModelZone] = [:]
    /// Every URL ever handed out, with the (zone, root) it names; root nil for a zone-wide share.
    var urls: [(zone: String, root: String?, url: String)] = []
    var replicas: [String: Replica] = [:]
    var step = 0
    var shareCounter = 0
    var stopped = false
    var stats: [String: Int] = [:]
    var knownIssueCount: [String: Int] = [:]
    var firstKnownIssue: [String: String] = [:]

    init(seed: UInt64) throws {
        self.seed = seed
        rng = SplitMix64(seed: seed)
        db = try PrivateDatabase(inMemoryOwnerName: Self.owner)
        for z in Self.zones {
            try db.saveZone(RecordZone(zoneID: RecordZone.ID(zoneName: z)))
            model[z] = ModelZone()
        }
        for u in Self.users { replicas[u] = Replica(u) }
    }

    var tag: String { "seed \(seed) step \(step)" }

    func ownerZone(_ z: String) -> RecordZone.ID { RecordZone.ID(zoneName: z) }
    func sharedZone(_ z: String) -> RecordZone.ID { RecordZone.ID(zoneName: z, ownerName: Self.owner) }
    func poolName(_ i: Int) -> String { "r\(i)" }

    mutating func randomPoolName() -> String { poolName(rng.int(Self.poolSize)) }

    mutating func randomParent(_ z: String, preferring view: [String] = []) -> String? {
        let m = model[z]!
        let roll = rng.int(100)
        if roll < 25 { return nil }
        if roll < 35 { return randomPoolName() }  // maybe missing
        if !view.isEmpty, roll < 75 { return rng.pick(view) }
        return rng.pick(m.records.keys.sorted()) ?? randomPoolName()
    }

    // MARK: Checking a write's outcome

    mutating func check(_ kind: String, _ error: ShareSyncError?, _ e: Expectation) -> Bool {
        stats["\(kind) \(error.map { "\($0.code)" } ?? "ok")", default: 0] += 1
        if let code = error?.code, let known = e.known[code], !e.allowed.contains(code) {
            knownIssueCount[known, default: 0] += 1
            if knownIssueCount[known] == 1 {
                firstKnownIssue[known] =
                    "\(tag): \(kind) — \(e.description): database answered \(code): \(error!.message)"
                    + (error!.serverRecord.map { " — with serverRecord \($0.recordID.recordName) title \($0["title"]?.stringValue ?? "-")" } ?? "")
            }
            // Fixed in 8d9f759 and 33789fb: a leak is a failure again.
            Issue.record("\(tag): \(kind) — \(e.description): model expects permissionFailure, database answered \(code): \(error!.message) [\(known)]")
            stopped = true
            return false
        }
        let ok = e.allowed.contains { $0 == error?.code }
        #expect(
            ok,
            "\(tag): \(kind) — \(e.description): model allows \(e.allowed.map { $0.map { "\($0)" } ?? "success" }), database answered \(error.map { "\($0.code): \($0.message)" } ?? "success")"
        )
        if !ok { stopped = true }
        return ok && error == nil
    }

    // MARK: Predictions, from first principles

    /// A save of `name` with `parent` by `actor` (owner or participant).
    func predictSave(_ z: String, _ name: String, parent: String?, actor: String, policyNoTag: Bool) -> Expectation {
        let m = model[z]!
        let exists = m.records[name] != nil
        let isOwner = actor == Self.owner
        var desc = "save \(name) parent \(parent ?? "-") in \(z) by \(actor)"
        if policyNoTag, exists {
            // ifServerRecordUnchanged without a tag on an existing record.
            if isOwner { return Expectation(allowed: [.serverRecordChanged], description: desc + " (exists, no tag)") }
            let visible = m.accepted(actor, m.membership(of: name)) != nil
            return Expectation(
                allowed: (visible ? [.serverRecordChanged, .permissionFailure] : [.permissionFailure])
                    + (parent == name ? [.invalidArguments] : []),
                description: desc + " (exists, no tag, \(visible ? "visible" : "outside view"))",
                known: visible ? [:] : [.serverRecordChanged: ModelBasedTests.serverRecordLeak])
        }
        let cycle = m.wouldCycle(name, parent: parent)
        let isRoot = m.shareRooted(at: name) != nil
        let parentChanged = !exists || m.records[name]?.parent != parent
        var alreadyShared = false
        if !m.shares.isEmpty && !cycle {
            let newShare = isRoot ? m.shareRooted(at: name) : m.membership(parent: parent)
            if parentChanged, !isRoot, newShare != nil, m.zoneShare == nil,
                m.descendants(of: name).contains(where: { m.shareRooted(at: $0) != nil })
            {
                alreadyShared = true
            }
            if isRoot, parentChanged, let p = parent, m.zoneShare == nil, m.membership(of: p) != nil {
                alreadyShared = true
            }
        }
        var permitted = true
        if !isOwner {
            let target = isRoot ? m.shareRooted(at: name) : m.membership(parent: parent)
            if exists {
                let old = m.membership(of: name)
                permitted = m.writable(actor, old) && !(isRoot && parentChanged) && target == old
                desc += " (modify: share \(old ?? "-") → \(target ?? "-"), root \(isRoot), parentChanged \(parentChanged))"
            } else {
                // Records naming it as their parent (theirs was deleted) would come into its share with it.
                let adopts = m.records.contains { $0.value.parent == name && m.membership(of: $0.key) != target }
                permitted = m.writable(actor, target) && !adopts
                desc += " (create into share \(target ?? "-")\(adopts ? ", adopting records outside it" : ""))"
            }
        }
        if !permitted {
            // A record cannot be its own parent: the request itself is invalid, whoever sends it.
            var e = Expectation(
                allowed: parent == name ? [.permissionFailure, .invalidArguments] : [.permissionFailure],
                description: desc + " [not permitted]")
            // When the user sees everything involved, the data-model error tells them nothing new.
            let sees = { (n: String?) in n.map { m.accepted(actor, m.membership(of: $0)) != nil } ?? true }
            let involved = [name, parent] + (alreadyShared ? [m.membership(of: parent ?? name)] : [])
            if involved.allSatisfy(sees) {
                if cycle { e.allowed.append(.invalidArguments) }
                if alreadyShared { e.allowed.append(.alreadyShared) }
            } else {
                if cycle, parent != name { e.known[.invalidArguments] = ModelBasedTests.cycleLeak }
                if alreadyShared { e.known[.alreadyShared] = ModelBasedTests.overlapLeak }
            }
            return e
        }
        if cycle { return Expectation(allowed: [.invalidArguments], description: desc + " [cycle]") }
        if alreadyShared { return Expectation(allowed: [.alreadyShared], description: desc + " [overlap]") }
        return Expectation(allowed: [nil], description: desc)
    }

    func predictDelete(_ z: String, _ name: String, actor: String) -> Expectation {
        let m = model[z]!
        let desc = "delete \(name) in \(z) by \(actor)"
        if actor == Self.owner {
            // A record that does not exist: unknownItem, as CloudKit answers.
            return Expectation(allowed: [m.records[name] == nil ? .unknownItem : nil], description: desc)
        }
        guard m.records[name] != nil else {
            // Gone already: unknownItem for a participant whose feed had it; anyone else learns nothing
            // (permissionFailure, like a record outside the view). That depends on feed history, so both.
            return Expectation(allowed: [.unknownItem, .permissionFailure], description: desc + " (no such record)")
        }
        let share = m.membership(of: name)
        let isRoot = m.shareRooted(at: name) != nil
        if !m.writable(actor, share) || isRoot {
            return Expectation(allowed: [.permissionFailure], description: desc + " (share \(share ?? "-"), root \(isRoot))")
        }
        return Expectation(allowed: [nil], description: desc + " (share \(share ?? "-"))")
    }

    // MARK: Applying to the model

    mutating func applySave(_ z: String, _ name: String, title: String, parent: String?) {
        model[z]!.records[name] = .init(title: title, parent: parent)
    }

    mutating func applyDelete(_ z: String, _ name: String) {
        model[z]!.records[name] = nil
        if let s = model[z]!.shareRooted(at: name) { model[z]!.dropShare(s) }
    }

    // MARK: Operations

    mutating func ownerSave(reparentOnly: Bool) throws {
        let z = rng.pick(Self.zones)!
        let m = model[z]!
        let name: String
        var title = "t\(rng.int(1000))"
        if reparentOnly {
            guard let n = rng.pick(m.records.keys.sorted()) else { return }
            name = n
            title = m.records[n]!.title
        } else {
            name = randomPoolName()
        }
        let parent = randomParent(z)
        var r = Record(recordType: "Item", recordID: Record.ID(recordName: name, zoneID: ownerZone(z)))
        r["title"] = .string(title)
        r.setParent(parent.map { Record.ID(recordName: $0, zoneID: ownerZone(z)) })
        let e = predictSave(z, name, parent: parent, actor: Self.owner, policyNoTag: false)
        let result = try db.modifyRecords(saving: [r], savePolicy: .allKeys)
        if check(reparentOnly ? "owner re-parent" : "owner save", result.errors[name], e) {
            applySave(z, name, title: title, parent: parent)
        }
    }

    mutating func ownerDelete() throws {
        let z = rng.pick(Self.zones)!
        let name = rng.chance(0.85) ? (rng.pick(model[z]!.records.keys.sorted()) ?? randomPoolName()) : randomPoolName()
        let e = predictDelete(z, name, actor: Self.owner)
        let result = try db.modifyRecords(deleting: [Record.ID(recordName: name, zoneID: ownerZone(z))])
        if check("owner delete", result.errors[name], e) { applyDelete(z, name) }
    }

    mutating func ownerShare() throws {
        let z = rng.pick(Self.zones)!
        let m = model[z]!
        let zoneWide = rng.chance(0.25)
        var share: Share
        var root: String?
        let e: Expectation
        if zoneWide {
            share = Share(recordZoneID: ownerZone(z))
            // A second zone-wide share is the same record ID: saved without its change tag, it is a
            // stale update of the existing one.
            e = Expectation(
                allowed: [m.zoneShare != nil ? .serverRecordChanged : m.shares.isEmpty ? nil : .alreadyShared],
                description: "zone-wide share of \(z)")
        } else {
            guard let r = rng.pick(m.records.keys.sorted()) else { return }
            root = r
            shareCounter += 1
            let rootRecord = try db.fetchRecord(Record.ID(recordName: r, zoneID: ownerZone(z)))
            share = Share(rootRecord: rootRecord, shareID: Record.ID(recordName: "s\(shareCounter)", zoneID: ownerZone(z)))
            let overlap = m.zoneShare != nil || m.membership(of: r) != nil
                || m.descendants(of: r).contains { m.shareRooted(at: $0) != nil }
            e = Expectation(
                allowed: [overlap ? .alreadyShared : nil],
                description: "share of hierarchy \(r) in \(z) (zone share \(m.zoneShare ?? "-"), root's share \(m.membership(of: r) ?? "-"))")
        }
        var members: [String: ModelZone.Member] = [:]
        for u in Self.users where rng.chance(0.3) {
            let p: Participant.Permission = rng.chance(0.5) ? .readWrite : .readOnly
            try share.addParticipant(Participant(lookupInfo: .init(userRecordName: u), permission: p))
            members[u] = .init(permission: p, status: .pending)
        }
        let result = try db.modifyRecords(saving: [share.record])
        if check("owner share", result.errors[share.recordID.recordName], e) {
            let saved = try #require(Share(result.get().first { $0.recordType == Record.shareRecordType }!))
            let url = try #require(saved.url)
            model[z]!.shares[saved.recordID.recordName] = .init(name: saved.recordID.recordName, root: root, members: members)
            if let old = urls.first(where: { $0.zone == z && $0.root == root }) {
                #expect(old.url == url, "\(tag): sharing the same root again gives the same URL")
            } else {
                urls.append((z, root, url))
            }
        }
    }

    /// Picks a share: (zone, share name).
    mutating func randomShare() -> (String, String)? {
        let all = Self.zones.flatMap { z in model[z]!.shares.keys.sorted().map { (z, $0) } }
        return rng.pick(all)
    }

    mutating func fetchShare(_ z: String, _ name: String) throws -> Share {
        try #require(Share(db.fetchRecord(Record.ID(recordName: name, zoneID: ownerZone(z)))))
    }

    mutating func ownerInvite() throws {
        guard let (z, s) = randomShare() else { return }
        let u = rng.pick(Self.users)!
        let p: Participant.Permission = rng.chance(0.5) ? .readWrite : .readOnly
        let role: Participant.Role = rng.chance(0.5) ? .administrator : .privateUser
        var share = try fetchShare(z, s)
        let shr = model[z]!.shares[s]!
        // A public share takes no invitations (publicAndPrivateDoNotMix), nor a blocked user (identityBlocked):
        // refused by Share itself.
        let refusal = shr.publicPermission != .none || shr.blocked.contains(u)
        var clientError: ShareSyncError?
        do { try share.addParticipant(Participant(lookupInfo: .init(userRecordName: u), permission: p, role: role)) } catch { clientError = error }
        if refusal || clientError != nil {
            _ = check(
                "owner invite (refused by Share)", clientError,
                Expectation(allowed: [refusal ? .invalidArguments : nil], description: "invite \(u) \(role) to \(s) (public \(shr.publicPermission), blocked \(shr.blocked.sorted()))"))
            return
        }
        let result = try db.modifyRecords(saving: [share.record])
        if check("owner invite", result.errors[s], Expectation(allowed: [nil], description: "invite \(u) \(p) \(role) to \(s)")) {
            var member = model[z]!.shares[s]!.members[u] ?? .init(permission: p, status: .pending)
            member.permission = p
            member.role = role
            if member.status == .removed { member.status = .pending }
            model[z]!.shares[s]!.members[u] = member
        }
    }

    /// The owner adds a one-time URL participant (no email, phone or user). A public share takes
    /// none (publicAndPrivateDoNotMix): refused by Share itself.
    mutating func ownerInviteOneTime() throws {
        guard let (z, s) = randomShare() else { return }
        let p: Participant.Permission = rng.chance(0.5) ? .readWrite : .readOnly
        var share = try fetchShare(z, s)
        let participant = Participant.oneTimeURLParticipant(permission: p)
        let publicPermission = model[z]!.shares[s]!.publicPermission
        var clientError: ShareSyncError?
        do { try share.addParticipant(participant) } catch { clientError = error }
        if publicPermission != .none || clientError != nil {
            _ = check(
                "owner one-time (refused by Share)", clientError,
                Expectation(allowed: [publicPermission != .none ? .invalidArguments : nil], description: "one-time \(p) in \(s) (public \(publicPermission))"))
            return
        }
        let result = try db.modifyRecords(saving: [share.record])
        if check("owner one-time", result.errors[s], Expectation(allowed: [nil], description: "one-time \(p) in \(s)")) {
            let saved = try fetchShare(z, s)
            let url = try #require(saved.oneTimeURL(for: participant.participantID), "\(tag): one-time URL of \(s)")
            model[z]!.oneTime[participant.participantID] = .init(share: s, url: url, permission: p, boundTo: nil)
        }
    }

    /// The owner makes a member an administrator or a privateUser.
    mutating func ownerSetRole() throws {
        guard let (z, s) = randomShare(), let u = rng.pick(model[z]!.shares[s]!.members.keys.sorted()) else { return }
        var share = try fetchShare(z, s)
        let participant = try #require(share.participants.first { $0.userIdentity.userRecordName == u }, "\(tag): \(u) in \(s)")
        let role: Participant.Role = rng.chance(0.7) ? .administrator : .privateUser
        // A public user's role does not change (participantRole): refused by Share itself.
        let refusal = model[z]!.shares[s]!.members[u]!.role == .publicUser
        var clientError: ShareSyncError?
        do { try share.setRole(role, forParticipantID: participant.participantID) } catch { clientError = error }
        if refusal || clientError != nil {
            _ = check(
                "owner role (refused by Share)", clientError,
                Expectation(allowed: [refusal ? .invalidArguments : nil], description: "make \(u) (\(participant.role)) \(role) in \(s)"))
            return
        }
        let result = try db.modifyRecords(saving: [share.record])
        if check("owner role", result.errors[s], Expectation(allowed: [nil], description: "make \(u) \(role) in \(s)")) {
            model[z]!.shares[s]!.members[u]!.role = role
        }
    }

    /// A participant changes a share through their shared database, as an administrator would: adds,
    /// re-invites or removes someone, changes a permission, a role or the publicPermission. From first
    /// principles: only an accepted administrator may, and never about themselves, another
    /// administrator, or to make one, and never the publicPermission (shareSettingsOwnerOnly). Before
    /// that, Share itself refuses what no one may do: inviting to or removing from a public share
    /// (publicAndPrivateDoNotMix), inviting a blocked user (identityBlocked; only the owner and
    /// administrators see the blocked identities), setting a public user's permission or role.
    mutating func participantEditsShare() throws {
        // Mostly an accepted administrator (of any share, by anyone), so that administrators' edits are frequent.
        let candidates = Self.users.flatMap { u in
            Self.zones.flatMap { z in model[z]!.shares.keys.sorted().filter { model[z]!.accepted(u, $0) != nil }.map { (u, z, $0) } }
        }
        let admins = candidates.filter { model[$0.1]!.accepted($0.0, $0.2)?.role == .administrator }
        guard let (u, z, s) = rng.chance(0.7) ? (rng.pick(admins) ?? rng.pick(candidates)) : rng.pick(candidates) else { return }
        let view = db.sharedDatabase(for: Caller(userRecordName: u))
        let id = Record.ID(recordName: s, zoneID: sharedZone(z))
        guard var share = Share(try view.fetchRecords([id])[id]!.get()) else { return }
        let shr = model[z]!.shares[s]!
        let members = shr.members
        let isAdmin = model[z]!.accepted(u, s)?.role == .administrator
        // Mostly someone an administrator may manage, so that edits succeed often too.
        let manageable = Self.users.filter { $0 != u && members[$0]?.role != .administrator }
        // Sometimes a blocked user, to see identityBlocked.
        var t = rng.chance(0.7) ? (rng.pick(manageable) ?? rng.pick(Self.users)!) : rng.pick(Self.users)!
        if rng.chance(0.15), let b = rng.pick(shr.blocked.sorted()) { t = b }
        let target = members[t]
        let p: Participant.Permission = rng.chance(0.5) ? .readWrite : .readOnly
        let kind = rng.int(5)
        var desc = "\(u) (\(isAdmin ? "admin" : "not admin")) of \(s) (public \(shr.publicPermission)) "
        // Whom the edit touches, and whether an administrator may touch them.
        let protected = t == u || target?.role == .administrator
        var allowed = isAdmin && !protected
        // What Share itself refuses, before anything is sent.
        var refusal = false
        var why = "publicUser"
        var clientError: ShareSyncError?
        let targetParticipant = share.participants.first { $0.userIdentity.userRecordName == t }
        switch kind {
        case 0:  // invite (or re-invite) t
            let role: Participant.Role = rng.chance(0.2) ? .administrator : .privateUser
            desc += "invites \(t) \(p) \(role) (blocked \(shr.blocked.contains(t)))"
            if role == .administrator && target?.role != .administrator { allowed = false }
            refusal = shr.publicPermission != .none || (isAdmin && shr.blocked.contains(t))
            why = shr.publicPermission != .none ? "publicAndPrivateDoNotMix" : "identityBlocked"
            do { try share.addParticipant(Participant(lookupInfo: .init(userRecordName: t), permission: p, role: role)) } catch { clientError = error }
            // Re-inviting an administrator (themselves included) unchanged changes nothing about them: not refused.
            if isAdmin, target?.role == .administrator, role == .administrator, target?.permission == p { allowed = true }
        case 1:  // remove t
            guard let targetParticipant else { return }
            desc += "removes \(t)"
            refusal = shr.publicPermission != .none
            why = "publicAndPrivateDoNotMix"
            do { try share.removeParticipant(targetParticipant) } catch { clientError = error }
        case 2:  // permission
            guard let targetParticipant else { return }
            desc += "makes \(t) (\(targetParticipant.role)) \(p)"
            refusal = target?.role == .publicUser
            do { try share.setPermission(p, forParticipantID: targetParticipant.participantID) } catch { clientError = error }
            if target?.permission == p, isAdmin { allowed = true }  // no change
        case 3:  // role
            guard let targetParticipant else { return }
            let role: Participant.Role = rng.chance(0.5) ? .administrator : .privateUser
            desc += "makes \(t) (\(targetParticipant.role)) \(role)"
            refusal = target?.role == .publicUser
            do { try share.setRole(role, forParticipantID: targetParticipant.participantID) } catch { clientError = error }
            if role == .administrator && target?.role != .administrator { allowed = false }
            if target?.role == role, isAdmin { allowed = true }  // no change
        default:  // publicPermission: the owner's alone (shareSettingsOwnerOnly); unchanged, it changes nothing
            let permission = rng.pick([Participant.Permission.none, .readOnly, .readWrite])!
            desc += "makes the share public \(permission)"
            share.publicPermission = permission
            allowed = isAdmin && permission == shr.publicPermission
        }
        let label = "\(isAdmin ? "administrator" : "non-administrator") edits share: \(["invite", "remove", "permission", "role", "publicPermission"][kind])"
        if refusal || clientError != nil {
            _ = check(label + " (refused by Share, \(why))", clientError, Expectation(allowed: [refusal ? .invalidArguments : nil], description: desc))
            return
        }
        let failure = try view.modifyRecords(saving: [share.record]).errors[s]
        let e = Expectation(allowed: [allowed ? nil : .permissionFailure], description: desc)
        guard check(label, failure, e) else { return }
        switch kind {
        case 0:
            var member = members[t] ?? .init(permission: p, status: .pending)
            member.permission = p
            member.role = share.participants.first { $0.userIdentity.userRecordName == t }?.role ?? .privateUser
            if member.status == .removed { member.status = .pending }
            model[z]!.shares[s]!.members[t] = member
        case 1:
            model[z]!.shares[s]!.members[t] = nil
            model[z]!.dropOrphanedLinks()
        case 2: model[z]!.shares[s]!.members[t]!.permission = p
        case 3: model[z]!.shares[s]!.members[t]!.role = share.participants.first { $0.userIdentity.userRecordName == t }!.role
        default: break  // unchanged
        }
    }

    /// Someone uses a one-time URL: a blocked user is refused; anyone already in the share (not left)
    /// stays who they are (the link stays unspent); else the first identity to use it becomes that
    /// participant; someone who left is told so; anyone else joins a public share as a public user
    /// (the link holds the share's URL) and is refused on a private one (invitationSpent).
    mutating func userAcceptOneTime() throws {
        let links = Self.zones.flatMap { z in model[z]!.oneTime.keys.sorted().map { (z, $0) } }
        guard let (z, pid) = rng.pick(links) else { return }
        let link = model[z]!.oneTime[pid]!
        let u = rng.pick(Self.users)!
        let s = link.share
        let shr = model[z]!.shares[s]!
        let mine = shr.members[u]
        let e: Expectation
        var bind = false
        var joinsPublicly = false
        let desc = "\(u) uses one-time link \(pid.prefix(8)) of \(s) (bound to \(link.boundTo ?? "nobody"), member \(mine.map { "\($0.status)" } ?? "no"), public \(shr.publicPermission), blocked \(shr.blocked.contains(u)))"
        if shr.blocked.contains(u) {
            e = Expectation(allowed: [.participantMayNeedVerification], description: desc)
        } else if let mine, mine.status != .removed {
            e = Expectation(allowed: [nil], description: desc)
        } else if link.boundTo == nil {
            e = Expectation(allowed: [nil], description: desc)
            bind = true
        } else if mine != nil {
            e = Expectation(allowed: [.permissionFailure], description: desc)  // they left: told so (rule leftShare)
        } else if shr.publicPermission != .none {
            e = Expectation(allowed: [nil], description: desc)
            joinsPublicly = true
        } else {
            e = Expectation(allowed: [.participantMayNeedVerification], description: desc)
        }
        var failure: ShareSyncError?
        var metadata: ShareMetadata?
        do { metadata = try db.acceptShare(url: link.url, as: Caller(userRecordName: u)) } catch { failure = error }
        guard check("one-time accept", failure, e) else { return }
        #expect(metadata?.participantStatus == .accepted, "\(tag): \(desc)")
        if bind {
            model[z]!.oneTime[pid]!.boundTo = u
            model[z]!.shares[s]!.members[u] = .init(permission: link.permission, status: .accepted, role: .privateUser)
        } else if joinsPublicly {
            model[z]!.shares[s]!.members[u] = .init(permission: shr.publicPermission, status: .accepted, role: .publicUser)
            #expect(metadata?.participantRole == .publicUser && metadata?.participantPermission == shr.publicPermission, "\(tag): \(desc)")
        } else {
            model[z]!.shares[s]!.members[u]!.status = .accepted
        }
    }

    mutating func ownerChangeParticipant(remove: Bool) throws {
        guard let (z, s) = randomShare(), let u = rng.pick(model[z]!.shares[s]!.members.keys.sorted()) else { return }
        var share = try fetchShare(z, s)
        let participant = try #require(share.participants.first { $0.userIdentity.userRecordName == u }, "\(tag): \(u) in \(s)")
        let p: Participant.Permission = rng.chance(0.5) ? .readWrite : .readOnly
        // Refused by Share: removing anyone from a public share, setting a public user's own permission.
        let refusal = remove ? model[z]!.shares[s]!.publicPermission != .none : participant.role == .publicUser
        var clientError: ShareSyncError?
        do {
            if remove {
                try share.removeParticipant(participant)
            } else {
                try share.setPermission(p, forParticipantID: participant.participantID)
            }
        } catch { clientError = error }
        if refusal || clientError != nil {
            _ = check(
                remove ? "owner remove (refused by Share)" : "owner permission (refused by Share)", clientError,
                Expectation(allowed: [refusal ? .invalidArguments : nil], description: "\(remove ? "remove" : "change") \(u) (\(participant.role)) in \(s)"))
            return
        }
        let result = try db.modifyRecords(saving: [share.record])
        let e = Expectation(allowed: [nil], description: remove ? "remove \(u) from \(s)" : "make \(u) \(p) in \(s)")
        if check(remove ? "owner remove" : "owner permission", result.errors[s], e) {
            if remove {
                model[z]!.shares[s]!.members[u] = nil
                // A one-time link bound to them is gone with their participant: it admits nobody now.
                model[z]!.dropOrphanedLinks()
            } else {
                model[z]!.shares[s]!.members[u]!.permission = p
            }
        }
    }

    mutating func ownerStop() throws {
        guard let (z, s) = randomShare() else { return }
        let result = try db.modifyRecords(deleting: [Record.ID(recordName: s, zoneID: ownerZone(z))])
        if check("owner stop", result.errors[s], Expectation(allowed: [nil], description: "stop \(s)")) {
            model[z]!.dropShare(s)
        }
    }

    mutating func userAccept() throws {
        // Mostly a pending invitation; otherwise any URL ever handed out, by anyone.
        let pending = Self.zones.flatMap { z in
            model[z]!.shares.values.sorted { $0.name < $1.name }.flatMap { s in
                s.members.keys.sorted().filter { s.members[$0]!.status == .pending }.map { (z, s.root, $0) }
            }
        }
        let z: String, root: String?, u: String
        if rng.chance(0.7), let (pz, pr, pu) = rng.pick(pending) {
            (z, root, u) = (pz, pr, pu)
        } else {
            guard let any = rng.pick(urls) else { return }
            (z, root, u) = (any.zone, any.root, rng.pick(Self.users)!)
        }
        let url = urls.first { $0.zone == z && $0.root == root }!.url
        let m = model[z]!
        let s = root == nil ? m.zoneShare : m.shareRooted(at: root!)
        let e: Expectation
        var desc = "\(u) accepts \(url.suffix(8)) (\(z) root \(root ?? "zone"), share \(s ?? "none"))"
        var joinsPublicly = false
        if let s, m.shares[s]!.blocked.contains(u) {
            e = Expectation(allowed: [.participantMayNeedVerification], description: desc + " (blocked)")
        } else if let s, let member = m.shares[s]!.members[u] {
            desc += " status \(member.status)"
            e = Expectation(allowed: [member.status == .removed ? .permissionFailure : nil], description: desc)
        } else if let s, m.shares[s]!.publicPermission != .none {
            joinsPublicly = true
            e = Expectation(allowed: [nil], description: desc + " (public \(m.shares[s]!.publicPermission))")
        } else {
            e = Expectation(allowed: [.participantMayNeedVerification], description: desc)
        }
        var failure: ShareSyncError?
        var metadata: ShareMetadata?
        do {
            metadata = try db.acceptShare(url: url, as: Caller(userRecordName: u))
            #expect(metadata?.participantStatus == .accepted, "\(tag): \(desc)")
        } catch { failure = error }
        if check("accept", failure, e), let s {
            if joinsPublicly {
                let permission = model[z]!.shares[s]!.publicPermission
                model[z]!.shares[s]!.members[u] = .init(permission: permission, status: .accepted, role: .publicUser)
                #expect(metadata?.participantRole == .publicUser && metadata?.participantPermission == permission, "\(tag): \(desc)")
            } else {
                model[z]!.shares[s]!.members[u]!.status = .accepted
            }
        }
    }

    mutating func userLeave() throws {
        let u = rng.pick(Self.users)!
        var candidates = Self.zones.flatMap { z in
            model[z]!.shares.keys.sorted().filter { model[z]!.accepted(u, $0) != nil }.map { (z, $0) }
        }
        if candidates.isEmpty || rng.chance(0.2) {
            candidates = Self.zones.flatMap { z in model[z]!.shares.keys.sorted().map { (z, $0) } }
        }
        guard let (z, s) = rng.pick(candidates) else { return }
        let accepted = model[z]!.accepted(u, s) != nil
        var failure: ShareSyncError?
        do {
            try db.sharedDatabase(for: Caller(userRecordName: u)).leaveShare(Record.ID(recordName: s, zoneID: sharedZone(z)))
        } catch { failure = error.partialErrors?[s] ?? error }
        let e = Expectation(allowed: [accepted ? nil : .permissionFailure], description: "\(u) leaves \(s) (accepted \(accepted))")
        if check("leave", failure, e) {
            // A public user leaves the list; anyone else stays in it, removed.
            if model[z]!.shares[s]!.members[u]!.role == .publicUser {
                model[z]!.shares[s]!.members[u] = nil
            } else {
                model[z]!.shares[s]!.members[u]!.status = .removed
            }
        }
    }

    /// The owner changes a share's publicPermission (sometimes to what it is already). A change removes
    /// the pending participants (unbound one-time ones included), a change to none the public users
    /// too; public users get the new one.
    mutating func ownerSetPublicPermission() throws {
        guard let (z, s) = randomShare() else { return }
        let permission = rng.pick([Participant.Permission.none, .readOnly, .readWrite])!
        var share = try fetchShare(z, s)
        share.publicPermission = permission
        let result = try db.modifyRecords(saving: [share.record])
        let old = model[z]!.shares[s]!.publicPermission
        if check("owner public", result.errors[s], Expectation(allowed: [nil], description: "make \(s) public \(permission) (was \(old))")) {
            var shr = model[z]!.shares[s]!
            if permission != old {
                shr.members = shr.members.filter { $0.value.status != .pending && !(permission == .none && $0.value.role == .publicUser) }
                // Unbound one-time participants are pending: they go too (bound ones go with their member).
                model[z]!.oneTime = model[z]!.oneTime.filter { $0.value.share != s || $0.value.boundTo != nil }
            }
            shr.publicPermission = permission
            for (u, member) in shr.members where member.role == .publicUser { shr.members[u]!.permission = permission }
            model[z]!.shares[s] = shr
            model[z]!.dropOrphanedLinks()
        }
    }

    /// The owner blocks a user (a participant or not): they leave the share and cannot accept.
    mutating func ownerBlock() throws {
        guard let (z, s) = randomShare() else { return }
        let u = rng.chance(0.7) ? (rng.pick(model[z]!.shares[s]!.members.keys.sorted()) ?? rng.pick(Self.users)!) : rng.pick(Self.users)!
        var share = try fetchShare(z, s)
        share.blockIdentities([UserIdentity(userRecordName: u)])
        let result = try db.modifyRecords(saving: [share.record])
        if check("owner block", result.errors[s], Expectation(allowed: [nil], description: "block \(u) in \(s)")) {
            model[z]!.shares[s]!.blocked.insert(u)
            model[z]!.shares[s]!.members[u] = nil
            model[z]!.dropOrphanedLinks()
        }
    }

    /// The owner lifts a block (`unblockIdentities`).
    mutating func ownerUnblock() throws {
        let blocked = Self.zones.flatMap { z in
            model[z]!.shares.values.sorted { $0.name < $1.name }.flatMap { s in s.blocked.sorted().map { (z, s.name, $0) } }
        }
        guard let (z, s, u) = rng.pick(blocked) else { return }
        var share = try fetchShare(z, s)
        share.unblockIdentities(share.blockedIdentities.filter { $0.userRecordName == u })
        let result = try db.modifyRecords(saving: [share.record])
        if check("owner unblock", result.errors[s], Expectation(allowed: [nil], description: "unblock \(u) in \(s)")) {
            model[z]!.shares[s]!.blocked.remove(u)
        }
    }

    /// Names of ordinary records `u` sees in zone `z`.
    func visibleRecords(_ u: String, _ z: String) -> [String] {
        model[z]!.view(for: u).map { $0.records.keys.sorted() } ?? []
    }

    mutating func userWrite() throws {
        // Mostly a user who may write somewhere in the zone, so that writes succeed often too.
        let writers = Self.zones.flatMap { z in
            Self.users.filter { u in model[z]!.shares.keys.contains { model[z]!.writable(u, $0) } }.map { ($0, z) }
        }
        var u = rng.pick(Self.users)!
        var z = rng.pick(Self.zones)!
        if rng.chance(0.7), let (wu, wz) = rng.pick(writers) { (u, z) = (wu, wz) }
        let m = model[z]!
        let visible = visibleRecords(u, z)
        let view = db.sharedDatabase(for: Caller(userRecordName: u))
        func id(_ n: String) -> Record.ID { Record.ID(recordName: n, zoneID: sharedZone(z)) }
        let kind = rng.int(4)
        if kind == 3 {
            // Delete.
            let roll = rng.int(10)
            let name = roll < 7 ? (rng.pick(visible) ?? randomPoolName())
                : roll < 9 ? (rng.pick(m.records.keys.sorted()) ?? randomPoolName()) : randomPoolName()
            let e = predictDelete(z, name, actor: u)
            var failure: ShareSyncError?
            do { failure = try view.modifyRecords(deleting: [id(name)]).errors[name] } catch { failure = error }
            if check("participant delete", failure, e) { applyDelete(z, name) }
            return
        }
        let name: String
        var title = "p\(rng.int(1000))"
        var parent: String?
        var policy: SavePolicy = .allKeys
        switch kind {
        case 0:  // create
            let free = (0..<Self.poolSize).map(poolName).filter { m.records[$0] == nil }
            name = rng.chance(0.9) ? (rng.pick(free) ?? randomPoolName()) : randomPoolName()
            parent = randomParent(z, preferring: visible)
            policy = [.allKeys, .changedKeys, .ifServerRecordUnchanged][rng.int(3)]
        case 1:  // modify (title only)
            name = rng.chance(0.75) ? (rng.pick(visible) ?? randomPoolName()) : (rng.pick(m.records.keys.sorted()) ?? randomPoolName())
            parent = m.records[name]?.parent
            policy = rng.chance(0.5) ? .allKeys : .changedKeys
        default:  // re-parent
            name = rng.chance(0.75) ? (rng.pick(visible) ?? randomPoolName()) : (rng.pick(m.records.keys.sorted()) ?? randomPoolName())
            title = m.records[name]?.title ?? title
            parent = randomParent(z, preferring: visible)
        }
        var r = Record(recordType: "Item", recordID: id(name))
        r["title"] = .string(title)
        r.setParent(parent.map(id))
        let e = predictSave(z, name, parent: parent, actor: u, policyNoTag: policy == .ifServerRecordUnchanged)
        var failure: ShareSyncError?
        do { failure = try view.modifyRecords(saving: [r], savePolicy: policy).errors[name] } catch { failure = error }
        if check(["participant create", "participant modify", "participant re-parent"][kind], failure, e) {
            applySave(z, name, title: title, parent: parent)
        }
    }

    mutating func randomStep() throws {
        let roll = rng.int(120)
        switch roll {
        case 0..<18: try ownerSave(reparentOnly: false)
        case 18..<26: try ownerSave(reparentOnly: true)
        case 26..<32: try ownerDelete()
        case 32..<38: try ownerShare()
        case 38..<46: try ownerInvite()
        case 46..<55: try userAccept()
        case 55..<59: try ownerChangeParticipant(remove: false)
        case 59..<61: try ownerChangeParticipant(remove: true)
        case 61..<64: try userLeave()
        case 64..<67: try ownerStop()
        case 67..<71: try ownerSetPublicPermission()
        case 71..<73: try ownerBlock()
        case 73..<75: try ownerUnblock()
        case 75..<77: try ownerInviteOneTime()
        case 77..<80: try userAcceptOneTime()
        case 80..<82: try ownerSetRole()
        case 82..<98: try participantEditsShare()
        default: try userWrite()
        }
    }

    // MARK: Checking state

    /// The owner's database, read through its own feed from nil, equals the model.
    func checkOwner() throws -> Bool {
        var ok = true
        for z in Self.zones {
            let m = model[z]!
            var records: [String: Record] = [:]
            var token: ServerChangeToken?
            var more = true
            while more {
                let page = try db.fetchZoneChanges(ownerZone(z), since: token)
                for case .changed(let r) in page.changes { records[r.recordID.recordName] = r }
                token = page.changeToken
                more = page.moreComing
            }
            var actualRecs: [String: ModelZone.Rec] = [:]
            var actualShares: [String: ModelZone.Shr] = [:]
            for (name, r) in records {
                if let s = Share(r) {
                    var members: [String: ModelZone.Member] = [:]
                    var pendingOneTime = 0
                    for p in s.participants where p.role != .owner {
                        guard let user = p.userIdentity.userRecordName else {
                            if p.isOneTimeURLParticipant && p.acceptanceStatus == .pending { pendingOneTime += 1 } else { pendingOneTime += 1000 }
                            continue
                        }
                        if members[user] != nil {
                            ok = false
                            Issue.record("\(tag): \(user) is in share \(name) twice: \(s.participants)")
                        }
                        members[user] = .init(permission: p.permission, status: p.acceptanceStatus, role: p.role)
                    }
                    if pendingOneTime != m.pendingOneTime(name) {
                        ok = false
                        Issue.record("\(tag): share \(name) has \(pendingOneTime) unbound one-time participants, model \(m.pendingOneTime(name))")
                    }
                    actualShares[name] = .init(
                        name: name, root: s.rootRecordID?.recordName, members: members, publicPermission: s.publicPermission,
                        blocked: Set(s.blockedIdentities.map(\.userRecordName)))
                } else {
                    actualRecs[name] = .init(title: r["title"]?.stringValue ?? "", parent: r.parent?.recordID.recordName)
                }
            }
            if actualRecs != m.records {
                ok = false
                let diff = Set(actualRecs.keys).union(m.records.keys).filter { actualRecs[$0] != m.records[$0] }.sorted()
                Issue.record("\(tag): owner's records in \(z) differ from the model at \(diff.map { "\($0): db \(String(describing: actualRecs[$0])) model \(String(describing: m.records[$0]))" })")
            }
            if actualShares != m.shares {
                ok = false
                Issue.record("\(tag): owner's shares in \(z) differ from the model: db \(actualShares) model \(m.shares)")
            }
        }
        return ok
    }

    /// A replica's content equals the first-principles view of its user.
    func checkReplica(_ replica: Replica, label: String) -> Bool {
        var ok = true
        let u = replica.user.userRecordName
        for z in Self.zones {
            let expected = model[z]!.view(for: u)
            guard let got = replica.records[z] else {
                if let expected {
                    ok = false
                    Issue.record("\(tag): \(label) replica of \(u) lacks zone \(z); expected \(expected.records.keys.sorted()) + shares \(expected.shares.keys.sorted())")
                }
                continue
            }
            guard let expected else {
                ok = false
                Issue.record("\(tag): \(label) replica of \(u) has zone \(z) (\(got.keys.sorted())) but sees no share in it")
                continue
            }
            var recs: [String: ModelZone.Rec] = [:]
            var shares: [String: ModelZone.Member] = [:]
            for (name, r) in got {
                if let s = Share(r) {
                    let me = s.currentUserParticipant
                    shares[name] = me.map { .init(permission: $0.permission, status: $0.acceptanceStatus, role: $0.role) }
                        ?? .init(permission: .unknown, status: .unknown)
                    // What the share record shows this participant: everyone to an administrator, else
                    // the owner and themselves, never an invitation secret.
                    if let modelShare = model[z]!.shares[name] {
                        if me?.role == .administrator {
                            let all = 1 + modelShare.members.count + model[z]!.pendingOneTime(name)
                            if s.participants.count != all {
                                ok = false
                                Issue.record("\(tag): administrator \(u) sees \(s.participants.count) participants of \(name), not \(all)")
                            }
                        } else if !Set(s.participants.compactMap(\.userIdentity.userRecordName)).isSubset(of: [Self.owner, u])
                            || s.participants.contains(where: { $0.userIdentity.userRecordName == nil || s.oneTimeURL(for: $0.participantID) != nil })
                        {
                            ok = false
                            Issue.record("\(tag): \(u) sees more of share \(name) than the owner and themselves: \(s.participants)")
                        }
                        // Everyone sees the publicPermission; only administrators see the blocked identities.
                        let blockedSeen = Set(s.blockedIdentities.map(\.userRecordName))
                        let blockedExpected = me?.role == .administrator ? modelShare.blocked : []
                        if s.publicPermission != modelShare.publicPermission || blockedSeen != blockedExpected {
                            ok = false
                            Issue.record("\(tag): \(u) (\(me?.role.rawValue ?? "-")) sees share \(name) public \(s.publicPermission) blocked \(blockedSeen.sorted()), model public \(modelShare.publicPermission) blocked \(blockedExpected.sorted())")
                        }
                    }
                } else {
                    recs[name] = .init(title: r["title"]?.stringValue ?? "", parent: r.parent?.recordID.recordName)
                }
            }
            if recs != expected.records {
                ok = false
                let diff = Set(recs.keys).union(expected.records.keys).filter { recs[$0] != expected.records[$0] }.sorted()
                Issue.record("\(tag): \(label) replica of \(u) in \(z) differs at \(diff.map { "\($0): replica \(String(describing: recs[$0])) model \(String(describing: expected.records[$0])) (share \(model[z]!.membership(of: $0) ?? "-"))" })")
            }
            if shares != expected.shares {
                ok = false
                Issue.record("\(tag): \(label) replica of \(u) in \(z) has shares \(shares), model \(expected.shares)")
            }
        }
        return ok
    }

    mutating func checkAll(fresh: Bool) throws {
        var ok = try checkOwner()
        for u in Self.users {
            try replicas[u]!.sync(db)
            ok = checkReplica(replicas[u]!, label: "incremental") && ok
            if fresh {
                var f = Replica(u)
                try f.sync(db, pageSize: 11)
                ok = checkReplica(f, label: "fresh") && ok
            }
        }
        if !ok { stopped = true }
    }

    mutating func run(steps: Int) throws {
        for s in 1...steps {
            step = s
            try randomStep()
            if stopped { return }
            try checkAll(fresh: s % 100 == 0)
            if stopped { return }
        }
    }
}

@Suite("Model-based: random sharing steps against a first-principles model")
struct ModelBasedTests {
    static let seeds: [UInt64] = [1, 2, 3]
    static let steps = 1500

    /// Disagreements the model found (now fixed, kept as failures). A participant's write to a
    /// record outside their view must fail with permissionFailure "exactly like a record that does not
    /// exist would, so the answer reveals nothing" (AccessPolicy.checkRecordWrite). The database checks
    /// the data-model rules first, so these answers tell a participant about records they cannot see.
    static let cycleLeak =
        "participant write outside their view answered parentCycle (invalidArguments), not permissionFailure: reveals the record exists and where it sits"
    static let overlapLeak =
        "participant write outside their view answered alreadyShared, not permissionFailure: reveals another share (and its name) near the record"
    static let serverRecordLeak =
        "participant save (ifServerRecordUnchanged, no tag) of an existing record outside their view answered serverRecordChanged, not permissionFailure: reveals the record exists, and its serverRecord carries its fields"

    @Test("random saves, deletes, re-parents, shares, accepts, permission changes, roles, administrators' edits, one-time URLs, publicPermission changes, blocks, unblocks, removals, leaves, stops and participant writes", arguments: seeds)
    func modelBased(seed: UInt64) async throws {
        // Seconds of CPU: run on the blocking threads, not on the cooperative pool the async tests need.
        try await blocking {
            var run = try ModelRun(seed: seed)
            let start = Date()
            try run.run(steps: Self.steps)
            let elapsed = Date().timeIntervalSince(start)
            print("ModelBased seed \(seed): \(run.step) steps in \(String(format: "%.1f", elapsed)) s; outcomes: \(run.stats.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ", "))")
            let stopped = run.stopped
            for (issue, count) in run.knownIssueCount.sorted(by: { $0.key < $1.key }) {
                print("ModelBased seed \(seed): known issue ×\(count): \(issue)\n  first: \(run.firstKnownIssue[issue]!)")
            }
            #expect(!stopped, "seed \(seed) stopped at step \(run.step) after a disagreement (see above)")
        }
    }
}
