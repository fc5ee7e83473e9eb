import Foundation
import XCTest

@testable import Qwen3MLX

/// Qwen3-Embedding-0.6B's config.json, as published with the checkpoint.
let embedding06B = """
    {
      "architectures": ["Qwen3ForCausalLM"],
      "attention_bias": false,
      "attention_dropout": 0.0,
      "bos_token_id": 151643,
      "eos_token_id": 151643,
      "head_dim": 128,
      "hidden_act": "silu",
      "hidden_size": 1024,
      "initializer_range": 0.02,
      "intermediate_size": 3072,
      "max_position_embeddings": 32768,
      "max_window_layers": 28,
      "model_type": "qwen3",
      "num_attention_heads": 16,
      "num_hidden_layers": 28,
      "num_key_value_heads": 8,
      "rms_norm_eps": 1e-06,
      "rope_scaling": null,
      "rope_theta": 1000000,
      "sliding_window": null,
      "tie_word_embeddings": true,
      "torch_dtype": "bfloat16",
      "use_cache": true,
      "use_sliding_window": false,
      "vocab_size": 151669
    }
    """

final class Qwen3ConfigTests: XCTestCase {
    func testQwen3Embedding06B() throws {
        let c = try Qwen3Config(json: Data(embedding06B.utf8))
        XCTAssertEqual(
            c,
            Qwen3Config(
                hiddenSize: 1024, layers: 28, intermediateSize: 3072, heads: 16, kvHeads: 8, headDim: 128,
                rmsNormEps: Float(1e-6), ropeTheta: 1_000_000, vocabSize: 151669, maxPositions: 32768))
    }

    func testDefaults() throws {
        let c = try Qwen3Config(
            json: Data(
                #"{"hidden_size":64,"num_hidden_layers":2,"intermediate_size":128,"num_attention_heads":4,"vocab_size":10,"_name_or_path":"Qwen/Qwen3-Embedding-0.6B"}"#
                    .utf8))
        XCTAssertEqual(c.kvHeads, 4, "no num_key_value_heads: one per head")
        XCTAssertEqual(c.headDim, 16, "no head_dim: hidden_size / heads")
        XCTAssertEqual(c.rmsNormEps, Float(1e-6))
        XCTAssertEqual(c.ropeTheta, 1_000_000)
        XCTAssertEqual(c.maxPositions, 32768)
        XCTAssertEqual(c.name, "Qwen/Qwen3-Embedding-0.6B")
    }

    /// Checkpoints this forward pass does not implement exactly are refused, each with
    /// the field to blame.
    func testRefusals() {
        let cases: [(change: String, want: String)] = [
            (#""model_type": "qwen2""#, "config.json: model_type is qwen2; this server implements qwen3"),
            (#""hidden_act": "gelu""#, "config.json: hidden_act is gelu; Qwen3 uses silu"),
            (#""attention_bias": true"#, "config.json: attention_bias is true; Qwen3 has no attention biases"),
            (
                #""use_sliding_window": true"#,
                "config.json: use_sliding_window is true; this server implements full causal attention only"
            ),
            (
                #""rope_scaling": {"type": "yarn", "factor": 4.0}"#,
                "config.json: rope_scaling is set; this server implements unscaled RoPE only"
            ),
            (
                #""num_key_value_heads": 3"#,
                "config.json: num_attention_heads 16 is not a multiple of num_key_value_heads 3"
            ),
            (#""head_dim": 0"#, "config.json: head_dim is 0; it must be positive"),
            (#""hidden_size": "1024""#, "config.json: hidden_size is missing or not an integer"),
        ]
        for c in cases {
            let key = String(c.change[..<c.change.firstIndex(of: ":")!])
            // Replace the line holding key with the changed one.
            let lines = embedding06B.split(separator: "\n").map { line -> String in
                line.trimmingCharacters(in: .whitespaces).hasPrefix(key)
                    ? "  " + c.change + (line.hasSuffix(",") ? "," : "") : String(line)
            }
            let json = lines.joined(separator: "\n")
            XCTAssertThrowsError(try Qwen3Config(json: Data(json.utf8)), c.change) { error in
                XCTAssertEqual("\(error)", c.want, c.change)
            }
        }
    }
}
