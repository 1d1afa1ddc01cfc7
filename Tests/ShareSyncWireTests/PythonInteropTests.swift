import NIOCore
import Testing
@testable import ShareSyncWire

/// Fixtures produced by the Python reference snippet in protocol.md
/// (`zlib.compressobj(level, wbits=-15)` + `Z_SYNC_FLUSH`, zlib 1.2.13) for these payloads: at zlib's
/// default level, and at level 1, the level ShareSync nodes send at.
@Suite struct PythonInteropTests {
    static let payloads: [ByteBuffer] = (0..<3).map { index in
        ByteBuffer(string: #"{"recordName":"note-\#(index)","recordType":"Note","fields":{"title":{"value":"Hello\nworld \#u{1B}","type":"STRING"}}}"#)
    } + [ByteBuffer(), ByteBuffer(string: "{}")]

    static let pythonDeflate = """
        aa562a4a4dce2f4af14bcc4d55b252cacb2f49d53550d2818a8654168044fd80a240b1b4ccd49c946225ab6aa592cc929c54\
        10a32c31a714a4c2233527273f26af3cbf282745411aa8b604a2333824c8d3cf5da9b6b616000aaac66291212d2c02000ac2\
        6691112d2c02000a0aaaae05000a
        """

    static let pythonDeflateBase64 = """
        qlYqSk3OL0rxS8xNVbJSyssvSdU1UNKBioZUFoBE/YCiQLG0zNSclGIlq2qlksySnFQQoywxpxSkwiM1Jyc/Jq88vygnRUEaqLYEojM4JMjTz12ptrYWAA==
        qsZikSEtLAIA
        wmaRES0sAgA=

        qq4FAA==

        """

    static let pythonDeflateLevel1 = """
        aa562a4a4dce2f4af14bcc4d55b252cacb2f49d53550d2818a8654168044fd80a240b1b4ccd49c946225ab6aa592cc921ca044\
        b55259624e294885476a4e4e7e4c5e797e514e8a8234506d094467704890a79fbb526d6d2d000aaac66291212d2c02000ac2\
        6691112d2c02000a0aaaae05000a
        """

    static let pythonDeflateBase64Level1 = """
        qlYqSk3OL0rxS8xNVbJSyssvSdU1UNKBioZUFoBE/YCiQLG0zNSclGIlq2qlksySHKBEtVJZYk4pSIVHak5OfkxeeX5RToqCNFBtCURncEiQp5+7Um1tLQA=
        qsZikSEtLAIA
        wmaRES0sAgA=

        qq4FAA==

        """

    @Test func swiftDecodesPythonDeflate() throws {
        #expect(try decodeLines(ByteBuffer(hex: Self.pythonDeflateLevel1), encoding: .deflate) == Self.payloads)
        #expect(try decodeLines(ByteBuffer(hex: Self.pythonDeflate), encoding: .deflate) == Self.payloads)
    }

    @Test func swiftDecodesPythonDeflateBase64() throws {
        #expect(try decodeLines(ByteBuffer(string: Self.pythonDeflateBase64), encoding: .deflateBase64) == Self.payloads)
    }

    /// Same zlib, same parameters: Swift writes the very bytes Python wrote (and Python reads).
    @Test func swiftEncodesWhatPythonEncodes() throws {
        #expect(try encodeStream(Self.payloads, encoding: .deflate).hex == Self.pythonDeflateLevel1)
        #expect(try String(buffer: encodeStream(Self.payloads, encoding: .deflateBase64)) == Self.pythonDeflateBase64Level1)
        #expect(try encodeStream(Self.payloads, encoding: .deflate, compressionLevel: -1).hex == Self.pythonDeflate)
        #expect(
            try String(buffer: encodeStream(Self.payloads, encoding: .deflateBase64, compressionLevel: -1)) == Self.pythonDeflateBase64)
    }
}
