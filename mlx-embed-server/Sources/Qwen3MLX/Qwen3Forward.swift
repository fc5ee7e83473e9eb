import Foundation
import MLX

/// The Qwen3 decoder stack for one right-padded sequence, returning the final-normed
/// hidden state of its last real token: the vector llama.cpp's LAST pooling gives.
///
/// Precision follows llama.cpp on an F16 GGUF: weights are F16, the residual stream is
/// F32, and every matrix product takes F16 inputs (llama.cpp converts activations to
/// F16 for its F16 matmuls as well). RMSNorm, RoPE and the attention softmax compute
/// in F32 inside the MLX kernels.
///
/// Shapes: tokens [1, L] int32 (L = the bucket), last [1] int32 (index of the last real
/// token). Result: [1, hidden] f32.
func qwen3LastToken(tokens: MLXArray, last: MLXArray, weights w: Qwen3Weights, config c: Qwen3Config)
    -> MLXArray
{
    let length = tokens.dim(1)
    let eps = c.rmsNormEps
    let scale = Float(1.0 / Double(c.headDim).squareRoot())
    let startPosition: Int = 0  // typed, to pick RoPE's Int-offset overload over the MLXArray one

    // [1, L, hidden]
    var h = w.embed.take(tokens, axis: 0).asType(.float32)

    for l in w.layers {
        // Attention. The causal mask is what makes right padding harmless: position i
        // attends to positions 0...i only, so the last real token never sees the
        // padding after it, and RoPE gives the real tokens the positions 0..<n they
        // would have without padding. Every other operation works token by token, so
        // the vector at index n-1 is the one an unpadded pass of length n computes
        // (up to the rounding order of kernels tiled for another length).
        let x = MLXFast.rmsNorm(h, weight: l.inputNorm, eps: eps).asType(.float16)
        var q = x.matmul(l.q.T).reshaped(1, length, c.heads, c.headDim)
        var k = x.matmul(l.k.T).reshaped(1, length, c.kvHeads, c.headDim)
        let v = x.matmul(l.v.T).reshaped(1, length, c.kvHeads, c.headDim).transposed(0, 2, 1, 3)

        // Qwen3's per-head RMSNorm of queries and keys, before RoPE.
        q = MLXFast.rmsNorm(q, weight: l.qNorm, eps: eps).transposed(0, 2, 1, 3)
        k = MLXFast.rmsNorm(k, weight: l.kNorm, eps: eps).transposed(0, 2, 1, 3)

        // NEOX RoPE (traditional: false rotates the two halves of each head, as Hugging
        // Face's rotate_half and llama.cpp's LLAMA_ROPE_TYPE_NEOX do) over the whole
        // head, positions from 0. RoPE reads positions along axis -2, hence [1, H, L, D].
        q = MLXFast.RoPE(q, dimensions: c.headDim, traditional: false, base: c.ropeTheta, scale: 1, offset: startPosition)
        k = MLXFast.RoPE(k, dimensions: c.headDim, traditional: false, base: c.ropeTheta, scale: 1, offset: startPosition)

        // Grouped-query attention: keys and values keep kvHeads heads; the kernel maps
        // each query head to its group.
        let attn = MLXFast.scaledDotProductAttention(
            queries: q, keys: k, values: v, scale: scale,
            mask: MLXFast.ScaledDotProductAttentionMaskMode.causal)
        let merged = attn.transposed(0, 2, 1, 3).reshaped(1, length, c.heads * c.headDim)
        h = h + merged.matmul(l.o.T).asType(.float32)

        // SwiGLU MLP.
        let y = MLXFast.rmsNorm(h, weight: l.postNorm, eps: eps).asType(.float16)
        let gate = y.matmul(l.gate.T)
        let up = y.matmul(l.up.T)
        let act = gate * MLX.sigmoid(gate) * up
        h = h + act.matmul(l.down.T).asType(.float32)
    }

    // Last-token pooling. The final norm works token by token, so it is applied to
    // the one row kept rather than to all L.
    let lastHidden = h.take(last, axis: 1)  // [1, 1, hidden]
    return MLXFast.rmsNorm(lastHidden, weight: w.finalNorm, eps: eps).reshaped(1, c.hiddenSize)
}
