import Darwin
import Foundation
import XCTest

@testable import WorkerCore

/// A raw client connection to a Unix socket, reading responses with the server's own
/// BufferedReader.
final class TestClient {
    let fd: Int32
    let reader: BufferedReader

    init(path: String) throws {
        let fd = Darwin.socket(AF_UNIX, SOCK_STREAM, 0)
        guard fd >= 0 else { throw ServerError.posix("socket") }
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        addr.sun_len = UInt8(MemoryLayout<sockaddr_un>.size)
        let pathBytes = Array(path.utf8)
        withUnsafeMutableBytes(of: &addr.sun_path) { $0.copyBytes(from: pathBytes) }
        let rc = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Darwin.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard rc == 0 else {
            Darwin.close(fd)
            throw ServerError.posix("connect \(path)")
        }
        self.fd = fd
        let conn = Connection(fd: fd)
        reader = BufferedReader(source: { try conn.read(into: $0) })
    }

    deinit { Darwin.close(fd) }

    func send(_ s: String) throws {
        try Connection(fd: fd).write(Array(s.utf8))
    }

    /// Reads one response: status, lowercased headers, body (by Content-Length).
    func response() throws -> (status: Int, headers: [String: String], body: String) {
        guard let head = try reader.readHead(limit: 1 << 16) else { throw ConnectionClosed() }
        var lines = String(decoding: head, as: UTF8.self).components(separatedBy: "\r\n")
        let statusLine = lines.removeFirst().split(separator: " ")
        let status = Int(statusLine[1]) ?? -1
        var headers: [String: String] = [:]
        for line in lines where !line.isEmpty {
            let kv = line.split(separator: ":", maxSplits: 1)
            headers[kv[0].lowercased()] = kv[1].trimmingCharacters(in: .whitespaces)
        }
        let body = try reader.readExactly(Int(headers["content-length"] ?? "0") ?? 0)
        return (status, headers, String(decoding: body, as: UTF8.self))
    }

    /// Whether the server closed the connection (a read returns end of stream).
    func closedByServer() throws -> Bool {
        try reader.readHead(limit: 1 << 16) == nil
    }
}

final class UnixHTTPServerTests: XCTestCase {
    var dir = ""

    override func setUpWithError() throws {
        // Short, private: NSTemporaryDirectory() paths on macOS leave little room in
        // the 104-byte sun_path.
        var template = Array("/tmp/mlxw.XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw ServerError.posix("mkdtemp") }
        dir = String(cString: made)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: dir)
    }

    func startServer(_ handler: WorkerHandler, name: String = "w.sock") throws -> UnixHTTPServer {
        let server = try UnixHTTPServer(socketPath: dir + "/" + name, log: WorkerLog(write: { _ in })) {
            request, connection in
            handler.handle(request, peerGone: { connection.peerGone() })
        }
        server.start()
        return server
    }

    func testKeepAlivePipeliningAndClose() throws {
        let handler = WorkerHandler(pid: 7)
        handler.setReady(FakeEngine())
        let server = try startServer(handler)
        let client = try TestClient(path: server.socketPath)

        // Two requests in one write, then a third after the answers: one connection.
        let embed = "{\"tokens\":[[3,4]]}"
        try client.send(
            "GET /health HTTP/1.1\r\nHost: worker\r\n\r\n"
                + "POST /embed HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: \(embed.utf8.count)\r\n\r\n"
                + embed)
        let health = try client.response()
        XCTAssertEqual(health.status, 200)
        XCTAssertEqual(
            health.body,
            "{\"status\":\"ready\",\"n_embd\":3,\"max_tokens\":4,\"max_batch_tokens\":8,\"model\":\"fake \\\"model\\\"\",\"pid\":7}"
        )
        XCTAssertNil(health.headers["connection"])
        let vectors = try client.response()
        XCTAssertEqual(vectors.status, 200)
        XCTAssertEqual(vectors.body, "{\"embeddings\":[[2.0,3.0,0.5]]}")

        try client.send("GET /health HTTP/1.1\r\nConnection: close\r\n\r\n")
        let last = try client.response()
        XCTAssertEqual(last.status, 200)
        XCTAssertEqual(last.headers["connection"], "close")
        XCTAssertTrue(try client.closedByServer())

        XCTAssertTrue(server.shutdown(drainTimeout: 1))
        XCTAssertFalse(FileManager.default.fileExists(atPath: server.socketPath), "shutdown removes the socket")
    }

    func testMalformedRequestIsAnsweredThenClosed() throws {
        let server = try startServer(WorkerHandler(pid: 7))
        let client = try TestClient(path: server.socketPath)
        try client.send("POST /embed HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n")
        let r = try client.response()
        XCTAssertEqual(r.status, 400)
        XCTAssertEqual(r.body, "{\"error\":\"the request body exceeds 33554432 bytes; send fewer tokens per request\"}")
        XCTAssertEqual(r.headers["connection"], "close")
        XCTAssertTrue(try client.closedByServer())
        server.shutdown(drainTimeout: 0)
    }

    func testRequestsAfterShutdownGet503() throws {
        let server = try startServer(WorkerHandler(pid: 7))
        let client = try TestClient(path: server.socketPath)
        try client.send("GET /health HTTP/1.1\r\n\r\n")
        XCTAssertEqual(try client.response().status, 503, "loading")
        XCTAssertTrue(server.shutdown(drainTimeout: 1))
        try client.send("GET /health HTTP/1.1\r\n\r\n")
        let r = try client.response()
        XCTAssertEqual(r.status, 503)
        XCTAssertEqual(r.body, "{\"error\":\"the worker is shutting down\"}")
        XCTAssertTrue(try client.closedByServer())
    }

    func testSocketSetupRefusals() throws {
        let server = try startServer(WorkerHandler(pid: 7))
        defer { server.shutdown(drainTimeout: 0) }
        let mode = try FileManager.default.attributesOfItem(atPath: server.socketPath)[.posixPermissions] as? NSNumber
        XCTAssertEqual(mode?.intValue, 0o600)

        let longName = String(repeating: "s", count: 120)
        let longPath = dir + "/" + longName
        let cases: [(path: String, want: String)] = [
            (
                server.socketPath,
                "socket \(server.socketPath) already exists: is another worker serving it? Remove it or give another --socket"
            ),
            ("\(dir)/missing/w.sock", "socket directory \(dir)/missing does not exist"),
            (
                longPath,
                "socket path \(longPath) is \(longPath.utf8.count) bytes; Unix sockets allow at most 103: use a shorter socket directory"
            ),
        ]
        for c in cases {
            XCTAssertThrowsError(try UnixHTTPServer(socketPath: c.path, log: WorkerLog(write: { _ in })) { _, _ in
                HTTPResponse(status: 200)
            }) { error in
                XCTAssertEqual("\(error)", c.want)
            }
        }
    }
}
