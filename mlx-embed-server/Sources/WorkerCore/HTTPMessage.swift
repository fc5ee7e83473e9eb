// WorkerCore: the server side of the embed-stack worker protocol, without MLX.
//
// It owns HTTP/1.1 over a Unix socket (request reading with Content-Length and chunked
// bodies, keep-alive, pipelining), the /health and /embed handlers with the same
// checks and messages as the Go worker (backends/handler.go), the command line shared
// with `embed-stack worker`, and the process lifecycle (signals, stdin EOF, drain).
//
// It refuses to know how embeddings are computed: an engine is anything conforming
// to EmbeddingEngine.

import Foundation

/// One HTTP/1.1 request with its whole body. Header names are lowercased.
public struct HTTPRequest: Sendable {
    public var method: String
    /// The request target as sent, e.g. "/embed" or "/health?x=1".
    public var target: String
    /// "HTTP/1.1" or "HTTP/1.0".
    public var version: String
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]

    public init(
        method: String, target: String, version: String = "HTTP/1.1",
        headers: [(name: String, value: String)] = [], body: [UInt8] = []
    ) {
        self.method = method
        self.target = target
        self.version = version
        self.headers = headers.map { (name: $0.name.lowercased(), value: $0.value) }
        self.body = body
    }

    /// The target without its query string.
    public var path: String {
        if let q = target.firstIndex(of: "?") {
            return String(target[..<q])
        }
        return target
    }

    /// The first value of a header, by case-insensitive name.
    public func header(_ name: String) -> String? {
        let n = name.lowercased()
        return headers.first(where: { $0.name == n })?.value
    }

    /// Whether the connection may carry another request after this one. HTTP/1.1
    /// connections persist unless the client says "Connection: close"; HTTP/1.0 ones
    /// are always closed (no client of the protocol speaks 1.0, so its keep-alive
    /// extension is not worth supporting).
    public var keepAlive: Bool {
        guard version == "HTTP/1.1" else { return false }
        let tokens = (header("connection") ?? "")
            .lowercased()
            .split(separator: ",")
            .map { $0.trimmingCharacters(in: .whitespaces) }
        return !tokens.contains("close")
    }
}

/// One HTTP response. Content-Length is added when it is serialised.
public struct HTTPResponse: Sendable {
    public var status: Int
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]

    public init(status: Int, headers: [(name: String, value: String)] = [], body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// A JSON response; body must already be JSON text.
    public static func json(
        _ status: Int, _ body: String, headers: [(name: String, value: String)] = []
    ) -> HTTPResponse {
        HTTPResponse(
            status: status,
            headers: [(name: "Content-Type", value: "application/json")] + headers,
            body: Array(body.utf8))
    }

    /// The protocol's error shape: {"error":"..."} plus "index" when the error is about
    /// one sequence of the request.
    public static func error(
        _ status: Int, _ message: String, index: Int? = nil,
        headers: [(name: String, value: String)] = []
    ) -> HTTPResponse {
        var body = "{\"error\":" + jsonString(message)
        if let index {
            body += ",\"index\":\(index)"
        }
        body += "}"
        return json(status, body, headers: headers)
    }

    /// The bytes to write: status line, headers, Content-Length, "Connection: close"
    /// when the server will close afterwards, then the body unless includeBody is false
    /// (a HEAD request still gets the Content-Length of the body it would have had).
    public func serialized(close: Bool, includeBody: Bool) -> [UInt8] {
        var head = "HTTP/1.1 \(status) \(reasonPhrase(status))\r\n"
        for h in headers {
            head += "\(h.name): \(h.value)\r\n"
        }
        head += "Content-Length: \(body.count)\r\n"
        if close {
            head += "Connection: close\r\n"
        }
        head += "\r\n"
        var out = Array(head.utf8)
        if includeBody {
            out.append(contentsOf: body)
        }
        return out
    }
}

/// A request the server answers with an error status and then closes the connection,
/// because the rest of the byte stream can no longer be trusted to start a request.
public struct HTTPError: Error, Equatable, CustomStringConvertible {
    public let status: Int
    public let message: String

    public init(_ status: Int, _ message: String) {
        self.status = status
        self.message = message
    }

    public var description: String { "\(status) \(message)" }
}

/// The reason phrase of the statuses this server sends.
public func reasonPhrase(_ status: Int) -> String {
    switch status {
    case 100: return "Continue"
    case 200: return "OK"
    case 400: return "Bad Request"
    case 404: return "Not Found"
    case 405: return "Method Not Allowed"
    case 413: return "Content Too Large"
    case 431: return "Request Header Fields Too Large"
    case 500: return "Internal Server Error"
    case 501: return "Not Implemented"
    case 503: return "Service Unavailable"
    case 505: return "HTTP Version Not Supported"
    default: return "Status \(status)"
    }
}

/// s as a JSON string literal, quotes included.
public func jsonString(_ s: String) -> String {
    var out = "\""
    out.reserveCapacity(s.utf8.count + 2)
    for scalar in s.unicodeScalars {
        switch scalar {
        case "\"": out += "\\\""
        case "\\": out += "\\\\"
        case "\n": out += "\\n"
        case "\r": out += "\\r"
        case "\t": out += "\\t"
        default:
            if scalar.value < 0x20 {
                let hex = String(scalar.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            } else {
                out.unicodeScalars.append(scalar)
            }
        }
    }
    out += "\""
    return out
}
