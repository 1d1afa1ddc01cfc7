import Foundation
import Testing

@testable import ShareSyncCore

@Suite("Name syntax")
struct NamesTests {
    let limits = Limits()

    // MARK: Record types

    @Test("valid record types are accepted", arguments: ["Note", "note", "Note_2", "N", "cloudkit.share", String(repeating: "a", count: 255)])
    func validRecordType(name: String) throws {
        try Names.checkRecordType(name, limits: limits)
    }

    @Test(
        "invalid record types fail with rule recordTypeSyntax and a message quoting the name",
        arguments: ["", "2Note", "_Note", "Note-x", "Note x", "Nöte", "cloudkit.other", "Note.Sub", String(repeating: "a", count: 256)])
    func invalidRecordType(name: String) throws {
        let error = try #require(#expect(throws: ShareSyncError.self) { try Names.checkRecordType(name, limits: limits) })
        #expect(error.code == .invalidArguments)
        #expect(error.rule == .recordTypeSyntax)
        #expect(error.message.contains("record type \"\(name.prefix(40))"), "\(error.message)")
        #expect(error.message.contains("must start with a letter"), "\(error.message)")
    }

    // MARK: Field keys

    @Test(
        "valid field keys, including the share's own cloudkit. fields, are accepted",
        arguments: ["title", "Title_2", "x", "cloudkit.title", "cloudkit.thumbnailImageData", "cloudkit.type"])
    func validFieldKey(key: String) throws {
        try Names.checkFieldKey(key, limits: limits)
    }

    @Test(
        "invalid field keys fail with rule fieldKeySyntax",
        arguments: ["", "1x", "_x", "has space", "dash-key", "clé", "cloudkit.other", "cloudkit.", String(repeating: "k", count: 256)])
    func invalidFieldKey(key: String) throws {
        let recordID = Record.ID(recordName: "note-1")
        let error = try #require(#expect(throws: ShareSyncError.self) {
            try Names.checkFieldKey(key, limits: limits, recordID: recordID)
        })
        #expect(error.code == .invalidArguments)
        #expect(error.rule == .fieldKeySyntax)
        #expect(error.recordID == recordID)
        #expect(error.message.contains("field key"), "\(error.message)")
    }

    // MARK: Record names

    @Test(
        "valid record names are accepted",
        arguments: ["note-1", "A", "cloudkit.zoneshare", "9F2C-11", "a.b:c@d!~", String(repeating: "r", count: 255)])
    func validRecordName(name: String) throws {
        try Names.checkRecordName(name, limits: limits)
    }

    @Test(
        "invalid record names fail with rule recordNameSyntax and a message stating the rule",
        arguments: ["", "has space", " lead", "_private", "café", "名前", "tab\there", "new\nline", String(repeating: "r", count: 256)])
    func invalidRecordName(name: String) throws {
        let recordID = Record.ID(recordName: name)
        let error = try #require(#expect(throws: ShareSyncError.self) {
            try Names.checkRecordName(name, limits: limits, recordID: recordID)
        })
        #expect(error.code == .invalidArguments)
        #expect(error.rule == .recordNameSyntax)
        #expect(error.recordID == recordID)
        #expect(error.message.contains("1 to 255 printable ASCII characters without spaces, not starting with _"), "\(error.message)")
    }

    @Test("a long invalid name is shortened to 40 characters in the message")
    func longNameIsShortened() throws {
        let name = String(repeating: "r", count: 256)
        let error = try #require(#expect(throws: ShareSyncError.self) { try Names.checkRecordName(name, limits: limits) })
        #expect(error.message.contains("\"" + String(repeating: "r", count: 40) + "…\""), "\(error.message)")
        #expect(!error.message.contains(String(repeating: "r", count: 41)))
    }

    @Test("the name length limit is configurable and counted in UTF-8 bytes")
    func configurableLength() throws {
        var small = Limits()
        small.maximumNameLength = 5
        try Names.checkRecordName("abcde", limits: small)
        try Names.checkRecordType("Abcde", limits: small)
        let error = try #require(#expect(throws: ShareSyncError.self) { try Names.checkRecordName("abcdef", limits: small) })
        #expect(error.message.contains("1 to 5"), "\(error.message)")
        let typeError = try #require(#expect(throws: ShareSyncError.self) { try Names.checkRecordType("Abcdef", limits: small) })
        #expect(typeError.message.contains("at most 5"), "\(typeError.message)")
    }

    // MARK: Zone names

    @Test("valid zone names are accepted", arguments: ["Topics", "my-zone.v2", "zone_1", "1zone", "_defaultZone", String(repeating: "z", count: 255)])
    func validZoneName(name: String) throws {
        try Names.checkZoneName(name, limits: limits)
    }

    @Test(
        "invalid zone names fail with rule zoneNameSyntax, carrying the zone",
        arguments: ["", "_private", "has space", "zone/1", "zöne", "zone:1", String(repeating: "z", count: 256)])
    func invalidZoneName(name: String) throws {
        let error = try #require(#expect(throws: ShareSyncError.self) { try Names.checkZoneName(name, limits: limits) })
        #expect(error.code == .invalidArguments)
        #expect(error.rule == .zoneNameSyntax)
        #expect(error.zoneID == RecordZone.ID(zoneName: name))
        #expect(error.message.contains("letters, digits, _, - or ., not starting with _"), "\(error.message)")
    }
}
