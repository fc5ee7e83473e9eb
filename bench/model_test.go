package bench

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/embed-stack/embed-stack/gguf"
	"github.com/embed-stack/embed-stack/internal/e2e"
)

// writeModel writes a GGUF with the metadata and tensor shapes ReadModel reads
// (zero weights: only shapes matter).
func writeModel(t *testing.T) string {
	t.Helper()
	w := gguf.NewWriter()
	w.AddKV("general.architecture", "qwen3")
	w.AddKV("qwen3.block_count", uint32(2))
	w.AddKV("qwen3.embedding_length", uint32(8))
	w.AddKV("qwen3.attention.head_count", uint32(2))
	w.AddKV("qwen3.attention.head_count_kv", uint32(1))
	w.AddKV("qwen3.attention.key_length", uint32(4))
	w.AddKV("qwen3.context_length", uint32(128))
	for _, tt := range []struct {
		name string
		dims []uint64
	}{
		{"token_embd.weight", []uint64{8, 100}}, // a lookup: no arithmetic
		{"blk.0.attn_q.weight", []uint64{8, 8}},
		{"blk.0.attn_k.weight", []uint64{8, 4}},
		{"blk.0.attn_norm.weight", []uint64{8}}, // a vector: not a matrix
		{"blk.1.ffn_up.weight", []uint64{8, 16}},
		{"output_norm.weight", []uint64{8}},
	} {
		n := uint64(4)
		for _, d := range tt.dims {
			n *= d
		}
		w.AddTensor(tt.name, gguf.TypeF32, tt.dims, func(out io.Writer) error {
			_, err := out.Write(make([]byte, n))
			return err
		})
	}
	path := filepath.Join(t.TempDir(), "shape.gguf")
	if err := w.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestReadModel(t *testing.T) {
	path := writeModel(t)
	m, err := ReadModel(path)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(path)
	want := Model{Path: path, FileBytes: st.Size(), Arch: "qwen3", Layers: 2, Embd: 8, Heads: 2, KVHeads: 1, HeadDim: 4, Context: 128,
		Params: 800 + 64 + 32 + 8 + 128 + 8, LinearParams: 64 + 32 + 128, WeightType: "F32"}
	if m != want {
		t.Fatalf("ReadModel = %+v\nwant          %+v", m, want)
	}
	tests := []struct {
		n    int
		want float64
	}{
		// 2 per linear weight, plus 4 × layers × heads × head_dim × (n+1)/2.
		{1, 448 + 4*2*2*4*1},
		{3, 448 + 4*2*2*4*2},
		{128, 448 + 4*2*2*4*64.5},
	}
	for _, tt := range tests {
		if got := m.FLOPsPerToken(tt.n); got != tt.want {
			t.Errorf("FLOPsPerToken(%d) = %v, want %v", tt.n, got, tt.want)
		}
	}
	// An encoder's token attends to all n tokens of its sequence.
	enc := m
	enc.Encoder = true
	if got, want := enc.FLOPsPerToken(128), 448+4*2*2*4*128.0; got != want {
		t.Errorf("encoder FLOPsPerToken(128) = %v, want %v", got, want)
	}
	// K and V, 2 layers, 1 KV head of 4, 2 bytes each.
	if got := m.KVBytesPerToken(2); got != 32 {
		t.Errorf("KVBytesPerToken(2) = %d, want 32", got)
	}
}

// TestReadModel06B pins the figures docs/performance.md quotes for the 0.6B shape,
// when that model has been generated (make bench-model).
func TestReadModel06B(t *testing.T) {
	path := filepath.Join("..", "models", "qwen3-0.6b-f16.gguf")
	if _, err := os.Stat(path); err != nil {
		t.Skip("models/qwen3-0.6b-f16.gguf not generated (make bench-model)")
	}
	m, err := ReadModel(path)
	if err != nil {
		t.Fatal(err)
	}
	// Per layer: q 1024×2048, k and v 1024×1024, o 2048×1024, gate and up
	// 1024×3072, down 3072×1024, plus q_norm/k_norm (1-D, excluded).
	perLayer := int64(1024*2048 + 2*1024*1024 + 2048*1024 + 3*1024*3072)
	if m.LinearParams != 28*perLayer || m.Layers != 28 || m.HeadDim != 128 || m.KVHeads != 8 {
		t.Errorf("0.6B shape: %+v; want 28 layers of %d matrix weights, head_dim 128, 8 KV heads", m, perLayer)
	}
	if got := m.KVBytesPerToken(2); got != 114688 {
		t.Errorf("KV bytes per token %d, want 114688 (112 KiB)", got)
	}
}

// TestReadModelEncoder: a BERT GGUF (MiniLM's shape and vocabulary, random weights) is
// read as an encoder, so that its attention counts the whole sequence.
func TestReadModelEncoder(t *testing.T) {
	path := filepath.Join(e2e.RepoRoot(t), "models", "bert-tiny.gguf")
	if _, err := os.Stat(path); err != nil {
		e2e.Require(t, "missing models/bert-tiny.gguf: run `make models` first")
	}
	m, err := ReadModel(path)
	if err != nil {
		t.Fatal(err)
	}
	if m.Arch != "bert" || !m.Encoder {
		t.Errorf("ReadModel(bert-tiny.gguf): arch %q, encoder %v; want bert, true", m.Arch, m.Encoder)
	}
	q, err := ReadModel(writeModel(t))
	if err != nil {
		t.Fatal(err)
	}
	if q.Encoder {
		t.Error("a qwen3 GGUF read as an encoder")
	}
}

func TestReadModelErrors(t *testing.T) {
	if _, err := ReadModel(filepath.Join(t.TempDir(), "missing.gguf")); err == nil {
		t.Error("missing file: no error")
	}
	w := gguf.NewWriter()
	w.AddKV("general.architecture", "qwen3")
	path := filepath.Join(t.TempDir(), "bare.gguf")
	if err := w.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadModel(path); err == nil {
		t.Error("no block_count: no error")
	}
}
