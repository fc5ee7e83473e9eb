package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/embed-stack/embed-stack/gguf"
)

// tensorSpec is one tensor of the model as build adds it: enough to write it
// again in another container.
type tensorSpec struct {
	name string
	typ  gguf.GGMLType
	dims []uint64 // GGUF order: row length first
	fill func(io.Writer) error
}

// hfName maps a GGUF tensor name of the Qwen3 architecture to its name in a
// Hugging Face Qwen3Model checkpoint (as llama.cpp's convert_hf_to_gguf.py maps
// them the other way; Qwen3 needs no permutation of Q and K).
func hfName(name string) (string, error) {
	switch name {
	case "token_embd.weight":
		return "embed_tokens.weight", nil
	case "output_norm.weight":
		return "norm.weight", nil
	}
	var layer int
	var rest string
	if _, err := fmt.Sscanf(name, "blk.%d.%s", &layer, &rest); err != nil {
		return "", fmt.Errorf("tensor %s has no Hugging Face name", name)
	}
	parts := map[string]string{
		"attn_norm.weight":   "input_layernorm.weight",
		"attn_q.weight":      "self_attn.q_proj.weight",
		"attn_k.weight":      "self_attn.k_proj.weight",
		"attn_v.weight":      "self_attn.v_proj.weight",
		"attn_output.weight": "self_attn.o_proj.weight",
		"attn_q_norm.weight": "self_attn.q_norm.weight",
		"attn_k_norm.weight": "self_attn.k_norm.weight",
		"ffn_norm.weight":    "post_attention_layernorm.weight",
		"ffn_gate.weight":    "mlp.gate_proj.weight",
		"ffn_up.weight":      "mlp.up_proj.weight",
		"ffn_down.weight":    "mlp.down_proj.weight",
	}
	hf, ok := parts[rest]
	if !ok {
		return "", fmt.Errorf("tensor %s has no Hugging Face name", name)
	}
	return fmt.Sprintf("layers.%d.%s", layer, hf), nil
}

// writeHF writes the model as a Hugging Face snapshot: config.json and
// model.safetensors holding the very values of the GGUF (same seed, same
// encoding; shapes in PyTorch order, the GGUF's reversed). It is the same model for
// transformers and sentence-transformers, the GPU peer of docs/performance.md and
// an independent second reference. Only f16 and f32 matrices have a safetensors
// dtype here.
func writeHF(dir string, s shape, nVocab int, tensors []tensorSpec) error {
	dtypes := map[gguf.GGMLType]string{gguf.TypeF16: "F16", gguf.TypeF32: "F32"}
	size := map[gguf.GGMLType]uint64{gguf.TypeF16: 2, gguf.TypeF32: 4}
	type entry struct {
		Dtype       string    `json:"dtype"`
		Shape       []uint64  `json:"shape"`
		DataOffsets [2]uint64 `json:"data_offsets"`
	}
	header := map[string]any{"__metadata__": map[string]string{"format": "pt"}}
	var off uint64
	for _, t := range tensors {
		dt, ok := dtypes[t.typ]
		if !ok {
			return fmt.Errorf("-hf: tensor %s is %s; safetensors are written for f16 and f32 models only", t.name, t.typ)
		}
		name, err := hfName(t.name)
		if err != nil {
			return err
		}
		n := size[t.typ]
		shape := make([]uint64, len(t.dims))
		for i, d := range t.dims {
			shape[len(t.dims)-1-i] = d
			n *= d
		}
		header[name] = entry{Dtype: dt, Shape: shape, DataOffsets: [2]uint64{off, off + n}}
		off += n
	}
	hdr, err := json.Marshal(header)
	if err != nil {
		return err
	}
	// The header is padded with spaces to 8 bytes, as the safetensors library does.
	if pad := (8 - len(hdr)%8) % 8; pad > 0 {
		hdr = append(hdr, []byte(strings.Repeat(" ", pad))...)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		return err
	}
	defer f.Close()
	w := bufio.NewWriterSize(f, 1<<20)
	var n [8]byte
	for i := range 8 {
		n[i] = byte(uint64(len(hdr)) >> (8 * i))
	}
	w.Write(n[:])
	w.Write(hdr)
	for _, t := range tensors {
		if err := t.fill(w); err != nil {
			return err
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	dtype := "float16"
	if tensors[0].typ == gguf.TypeF32 {
		dtype = "float32"
	}
	cfg := map[string]any{
		"architectures":           []string{"Qwen3Model"},
		"model_type":              "qwen3",
		"hidden_size":             s.hidden,
		"num_hidden_layers":       s.layers,
		"num_attention_heads":     s.heads,
		"num_key_value_heads":     s.kvHeads,
		"head_dim":                s.headDim,
		"intermediate_size":       s.ffn,
		"max_position_embeddings": s.context,
		"rope_theta":              ropeFreqBase,
		"rms_norm_eps":            rmsEpsilon,
		"vocab_size":              nVocab,
		"hidden_act":              "silu",
		"tie_word_embeddings":     true,
		"attention_bias":          false,
		"attention_dropout":       0.0,
		"use_sliding_window":      false,
		"max_window_layers":       s.layers,
		"torch_dtype":             dtype,
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "config.json"), append(b, '\n'), 0o644)
}
