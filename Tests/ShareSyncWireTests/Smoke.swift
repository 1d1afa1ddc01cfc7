import Testing
@testable import ShareSyncWire
