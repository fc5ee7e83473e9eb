// Qwen3MLX: the Qwen3 forward pass (as used by Qwen3-Embedding) in MLX, over the
// weights of a Hugging Face safetensors snapshot, with last-token pooling and no LM
// head.
//
// It refuses to know about HTTP, the worker protocol or processes; it also refuses
// checkpoints it does not implement exactly (attention biases, RoPE scaling, another
// activation, tensors it would not use) instead of computing something else quietly.

import Foundation

/// Why a model cannot be loaded or a request cannot be embedded.
public enum Qwen3Error: Error, CustomStringConvertible {
    /// config.json is missing, malformed or describes something else than Qwen3.
    case config(String)
    /// The safetensors do not hold the tensors config.json implies.
    case weights(String)
    /// A token id outside [0, vocab): a request error, not an engine failure.
    case outOfVocabulary(sequence: Int, position: Int, id: Int32, vocabSize: Int)
    /// A sequence no bucket can hold, or an empty one.
    case badLength(sequence: Int, length: Int, maxTokens: Int)
    /// The caller stopped waiting.
    case cancelled
    /// MLX reported an error while computing.
    case engine(String)

    public var description: String {
        switch self {
        case .config(let m): return "config.json: \(m)"
        case .weights(let m): return "weights: \(m)"
        case .outOfVocabulary(let s, let p, let id, let v):
            return "sequence \(s): token \(p) is id \(id), outside the vocabulary [0, \(v))"
        case .badLength(let s, let n, let max):
            return "sequence \(s) has \(n) tokens; this worker accepts 1 to \(max)"
        case .cancelled: return "the caller has gone"
        case .engine(let m): return "mlx: \(m)"
        }
    }
}

/// The fields of a Hugging Face Qwen3 config.json that the forward pass uses.
public struct Qwen3Config: Sendable, Equatable {
    public var hiddenSize: Int
    public var layers: Int
    public var intermediateSize: Int
    public var heads: Int
    public var kvHeads: Int
    public var headDim: Int
    public var rmsNormEps: Float
    public var ropeTheta: Float
    public var vocabSize: Int
    public var maxPositions: Int
    /// _name_or_path, when the snapshot carries one.
    public var name: String?

    public init(
        hiddenSize: Int, layers: Int, intermediateSize: Int, heads: Int, kvHeads: Int,
        headDim: Int, rmsNormEps: Float, ropeTheta: Float, vocabSize: Int,
        maxPositions: Int, name: String? = nil
    ) {
        self.hiddenSize = hiddenSize
        self.layers = layers
        self.intermediateSize = intermediateSize
        self.heads = heads
        self.kvHeads = kvHeads
        self.headDim = headDim
        self.rmsNormEps = rmsNormEps
        self.ropeTheta = ropeTheta
        self.vocabSize = vocabSize
        self.maxPositions = maxPositions
        self.name = name
    }

    /// Reads directory/config.json.
    public static func load(directory: URL) throws -> Qwen3Config {
        let url = directory.appendingPathComponent("config.json")
        let data: Data
        do {
            data = try Data(contentsOf: url)
        } catch {
            throw Qwen3Error.config(
                "cannot read \(url.path): \(error.localizedDescription); --model must be the snapshot directory holding config.json and model.safetensors"
            )
        }
        return try Qwen3Config(json: data)
    }

    /// Parses the text of a config.json.
    public init(json data: Data) throws {
        let parsed: Any
        do {
            parsed = try JSONSerialization.jsonObject(with: data)
        } catch {
            throw Qwen3Error.config("not JSON: \(error.localizedDescription)")
        }
        guard let obj = parsed as? [String: Any] else {
            throw Qwen3Error.config("not a JSON object")
        }

        // JSONSerialization gives NSNumber; `as? Int` succeeds only for integral
        // values, and fractional ones are read as Double (1e-6 is not a Float exactly,
        // so `as? Float` would fail on it).
        func int(_ key: String, default def: Int? = nil) throws -> Int {
            if let v = obj[key] as? Int { return v }
            if obj[key] == nil || obj[key] is NSNull, let def { return def }
            throw Qwen3Error.config("\(key) is missing or not an integer")
        }
        func double(_ key: String, default def: Double? = nil) throws -> Double {
            if let v = obj[key] as? Double { return v }
            if obj[key] == nil || obj[key] is NSNull, let def { return def }
            throw Qwen3Error.config("\(key) is missing or not a number")
        }
        func isSet(_ key: String) -> Bool {
            guard let v = obj[key] else { return false }
            return !(v is NSNull)
        }

        if let type = obj["model_type"] as? String, type != "qwen3" {
            throw Qwen3Error.config("model_type is \(type); this server implements qwen3")
        }
        if let act = obj["hidden_act"] as? String, act != "silu" {
            throw Qwen3Error.config("hidden_act is \(act); Qwen3 uses silu")
        }
        if let bias = obj["attention_bias"] as? Bool, bias {
            throw Qwen3Error.config("attention_bias is true; Qwen3 has no attention biases")
        }
        if let sliding = obj["use_sliding_window"] as? Bool, sliding {
            throw Qwen3Error.config("use_sliding_window is true; this server implements full causal attention only")
        }
        if isSet("rope_scaling") {
            throw Qwen3Error.config("rope_scaling is set; this server implements unscaled RoPE only")
        }

        let hidden = try int("hidden_size")
        let headCount = try int("num_attention_heads")
        hiddenSize = hidden
        layers = try int("num_hidden_layers")
        intermediateSize = try int("intermediate_size")
        heads = headCount
        kvHeads = try int("num_key_value_heads", default: headCount)
        headDim = try int("head_dim", default: headCount > 0 ? hidden / headCount : 0)
        rmsNormEps = try Float(double("rms_norm_eps", default: 1e-6))
        ropeTheta = try Float(double("rope_theta", default: 1_000_000))
        vocabSize = try int("vocab_size")
        maxPositions = try int("max_position_embeddings", default: 32768)
        name = (obj["_name_or_path"] as? String).flatMap { $0.isEmpty ? nil : $0 }

        for (key, v) in [
            ("hidden_size", hiddenSize), ("num_hidden_layers", layers),
            ("intermediate_size", intermediateSize), ("num_attention_heads", heads),
            ("num_key_value_heads", kvHeads), ("head_dim", headDim), ("vocab_size", vocabSize),
            ("max_position_embeddings", maxPositions),
        ] where v <= 0 {
            throw Qwen3Error.config("\(key) is \(v); it must be positive")
        }
        if heads % kvHeads != 0 {
            throw Qwen3Error.config(
                "num_attention_heads \(heads) is not a multiple of num_key_value_heads \(kvHeads)")
        }
        if headDim % 2 != 0 {
            throw Qwen3Error.config("head_dim \(headDim) is odd; RoPE rotates pairs")
        }
    }
}
