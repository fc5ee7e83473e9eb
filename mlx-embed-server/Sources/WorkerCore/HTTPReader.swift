import Foundation

/// The connection ended in the middle of a request (or a read failed): there is
/// nobody to answer, so the server just closes.
public struct ConnectionClosed: Error {
    public init() {}
}

/// Limits applied while reading a request.
public struct RequestLimits: Sendable {
    /// Largest request line plus headers. 64 KiB is far above what any client of the
    /// protocol sends (a few hundred bytes).
    public var headBytes = 64 << 10
    /// Largest body: the same 32 MiB as the Go worker's MaxRequestBytes (about four
    /// million token ids), so both workers refuse the same requests.
    public var bodyBytes = 32 << 20

    public init() {}
}

/// Reads bytes from a source and keeps whatever arrived past the end of one request
/// for the next: HTTP/1.1 clients may send a request before the previous answer.
/// Not safe for concurrent use; each connection has its own.
public final class BufferedReader {
    /// Fills the buffer it is given and returns how many bytes it wrote, 0 at end of
    /// stream; throws when the stream failed.
    public typealias Source = (UnsafeMutableRawBufferPointer) throws -> Int

    private let source: Source
    private var buffer: [UInt8] = []
    private var start = 0  // index in buffer of the first unconsumed byte
    private var scratch = [UInt8](repeating: 0, count: 64 << 10)

    public init(source: @escaping Source) {
        self.source = source
    }

    /// Bytes read from the source and not consumed yet.
    var available: Int { buffer.count - start }

    /// Reads once from the source; false at end of stream.
    private func fill() throws -> Bool {
        let n = try scratch.withUnsafeMutableBytes { try source($0) }
        if n <= 0 {
            return false
        }
        // Drop consumed bytes before growing, so a long-lived connection's buffer
        // holds at most one request plus what was pipelined after it.
        if start > 0 && (start == buffer.count || start >= 64 << 10) {
            buffer.removeFirst(start)
            start = 0
        }
        buffer.append(contentsOf: scratch[0..<n])
        return true
    }

    /// Returns the request head: the bytes up to and including the empty line that
    /// ends the headers. Returns nil when the stream ends before the first byte of a
    /// request (the client closed an idle connection).
    public func readHead(limit: Int) throws -> [UInt8]? {
        var scanned = 0  // bytes after start already searched for the terminator
        while true {
            // Empty lines before a request line are skipped, as RFC 9112 section 2.2
            // asks of servers (some clients send a CRLF after a body).
            while available >= 2 && buffer[start] == 13 && buffer[start + 1] == 10 {
                start += 2
                scanned = 0
            }
            if let end = find([13, 10, 13, 10], from: start + scanned) {
                if end + 4 - start > limit {
                    throw HTTPError(431, "the request head exceeds \(limit) bytes")
                }
                let head = Array(buffer[start..<end + 4])
                start = end + 4
                return head
            }
            if available > limit {
                throw HTTPError(431, "the request head exceeds \(limit) bytes")
            }
            scanned = max(0, available - 3)
            guard try fill() else {
                if available == 0 {
                    return nil
                }
                throw ConnectionClosed()
            }
        }
    }

    /// Returns the next n bytes.
    public func readExactly(_ n: Int) throws -> [UInt8] {
        if buffer.count < start + n {
            buffer.reserveCapacity(start + n)
        }
        while available < n {
            guard try fill() else { throw ConnectionClosed() }
        }
        let out = Array(buffer[start..<start + n])
        start += n
        return out
    }

    /// Returns the next line without its CRLF.
    public func readLine(limit: Int) throws -> [UInt8] {
        var scanned = 0
        while true {
            if let end = find([13, 10], from: start + scanned) {
                let line = Array(buffer[start..<end])
                start = end + 2
                return line
            }
            if available > limit {
                throw HTTPError(400, "a line of the chunked body exceeds \(limit) bytes")
            }
            scanned = max(0, available - 1)
            guard try fill() else { throw ConnectionClosed() }
        }
    }

    /// The index of the first occurrence of pattern at or after from, if any.
    private func find(_ pattern: [UInt8], from: Int) -> Int? {
        let last = buffer.count - pattern.count
        guard from <= last else { return nil }
        var i = from
        while i <= last {
            if buffer[i] == pattern[0] {
                var j = 1
                while j < pattern.count && buffer[i + j] == pattern[j] {
                    j += 1
                }
                if j == pattern.count {
                    return i
                }
            }
            i += 1
        }
        return nil
    }
}

/// Reads one request from reader. Returns nil when the client closed the connection
/// between requests. Throws HTTPError for a request to refuse (the caller answers it
/// and closes the connection) and ConnectionClosed when the stream ended mid-request.
///
/// sendContinue is called before reading the body of a request that carries
/// "Expect: 100-continue", so that such clients (curl, for large bodies) send it.
public func readRequest(
    from reader: BufferedReader, limits: RequestLimits,
    sendContinue: () throws -> Void
) throws -> HTTPRequest? {
    guard let head = try reader.readHead(limit: limits.headBytes) else {
        return nil
    }
    var request = try parseHead(head)
    let expectsContinue = request.header("expect")?.lowercased() == "100-continue"

    if let te = request.header("transfer-encoding") {
        guard te.trimmingCharacters(in: .whitespaces).lowercased() == "chunked" else {
            throw HTTPError(501, "Transfer-Encoding \(te) is not supported; send Content-Length or chunked")
        }
        if expectsContinue {
            try sendContinue()
        }
        request.body = try readChunkedBody(from: reader, limit: limits.bodyBytes)
    } else if let cl = request.header("content-length") {
        let values = request.headers.filter { $0.name == "content-length" }.map { $0.value }
        guard Set(values).count == 1,
            let n = Int(cl.trimmingCharacters(in: .whitespaces)), n >= 0
        else {
            throw HTTPError(400, "invalid Content-Length \(values.joined(separator: ", "))")
        }
        if n > limits.bodyBytes {
            throw HTTPError(400, bodyTooLarge(limits.bodyBytes))
        }
        if n > 0 {
            if expectsContinue {
                try sendContinue()
            }
            request.body = try reader.readExactly(n)
        }
    }
    return request
}

/// The Go worker's wording for an oversized body, so that both workers refuse alike.
func bodyTooLarge(_ limit: Int) -> String {
    "the request body exceeds \(limit) bytes; send fewer tokens per request"
}

/// Parses a request line and headers (the bytes readHead returned).
func parseHead(_ bytes: [UInt8]) throws -> HTTPRequest {
    let text = String(decoding: bytes, as: UTF8.self)
    var lines = text.components(separatedBy: "\r\n")
    let requestLine = lines.removeFirst()
    let parts = requestLine.split(separator: " ", omittingEmptySubsequences: false)
    guard parts.count == 3, !parts[0].isEmpty, !parts[1].isEmpty else {
        throw HTTPError(400, "malformed request line \(jsonString(requestLine))")
    }
    let method = String(parts[0])
    var target = String(parts[1])
    let version = String(parts[2])
    guard version == "HTTP/1.1" || version == "HTTP/1.0" else {
        throw HTTPError(505, "\(version) is not supported; use HTTP/1.1")
    }
    // Absolute form ("http://worker/embed"), which proxies use: keep the path.
    if let scheme = target.range(of: "://") {
        let afterAuthority = target[scheme.upperBound...]
        if let slash = afterAuthority.firstIndex(of: "/") {
            target = String(afterAuthority[slash...])
        } else {
            target = "/"
        }
    }
    guard target.hasPrefix("/") else {
        throw HTTPError(400, "malformed request target \(jsonString(target))")
    }

    var headers: [(name: String, value: String)] = []
    for line in lines where !line.isEmpty {
        guard let colon = line.firstIndex(of: ":") else {
            throw HTTPError(400, "malformed header line \(jsonString(line))")
        }
        let name = line[..<colon].lowercased()
        guard !name.isEmpty, !name.contains(" "), !name.contains("\t") else {
            throw HTTPError(400, "malformed header name \(jsonString(String(line[..<colon])))")
        }
        let value = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        headers.append((name: name, value: value))
    }
    return HTTPRequest(method: method, target: target, version: version, headers: headers)
}

/// Reads a chunked body (RFC 9112 section 7.1), discarding chunk extensions and
/// trailers.
func readChunkedBody(from reader: BufferedReader, limit: Int) throws -> [UInt8] {
    var body: [UInt8] = []
    while true {
        let line = try String(decoding: reader.readLine(limit: 4096), as: UTF8.self)
        let sizeField = line.split(separator: ";", maxSplits: 1, omittingEmptySubsequences: false)
            .first.map { $0.trimmingCharacters(in: .whitespaces) } ?? ""
        guard let size = Int(sizeField, radix: 16), size >= 0 else {
            throw HTTPError(400, "malformed chunk size \(jsonString(line))")
        }
        if size == 0 {
            while try !reader.readLine(limit: 8192).isEmpty {}
            return body
        }
        if body.count + size > limit {
            throw HTTPError(400, bodyTooLarge(limit))
        }
        try body.append(contentsOf: reader.readExactly(size))
        guard try reader.readLine(limit: 2).isEmpty else {
            throw HTTPError(400, "a chunk is not followed by CRLF")
        }
    }
}
