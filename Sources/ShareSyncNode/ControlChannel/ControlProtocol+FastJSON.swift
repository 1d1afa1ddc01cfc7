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
}
