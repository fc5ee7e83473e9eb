import Foundation

/// Turns token-id sequences into raw pooled vectors, one per sequence, in order, each
/// of info.nEmbd floats. The handler calls embed from many connection threads at once;
/// an implementation serialises internally (the MLX engine runs every call on its one
/// engine thread).
public protocol EmbeddingEngine: AnyObject {
    var info: EngineInfo { get }

    /// isCancelled reports whether the caller has gone; an engine checks it between
    /// sequences and throws CancelledError, since nobody would read the answer.
    /// traceparent is the caller's W3C trace context, when it sent a valid one.
    /// Throw InputError to refuse one sequence (answered 400 naming it); any other
    /// error is answered 500.
    func embed(_ seqs: [[Int32]], traceparent: String?, isCancelled: @escaping () -> Bool) throws
        -> [[Float]]
}

/// What GET /health reports about a ready engine.
public struct EngineInfo: Sendable, Equatable {
    /// Length of every vector.
    public var nEmbd: Int
    /// Longest single sequence accepted (here: the largest bucket).
    public var maxTokens: Int
    /// Tokens a caller should put into one /embed request at most.
    public var maxBatchTokens: Int
    /// Model name for logs and /health.
    public var model: String

    public init(nEmbd: Int, maxTokens: Int, maxBatchTokens: Int, model: String) {
        self.nEmbd = nEmbd
        self.maxTokens = maxTokens
        self.maxBatchTokens = maxBatchTokens
        self.model = model
    }

    /// Refuses an EngineInfo the Go client would reject as unusable.
    public func validate() throws {
        if nEmbd <= 0 { throw EngineInfoError("engine reports n_embd \(nEmbd); it must be positive") }
        if maxTokens <= 0 { throw EngineInfoError("engine reports max_tokens \(maxTokens); it must be positive") }
        if maxBatchTokens <= 0 {
            throw EngineInfoError("engine reports max_batch_tokens \(maxBatchTokens); it must be positive")
        }
    }
}

public struct EngineInfoError: Error, CustomStringConvertible {
    public let description: String
    init(_ d: String) { description = d }
}

/// An engine's refusal of one sequence: answered 400 with "index".
public struct InputError: Error, CustomStringConvertible {
    public let index: Int
    public let reason: String

    public init(index: Int, reason: String) {
        self.index = index
        self.reason = reason
    }

    public var description: String { "sequence \(index): \(reason)" }
}

/// The caller went away before its request was done.
public struct CancelledError: Error, CustomStringConvertible {
    public init() {}
    public var description: String { "the caller has gone" }
}

/// The worker side of the protocol: GET /health and POST /embed, with the checks,
/// statuses and messages of the Go worker's handler (backends/handler.go), so that the
/// server cannot tell the two workers apart.
///
/// Safe for concurrent use.
public final class WorkerHandler: @unchecked Sendable {
    private let lock = NSLock()
    private var engine: EmbeddingEngine?  // guarded by lock; nil while loading
    private let pid: Int32

    public init(pid: Int32 = getpid()) {
        self.pid = pid
    }

    /// Switches from "loading" to "ready".
    public func setReady(_ engine: EmbeddingEngine) {
        lock.lock()
        self.engine = engine
        lock.unlock()
    }

    private func currentEngine() -> EmbeddingEngine? {
        lock.lock()
        defer { lock.unlock() }
        return engine
    }

    /// Answers one request. peerGone reports whether the client has closed its end.
    public func handle(_ request: HTTPRequest, peerGone: @escaping () -> Bool) -> HTTPResponse {
        switch request.path {
        case "/health":
            guard request.method == "GET" || request.method == "HEAD" else {
                return .error(
                    405, "\(request.method) \(request.path) is not allowed; use GET",
                    headers: [(name: "Allow", value: "GET, HEAD")])
            }
            return health()
        case "/embed":
            guard request.method == "POST" else {
                return .error(
                    405, "\(request.method) \(request.path) is not allowed; use POST",
                    headers: [(name: "Allow", value: "POST")])
            }
            return embed(request, peerGone: peerGone)
        default:
            return .error(
                404, "no such endpoint \(request.path); the worker serves GET /health and POST /embed")
        }
    }

    func health() -> HTTPResponse {
        guard let engine = currentEngine() else {
            return .json(
                503, "{\"status\":\"loading\",\"pid\":\(pid)}",
                headers: [(name: "Retry-After", value: "1")])
        }
        let i = engine.info
        return .json(
            200,
            "{\"status\":\"ready\",\"n_embd\":\(i.nEmbd),\"max_tokens\":\(i.maxTokens),"
                + "\"max_batch_tokens\":\(i.maxBatchTokens),\"model\":\(jsonString(i.model)),\"pid\":\(pid)}")
    }

    func embed(_ request: HTTPRequest, peerGone: @escaping () -> Bool) -> HTTPResponse {
        guard let engine = currentEngine() else {
            return .error(
                503, "the worker is still loading its model",
                headers: [(name: "Retry-After", value: "1")])
        }
        let seqs: [[Int32]]
        do {
            seqs = try decodeEmbedRequest(request.body)
        } catch {
            return .error(400, "\(error)")
        }
        let info = engine.info
        if let refusal = check(seqs, maxTokens: info.maxTokens) {
            return .error(400, refusal.message, index: refusal.index)
        }

        var traceparent: String?
        if let tp = request.header("traceparent"), validTraceparent(tp) {
            traceparent = tp
        }
        let vectors: [[Float]]
        do {
            vectors = try engine.embed(seqs, traceparent: traceparent, isCancelled: peerGone)
        } catch let e as InputError {
            return .error(400, e.reason, index: e.index)
        } catch {
            // Also when the caller has gone: it reads nothing, but the status must not
            // claim success.
            return .error(500, "engine: \(error)")
        }
        if let problem = checkVectors(vectors, want: seqs.count, nEmbd: info.nEmbd) {
            return .error(500, "engine: \(problem)")
        }
        return HTTPResponse(
            status: 200, headers: [(name: "Content-Type", value: "application/json")],
            body: encodeEmbeddings(vectors))
    }
}

/// The reason a body is not an embed request.
struct BodyError: Error, CustomStringConvertible {
    let description: String
}

private struct EmbedRequest: Decodable {
    let tokens: [[Int32]]?
}

/// Decodes {"tokens":[[id,...],...]}.
func decodeEmbedRequest(_ body: [UInt8]) throws -> [[Int32]] {
    let req: EmbedRequest
    do {
        req = try JSONDecoder().decode(EmbedRequest.self, from: Data(body))
    } catch {
        throw BodyError(
            description: "the body is not a JSON object {\"tokens\":[[id,...],...]}: \(describeDecodingError(error))")
    }
    guard let tokens = req.tokens else {
        throw BodyError(description: "\"tokens\" is missing; send {\"tokens\":[[id,...],...]}")
    }
    return tokens
}

/// A short reason for a JSONDecoder failure, with the path of the offending value.
private func describeDecodingError(_ error: Error) -> String {
    func path(_ keys: [CodingKey]) -> String {
        var s = ""
        for k in keys {
            if let i = k.intValue {
                s += "[\(i)]"
            } else {
                s += (s.isEmpty ? "" : ".") + k.stringValue
            }
        }
        return s.isEmpty ? "the top level" : s
    }
    guard let e = error as? DecodingError else { return "\(error)" }
    switch e {
    case .typeMismatch(let type, let ctx):
        return "at \(path(ctx.codingPath)): expected \(type)"
    case .valueNotFound(let type, let ctx):
        return "at \(path(ctx.codingPath)): expected \(type), found null"
    case .keyNotFound(let key, let ctx):
        return "at \(path(ctx.codingPath)): missing \(key.stringValue)"
    case .dataCorrupted(let ctx):
        let underlying = ctx.underlyingError.map { ($0 as NSError).localizedDescription }
        return "at \(path(ctx.codingPath)): \(underlying ?? ctx.debugDescription)"
    @unknown default:
        return "\(e)"
    }
}

/// Why a request is refused before it reaches the engine.
struct Refusal: Equatable {
    /// The offending sequence, nil when the request as a whole is wrong.
    let index: Int?
    let message: String
}

/// The engine-independent limits: a non-empty list, no empty sequence, none longer
/// than maxTokens, no negative id. Returns nil when the request is acceptable. The
/// messages are the Go handler's.
func check(_ seqs: [[Int32]], maxTokens: Int) -> Refusal? {
    if seqs.isEmpty {
        return Refusal(index: nil, message: "\"tokens\" is empty; send at least one sequence")
    }
    for (i, s) in seqs.enumerated() {
        if s.isEmpty {
            return Refusal(index: i, message: "the sequence is empty")
        }
        if maxTokens > 0 && s.count > maxTokens {
            return Refusal(
                index: i,
                message: "the sequence has \(s.count) tokens; this worker accepts at most \(maxTokens) (max_tokens)")
        }
        if let j = s.firstIndex(where: { $0 < 0 }) {
            return Refusal(index: i, message: "token \(j) is id \(s[j]); ids are not negative")
        }
    }
    return nil
}

/// Guards the protocol against an engine bug: callers index the answer by position
/// and assume n_embd finite floats per vector.
func checkVectors(_ vecs: [[Float]], want: Int, nEmbd: Int) -> String? {
    if vecs.count != want {
        return "returned \(vecs.count) vectors for \(want) sequences"
    }
    for (i, v) in vecs.enumerated() {
        if v.count != nEmbd {
            return "vector \(i) has \(v.count) floats; n_embd is \(nEmbd)"
        }
        if let j = v.firstIndex(where: { !$0.isFinite }) {
            return "vector \(i) holds \(v[j]) at \(j)"
        }
    }
    return nil
}

/// {"embeddings":[[...],...]} with each float in its shortest round-trip form (what
/// Swift's description gives: "0.125", "1e-05", "-3.4028235e+38", all valid JSON
/// numbers). Callers have checked that every value is finite.
func encodeEmbeddings(_ vecs: [[Float]]) -> [UInt8] {
    var s = "{\"embeddings\":["
    s.reserveCapacity(32 + vecs.reduce(0) { $0 + $1.count * 14 })
    for (i, v) in vecs.enumerated() {
        if i > 0 { s += "," }
        s += "["
        for (j, f) in v.enumerated() {
            if j > 0 { s += "," }
            s += f.description
        }
        s += "]"
    }
    s += "]}"
    return Array(s.utf8)
}

/// Whether v has the shape of a W3C traceparent (version-traceid-parentid-flags,
/// lowercase hex, ids not all zero). A malformed header is ignored rather than
/// refused, as the W3C spec asks of receivers; the same rule as the Go worker.
public func validTraceparent(_ v: String) -> Bool {
    let parts = v.split(separator: "-", omittingEmptySubsequences: false)
    guard parts.count >= 4, parts[0].count == 2, parts[0] != "ff" else { return false }
    // Version 00 has exactly four fields; later versions may append more.
    if parts[0] == "00" && parts.count != 4 { return false }
    for (i, n) in [2, 32, 16, 2].enumerated() {
        let p = parts[i]
        guard p.utf8.count == n else { return false }
        var zero = true
        for c in p.utf8 {
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "f"): break
            default: return false
            }
            if c != UInt8(ascii: "0") { zero = false }
        }
        if zero && (i == 1 || i == 2) { return false }
    }
    return true
}
