import Foundation
import ShareSyncCore

extension ControlRequest {
    /// Reads the one request that carries many records, `{"recordImport":{"records":[...],"zone":...}}`,
    /// with the hand-written record reader; `nil` for every other line and anything unusual, which the
    /// `Codable` path then decodes (or refuses) exactly as before.
    package static func fastDecode(_ line: Data) -> ControlRequest? {
        JSONReader.read(line) { (reader: inout JSONReader) throws(JSONFallback) -> ControlRequest in
            var request: ControlRequest?
            try reader.object { reader, key throws(JSONFallback) in
                guard key.is("recordImport"), request == nil else { throw JSONFallback() }
                var zone: String?
                var records: [Record]?
                try reader.object { reader, key throws(JSONFallback) in
                    if key.is("zone"), zone == nil {
                        zone = try reader.string()
                    } else if key.is("records"), records == nil {
                        records = try reader.elements { reader throws(JSONFallback) in try reader.record() }
                    } else {
                        throw JSONFallback()
                    }
                }
                guard let zone, let records else { throw JSONFallback() }
                request = .recordImport(zone: zone, records: records)
            }
            guard let request else { throw JSONFallback() }
            return request
        }
    }

    /// The JSON line of the one request that carries many records, `recordImport` without a save
    /// policy, written with the hand-written record writer: the same bytes as `JSONEncoder` with sorted
    /// keys and unescaped slashes, about 5 times faster (`sharesync-bench codec`). `nil` for every other
    /// request and for records the writer leaves to Foundation; the caller then encodes with `JSONEncoder`.
    package func fastEncode() -> Data? {
        guard case .recordImport(let zone, let records, nil) = self else { return nil }
        var writer = JSONWriter(capacity: records.count * 400 + 64)
        writer.raw(#"{"recordImport":{"records":"#)
        do {
            try writer.array(records) { writer, record throws(JSONFallback) in try writer.record(record, includingChangedKeys: false) }
        } catch {
            return nil
        }
        writer.raw(#","zone":"#)
        writer.string(zone)
        writer.raw("}}")
        return Data(writer.bytes)
    }
}

extension QueryPage {
    /// The response line `{"ok":true,"result":{"cursor":N,"records":[…]}}` written with the hand-written
    /// record writer: the same bytes as `ControlHandler`'s `JSONEncoder` (sorted keys, unescaped
    /// slashes), about 5 times faster (`sharesync-bench codec`); `nil` when a record needs Foundation.
    package func fastResponse() -> Data? {
        var writer = JSONWriter(capacity: records.count * 400 + 64)
        writer.raw(#"{"ok":true,"result":{"#)
        if let cursor {
            writer.raw(#""cursor":"#)
            writer.int(Int64(cursor))
            writer.byte(UInt8(ascii: ","))
        }
        writer.raw(#""records":"#)
        do {
            try writer.array(records) { writer, record throws(JSONFallback) in try writer.record(record, includingChangedKeys: false) }
        } catch {
            return nil
        }
        writer.raw("}}")
        return Data(writer.bytes)
    }

    /// Reads a successful response line of that shape with the hand-written record reader; `nil` for an
    /// error and anything unusual, which the `Codable` path then reads exactly as before.
    package static func fastResult(_ line: Data) -> QueryPage? {
        JSONReader.read(line) { (reader: inout JSONReader) throws(JSONFallback) -> QueryPage in
            var ok: Bool?
            var page: QueryPage?
            try reader.object { reader, key throws(JSONFallback) in
                if key.is("ok"), ok == nil {
                    ok = try reader.bool()
                } else if key.is("result"), page == nil {
                    var records: [Record]?
                    var cursor: Int?
                    var sawCursor = false
                    try reader.object { reader, key throws(JSONFallback) in
                        if key.is("records"), records == nil {
                            records = try reader.elements { reader throws(JSONFallback) in try reader.record() }
                        } else if key.is("cursor"), !sawCursor {
                            sawCursor = true
                            cursor = try reader.int()
                        } else {
                            throw JSONFallback()
                        }
                    }
                    guard let records else { throw JSONFallback() }
                    page = QueryPage(records: records, cursor: cursor)
                } else {
                    throw JSONFallback()
                }
            }
            guard ok == true, let page else { throw JSONFallback() }
            return page
        }
    }
}
