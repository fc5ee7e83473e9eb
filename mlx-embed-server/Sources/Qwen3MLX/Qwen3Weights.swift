import Foundation
import MLX

/// The weights of one decoder layer. Projections are F16 in the Hugging Face layout
/// [out, in] (applied as x @ W^T); the q/k norms are F16 like the activations they
/// scale; the two layer norms are F32 like the residual stream they read.
struct LayerWeights {
    let inputNorm: MLXArray  // [hidden] f32
    let postNorm: MLXArray  // [hidden] f32
    let q: MLXArray  // [heads*headDim, hidden]
    let k: MLXArray  // [kvHeads*headDim, hidden]
    let v: MLXArray  // [kvHeads*headDim, hidden]
    let o: MLXArray  // [hidden, heads*headDim]
    let qNorm: MLXArray  // [headDim] f16
    let kNorm: MLXArray  // [headDim] f16
    let gate: MLXArray  // [intermediate, hidden]
    let up: MLXArray  // [intermediate, hidden]
    let down: MLXArray  // [hidden, intermediate]

    static let count = 11

    /// In the order init(flat:) reads them.
    var flattened: [MLXArray] { [inputNorm, postNorm, q, k, v, o, qNorm, kNorm, gate, up, down] }

    init(flat a: ArraySlice<MLXArray>) {
        let b = a.startIndex
        inputNorm = a[b]
        postNorm = a[b + 1]
        q = a[b + 2]
        k = a[b + 3]
        v = a[b + 4]
        o = a[b + 5]
        qNorm = a[b + 6]
        kNorm = a[b + 7]
        gate = a[b + 8]
        up = a[b + 9]
        down = a[b + 10]
    }
}

/// All weights of the model, without the LM head (pooling reads hidden states).
struct Qwen3Weights {
    let embed: MLXArray  // [vocab, hidden] f16
    let finalNorm: MLXArray  // [hidden] f32
    let layers: [LayerWeights]

    /// [embed, finalNorm, layer 0..., layer 1..., ...]: the compiled forward takes the
    /// weights as inputs rather than capturing them, so that compile sees every array
    /// the graph reads as an input.
    var flattened: [MLXArray] { [embed, finalNorm] + layers.flatMap { $0.flattened } }

    init(embed: MLXArray, finalNorm: MLXArray, layers: [LayerWeights]) {
        self.embed = embed
        self.finalNorm = finalNorm
        self.layers = layers
    }

    /// Rebuilds the weights from flattened (inside the compiled function, where the
    /// arrays are tracers).
    init(flat a: [MLXArray], layerCount: Int) {
        precondition(a.count == 2 + layerCount * LayerWeights.count, "weights: \(a.count) arrays for \(layerCount) layers")
        embed = a[0]
        finalNorm = a[1]
        layers = (0..<layerCount).map { i in
            let s = 2 + i * LayerWeights.count
            return LayerWeights(flat: a[s..<s + LayerWeights.count])
        }
    }

    /// Loads every *.safetensors file directly in directory (one model.safetensors, or
    /// the shards of a sharded snapshot) and checks each tensor against config.
    ///
    /// Tensor names are the Hugging Face ones, with or without the "model." prefix: a
    /// Qwen3ForCausalLM checkpoint has model.layers.0.self_attn.q_proj.weight, the
    /// Qwen3-Embedding one (saved as Qwen3Model) has layers.0.self_attn.q_proj.weight.
    /// lm_head.weight and rotary inv_freq buffers are skipped; any other tensor that
    /// the forward pass would not use is an error, since ignoring it (an attention
    /// bias, say) would compute another model.
    ///
    /// Every weight is converted to F16, the precision of the F16 GGUF that the
    /// llama.cpp worker runs, so that both workers start from the same numbers.
    static func load(directory: URL, config c: Qwen3Config, progress: (String) -> Void) throws -> Qwen3Weights {
        let files: [URL]
        do {
            files = try FileManager.default.contentsOfDirectory(at: directory, includingPropertiesForKeys: nil)
                .filter { $0.pathExtension == "safetensors" }
                .sorted { $0.lastPathComponent < $1.lastPathComponent }
        } catch {
            throw Qwen3Error.weights("cannot list \(directory.path): \(error.localizedDescription)")
        }
        guard !files.isEmpty else {
            throw Qwen3Error.weights(
                "no *.safetensors file in \(directory.path); download the Hugging Face snapshot (config.json and model.safetensors)"
            )
        }

        var raw: [String: MLXArray] = [:]
        for file in files {
            progress("reading \(file.lastPathComponent)")
            let arrays: [String: MLXArray]
            do {
                arrays = try loadArrays(url: file)
            } catch {
                throw Qwen3Error.weights("reading \(file.lastPathComponent): \(error)")
            }
            for (name, array) in arrays {
                let key = name.hasPrefix("model.") ? String(name.dropFirst("model.".count)) : name
                if key == "lm_head.weight" || key.hasSuffix("rotary_emb.inv_freq") {
                    continue
                }
                if raw.keys.contains(key) {
                    throw Qwen3Error.weights("tensor \(key) appears twice (with and without the model. prefix, or in two files)")
                }
                raw[key] = array
            }
        }

        // Removes a tensor from raw, checks its shape and converts it. Each one is
        // evaluated at once so the file is read tensor by tensor and the source array,
        // possibly BF16, is freed before the next conversion.
        func take(_ key: String, _ shape: [Int], _ dtype: DType) throws -> MLXArray {
            guard let a = raw.removeValue(forKey: key) else {
                throw Qwen3Error.weights("tensor \(key) (or model.\(key)) is missing")
            }
            guard a.shape == shape else {
                throw Qwen3Error.weights("tensor \(key) has shape \(a.shape); config.json implies \(shape)")
            }
            // Through F16 even for the F32 norms, so that every weight holds the values
            // the F16 conversion gives.
            let converted = a.asType(.float16).asType(dtype)
            try withError {
                eval(converted)
            }
            return converted
        }

        let h = c.hiddenSize
        let qOut = c.heads * c.headDim
        let kvOut = c.kvHeads * c.headDim
        let embed = try take("embed_tokens.weight", [c.vocabSize, h], .float16)
        let finalNorm = try take("norm.weight", [h], .float32)
        var layers: [LayerWeights] = []
        for i in 0..<c.layers {
            let p = "layers.\(i)."
            let flat: [MLXArray] = try [
                take(p + "input_layernorm.weight", [h], .float32),
                take(p + "post_attention_layernorm.weight", [h], .float32),
                take(p + "self_attn.q_proj.weight", [qOut, h], .float16),
                take(p + "self_attn.k_proj.weight", [kvOut, h], .float16),
                take(p + "self_attn.v_proj.weight", [kvOut, h], .float16),
                take(p + "self_attn.o_proj.weight", [h, qOut], .float16),
                take(p + "self_attn.q_norm.weight", [c.headDim], .float16),
                take(p + "self_attn.k_norm.weight", [c.headDim], .float16),
                take(p + "mlp.gate_proj.weight", [c.intermediateSize, h], .float16),
                take(p + "mlp.up_proj.weight", [c.intermediateSize, h], .float16),
                take(p + "mlp.down_proj.weight", [h, c.intermediateSize], .float16),
            ]
            layers.append(LayerWeights(flat: flat[...]))
        }
        if !raw.isEmpty {
            let names = raw.keys.sorted()
            throw Qwen3Error.weights(
                "\(names.count) tensors this Qwen3 forward pass does not use, e.g. \(names.prefix(3).joined(separator: ", ")); is this a Qwen3 checkpoint?"
            )
        }
        return Qwen3Weights(embed: embed, finalNorm: finalNorm, layers: layers)
    }
}
