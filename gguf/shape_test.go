package gguf

import (
	"errors"
	"io/fs"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// shapeFile writes a header of kv (in the given order) and, when vocab > 0, a
// token-embedding table of vocab rows of 4 (F32, zeros), and reads its Shape.
func shapeFile(t *testing.T, vocab uint64, kv ...any) (Shape, error) {
	t.Helper()
	w := NewWriter()
	for i := 0; i < len(kv); i += 2 {
		w.AddKV(kv[i].(string), kv[i+1])
	}
	if vocab > 0 {
		w.AddTensor(TensorTokenEmbedding, TypeF32, []uint64{4, vocab}, bytesFill(make([]byte, 16*vocab)))
	}
	f, _ := writeAndOpen(t, w)
	return f.Shape()
}

// qwen3_06B is the header of Qwen3-Embedding-0.6B as llama.cpp's converter writes it
// (the keys Shape reads).
var qwen3_06B = []any{
	"general.architecture", "qwen3",
	"general.name", "Qwen3 Embedding 0.6B",
	"qwen3.context_length", uint32(32768),
	"qwen3.embedding_length", uint32(1024),
	"qwen3.feed_forward_length", uint32(3072),
	"qwen3.block_count", uint32(28),
	"qwen3.attention.head_count", uint32(16),
	"qwen3.attention.head_count_kv", uint32(8),
	"qwen3.attention.key_length", uint32(128),
	"qwen3.attention.value_length", uint32(128),
	"qwen3.attention.layer_norm_rms_epsilon", float32(1e-6),
	"qwen3.rope.freq_base", float32(1e6),
	"qwen3.pooling_type", uint32(3),
	"tokenizer.ggml.model", "gpt2",
	"tokenizer.ggml.eos_token_id", uint32(151643),
}

func TestShapeQwen3(t *testing.T) {
	s, err := shapeFile(t, 151669, qwen3_06B...)
	if err != nil {
		t.Fatal(err)
	}
	want := Shape{
		Architecture: "qwen3", Name: "Qwen3 Embedding 0.6B",
		ContextLength: 32768, EmbeddingLength: 1024, FeedForwardLength: 3072, Layers: 28,
		Heads: 16, KVHeads: 8, KeyLength: 128, ValueLength: 128, RMSEpsilon: 1e-6,
		RopeDimensions: 128, RopeFreqBase: 1e6,
		Pooling: PoolingLast, Vocab: VocabBPE, VocabSize: 151669, EOS: 151643,
	}
	want.present = s.present
	if !reflect.DeepEqual(s, want) {
		t.Fatalf("Shape =\n%+v\nwant\n%+v", s, want)
	}
	if got := s.KVBytesPerToken(2); got != 114688 {
		t.Errorf("KVBytesPerToken(2) = %d, want 114688 (28 layers x 8 KV heads x (128 + 128) x 2 bytes)", got)
	}
	for _, k := range []string{KeyContextLength, KeyBlockCount, KeyHeadCountKV, KeyKeyLength, KeyPoolingType} {
		if !s.Has(k) {
			t.Errorf("Has(%q) = false", k)
		}
	}
	if s.Has(KeyRopeDimensions) || s.Has(KeyClassifierLabels) {
		t.Error("Has is true for a key the header lacks")
	}
	if err := s.Require(KeyBlockCount, KeyHeadCount, KeyEmbeddingLength, KeyRMSEpsilon); err != nil {
		t.Errorf("Require: %v", err)
	}
	if got := s.Key(KeyBlockCount); got != "qwen3.block_count" {
		t.Errorf("Key = %q", got)
	}
}

// TestShapeDefaults: absent keys take llama.cpp's defaults (load_hparams), which
// depend on the counts present; Require names what is missing.
func TestShapeDefaults(t *testing.T) {
	tests := []struct {
		name string
		kv   []any
		want Shape
	}{
		{"architecture only", []any{"general.architecture", "bert"},
			Shape{Architecture: "bert", Pooling: PoolingUnspecified, EOS: -1, RopeFreqBase: 10000}},
		{"heads split the width; no GQA", []any{"general.architecture", "bert", "bert.embedding_length", uint32(384), "bert.attention.head_count", uint32(12),
			"bert.pooling_type", uint32(1), "tokenizer.ggml.model", "bert"},
			Shape{Architecture: "bert", EmbeddingLength: 384, Heads: 12, KVHeads: 12, KeyLength: 32, ValueLength: 32, RopeDimensions: 32,
				RopeFreqBase: 10000, Pooling: PoolingMean, Vocab: VocabWPM, EOS: -1}},
		// The value width defaults to the width over the heads, as llama.cpp's does,
		// not to the key width; the RoPE dimensions to the key width.
		{"key length alone", []any{"general.architecture", "x", "x.embedding_length", uint32(64), "x.attention.head_count", uint32(4), "x.attention.key_length", uint32(32)},
			Shape{Architecture: "x", EmbeddingLength: 64, Heads: 4, KVHeads: 4, KeyLength: 32, ValueLength: 16, RopeDimensions: 32,
				RopeFreqBase: 10000, Pooling: PoolingUnspecified, EOS: -1}},
		{"per-layer head counts: the largest", []any{"general.architecture", "x", "x.embedding_length", uint32(64),
			"x.attention.head_count", []int32{4, 8, 4}, "x.attention.head_count_kv", []uint32{1, 2, 2}},
			Shape{Architecture: "x", EmbeddingLength: 64, Heads: 8, KVHeads: 2, KeyLength: 8, ValueLength: 8, RopeDimensions: 8,
				RopeFreqBase: 10000, Pooling: PoolingUnspecified, EOS: -1}},
		{"no_vocab", []any{"general.architecture", "x", "tokenizer.ggml.model", "no_vocab", "x.pooling_type", uint32(4),
			"x.classifier.output_labels", []string{"yes", "no"}},
			Shape{Architecture: "x", Pooling: PoolingRank, Vocab: VocabNone, ClassifierLabels: []string{"yes", "no"}, RopeFreqBase: 10000, EOS: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := shapeFile(t, 0, tt.kv...)
			if err != nil {
				t.Fatal(err)
			}
			tt.want.present = s.present
			if !reflect.DeepEqual(s, tt.want) {
				t.Fatalf("Shape =\n%+v\nwant\n%+v", s, tt.want)
			}
		})
	}

	s, err := shapeFile(t, 0, "general.architecture", "bert", "bert.embedding_length", uint32(384))
	if err != nil {
		t.Fatal(err)
	}
	err = s.Require(KeyEmbeddingLength, KeyBlockCount, KeyHeadCount)
	if !errors.Is(err, ErrNotFound) || err.Error() != `gguf: key "bert.block_count": not found` {
		t.Errorf("Require = %v, want the first missing key, bert.block_count, not found", err)
	}
	if err := s.Require("block_cnt"); err == nil || !strings.Contains(err.Error(), `does not read key "block_cnt"`) {
		t.Errorf("Require of a key Shape does not read: %v", err)
	}
}

func TestShapeErrors(t *testing.T) {
	tests := []struct {
		name string
		kv   []any
		want string
	}{
		{"no architecture", []any{"qwen3.block_count", uint32(2)}, `gguf: key "general.architecture": not found`},
		{"count as a string", []any{"general.architecture", "qwen3", "qwen3.block_count", "28"}, `gguf: key "qwen3.block_count" is string, want an unsigned integer`},
		{"negative per-layer count", []any{"general.architecture", "qwen3", "qwen3.attention.head_count", []int32{4, -1}}, `gguf: key "qwen3.attention.head_count" holds -1, want counts of zero or more`},
		{"epsilon as an integer", []any{"general.architecture", "qwen3", "qwen3.attention.layer_norm_rms_epsilon", uint32(1)}, `key "qwen3.attention.layer_norm_rms_epsilon" is uint32, want float32 or float64`},
		{"labels not strings", []any{"general.architecture", "qwen3", "qwen3.classifier.output_labels", []uint32{1, 2}}, `want string array`},
		{"pooling as a string", []any{"general.architecture", "qwen3", "qwen3.pooling_type", "last"}, `key "qwen3.pooling_type" is string`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := shapeFile(t, 0, tt.kv...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
	if _, err := ReadShape(filepath.Join(t.TempDir(), "missing.gguf")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadShape of a missing file: %v, want fs.ErrNotExist", err)
	}
}

func TestPoolingString(t *testing.T) {
	for p, want := range map[Pooling]string{PoolingUnspecified: "unspecified", PoolingNone: "none", PoolingMean: "mean",
		PoolingCLS: "cls", PoolingLast: "last", PoolingRank: "rank", 5: "unknown"} {
		if got := p.String(); got != want {
			t.Errorf("Pooling(%d).String() = %q, want %q", int32(p), got, want)
		}
	}
	if !VocabUGM.Known() || VocabType("sentencepiece").Known() {
		t.Error("VocabType.Known")
	}
}

func TestParsePooling(t *testing.T) {
	for s, want := range map[string]Pooling{"none": PoolingNone, "mean": PoolingMean, "CLS": PoolingCLS, "last": PoolingLast, "rank": PoolingRank} {
		if got, err := ParsePooling(s); err != nil || got != want {
			t.Errorf("ParsePooling(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"", "unspecified", "unknown", "max", "lasttoken"} {
		if _, err := ParsePooling(s); err == nil || err.Error() != `pooling "`+s+`" is not one of none, mean, cls, last, rank` {
			t.Errorf("ParsePooling(%q): %v", s, err)
		}
	}
}
