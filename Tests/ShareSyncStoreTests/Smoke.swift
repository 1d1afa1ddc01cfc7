import Testing
@testable import ShareSyncStore
