import Darwin
import Foundation

/// Failures to set up the socket, with the step and the OS's reason.
public struct ServerError: Error, CustomStringConvertible {
    public let description: String

    init(_ description: String) {
        self.description = description
    }

    /// step plus the current errno's message.
    static func posix(_ step: String) -> ServerError {
        ServerError("\(step): \(String(cString: strerror(errno)))")
    }
}

/// One accepted connection, as a handler sees it.
public final class Connection: @unchecked Sendable {
    let fd: Int32

    init(fd: Int32) {
        self.fd = fd
    }

    /// Whether the client has closed its end. Checked between sequences of a long
    /// request: a unix-socket peer that closed makes a non-blocking peek return 0. The
    /// clients of the protocol never half-close a connection, so this never mistakes a
    /// live caller for a gone one. Safe to call from any thread.
    public func peerGone() -> Bool {
        var byte: UInt8 = 0
        let n = Darwin.recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT)
        if n == 0 {
            return true
        }
        if n < 0 {
            return !(errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
        }
        return false
    }

    /// Writes all of bytes.
    func write(_ bytes: [UInt8]) throws {
        var offset = 0
        try bytes.withUnsafeBytes { raw in
            while offset < raw.count {
                let n = Darwin.write(fd, raw.baseAddress! + offset, raw.count - offset)
                if n < 0 {
                    if errno == EINTR { continue }
                    throw ConnectionClosed()
                }
                offset += n
            }
        }
    }

    /// Reads into buffer; 0 at end of stream. A receive timeout counts as the end: the
    /// connection has been idle far longer than any client keeps one.
    func read(into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        while true {
            let n = Darwin.read(fd, buffer.baseAddress, buffer.count)
            if n >= 0 {
                return n
            }
            switch errno {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK: return 0
            default: throw ConnectionClosed()
            }
        }
    }
}

/// An HTTP/1.1 server on a Unix socket: one thread accepts, and each connection gets
/// a thread that reads requests one after another (keep-alive, pipelining) and writes
/// each answer before reading the next. Thread-per-connection suits this worker: its
/// only client is one embed-stack server holding a bounded pool of connections.
///
/// Safe for concurrent use.
public final class UnixHTTPServer: @unchecked Sendable {
    public typealias Handler = (HTTPRequest, Connection) -> HTTPResponse

    public let socketPath: String
    private let listenFD: Int32
    private let handler: Handler
    private let limits: RequestLimits
    private let maxConnections: Int
    private let log: WorkerLog

    private let cond = NSCondition()
    private var connections = 0  // guarded by cond: open connections
    private var inFlight = 0  // guarded by cond: requests being handled or answered
    private var stopping = false  // guarded by cond

    /// Creates the socket at socketPath (mode 0600) and listens; start() begins
    /// accepting. The path must not exist: a socket left there means another worker,
    /// or a dead one the supervisor has not cleaned up.
    public init(
        socketPath: String, limits: RequestLimits = RequestLimits(), maxConnections: Int = 256,
        log: WorkerLog, handler: @escaping Handler
    ) throws {
        self.socketPath = socketPath
        self.limits = limits
        self.maxConnections = maxConnections
        self.log = log
        self.handler = handler
        self.listenFD = try UnixHTTPServer.makeListener(path: socketPath, log: log)
    }

    private static func makeListener(path: String, log: WorkerLog) throws -> Int32 {
        var addr = sockaddr_un()
        let capacity = MemoryLayout.size(ofValue: addr.sun_path)
        let pathBytes = Array(path.utf8)
        guard !pathBytes.isEmpty else {
            throw ServerError("--socket is empty; give the worker --socket PATH")
        }
        guard pathBytes.count < capacity else {
            throw ServerError(
                "socket path \(path) is \(pathBytes.count) bytes; Unix sockets allow at most \(capacity - 1): use a shorter socket directory"
            )
        }
        let dir = (path as NSString).deletingLastPathComponent
        let dirPath = dir.isEmpty ? "." : dir
        guard let attrs = try? FileManager.default.attributesOfItem(atPath: dirPath) else {
            throw ServerError("socket directory \(dirPath) does not exist")
        }
        if let mode = (attrs[.posixPermissions] as? NSNumber)?.intValue, mode & 0o077 != 0 {
            log.warn(
                "the socket directory is open to other users; the supervisor makes a 0700 one",
                ["dir": dirPath, "mode": String(mode, radix: 8)])
        }
        var st = stat()
        if lstat(path, &st) == 0 {
            throw ServerError(
                "socket \(path) already exists: is another worker serving it? Remove it or give another --socket")
        }

        let fd = Darwin.socket(AF_UNIX, SOCK_STREAM, 0)
        guard fd >= 0 else { throw ServerError.posix("creating a Unix socket") }
        addr.sun_family = sa_family_t(AF_UNIX)
        addr.sun_len = UInt8(MemoryLayout<sockaddr_un>.size)
        withUnsafeMutableBytes(of: &addr.sun_path) { raw in
            raw.copyBytes(from: pathBytes)
        }
        let bound = withUnsafePointer(to: &addr) { ptr in
            ptr.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa in
                Darwin.bind(fd, sa, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard bound == 0 else {
            let err = ServerError.posix("listening on \(path)")
            Darwin.close(fd)
            throw err
        }
        // The mode bind gives depends on the umask, which is process-wide. The moment
        // between bind and chmod is harmless because the directory keeps others out.
        guard Darwin.chmod(path, 0o600) == 0 else {
            let err = ServerError.posix("restricting \(path) to mode 0600")
            Darwin.close(fd)
            Darwin.unlink(path)
            throw err
        }
        guard Darwin.listen(fd, 128) == 0 else {
            let err = ServerError.posix("listening on \(path)")
            Darwin.close(fd)
            Darwin.unlink(path)
            throw err
        }
        return fd
    }

    /// Starts the accept thread.
    public func start() {
        let t = Thread { [self] in self.acceptLoop() }
        t.name = "accept"
        t.start()
    }

    /// Stops taking requests and waits up to drainTimeout for the ones being handled
    /// to be answered. The socket file is removed first, so no new client can connect;
    /// requests that arrive on open connections meanwhile get 503. Returns whether
    /// every request finished in time. The process is expected to exit right after.
    @discardableResult
    public func shutdown(drainTimeout: TimeInterval) -> Bool {
        cond.lock()
        stopping = true
        cond.unlock()
        Darwin.unlink(socketPath)

        let deadline = Date().addingTimeInterval(drainTimeout)
        cond.lock()
        defer { cond.unlock() }
        while inFlight > 0 {
            if !cond.wait(until: deadline) {
                return inFlight == 0
            }
        }
        return true
    }

    private var isStopping: Bool {
        cond.lock()
        defer { cond.unlock() }
        return stopping
    }

    private func acceptLoop() {
        while true {
            let fd = Darwin.accept(listenFD, nil, nil)
            if fd < 0 {
                let e = errno
                if e == EINTR || e == ECONNABORTED { continue }
                log.error("accepting a connection", ["err": String(cString: strerror(e))])
                // EMFILE and friends: back off instead of spinning.
                Thread.sleep(forTimeInterval: 0.1)
                continue
            }
            configure(fd)

            cond.lock()
            let admitted = !stopping && connections < maxConnections
            if admitted { connections += 1 }
            let stop = stopping
            cond.unlock()
            guard admitted else {
                // Refuse at admission rather than queue without bound.
                let conn = Connection(fd: fd)
                let message = stop ? "the worker is shutting down" : "the worker has too many open connections"
                try? conn.write(
                    HTTPResponse.error(503, message, headers: [(name: "Retry-After", value: "1")])
                        .serialized(close: true, includeBody: true))
                Darwin.close(fd)
                continue
            }

            let t = Thread { [self] in
                self.serve(fd)
                Darwin.close(fd)
                self.cond.lock()
                self.connections -= 1
                self.cond.unlock()
            }
            t.name = "conn"
            // Room for JSON decoding of large bodies; connection threads do no MLX work.
            t.stackSize = 1 << 20
            t.start()
        }
    }

    private func configure(_ fd: Int32) {
        var one: Int32 = 1
        // Writing to a closed peer must fail with EPIPE, not kill the process.
        _ = setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &one, socklen_t(MemoryLayout<Int32>.size))
        // Bounds how long an idle keep-alive connection holds its thread. The Go
        // client drops idle connections after 90 s.
        var tv = timeval(tv_sec: 300, tv_usec: 0)
        _ = setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
    }

    /// Serves requests on one connection until the client closes it, asks to close it,
    /// or sends something that cannot be read as a request.
    private func serve(_ fd: Int32) {
        let conn = Connection(fd: fd)
        let reader = BufferedReader(source: { try conn.read(into: $0) })
        while true {
            let request: HTTPRequest
            do {
                guard
                    let r = try readRequest(
                        from: reader, limits: limits,
                        sendContinue: { try conn.write(Array("HTTP/1.1 100 Continue\r\n\r\n".utf8)) })
                else { return }
                request = r
            } catch let e as HTTPError {
                try? conn.write(HTTPResponse.error(e.status, e.message).serialized(close: true, includeBody: true))
                return
            } catch {
                return  // the stream ended mid-request: nobody to answer
            }

            cond.lock()
            let admitted = !stopping
            if admitted { inFlight += 1 }
            cond.unlock()
            guard admitted else {
                try? conn.write(
                    HTTPResponse.error(503, "the worker is shutting down", headers: [(name: "Retry-After", value: "1")])
                        .serialized(close: true, includeBody: true))
                return
            }

            let response = handler(request, conn)
            let close = !request.keepAlive || isStopping
            let written: Bool
            do {
                try conn.write(response.serialized(close: close, includeBody: request.method != "HEAD"))
                written = true
            } catch {
                written = false
            }

            cond.lock()
            inFlight -= 1
            cond.broadcast()
            cond.unlock()

            if close || !written {
                return
            }
        }
    }
}
