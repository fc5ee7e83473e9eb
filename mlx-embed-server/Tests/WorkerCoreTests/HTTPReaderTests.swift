import XCTest

@testable import WorkerCore

/// A reader over fixed chunks, one per read call, then end of stream: it exercises
/// requests split at every boundary a socket may split them.
func chunkedReader(_ chunks: [[UInt8]]) -> BufferedReader {
    var rest = chunks
    return BufferedReader { buffer in
        guard !rest.isEmpty else { return 0 }
        var chunk = rest.removeFirst()
        if chunk.count > buffer.count {
            rest.insert(Array(chunk[buffer.count...]), at: 0)
            chunk = Array(chunk[..<buffer.count])
        }
        buffer.copyBytes(from: chunk)
        return chunk.count
    }
}

func bytes(_ s: String) -> [UInt8] { Array(s.utf8) }

/// Splits s into pieces of n bytes.
func pieces(_ s: String, _ n: Int) -> [[UInt8]] {
    let b = bytes(s)
    return stride(from: 0, to: b.count, by: n).map { Array(b[$0..<min($0 + n, b.count)]) }
}

final class HTTPReaderTests: XCTestCase {
    func read(_ r: BufferedReader, limits: RequestLimits = RequestLimits()) throws -> HTTPRequest? {
        try readRequest(from: r, limits: limits, sendContinue: {})
    }

    func testGetThenIdleClose() throws {
        let r = chunkedReader([bytes("GET /health?x=1 HTTP/1.1\r\nHost: worker\r\nTraceparent: abc\r\n\r\n")])
        let req = try XCTUnwrap(try read(r))
        XCTAssertEqual(req.method, "GET")
        XCTAssertEqual(req.target, "/health?x=1")
        XCTAssertEqual(req.path, "/health")
        XCTAssertEqual(req.header("traceparent"), "abc")
        XCTAssertEqual(req.header("HOST"), "worker")
        XCTAssertEqual(req.body, [])
        XCTAssertTrue(req.keepAlive)
        XCTAssertNil(try read(r), "a connection closed between requests reads as nil")
    }

    func testBodySplitAtEveryByte() throws {
        let body = "{\"tokens\":[[1,2,3]]}"
        let raw = "POST /embed HTTP/1.1\r\nContent-Length: \(body.utf8.count)\r\n\r\n" + body
        for size in [1, 2, 7, raw.utf8.count] {
            let req = try XCTUnwrap(try read(chunkedReader(pieces(raw, size))), "pieces of \(size)")
            XCTAssertEqual(String(decoding: req.body, as: UTF8.self), body, "pieces of \(size)")
        }
    }

    func testPipelinedRequestsKeepTheirOrder() throws {
        let raw =
            "POST /embed HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"
            + "GET /health HTTP/1.1\r\nConnection: close\r\n\r\n"
        let r = chunkedReader([bytes(raw)])
        let first = try XCTUnwrap(try read(r))
        XCTAssertEqual(first.body, bytes("abc"))
        let second = try XCTUnwrap(try read(r))
        XCTAssertEqual(second.path, "/health")
        XCTAssertFalse(second.keepAlive)
        XCTAssertNil(try read(r))
    }

    func testEmptyLinesBeforeARequestAreSkipped() throws {
        let r = chunkedReader(pieces("POST /embed HTTP/1.1\r\nContent-Length: 1\r\n\r\nx\r\n\r\nGET /health HTTP/1.1\r\n\r\n", 1))
        XCTAssertEqual(try XCTUnwrap(try read(r)).body, bytes("x"))
        XCTAssertEqual(try XCTUnwrap(try read(r)).path, "/health")
        XCTAssertNil(try read(r))
    }

    func testChunkedBodyWithExtensionAndTrailer() throws {
        let raw =
            "POST /embed HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
            + "4\r\nWiki\r\n5;name=value\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nX-Trailer: 1\r\n\r\n"
        for size in [1, 3, raw.utf8.count] {
            let req = try XCTUnwrap(try read(chunkedReader(pieces(raw, size))))
            XCTAssertEqual(String(decoding: req.body, as: UTF8.self), "Wikipedia in\r\n\r\nchunks.")
        }
    }

    func testExpectContinueIsAnsweredBeforeTheBody() throws {
        var continues = 0
        let r = chunkedReader([bytes("POST /embed HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nhi")])
        let req = try XCTUnwrap(try readRequest(from: r, limits: RequestLimits(), sendContinue: { continues += 1 }))
        XCTAssertEqual(req.body, bytes("hi"))
        XCTAssertEqual(continues, 1)
    }

    func testKeepAlive() throws {
        let cases: [(String, Bool)] = [
            ("GET / HTTP/1.1\r\n\r\n", true),
            ("GET / HTTP/1.1\r\nConnection: keep-alive\r\n\r\n", true),
            ("GET / HTTP/1.1\r\nConnection: Upgrade, Close\r\n\r\n", false),
            ("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", false),
        ]
        for (raw, want) in cases {
            let req = try XCTUnwrap(try read(chunkedReader([bytes(raw)])))
            XCTAssertEqual(req.keepAlive, want, raw)
        }
    }

    func testAbsoluteFormTargetKeepsThePath() throws {
        let req = try XCTUnwrap(try read(chunkedReader([bytes("GET http://worker/health HTTP/1.1\r\n\r\n")])))
        XCTAssertEqual(req.path, "/health")
    }

    func testRefusals() {
        var small = RequestLimits()
        small.headBytes = 64
        small.bodyBytes = 10
        let longHead = "GET / HTTP/1.1\r\nX: " + String(repeating: "a", count: 100) + "\r\n\r\n"
        let cases: [(name: String, raw: String, status: Int, message: String)] = [
            ("two-word request line", "GET /\r\n\r\n", 400, "malformed request line \"GET /\""),
            ("HTTP/2", "GET / HTTP/2.0\r\n\r\n", 505, "HTTP/2.0 is not supported; use HTTP/1.1"),
            ("header without colon", "GET / HTTP/1.1\r\nBad\r\n\r\n", 400, "malformed header line \"Bad\""),
            ("head too large", longHead, 431, "the request head exceeds 64 bytes"),
            (
                "body too large", "POST / HTTP/1.1\r\nContent-Length: 11\r\n\r\n", 400,
                "the request body exceeds 10 bytes; send fewer tokens per request"
            ),
            ("negative length", "POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400, "invalid Content-Length -1"),
            (
                "conflicting lengths", "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", 400,
                "invalid Content-Length 1, 2"
            ),
            (
                "gzip", "POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 501,
                "Transfer-Encoding gzip is not supported; send Content-Length or chunked"
            ),
            (
                "chunked too large", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nB\r\n", 400,
                "the request body exceeds 10 bytes; send fewer tokens per request"
            ),
            (
                "bad chunk size", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400,
                "malformed chunk size \"zz\""
            ),
        ]
        for c in cases {
            XCTAssertThrowsError(try read(chunkedReader([bytes(c.raw)]), limits: small), c.name) { error in
                XCTAssertEqual(error as? HTTPError, HTTPError(c.status, c.message), c.name)
            }
        }
    }

    func testStreamEndingMidRequestIsNotAnswered() {
        for raw in ["GET / HTTP/1.1\r\nHost", "POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nab"] {
            XCTAssertThrowsError(try read(chunkedReader([bytes(raw)])), raw) { error in
                XCTAssertTrue(error is ConnectionClosed, "\(raw): \(error)")
            }
        }
    }

    func testResponseSerialisation() {
        let r = HTTPResponse.error(503, "loading", headers: [(name: "Retry-After", value: "1")])
        XCTAssertEqual(
            String(decoding: r.serialized(close: true, includeBody: true), as: UTF8.self),
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
                + "Content-Length: 19\r\nConnection: close\r\n\r\n{\"error\":\"loading\"}")
        XCTAssertEqual(
            String(decoding: r.serialized(close: false, includeBody: false), as: UTF8.self),
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
                + "Content-Length: 19\r\n\r\n",
            "HEAD keeps the length of the body it omits")
    }

    func testJSONString() {
        XCTAssertEqual(jsonString("a\"b\\c\n\u{1}é"), "\"a\\\"b\\\\c\\n\\u0001é\"")
    }
}
