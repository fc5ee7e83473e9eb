import Darwin
import Dispatch
import Foundation

/// How the worker process ends, the same ways as the Go worker (backends/worker.go):
/// SIGTERM or SIGINT, or EOF on stdin (the supervisor holds the write end of a pipe,
/// so the worker also dies when its parent is SIGKILLed) stop it in order: the socket
/// is removed, requests being handled get up to drainTimeout to finish, then the
/// process exits 0. A failed model load exits 1 after printing the reason to stderr,
/// which the supervisor quotes.
///
/// Safe for concurrent use.
public final class Lifecycle: @unchecked Sendable {
    private let server: UnixHTTPServer
    private let log: WorkerLog
    private let drainTimeout: TimeInterval
    private let lock = NSLock()
    private var ending = false  // guarded by lock
    private var signalSources: [DispatchSourceSignal] = []  // guarded by lock; kept alive here

    public init(server: UnixHTTPServer, log: WorkerLog, drainTimeout: TimeInterval = 5) {
        self.server = server
        self.log = log
        self.drainTimeout = drainTimeout
    }

    /// Stops on SIGTERM and SIGINT.
    public func watchSignals() {
        for (sig, name) in [(SIGTERM, "SIGTERM"), (SIGINT, "SIGINT")] {
            // The default action would kill the process before the socket is removed.
            Darwin.signal(sig, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: sig, queue: .global())
            source.setEventHandler { [self] in self.stop(reason: name) }
            source.resume()
            lock.lock()
            signalSources.append(source)
            lock.unlock()
        }
    }

    /// Stops when stdin reaches EOF. A read error counts as EOF: the parent is
    /// unreachable either way.
    public func watchStdin() {
        let t = Thread { [self] in
            var buf = [UInt8](repeating: 0, count: 4096)
            while true {
                let n = buf.withUnsafeMutableBytes { Darwin.read(0, $0.baseAddress, $0.count) }
                if n > 0 { continue }
                if n < 0 && errno == EINTR { continue }
                break
            }
            self.stop(reason: "stdin reached EOF")
        }
        t.name = "stdin"
        t.start()
    }

    /// Orderly stop; exits 0. Only the first call acts.
    public func stop(reason: String) {
        guard begin() else { return }
        log.info("worker stopping", ["reason": reason])
        if !server.shutdown(drainTimeout: drainTimeout) {
            log.warn(
                "requests still running after the shutdown timeout; exiting anyway",
                ["timeout": "\(drainTimeout)s"])
        }
        terminate(0)
    }

    /// Failure; prints "mlx-embed-server: message" to stderr and exits 1.
    public func fail(_ message: String) {
        guard begin() else { return }
        FileHandle.standardError.write(Data("mlx-embed-server: \(message)\n".utf8))
        server.shutdown(drainTimeout: 0)
        terminate(1)
    }

    private func begin() -> Bool {
        lock.lock()
        defer { lock.unlock() }
        if ending { return false }
        ending = true
        return true
    }

    /// _exit rather than exit: the engine thread may be inside MLX (a model still
    /// loading), and running C++ static destructors under it could crash the exit.
    /// Logs are written unbuffered, so nothing is lost.
    private func terminate(_ code: Int32) -> Never {
        Darwin._exit(code)
    }
}
