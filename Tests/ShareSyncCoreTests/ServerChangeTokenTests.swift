import Foundation
import Testing

@testable import ShareSyncCore

@Suite("Server change tokens")
struct ServerChangeTokenTests {
    @Test("a token is version 1, its database and its sequence, and decodes to the sequence")
    func encodeDecode() throws {
        let token = ServerChangeToken(databaseID: "db1", sequence: 42)
        #expect(token.stringValue == "1.db1.42")
        #expect(token.description == "1.db1.42")
        #expect(try token.decode(expectedDatabaseID: "db1") == 42)
        #expect(try ServerChangeToken(databaseID: "db1", sequence: 0).decode(expectedDatabaseID: "db1") == 0)
        #expect(try ServerChangeToken(databaseID: "db1", sequence: .max).decode(expectedDatabaseID: "db1") == .max)
    }

    @Test("a token survives being stored as its string")
    func storedAsString() throws {
        let token = ServerChangeToken(databaseID: "9F2C11AB", sequence: 7)
        let restored = ServerChangeToken(stringValue: token.stringValue)
        #expect(restored == token)
        #expect(try restored.decode(expectedDatabaseID: "9F2C11AB") == 7)
    }

    @Test("a token is Codable as a bare JSON string")
    func codableAsString() throws {
        let token = ServerChangeToken(databaseID: "db1", sequence: 42)
        let data = try JSONEncoder().encode(token)
        #expect(String(decoding: data, as: UTF8.self) == #""1.db1.42""#)
        #expect(try JSONDecoder().decode(ServerChangeToken.self, from: data) == token)
    }

    @Test(
        "a malformed token fails with invalidArguments and rule changeTokenFormat",
        arguments: ["", "garbage", "1.db1", "1.db1.x", "1.db1.-3", "1.db1.42.7", "1..", "1.db1.", "1.db1.99999999999999999999",
                    // Another spelling of a valid position: a token is only ever sent back as issued.
                    "1.db1.042", "1.db1.+42", "1s.db1.42.07", "1s.db1.0042.7", "1.db1.\(String(repeating: "0", count: 4096))42"])
    func malformed(text: String) throws {
        let error = try #require(#expect(throws: ShareSyncError.self) {
            try ServerChangeToken(stringValue: text).decode(expectedDatabaseID: "db1")
        })
        #expect(error.code == .invalidArguments)
        #expect(error.rule == .changeTokenFormat)
        #expect(error.message.contains("malformed change token"))
    }

    @Test("a token from another database fails with changeTokenExpired, telling the caller to fetch from nil")
    func otherDatabase() throws {
        let token = ServerChangeToken(databaseID: "db1", sequence: 42)
        let error = try #require(#expect(throws: ShareSyncError.self) { try token.decode(expectedDatabaseID: "db2") })
        #expect(error.code == .changeTokenExpired)
        #expect(error.rule == .changeTokenDatabase)
        #expect(error.message.contains("another database"))
        #expect(error.message.contains("from nil"))
    }

    @Test("a token of an unknown version fails with invalidArguments naming the version")
    func unknownVersion() throws {
        let error = try #require(#expect(throws: ShareSyncError.self) {
            try ServerChangeToken(stringValue: "2.db1.42").decode(expectedDatabaseID: "db1")
        })
        #expect(error.code == .invalidArguments)
        #expect(error.rule == .changeTokenVersion)
        #expect(error.message.contains("version 2"), "\(error.message)")
    }

}
