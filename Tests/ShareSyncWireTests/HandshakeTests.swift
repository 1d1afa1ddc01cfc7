import Testing
@testable import ShareSyncWire

@Suite struct HandshakeTests {
    @Test func clientHelloRendersAndParses() throws {
        let hello = Handshake.ClientHello(versions: [1, 2], encodings: [.deflate, .plain])
        #expect(hello.render() == "SHARESYNC versions=1,2 encodings=deflate,plain")
        #expect(try Handshake.ClientHello(parsing: "SHARESYNC versions=1,2 encodings=deflate,plain") == hello)
        #expect(try Handshake.ClientHello(parsing: "SHARESYNC encodings=deflate,plain versions=1,2\r") == hello)
    }

    @Test func clientHelloKeepsUnknownEncodingsAndIgnoresUnknownParameters() throws {
        let hello = try Handshake.ClientHello(parsing: "SHARESYNC versions=1 encodings=zstd,deflate future=yes")
        #expect(hello.encodings == ["zstd", "deflate"])
        let answer = try Handshake.negotiate(hello, configuration: ServerConfiguration())
        #expect(answer == Handshake.ServerHello(version: 1, encoding: .deflate))
    }

    @Test func serverHelloRendersAndParses() throws {
        let answer = Handshake.ServerHello(version: 1, encoding: .deflateBase64)
        #expect(answer.render() == "SHARESYNC version=1 encoding=deflate-base64")
        #expect(try Handshake.ServerHello(parsing: "SHARESYNC version=1 encoding=deflate-base64") == answer)
        #expect(try Handshake.ServerReply(parsing: "SHARESYNC version=1 encoding=deflate-base64") == .accepted(answer))
    }

    @Test("one trailing CR is tolerated, two are malformed, whichever parser reads the server's line (found by fuzzing)")
    func serverLineTrailingCarriageReturns() throws {
        let answer = Handshake.ServerHello(version: 1, encoding: .deflate)
        #expect(try Handshake.ServerHello(parsing: "SHARESYNC version=1 encoding=deflate\r") == answer)
        #expect(try Handshake.ServerReply(parsing: "SHARESYNC version=1 encoding=deflate\r") == .accepted(answer))
        #expect(throws: FrameError.self) { try Handshake.ServerHello(parsing: "SHARESYNC version=1 encoding=deflate\r\r") }
        #expect(throws: FrameError.self) { try Handshake.ServerReply(parsing: "SHARESYNC version=1 encoding=deflate\r\r") }
    }

    @Test func refusalLineRendersAndParses() throws {
        let error = FrameError(.unsupportedVersion, "no common protocol version\n(client offered 7)")
        let line = Handshake.renderError(error)
        #expect(line == "SHARESYNC-ERROR unsupportedVersion no common protocol version (client offered 7)")
        guard case .refused(let parsed) = try Handshake.ServerReply(parsing: Substring(line)) else {
            Issue.record("expected a refusal")
            return
        }
        #expect(parsed.code == .unsupportedVersion)
        #expect(parsed.message == "no common protocol version (client offered 7)")
    }

    @Test func negotiationPicksHighestCommonVersionAndFirstPreferredEncoding() throws {
        let server = ServerConfiguration(supportedVersions: [1, 2, 3])
        let hello = Handshake.ClientHello(versions: [1, 2, 5], encodings: [.plain, .deflate])
        #expect(try Handshake.negotiate(hello, configuration: server) == .init(version: 2, encoding: .plain))
    }

    @Test func negotiationSkipsPlainWhenTheServerDisallowsIt() throws {
        let server = ServerConfiguration(allowPlain: false)
        let hello = Handshake.ClientHello(versions: [1], encodings: [.plain, .deflateBase64, .deflate])
        #expect(try Handshake.negotiate(hello, configuration: server).encoding == .deflateBase64)
        #expect(throws: FrameError.self) {
            try Handshake.negotiate(.init(versions: [1], encodings: [.plain]), configuration: server)
        }
    }

    @Test func negotiationFailsWithoutCommonVersion() {
        let hello = Handshake.ClientHello(versions: [2, 3], encodings: [.deflate])
        do {
            _ = try Handshake.negotiate(hello, configuration: ServerConfiguration())
            Issue.record("expected unsupportedVersion")
        } catch {
            #expect(error.code == .unsupportedVersion)
            #expect(error.message.contains("2,3"))
        }
    }

    @Test func negotiationFailsWithoutCommonEncoding() {
        let hello = Handshake.ClientHello(versions: [1], encodingNames: ["zstd", "brotli"])
        #expect(throws: FrameError(.unsupportedEncoding, "no common encoding (server allows deflate,deflate-base64,plain)")) {
            try Handshake.negotiate(hello, configuration: ServerConfiguration())
        }
    }

    @Test(arguments: [
        "", "SHARESYNC", "sharesync versions=1 encodings=deflate", "SHARESYNC  versions=1 encodings=deflate",
        "SHARESYNC versions=1", "SHARESYNC encodings=deflate", "SHARESYNC versions= encodings=deflate",
        "SHARESYNC versions=1,,2 encodings=deflate", "SHARESYNC versions=0 encodings=deflate",
        "SHARESYNC versions=-1 encodings=deflate", "SHARESYNC versions=99999999 encodings=deflate",
        "SHARESYNC versions=1 encodings=", "SHARESYNC versions=1 encodings=DEFLATE",
        "SHARESYNC versions=1 encodings=deflate versions=2", "SHARESYNC versions=1 =x encodings=deflate",
        "SHARESYNC versions=1 encodings=deflate\t", "SHARESYNC versions=1 encodings=déflate",
        "GET / HTTP/1.1", String(repeating: "A", count: 2000),
    ])
    func malformedClientHelloIsRejected(line: String) {
        do {
            _ = try Handshake.ClientHello(parsing: Substring(line))
            Issue.record("accepted \(line)")
        } catch {
            #expect(error.code == .malformedHandshake)
        }
    }

    @Test(arguments: [
        "SHARESYNC version=1,2 encoding=deflate", "SHARESYNC version=1", "SHARESYNC encoding=deflate",
        "SHARESYNC-ERROR", "HELLO version=1 encoding=deflate",
    ])
    func malformedServerReplyIsRejected(line: String) {
        #expect(throws: FrameError.self) { try Handshake.ServerReply(parsing: Substring(line)) }
    }

    @Test func serverReplyWithUnknownEncodingIsUnsupported() {
        #expect(throws: FrameError.self) { try Handshake.ServerHello(parsing: "SHARESYNC version=1 encoding=zstd") }
        do {
            _ = try Handshake.ServerHello(parsing: "SHARESYNC version=1 encoding=zstd")
        } catch {
            #expect(error.code == .unsupportedEncoding)
        }
    }
}
