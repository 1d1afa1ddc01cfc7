import Testing
@testable import ShareSyncCore
