import Foundation
import Testing

@testable import ShareSyncCore

/// A sealing that shows the position (the layout around it is what these tests check; the owner's
/// database seals with a key, `PositionCipherTests` in the store's tests).
struct VisibleSealing: ChangeTokenSealing {
    func seal(_ position: ServerChangeToken.Position) throws(ShareSyncError) -> String {
        "p\(position.sequence)" + (position.scanSnapshot.map { "s\($0)" } ?? "")
    }

    func open(_ sealed: Substring) throws(ShareSyncError) -> ServerChangeToken.Position {
        let parts = sealed.dropFirst().split(separator: "s", omittingEmptySubsequences: false)
        guard sealed.first == "p", let sequence = Int64(parts[0]), parts.count <= 2 else {
            throw ShareSyncError(.invalidArguments, "malformed change token", rule: .changeTokenFormat)
        }
        if parts.count == 2 {
            guard let snapshot = Int64(parts[1]) else { throw ShareSyncError(.invalidArguments, "malformed change token", rule: .changeTokenFormat) }
            return .init(sequence: sequence, scanSnapshot: snapshot)
        }
        return .init(sequence: sequence)
    }

    func isWellFormed(_ sealed: Substring) -> Bool { sealed.first == "p" }
}

@Suite("Server change tokens")
struct ServerChangeTokenTests {
    static let sealing = VisibleSealing()

    static func token(_ sequence: Int64, snapshot: Int64? = nil, database: String = "db1") throws -> ServerChangeToken {
        try ServerChangeToken(databaseID: database, position: .init(sequence: sequence, scanSnapshot: snapshot), sealing: sealing)
    }

    @Test("a token is version 2, its database and its sealed position, and opens to the position")
    func encodeDecode() throws {
        let token = try Self.token(42)
        #expect(token.stringValue == "2.db1.p42")
        #expect(token.description == "2.db1.p42")
        #expect(try token.position(expectedDatabaseID: "db1", sealing: Self.sealing) == .init(sequence: 42))
        let scan = try Self.token(42, snapshot: 7)
        #expect(try scan.position(expectedDatabaseID: "db1", sealing: Self.sealing) == .init(sequence: 42, scanSnapshot: 7))
    }

    @Test("a token survives being stored as its string")
    func storedAsString() throws {
        let token = try Self.token(7, database: "9f2c11ab")
        let restored = ServerChangeToken(stringValue: token.stringValue)
        #expect(restored == token)
        #expect(try restored.position(expectedDatabaseID: "9f2c11ab", sealing: Self.sealing).sequence == 7)
    }

    @Test("a token is Codable as a bare JSON string")
    func codableAsString() throws {
        let token = try Self.token(42)
        let data = try JSONEncoder().encode(token)
        #expect(String(decoding: data, as: UTF8.self) == #""2.db1.p42""#)
        #expect(try JSONDecoder().decode(ServerChangeToken.self, from: data) == token)
    }

    @Test(
        "a malformed token fails with invalidArguments and rule changeTokenFormat",
        arguments: ["", "garbage", "2.db1", "2.db1.x", "2.db1.p42.7", "2..", "2.db1.", "2.db1.p99999999999999999999",
                    // Another spelling of a valid position: a token is only ever sent back as issued.
                    "2.db1.p042", "2.db1.p+42", "2.db1.p42s07",
                    // Made up or mangled: malformed, not another database's (whose holder would fetch all again).
                    "2.x.y", "2.db2.y", "2.DB1.p42", "2.db1x.p42"])
    func malformed(text: String) throws {
        let error = try #require(#expect(throws: ShareSyncError.self) {
            try ServerChangeToken(stringValue: text).position(expectedDatabaseID: "db1", sealing: Self.sealing)
        })
        #expect(error.code == .invalidArguments)
        #expect(error.rule == .changeTokenFormat)
        #expect(error.message.contains("malformed change token"))
    }

    @Test("a token from another database fails with changeTokenExpired, telling the caller to fetch from nil")
    func otherDatabase() throws {
        let token = try Self.token(42)
        let error = try #require(#expect(throws: ShareSyncError.self) {
            try token.position(expectedDatabaseID: "db2", sealing: Self.sealing)
        })
        #expect(error.code == .changeTokenExpired)
        #expect(error.rule == .changeTokenDatabase)
        #expect(error.message.contains("another database"))
        #expect(error.message.contains("from nil"))
    }

    @Test("a token of version 1 (its position in clear) is expired: its holder fetches again from nil, once")
    func earlierVersion() throws {
        for text in ["1.db1.42", "1s.db1.42.7"] {
            let error = try #require(#expect(throws: ShareSyncError.self) {
                try ServerChangeToken(stringValue: text).position(expectedDatabaseID: "db1", sealing: Self.sealing)
            })
            #expect(error.code == .changeTokenExpired)
            #expect(error.rule == .changeTokenVersion)
            #expect(error.message.contains("earlier version") && error.message.contains("from nil"), "\(error.message)")
        }
    }

    @Test("a token of an unknown version fails with invalidArguments naming the version")
    func unknownVersion() throws {
        let error = try #require(#expect(throws: ShareSyncError.self) {
            try ServerChangeToken(stringValue: "3.db1.42").position(expectedDatabaseID: "db1", sealing: Self.sealing)
        })
        #expect(error.code == .invalidArguments)
        #expect(error.rule == .changeTokenVersion)
        #expect(error.message.contains("version 3"), "\(error.message)")
    }
}
