package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// encoderArchs are the encoder architectures genmodel writes with random weights,
// each laid out as llama.cpp's loader creates its tensors (llama-model.cpp,
// load_tensors) and its graph reads them (src/models/bert.cpp, neo-bert.cpp,
// t5-enc.cpp), so that every architecture embed-stack serves has a test model.
var encoderArchs = []string{"bert", "nomic-bert", "nomic-bert-moe", "jina-bert-v2", "jina-bert-v3", "neo-bert", "gemma-embedding", "t5encoder"}

// Mixture-of-experts layout of the nomic-bert-moe test model: every second layer
// (the odd ones) routes each token to 2 of 4 experts, as nomic-embed-text-v2-moe
// routes to 2 of 8.
const (
	moeEveryNLayers = 2
	moeExperts      = 4
	moeExpertsUsed  = 2
	// t5RelBuckets is the relative-position bucket count of the t5encoder test
	// model (T5's 32).
	t5RelBuckets = 32
	// gemmaWindow is the gemma-embedding test model's sliding window: shorter than
	// its context, so that sequences longer than it take the windowed attention of
	// llama.cpp's SWA layers (EmbeddingGemma's is 512 of 2048).
	gemmaWindow = 128
	// gemmaSWAPattern is llama.cpp's layer pattern of gemma-embedding: five
	// sliding-window layers, then a global one.
	gemmaSWAPattern = 6
)

// encoderKeys are the hyperparameter keys (without the "<arch>." prefix) llama.cpp
// reads for arch beyond the shape's counts, with their values for shape s.
func encoderKeys(arch string, s bertShape) []kv {
	var keys []kv
	switch arch {
	case "neo-bert", "t5encoder", "gemma-embedding":
		keys = append(keys, kv{"attention.layer_norm_rms_epsilon", float32(1e-6)})
	default:
		keys = append(keys, kv{"attention.layer_norm_epsilon", s.layerNormEps})
	}
	keys = append(keys, kv{"attention.causal", false}, kv{"pooling_type", s.pooling})
	switch arch {
	case "nomic-bert", "nomic-bert-moe", "jina-bert-v3", "neo-bert":
		keys = append(keys, kv{"rope.freq_base", float32(10000)})
	}
	switch arch {
	case "nomic-bert-moe":
		keys = append(keys, kv{"moe_every_n_layers", uint32(moeEveryNLayers)}, kv{"expert_count", uint32(moeExperts)},
			kv{"expert_used_count", uint32(moeExpertsUsed)})
	case "t5encoder":
		keys = append(keys, kv{"attention.relative_buckets_count", uint32(t5RelBuckets)})
	case "gemma-embedding":
		// Grouped-query attention (2 query heads per KV head), a sliding window,
		// and sentence-transformers' two dense projections after pooling (to twice
		// the width and back), as EmbeddingGemma's conversion writes them.
		keys = append(keys, kv{"attention.head_count_kv", s.heads / 2}, kv{"attention.sliding_window", uint32(gemmaWindow)},
			kv{"dense_2_feat_in", s.hidden}, kv{"dense_2_feat_out", 2 * s.hidden},
			kv{"dense_3_feat_in", 2 * s.hidden}, kv{"dense_3_feat_out", s.hidden})
	}
	return keys
}

// encoderTensors lists the tensors of a random-weight encoder of architecture arch
// and shape s (bertTensors for bert, which -convert also reads by their Hugging
// Face names).
func encoderTensors(arch string, s bertShape, nVocab uint64) ([]bertTensor, error) {
	if arch == "bert" {
		return bertTensors(s, nVocab), nil
	}
	if !slices.Contains(encoderArchs, arch) {
		return nil, fmt.Errorf("-arch %q is not an encoder genmodel writes; use one of %s", arch, strings.Join(encoderArchs, ", "))
	}
	h, f := uint64(s.hidden), uint64(s.ffn)
	heads := uint64(s.heads)
	mat := func(in uint64) dist { return dist{std: 1 / math.Sqrt(float64(in))} }
	bias := dist{std: 0.02}
	normW, normB := dist{mean: 1, std: 0.1}, dist{std: 0.1}
	var ts []bertTensor
	add := func(name string, d dist, matrix bool, dims ...uint64) {
		ts = append(ts, bertTensor{name: name, dims: dims, matrix: matrix, init: d})
	}
	add("token_embd.weight", dist{std: 0.5}, true, h, nVocab)
	// LayerNorm (weight and bias) and RMSNorm (weight only) over n values.
	layerNorm := func(name string) { add(name+".weight", normW, false, h); add(name+".bias", normB, false, h) }
	rmsNorm := func(name string) { add(name+".weight", normW, false, h) }
	switch arch {
	case "nomic-bert", "nomic-bert-moe", "jina-bert-v2", "jina-bert-v3":
		add("token_types.weight", dist{std: 0.5}, false, h, uint64(s.tokenTypes))
		layerNorm("token_embd_norm")
	}
	for l := range uint64(s.layers) {
		p := fmt.Sprintf("blk.%d.", l)
		switch arch {
		case "nomic-bert", "nomic-bert-moe", "jina-bert-v3":
			// Fused Q, K and V; nomic-bert-moe and jina-bert-v3 with biases.
			add(p+"attn_qkv.weight", mat(h), true, h, 3*h)
			if arch != "nomic-bert" {
				add(p+"attn_qkv.bias", bias, false, 3*h)
			}
			add(p+"attn_output.weight", mat(h), true, h, h)
			if arch != "nomic-bert" {
				add(p+"attn_output.bias", bias, false, h)
			}
			layerNorm(p + "attn_output_norm")
			switch {
			case arch == "nomic-bert-moe" && l%moeEveryNLayers == 1:
				add(p+"ffn_gate_inp.weight", mat(h), true, h, moeExperts)
				add(p+"ffn_up_exps.weight", mat(h), true, h, f, moeExperts)
				add(p+"ffn_down_exps.weight", mat(f), true, f, h, moeExperts)
			case arch == "nomic-bert":
				// SwiGLU without biases.
				add(p+"ffn_up.weight", mat(h), true, h, f)
				add(p+"ffn_gate.weight", mat(h), true, h, f)
				add(p+"ffn_down.weight", mat(f), true, f, h)
			default:
				// GELU with biases, as BERT's.
				add(p+"ffn_up.weight", mat(h), true, h, f)
				add(p+"ffn_up.bias", bias, false, f)
				add(p+"ffn_down.weight", mat(f), true, f, h)
				add(p+"ffn_down.bias", bias, false, h)
			}
			layerNorm(p + "layer_output_norm")
		case "jina-bert-v2":
			// Separate Q, K, V with biases; ALiBi instead of positions; GEGLU in one
			// up-projection of twice the width.
			for _, x := range []string{"attn_q", "attn_k", "attn_v", "attn_output"} {
				add(p+x+".weight", mat(h), true, h, h)
				add(p+x+".bias", bias, false, h)
			}
			layerNorm(p + "attn_output_norm")
			add(p+"ffn_up.weight", mat(h), true, h, 2*f)
			add(p+"ffn_down.weight", mat(f), true, f, h)
			add(p+"ffn_down.bias", bias, false, h)
			layerNorm(p + "layer_output_norm")
		case "neo-bert":
			// Pre-norm with RMSNorm, fused QKV, SwiGLU in one up-projection.
			rmsNorm(p + "attn_norm")
			add(p+"attn_qkv.weight", mat(h), true, h, 3*h)
			add(p+"attn_output.weight", mat(h), true, h, h)
			rmsNorm(p + "ffn_norm")
			add(p+"ffn_up.weight", mat(h), true, h, 2*f)
			add(p+"ffn_down.weight", mat(f), true, f, h)
		case "gemma-embedding":
			// Gemma 3's block: RMSNorm before and after attention and the
			// feed-forward, Q and K normed per head, GeGLU.
			head, kvw := h/heads, h/2
			rmsNorm(p + "attn_norm")
			add(p+"attn_q.weight", mat(h), true, h, h)
			add(p+"attn_k.weight", mat(h), true, h, kvw)
			add(p+"attn_v.weight", mat(h), true, h, kvw)
			add(p+"attn_output.weight", mat(h), true, h, h)
			add(p+"attn_q_norm.weight", normW, false, head)
			add(p+"attn_k_norm.weight", normW, false, head)
			rmsNorm(p + "post_attention_norm")
			rmsNorm(p + "ffn_norm")
			add(p+"ffn_gate.weight", mat(h), true, h, f)
			add(p+"ffn_up.weight", mat(h), true, h, f)
			add(p+"ffn_down.weight", mat(f), true, f, h)
			rmsNorm(p + "post_ffw_norm")
		case "t5encoder":
			q := fmt.Sprintf("enc.blk.%d.", l)
			rmsNorm(q + "attn_norm")
			if l == 0 {
				// The relative position bias, shared by every layer.
				add(q+"attn_rel_b.weight", dist{std: 0.5}, false, heads, t5RelBuckets)
			}
			for _, x := range []string{"attn_q", "attn_k", "attn_v", "attn_o"} {
				add(q+x+".weight", mat(h), true, h, h)
			}
			rmsNorm(q + "ffn_norm")
			add(q+"ffn_up.weight", mat(h), true, h, f)
			add(q+"ffn_down.weight", mat(f), true, f, h)
		}
	}
	switch arch {
	case "neo-bert", "t5encoder":
		rmsNorm("enc.output_norm")
	case "gemma-embedding":
		rmsNorm("output_norm")
		add("dense_2.weight", mat(h), true, h, 2*h)
		add("dense_3.weight", mat(2*h), true, 2*h, h)
	}
	return ts, nil
}
