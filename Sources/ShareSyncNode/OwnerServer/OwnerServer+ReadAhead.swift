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
        let page: ZoneChanges
    }

    func readZonePage(_ key: ZonePageReadAhead.Key) throws(ShareSyncError) -> ZonePage {
        let generation = database.changeGeneration
        let page = try view.fetchZoneChanges(zoneID(key.zoneName), since: key.token, resultsLimit: key.resultsLimit)
        return ZonePage(generation: generation, page: page)
    }

    /// The response to a `fetchZoneChanges` request, from `readAhead` if nothing was written since it
    /// was read, else read now; and the token of the page after it, if there is one.
    func fetchZoneChanges(id: Int, _ key: ZonePageReadAhead.Key, readAhead: ZonePage?) -> (ByteBuffer, next: ServerChangeToken?) {
        do {
            let page: ZoneChanges
            if let readAhead, readAhead.generation == database.changeGeneration {
                page = readAhead.page
            } else {
                page = try readZonePage(key).page
            }
            let response = try MessageCoding.encode(Response(id: id, ok: ZoneChangesResult(page)))
            return (response, page.moreComing ? page.changeToken : nil)
        } catch {
            return (errorResponse(id: id, error), nil)
        }
    }
}

extension ServerConnectionHandler {
    /// Serves a `fetchZoneChanges`, from the page read ahead if it is the one asked for, and reads the
    /// page after it ahead.
    func fetchZoneChanges(
        id: Int, _ key: ZonePageReadAhead.Key, executor: RequestExecutor, eventLoop: any EventLoop
    ) -> EventLoopFuture<ByteBuffer> {
        let ahead: EventLoopFuture<RequestExecutor.ZonePage?>
        if let readAhead, readAhead.key == key {
            ahead = readAhead.page
        } else {
            ahead = eventLoop.makeSucceededFuture(nil)
        }
        readAhead = nil
        let threadPool = server.threadPool
        let bound = NIOLoopBound(self, eventLoop: eventLoop)
        return ahead.flatMap { page in
            threadPool.runIfActive(eventLoop: eventLoop) { executor.fetchZoneChanges(id: id, key, readAhead: page) }
        }.map { result in
            let (response, next) = result
            if let next {
                bound.value.startReadAhead(
                    ZonePageReadAhead.Key(zoneName: key.zoneName, token: next, resultsLimit: key.resultsLimit), executor: executor,
                    eventLoop: eventLoop)
            }
            return response
        }
    }

    private func startReadAhead(_ key: ZonePageReadAhead.Key, executor: RequestExecutor, eventLoop: any EventLoop) {
        guard isAuthenticated else { return }
        let page = server.threadPool.runIfActive(eventLoop: eventLoop) { () -> RequestExecutor.ZonePage? in
            try? executor.readZonePage(key)
        }.recover { _ in nil }
        readAhead = ZonePageReadAhead(key: key, page: page)
    }
}
