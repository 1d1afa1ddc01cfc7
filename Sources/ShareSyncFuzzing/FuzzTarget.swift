import Foundation

/// The fuzz targets of issue 10, one per decoder that reads bytes from a peer. Each takes any bytes and
/// runs them through the real decoders: errors are the expected answer to bad input; a crash, a trap,
/// unbounded memory or a broken invariant (thrown as ``FuzzFailure``) is a bug.
///
/// The same function runs under libFuzzer (`sharesync-fuzz` built with `-sanitize=fuzzer`), in the
/// replay driver (`sharesync-fuzz TARGET FILE...`) and in the regression test over `fuzz/corpus` and
/// `fuzz/crashes`. The README's "Fuzzing" paragraph and `fuzz/run.sh` say how to run them.
public enum FuzzTarget: String, CaseIterable, Sendable {
    /// `FrameDecoder` line by line and `FrameLineDecoder` in a `ByteToMessageHandler`, for each encoding.
    /// The first byte chooses the encoding and the path; see ``FrameFuzzing``.
    case frame
    /// The handshake lines (`ClientHello`, `ServerHello`, `ServerReply`, negotiation) and the
    /// `HandshakeHandler` of both roles on an `EmbeddedChannel` fed the bytes.
    case handshake
    /// The message reader: a frame payload read as the nodes read it (its head, then the message its
    /// head routes to), hand-written and Foundation decoders checked against each other.
    case message
    /// The record JSON reader: `Record(jsonData:)`, hand-written against Foundation.
    case record

    /// Runs one input through the target.
    /// - Throws: ``FuzzFailure`` when an invariant the code documents does not hold.
    public func run(_ bytes: UnsafeRawBufferPointer) throws(FuzzFailure) {
        switch self {
        case .frame: try FrameFuzzing.run(bytes)
        case .handshake: try HandshakeFuzzing.run(bytes)
        case .message: try MessageFuzzing.run(bytes)
        case .record: try RecordFuzzing.run(bytes)
        }
    }

    /// ``run(_:)-(UnsafeRawBufferPointer)`` over bytes in an array or `Data`.
    public func run<Bytes: ContiguousBytes>(_ bytes: Bytes) throws(FuzzFailure) {
        let result: Result<Void, FuzzFailure> = bytes.withUnsafeBytes { raw in
            Result { () throws(FuzzFailure) in try self.run(raw) }
        }
        try result.get()
    }
}

/// An invariant that did not hold for one input: a bug in the decoder (or in the invariant).
public struct FuzzFailure: Error, CustomStringConvertible, Sendable {
    /// What did not hold, with the values involved.
    public var message: String

    /// Creates a failure.
    public init(_ message: String) { self.message = message }

    public var description: String { "FuzzFailure: \(self.message)" }
}

/// Throws a ``FuzzFailure`` unless `condition` holds.
@inline(__always)
func check(_ condition: Bool, _ message: @autoclosure () -> String) throws(FuzzFailure) {
    if !condition { throw FuzzFailure(message()) }
}

/// A short printable rendering of bytes for failure messages.
func preview(_ bytes: some Collection<UInt8>, limit: Int = 200) -> String {
    let text = String(decoding: bytes.prefix(limit), as: UTF8.self)
    return bytes.count > limit ? text + "… (\(bytes.count) bytes)" : text
}
