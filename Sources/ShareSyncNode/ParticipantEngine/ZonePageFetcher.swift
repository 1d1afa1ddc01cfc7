import ShareSyncCore

/// Reads a zone's `fetchZoneChanges` pages from a token, one page ahead: as soon as page N arrives,
/// page N+1 is requested with page N's token (read from the answer before its records are decoded),
/// and page N is decoded while the owner serves page N+1, all while the caller stores page N-1. The
/// caller still stores the pages one after another, in order, each with its token.
///
/// At most one request is in flight. An error of the request for page N+1 (token expired, zone gone,
/// connection lost) comes out of the ``next()`` after page N, exactly where a fetch of page N+1 made
/// after storing page N would have thrown it: the caller's last stored token is the one that failed.
/// A page that fails to decode fails its own ``next()``; the request already sent for the page after
/// it is dropped with the fetcher.
struct ZonePageFetcher: ~Copyable {
    private let connection: any OwnerDatabase
    private let zoneName: String
    private let pageSize: Int?
    private var pending: Task<Result<Fetched, ShareSyncError>, Never>?

    /// A decoded page, and the request for the page after it if it was sent early.
    private struct Fetched: Sendable {
        var page: EncodedZoneChanges
        var next: (token: ServerChangeToken, request: Result<PendingZoneChanges, ShareSyncError>)?
    }

    /// Requests the first page (from `token`, nil for everything) at once.
    init(_ connection: any OwnerDatabase, zoneName: String, since token: ServerChangeToken?, pageSize: Int?) async {
        self.connection = connection
        self.zoneName = zoneName
        self.pageSize = pageSize
        pending = Self.read(await Self.request(connection, zoneName: zoneName, since: token, pageSize: pageSize), connection, zoneName, pageSize)
    }

    deinit { pending?.cancel() }

    /// The next page, in order; nil after the page without `moreComing`. The page after it is already
    /// requested when this returns.
    mutating func next() async throws(ShareSyncError) -> EncodedZoneChanges? {
        guard let task = pending else { return nil }
        pending = nil
        let fetched = try await task.value.get()
        let page = fetched.page
        if page.moreComing {
            let request: Result<PendingZoneChanges, ShareSyncError>
            if let early = fetched.next, early.token == page.changeToken {
                request = early.request
            } else {
                request = await Self.request(connection, zoneName: zoneName, since: page.changeToken, pageSize: pageSize)
            }
            pending = Self.read(request, connection, zoneName, pageSize)
        }
        return page
    }

    /// Sends the request for a page now, so requests keep their order.
    private static func request(
        _ connection: any OwnerDatabase, zoneName: String, since token: ServerChangeToken?, pageSize: Int?
    ) async -> Result<PendingZoneChanges, ShareSyncError> {
        do throws(ShareSyncError) {
            return .success(try await connection.startFetchZoneChanges(zoneName: zoneName, since: token, resultsLimit: pageSize))
        } catch {
            return .failure(error)
        }
    }

    /// Waits for a page to arrive, sends the request for the page after it, then decodes it.
    private static func read(
        _ request: Result<PendingZoneChanges, ShareSyncError>, _ connection: any OwnerDatabase, _ zoneName: String, _ pageSize: Int?
    ) -> Task<Result<Fetched, ShareSyncError>, Never> {
        Task {
            do throws(ShareSyncError) {
                let arrived = try await request.get().arrived
                var next: (token: ServerChangeToken, request: Result<PendingZoneChanges, ShareSyncError>)?
                if let continuation = arrived.continuation, continuation.moreComing, !Task.isCancelled {
                    next = (continuation.token, await Self.request(connection, zoneName: zoneName, since: continuation.token, pageSize: pageSize))
                }
                return .success(Fetched(page: try arrived.page(), next: next))
            } catch {
                return .failure(error)
            }
        }
    }
}
