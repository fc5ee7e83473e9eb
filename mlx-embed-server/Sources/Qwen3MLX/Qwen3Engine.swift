import Foundation
import MLX

/// A loaded Qwen3 embedding model with one compiled forward pass per bucket.
///
/// Inputs run one at a time (batch 1), each right-padded to the smallest bucket that
/// holds it, so MLX only ever sees the few fixed shapes compiled and warmed at start:
/// no request pays for tracing or kernel compilation.
///
/// Not safe for concurrent use: every call, load included, must come from the one
/// thread that owns the engine (WorkerCore's EngineThread).
public final class Qwen3Engine {
    public let config: Qwen3Config
    /// Sequence lengths with a compiled forward pass, smallest first.
    public let buckets: [Int]
    /// Name for /health and logs.
    public let modelName: String

    private let flatWeights: [MLXArray]
    private var forwards: [Int: ([MLXArray]) -> [MLXArray]] = [:]

    /// The padding id. Any id in the vocabulary will do: causal attention keeps the
    /// padded positions out of every real token's result.
    static let padToken: Int32 = 0

    /// Loads config.json and the safetensors from directory and compiles one forward
    /// pass per bucket (call warm() to trace them). name overrides the model name.
    /// progress receives a line at each step: the supervisor counts output as progress
    /// while a worker loads, so a slow load is not mistaken for a hung one.
    public init(directory: URL, buckets: [Int], name: String? = nil, progress: (String) -> Void = { _ in }) throws {
        let config = try Qwen3Config.load(directory: directory)
        progress(
            "read config.json: \(config.layers) layers, hidden \(config.hiddenSize), \(config.heads)/\(config.kvHeads) heads of \(config.headDim), vocab \(config.vocabSize)"
        )
        guard !buckets.isEmpty, buckets.allSatisfy({ $0 > 0 }) else {
            throw Qwen3Error.config("no usable bucket in \(buckets); give --buckets positive lengths")
        }
        let sortedBuckets = Array(Set(buckets)).sorted()
        if let largest = sortedBuckets.last, largest > config.maxPositions {
            throw Qwen3Error.config(
                "bucket \(largest) exceeds max_position_embeddings \(config.maxPositions); lower --buckets or --ctx")
        }
        self.config = config
        self.buckets = sortedBuckets
        if let name, !name.isEmpty {
            self.modelName = name
        } else {
            self.modelName = config.name ?? directory.standardizedFileURL.lastPathComponent
        }

        let weights = try Qwen3Weights.load(directory: directory, config: config, progress: progress)
        self.flatWeights = weights.flattened
        progress("loaded \(flatWeights.count) tensors as F16")

        let layerCount = config.layers
        for bucket in sortedBuckets {
            // One compiled function per bucket: each traces once for its own shape.
            // The weights are passed in as inputs, so the traced graph holds no
            // captured arrays.
            forwards[bucket] = compile { (inputs: [MLXArray]) -> [MLXArray] in
                let w = Qwen3Weights(flat: Array(inputs[2...]), layerCount: layerCount)
                return [qwen3LastToken(tokens: inputs[0], last: inputs[1], weights: w, config: config)]
            }
        }
    }

    public var hiddenSize: Int { config.hiddenSize }
    public var maxTokens: Int { buckets.last ?? 0 }

    /// Runs every bucket once on a full-length input, so that tracing, graph
    /// compilation and Metal pipeline creation happen before the worker reports ready.
    /// Returns the seconds each bucket took.
    public func warm(progress: (String) -> Void = { _ in }) throws -> [(bucket: Int, seconds: Double)] {
        var times: [(bucket: Int, seconds: Double)] = []
        for bucket in buckets {
            let start = Date()
            let v = try forward([Int32](repeating: Self.padToken, count: bucket))
            guard v.count == config.hiddenSize, v.allSatisfy({ $0.isFinite }) else {
                throw Qwen3Error.engine("warming bucket \(bucket) gave a vector that is not \(config.hiddenSize) finite floats")
            }
            let seconds = Date().timeIntervalSince(start)
            times.append((bucket: bucket, seconds: seconds))
            progress("compiled and warmed bucket \(bucket) in \(String(format: "%.2f", seconds))s")
        }
        return times
    }

    /// The last-token vector of each sequence, in order. Every sequence is checked
    /// before any is computed. isCancelled is polled between sequences.
    public func embed(_ seqs: [[Int32]], isCancelled: () -> Bool) throws -> [[Float]] {
        for (i, s) in seqs.enumerated() {
            guard !s.isEmpty, s.count <= maxTokens else {
                throw Qwen3Error.badLength(sequence: i, length: s.count, maxTokens: maxTokens)
            }
            if let j = s.firstIndex(where: { $0 < 0 || Int($0) >= config.vocabSize }) {
                throw Qwen3Error.outOfVocabulary(sequence: i, position: j, id: s[j], vocabSize: config.vocabSize)
            }
        }
        var out: [[Float]] = []
        out.reserveCapacity(seqs.count)
        for s in seqs {
            if isCancelled() {
                throw Qwen3Error.cancelled
            }
            out.append(try forward(s))
        }
        return out
    }

    /// One sequence through the compiled pass of the smallest bucket that holds it.
    private func forward(_ s: [Int32]) throws -> [Float] {
        guard let bucket = buckets.first(where: { $0 >= s.count }), let fn = forwards[bucket] else {
            throw Qwen3Error.badLength(sequence: 0, length: s.count, maxTokens: maxTokens)
        }
        var padded = s
        padded.append(contentsOf: repeatElement(Self.padToken, count: bucket - s.count))
        let tokens = MLXArray(padded, [1, bucket])
        let last = MLXArray([Int32(s.count - 1)], [1])
        do {
            // MLX reports errors through a handler that would otherwise end the process.
            return try withError { () throws -> [Float] in
                let y = fn([tokens, last] + flatWeights)[0]
                eval(y)
                return y.asArray(Float.self)
            }
        } catch {
            throw Qwen3Error.engine("\(error)")
        }
    }
}
