import Foundation

/// Writes one line per event to stderr in the key=value form of Go's slog text
/// handler (time=... level=INFO msg="..." key=value), which is what the supervisor
/// keeps a tail of and quotes when the worker dies.
///
/// Safe for concurrent use: each line is one write(2).
public final class WorkerLog: @unchecked Sendable {
    private let lock = NSLock()
    private let formatter: ISO8601DateFormatter  // guarded by lock
    private let write: (String) -> Void

    /// write receives each finished line, newline included; the default is stderr.
    public init(write: ((String) -> Void)? = nil) {
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        formatter = f
        self.write = write ?? { line in FileHandle.standardError.write(Data(line.utf8)) }
    }

    public func info(_ msg: String, _ fields: KeyValuePairs<String, String> = [:]) {
        emit("INFO", msg, fields)
    }

    public func warn(_ msg: String, _ fields: KeyValuePairs<String, String> = [:]) {
        emit("WARN", msg, fields)
    }

    public func error(_ msg: String, _ fields: KeyValuePairs<String, String> = [:]) {
        emit("ERROR", msg, fields)
    }

    private func emit(_ level: String, _ msg: String, _ fields: KeyValuePairs<String, String>) {
        lock.lock()
        let time = formatter.string(from: Date())
        lock.unlock()
        var line = "time=\(time) level=\(level) msg=\(quote(msg))"
        for (k, v) in fields {
            line += " \(k)=\(quote(v))"
        }
        write(line + "\n")
    }

    /// v as slog would print it: bare when it is a plain word, else quoted.
    func quote(_ v: String) -> String {
        let plain =
            !v.isEmpty
            && v.unicodeScalars.allSatisfy { s in
                s.value > 0x20 && s.value < 0x7f && s != "\"" && s != "=" && s != "\\"
            }
        return plain ? v : jsonString(v)
    }
}
