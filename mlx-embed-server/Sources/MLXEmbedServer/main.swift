// mlx-embed-server: the embed-stack warm worker for Apple Silicon.
//
// Listens on --socket at once (so /health answers "loading"), loads and warms the
// model on the engine thread, then serves /embed. See README.md.

import Foundation
import Qwen3MLX
import WorkerCore

/// Adapts Qwen3Engine to the protocol: every call runs on the engine thread, and the
/// engine's request errors become the protocol's.
final class MLXEmbeddingEngine: EmbeddingEngine, @unchecked Sendable {
    let info: EngineInfo
    private let engine: Qwen3Engine  // used on thread only
    private let thread: EngineThread
    private let logger: WorkerLog

    init(engine: Qwen3Engine, thread: EngineThread, log: WorkerLog) {
        self.engine = engine
        self.thread = thread
        self.logger = log
        // Sequences run one at a time, so a request may hold as many tokens as the
        // largest bucket: callers split at max_batch_tokens, and no single sequence
        // can be longer than max_tokens anyway.
        info = EngineInfo(
            nEmbd: engine.hiddenSize, maxTokens: engine.maxTokens,
            maxBatchTokens: engine.maxTokens, model: engine.modelName)
    }

    func embed(_ seqs: [[Int32]], traceparent: String?, isCancelled: @escaping () -> Bool) throws
        -> [[Float]]
    {
        let engine = self.engine
        do {
            return try thread.sync { try engine.embed(seqs, isCancelled: isCancelled) }
        } catch let e as Qwen3Error {
            switch e {
            case .outOfVocabulary(let s, let p, let id, let vocab):
                throw InputError(index: s, reason: "token \(p) is id \(id), outside the vocabulary [0, \(vocab))")
            case .badLength(let s, let n, let max):
                throw InputError(index: s, reason: "the sequence has \(n) tokens; this worker accepts 1 to \(max)")
            case .cancelled:
                throw CancelledError()
            default:
                logger.error("embedding failed", ["err": "\(e)", "traceparent": traceparent ?? ""])
                throw e
            }
        }
    }
}

let logger = WorkerLog()

let options: WorkerOptions
do {
    options = try WorkerOptions.parse(Array(CommandLine.arguments.dropFirst()))
} catch {
    FileHandle.standardError.write(Data("mlx-embed-server: \(error)\n".utf8))
    exit(2)
}
if options.showHelp {
    FileHandle.standardOutput.write(Data(WorkerOptions.usage.utf8))
    exit(0)
}
if !options.ignored.isEmpty {
    logger.warn(
        "ignoring flags that only mean something to llama.cpp",
        ["flags": options.ignored.joined(separator: ",")])
}

// Check --model before listening, so that a GGUF path (serve's --model) fails with
// a message naming the flag to change rather than a missing config.json.
var isDirectory: ObjCBool = false
if !FileManager.default.fileExists(atPath: options.modelDir, isDirectory: &isDirectory) || !isDirectory.boolValue {
    let hint =
        options.modelDir.lowercased().hasSuffix(".gguf")
        ? "it is a GGUF file; mlx-embed-server loads the Hugging Face safetensors snapshot directory (give serve --mlx-model DIR)"
        : "it must be the Hugging Face snapshot directory holding config.json and model.safetensors"
    FileHandle.standardError.write(Data("mlx-embed-server: --model \(options.modelDir): \(hint)\n".utf8))
    exit(1)
}

// Writing to a client that has gone must fail with EPIPE, not kill the worker.
signal(SIGPIPE, SIG_IGN)

let protocolHandler = WorkerHandler()
let server: UnixHTTPServer
do {
    server = try UnixHTTPServer(socketPath: options.socketPath, log: logger) { request, connection in
        protocolHandler.handle(request, peerGone: { connection.peerGone() })
    }
} catch {
    FileHandle.standardError.write(Data("mlx-embed-server: \(error)\n".utf8))
    exit(1)
}
let lifecycle = Lifecycle(server: server, log: logger)
lifecycle.watchSignals()
if !options.ignoreStdin {
    lifecycle.watchStdin()
}
server.start()
logger.info(
    "worker listening; loading the model",
    ["socket": options.socketPath, "pid": "\(getpid())", "model": options.modelDir])

let engineThread = EngineThread(name: "mlx-engine")
let loadStarted = Date()
engineThread.submit {
    do {
        let engine = try Qwen3Engine(
            directory: URL(fileURLWithPath: options.modelDir),
            buckets: options.effectiveBuckets,
            name: options.modelName.isEmpty ? nil : options.modelName,
            progress: { logger.info($0) })
        let loaded = Date().timeIntervalSince(loadStarted)
        let warm = try engine.warm(progress: { logger.info($0) })
        let adapter = MLXEmbeddingEngine(engine: engine, thread: engineThread, log: logger)
        try adapter.info.validate()
        protocolHandler.setReady(adapter)
        let info = adapter.info
        let bucketList: String = engine.buckets.map { String($0) }.joined(separator: ",")
        let warmList: String = warm.map { String(format: "%.2f", $0.seconds) }.joined(separator: ",")
        let loadTime: String = String(format: "%.2fs", loaded)
        let readyTime: String = String(format: "%.2fs", Date().timeIntervalSince(loadStarted))
        logger.info(
            "worker ready",
            [
                "model": info.model, "n_embd": "\(info.nEmbd)", "max_tokens": "\(info.maxTokens)",
                "max_batch_tokens": "\(info.maxBatchTokens)", "buckets": bucketList,
                "warm_seconds": warmList, "load_time": loadTime, "ready_time": readyTime,
            ])
    } catch {
        lifecycle.fail("loading the model: \(error)")
    }
}

dispatchMain()
