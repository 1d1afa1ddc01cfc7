import ShareSyncCore

/// Reads a zone's `fetchZoneChanges` pages from a token, one page ahead: as soon as page N arrives,
/// page N+1 is requested with page N's token and decoded in its own task, while the caller stores
/// page N. The caller still stores the pages one after another, in order, each with its token.
///
/// At most one request is in flight. An error of the request for page N+1 (token expired, zone gone,
/// connection lost) comes out of the ``next()`` after page N, exactly where a fetch of page N+1 made
/// after storing page N would have thrown it: the caller's last stored token is the one that failed.
struct ZonePageFetcher: ~Copyable {
    private let connection: any OwnerDatabase
    private let zoneName: String
    private let pageSize: Int?
    private var pending: Task<Result<EncodedZoneChanges, ShareSyncError>, Never>?

    /// Requests the first page (from `token`, nil for everything) at once.
    init(_ connection: any OwnerDatabase, zoneName: String, since token: ServerChangeToken?, pageSize: Int?) async {
        self.connection = connection
        self.zoneName = zoneName
        self.pageSize = pageSize
        pending = await Self.fetch(connection, zoneName: zoneName, since: token, pageSize: pageSize)
    }

    deinit { pending?.cancel() }

    /// The next page, in order; nil after the page without `moreComing`. Requests the page after it
    /// before returning.
    mutating func next() async throws(ShareSyncError) -> EncodedZoneChanges? {
        guard let task = pending else { return nil }
        pending = nil
        let page = try await task.value.get()
        if page.moreComing {
            pending = await Self.fetch(connection, zoneName: zoneName, since: page.changeToken, pageSize: pageSize)
        }
        return page
    }

    private static func fetch(
        _ connection: any OwnerDatabase, zoneName: String, since token: ServerChangeToken?, pageSize: Int?
    ) async -> Task<Result<EncodedZoneChanges, ShareSyncError>, Never> {
        // Sent here, before the task runs, so the request leaves now and requests keep their order.
        let request: PendingZoneChanges
        do {
            request = try await connection.startFetchZoneChanges(zoneName: zoneName, since: token, resultsLimit: pageSize)
        } catch {
            return Task { .failure(error) }
        }
        return Task {
            do throws(ShareSyncError) { return .success(try await request.encodedPage) } catch { return .failure(error) }
        }
    }
}
