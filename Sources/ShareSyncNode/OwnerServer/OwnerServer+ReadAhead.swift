import Foundation
import NIOCore
import NIOPosix
import ShareSyncCore
import ShareSyncStore
import ShareSyncWire

// Reading a zone's pages ahead. A participant pages through a zone by asking for the page after the
// token of the last one. When a `fetchZoneChanges` page says `moreComing`, the connection reads the
// next page (same zone, that token, same limit) on the thread pool while the participant stores the
// page it got; when the participant then asks for exactly that page, it is answered from the read.
//
// The answer is the one a fresh read would give: the read ahead goes through the caller's shared
// database view like any request (the same access checks, in one read transaction), and it is used
// only if no write to the database started or ended since just before it began
// (``PrivateDatabase/changeGeneration``). Otherwise the page is read again. One page is kept per
// connection, for the last page served.

/// The next page of the last `fetchZoneChanges` a connection served, being read or read.
struct ZonePageReadAhead {
    struct Key: Hashable, Sendable {
        var zoneName: String
        var token: ServerChangeToken?
        var resultsLimit: Int?
    }

    let key: Key
    /// The page and the database's generation before it was read; nil if the read failed.
    let page: EventLoopFuture<RequestExecutor.ZonePage?>
}

extension RequestExecutor {
    /// A page of a zone's changes in the caller's view, with the database's change generation from
    /// before the read.
    struct ZonePage: Sendable {
        let generation: UInt64
        /// The records as the JSON the participant sees, spliced from the stored bytes.
        let page: FeedPage<Data>
    }

    func readZonePage(_ key: ZonePageReadAhead.Key) throws(ShareSyncError) -> ZonePage {
        let generation = database.changeGeneration
        let page = try view.fetchZoneChangesPageJSON(
            zoneID(key.zoneName), since: key.token, resultsLimit: key.resultsLimit, byteBudget: nil, allowEmpty: false)!
        return ZonePage(generation: generation, page: page)
    }

    /// The response to a `fetchZoneChanges` request, from `readAhead` if nothing was written since it
    /// was read, else read now; the token of the page after it, if there is one; the error answered, if any.
    func fetchZoneChanges(id: Int, _ key: ZonePageReadAhead.Key, readAhead: ZonePage?)
        -> (ByteBuffer, next: ServerChangeToken?, error: ShareSyncError?)
    {
        do {
            let page: FeedPage<Data>
            if let readAhead, readAhead.generation == database.changeGeneration {
                page = readAhead.page
            } else {
                page = try readZonePage(key).page
            }
            let response = try MessageCoding.encode(Response(id: id, ok: ZoneChangesPage(page)))
            syncStates?.served(caller.userRecordName, zoneName: key.zoneName, token: page.changeToken)
            return (response, page.moreComing ? page.changeToken : nil, nil)
        } catch {
            return (errorResponse(id: id, error), nil, error)
        }
    }
}

extension ServerConnection {
    /// Serves a `fetchZoneChanges`, from the page read ahead if it is the one asked for, and reads the
    /// page after it ahead. Returns the answer, and the error it carries if the request was refused.
    func fetchZoneChanges(id: Int, _ key: ZonePageReadAhead.Key, executor: RequestExecutor, shared: ConnectionShared) async
        -> (payload: ByteBuffer, error: ShareSyncError?)
    {
        let ahead = shared.readAhead.withLock { slot -> EventLoopFuture<RequestExecutor.ZonePage?>? in
            defer { slot = nil }
            return slot?.key == key ? slot?.page : nil
        }
        let page = try? await ahead?.get()
        let threadPool = server.threadPool
        let answer: (ByteBuffer, next: ServerChangeToken?, error: ShareSyncError?)
        do {
            answer = try await threadPool.runIfActive { executor.fetchZoneChanges(id: id, key, readAhead: page ?? nil) }
        } catch {
            let refusal = ShareSyncError(.serviceUnavailable, "the server is shutting down: \(error)")
            return (executor.errorResponse(id: id, refusal), refusal)
        }
        if let next = answer.next {
            let nextKey = ZonePageReadAhead.Key(zoneName: key.zoneName, token: next, resultsLimit: key.resultsLimit)
            let read = threadPool.runIfActive(eventLoop: channel.channel.eventLoop) { () -> RequestExecutor.ZonePage? in
                try? executor.readZonePage(nextKey)
            }.recover { _ in nil }
            shared.readAhead.withLock { $0 = ZonePageReadAhead(key: nextKey, page: read) }
        }
        return (answer.0, answer.error)
    }
}

extension ZoneChangesPage {
    /// The wire form of a page of a viewer's feed whose records are JSON already.
    package init(_ page: FeedPage<Data>) {
        let changes: [Change] = page.changes.map { change in
            switch change {
            case .changed(let json): .changed(json)
            case .deleted(let name, let type): .deleted(recordName: name, recordType: type)
            }
        }
        self.init(zoneName: page.zoneID.zoneName, changes: changes, token: page.changeToken, moreComing: page.moreComing)
    }
}
