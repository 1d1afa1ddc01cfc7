import Testing
@testable import ShareSyncNode
