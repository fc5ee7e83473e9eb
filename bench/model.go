package bench

import (
	"fmt"
	"os"
	"strings"

	"github.com/embed-stack/embed-stack/family"
	"github.com/embed-stack/embed-stack/gguf"
)

// Model is what the report needs of a GGUF's shape: its size and the arithmetic one
// token costs.
type Model struct {
	Path      string `json:"path"`
	FileBytes int64  `json:"file_bytes"`
	Arch      string `json:"arch"`
	Layers    int    `json:"layers"`
	Embd      int    `json:"n_embd"`
	Heads     int    `json:"heads"`
	KVHeads   int    `json:"kv_heads"`
	HeadDim   int    `json:"head_dim"`
	// Context is the training context (0 when the file does not say).
	Context int `json:"context,omitempty"`
	// Encoder says every token attends to every other of its sequence (BERT and
	// the other encoder families, family.Arch.Encoder), not only to those before it.
	Encoder bool `json:"encoder,omitempty"`
	// Params counts every weight; LinearParams only those of the layers' matrices
	// (attention projections and feed-forward), which every token multiplies
	// through. The token embedding is a lookup, and the tied output head runs on
	// nothing in this engine mode (no logits), so neither costs arithmetic per
	// token.
	Params       int64 `json:"params"`
	LinearParams int64 `json:"linear_params"`
	// WeightType is the storage type of most of the layers' matrices ("F16",
	// "Q8_0", "BF16"): it decides which of llama.cpp's matrix kernels run.
	WeightType string `json:"weight_type,omitempty"`
}

// ReadModel reads the shape of the GGUF at path.
func ReadModel(path string) (Model, error) {
	st, err := os.Stat(path)
	if err != nil {
		return Model{}, fmt.Errorf("bench: model: %w", err)
	}
	f, err := gguf.Open(path)
	if err != nil {
		return Model{}, fmt.Errorf("bench: model: %w", err)
	}
	defer f.Close()
	s, err := f.Shape()
	if err == nil {
		err = s.Require(gguf.KeyBlockCount, gguf.KeyEmbeddingLength, gguf.KeyHeadCount)
	}
	if err != nil {
		return Model{}, fmt.Errorf("bench: model %s: %w", path, err)
	}
	if s.Heads == 0 {
		return Model{}, fmt.Errorf("bench: model %s: %s is 0", path, s.Key(gguf.KeyHeadCount))
	}
	m := Model{Path: path, FileBytes: st.Size(), Arch: s.Architecture, Layers: s.Layers, Embd: s.EmbeddingLength,
		Heads: s.Heads, KVHeads: s.KVHeads, HeadDim: s.KeyLength, Context: s.ContextLength}
	if a, ok := family.Lookup(s.Architecture); ok {
		m.Encoder = a.Encoder
	}
	byType := map[string]int64{}
	for _, t := range f.Tensors() {
		n := int64(t.Elements())
		m.Params += n
		if strings.HasPrefix(t.Name, "blk.") && len(t.Dims) >= 2 {
			m.LinearParams += n
			byType[t.Type.String()] += n
		}
	}
	for typ, n := range byType {
		if n > byType[m.WeightType] || n == byType[m.WeightType] && typ < m.WeightType {
			m.WeightType = typ
		}
	}
	return m, nil
}

// FLOPsPerToken is the arithmetic of one token, averaged over a causal sequence of
// n tokens: 2 per linear weight (a multiply and an add), plus attention's QKᵀ and
// AV, which for the token at position p (counting from 1) cost
// 2 × heads × head_dim × p each, per layer; their mean over the sequence is at
// (n+1)/2. An encoder's token attends to all n. Norms, RoPE and softmax are left
// out (well under 1%).
func (m Model) FLOPsPerToken(n int) float64 {
	span := float64(n+1) / 2
	if m.Encoder {
		span = float64(n)
	}
	attn := 4 * float64(m.Layers) * float64(m.Heads) * float64(m.HeadDim) * span
	return 2*float64(m.LinearParams) + attn
}

// KVBytesPerToken is the KV cache one token takes at elemBytes per element (2 for
// llama.cpp's default F16 cache): a key and a value of kv_heads × head_dim per layer
// (gguf.Shape.KVBytesPerToken).
func (m Model) KVBytesPerToken(elemBytes int) int64 {
	s := gguf.Shape{Layers: m.Layers, KVHeads: m.KVHeads, KeyLength: m.HeadDim, ValueLength: m.HeadDim}
	return s.KVBytesPerToken(elemBytes)
}
