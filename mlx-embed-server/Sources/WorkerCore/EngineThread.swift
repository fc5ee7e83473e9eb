import Foundation

/// One thread that owns an engine's native state and runs every job on it, in the
/// order submitted: MLX arrays and compiled functions are not safe to use from several
/// threads at once, so connection threads hand their work here and wait.
///
/// The thread gets a large stack because MLX traces and evaluates graphs of a few
/// thousand nodes on the calling thread, and secondary threads default to 512 KiB.
///
/// Safe for concurrent use.
public final class EngineThread: @unchecked Sendable {
    private let cond = NSCondition()
    private var jobs: [() -> Void] = []  // guarded by cond

    public init(name: String, stackSize: Int = 64 << 20) {
        let t = Thread { [self] in self.run() }
        t.name = name
        t.stackSize = stackSize
        t.start()
    }

    /// Queues job and returns at once.
    public func submit(_ job: @escaping () -> Void) {
        cond.lock()
        jobs.append(job)
        cond.signal()
        cond.unlock()
    }

    /// Runs job on the engine thread and returns its result once it is done.
    public func sync<T>(_ job: @escaping () throws -> T) throws -> T {
        let done = DispatchSemaphore(value: 0)
        var result: Result<T, Error>?
        submit {
            result = Result<T, Error>(catching: { try job() })
            done.signal()
        }
        done.wait()
        return try result!.get()
    }

    private func run() {
        while true {
            cond.lock()
            while jobs.isEmpty {
                cond.wait()
            }
            let job = jobs.removeFirst()
            cond.unlock()
            job()
        }
    }
}
