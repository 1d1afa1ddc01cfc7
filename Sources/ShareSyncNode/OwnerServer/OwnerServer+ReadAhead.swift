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
//
// On a `deflate` connection the page read ahead is also encoded as its answer after the request id,
// and compressed (``FrameEncoder/precompress(_:level:)``), on the thread pool: when the request
// comes, the answer is the id's few bytes and that tail, offered to the connection's frame encoder
// (``FrameSplices``), which compresses only the head on the event loop and splices the rest in. The
// page is then held once (its records only in the tail), and the offer shares the answer's bytes.

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
        /// The records as the JSON the participant sees, spliced from the stored bytes (none kept
        /// once they are in ``answerTail``).
        var page: FeedPage<Data>
        /// The answer's JSON after its request id (``Response/answerTail(_:capacity:)``), compressed
        /// for the connection's `deflate` frames; nil if not made.
        var answerTail: PrecompressedTail?
    }

    func readZonePage(_ key: ZonePageReadAhead.Key) throws(ShareSyncError) -> ZonePage {
        let generation = database.changeGeneration
        let page = try view.fetchZoneChangesPageJSON(
            zoneID(key.zoneName), since: key.token, resultsLimit: key.resultsLimit, byteBudget: nil, allowEmpty: false)!
        return ZonePage(generation: generation, page: page, answerTail: nil)
    }

    /// ``readZonePage(_:)`` ahead of its request; with `compressing`, its answer is also encoded and
    /// compressed now, all but the request id (on the thread pool, while the participant still
    /// receives and stores the page before it), so that the event loop only has the id to compress
    /// when the request comes.
    /// A page whose answer would be over `maximumFrameSize` is not compressed (it is answered with
    /// `limitExceeded`).
    func readZonePageAhead(_ key: ZonePageReadAhead.Key, compressing: Bool, maximumFrameSize: Int) throws(ShareSyncError) -> ZonePage {
        var read = try readZonePage(key)
        guard compressing else { return read }
        let bytes = read.page.changes.reduce(256) { sum, change in
            if case .changed(let json) = change { sum + json.count + 1 } else { sum + 64 }
        }
        // A page that cannot take the fast encoder is answered as it is when asked for.
        if let tail = try? Response<ZoneChangesPage>.answerTail(ZoneChangesPage(read.page), capacity: bytes),
            tail.count + 32 <= maximumFrameSize,
            let compressed = try? FrameEncoder.precompress(ByteBuffer(bytes: tail))
        {
            read.answerTail = compressed
            read.page.changes = []  // in the tail now: a connection holds the page once
        }
        return read
    }

    /// The response to a `fetchZoneChanges` request, from `readAhead` if nothing was written since it
    /// was read, else read now; the token of the page after it, if there is one; the error answered, if any.
    /// With the page read ahead and its answer compressed ahead, the response is its head and that
    /// tail, and the tail comes back too, for the connection to offer its frame encoder.
    func fetchZoneChanges(id: Int, _ key: ZonePageReadAhead.Key, readAhead: ZonePage?)
        -> (ByteBuffer, next: ServerChangeToken?, error: ShareSyncError?, tail: PrecompressedTail?)
    {
        do {
            let page: FeedPage<Data>
            var tail: PrecompressedTail?
            if let readAhead, readAhead.generation == database.changeGeneration {
                page = readAhead.page
                tail = readAhead.answerTail
            } else {
                page = try readZonePage(key).page
            }
            let response: ByteBuffer
            if let precompressed = tail {
                let head = Response<ZoneChangesPage>.answerHead(id: id)
                var buffer = ByteBufferAllocator().buffer(capacity: head.count + precompressed.plaintext.readableBytes)
                buffer.writeBytes(head)
                buffer.writeImmutableBuffer(precompressed.plaintext)
                response = buffer
                tail = precompressed.within(buffer)  // the answer's own bytes: the page is held once
            } else {
                response = try MessageCoding.encode(Response(id: id, ok: ZoneChangesPage(page)))
            }
            syncStates?.served(caller.userRecordName, zoneName: key.zoneName, token: page.changeToken)
            return (response, page.moreComing ? page.changeToken : nil, nil, tail)
        } catch {
            return (errorResponse(id: id, error), nil, error, nil)
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
        let answer: (ByteBuffer, next: ServerChangeToken?, error: ShareSyncError?, tail: PrecompressedTail?)
        do {
            answer = try await threadPool.runIfActive { executor.fetchZoneChanges(id: id, key, readAhead: page ?? nil) }
        } catch {
            let refusal = ShareSyncError(.serviceUnavailable, "the server is shutting down: \(error)")
            return (executor.errorResponse(id: id, refusal), refusal)
        }
        let splices = shared.splices.withLock { $0 }
        let frameLimit = server.configuration.transport.limits.maximumFrameSize
        if let next = answer.next {
            let nextKey = ZonePageReadAhead.Key(zoneName: key.zoneName, token: next, resultsLimit: key.resultsLimit)
            let compressing = splices != nil
            let read = threadPool.runIfActive(eventLoop: channel.channel.eventLoop) { () -> RequestExecutor.ZonePage? in
                try? executor.readZonePageAhead(nextKey, compressing: compressing, maximumFrameSize: frameLimit)
            }.recover { _ in nil }
            shared.readAhead.withLock { $0 = ZonePageReadAhead(key: nextKey, page: read) }
        }
        // Offered only for an answer that goes out as it is (one over the frame limit is replaced).
        if let tail = answer.tail, answer.0.readableBytes <= frameLimit {
            let registry = server.registry
            splices?.offer(tail) { registry.splicedAnswers.add(1, ordering: .relaxed) }
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
