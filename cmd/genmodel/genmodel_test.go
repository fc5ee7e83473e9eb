package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/embed-stack/embed-stack/family"
	"github.com/embed-stack/embed-stack/gguf"
	"github.com/embed-stack/embed-stack/internal/reference"
	"github.com/embed-stack/embed-stack/internal/testrepo"
	"github.com/embed-stack/embed-stack/tokenizer"
)

const miniTokenizer = "testdata/tokenizer-mini.json"

func TestLoadVocab(t *testing.T) {
	v, err := loadVocab(miniTokenizer)
	if err != nil {
		t.Fatal(err)
	}
	wantTokens := []string{"a", "b", "ab", "Ġ", "Ġa", "c", "<|endoftext|>", "<think>", "<|im_start|>"}
	wantTypes := []int32{1, 1, 1, 1, 1, 1, 3, 4, 3}
	wantMerges := []string{"a b", "Ġ a"} // one written as a pair, one as a string
	if !reflect.DeepEqual(v.tokens, wantTokens) {
		t.Errorf("tokens = %q, want %q", v.tokens, wantTokens)
	}
	if !reflect.DeepEqual(v.types, wantTypes) {
		t.Errorf("types = %v, want %v", v.types, wantTypes)
	}
	if !reflect.DeepEqual(v.merges, wantMerges) {
		t.Errorf("merges = %q, want %q", v.merges, wantMerges)
	}
	if v.eosID != 6 {
		t.Errorf("eos id = %d, want 6", v.eosID)
	}
}

func TestLoadVocabErrors(t *testing.T) {
	doc := func(vocab, merges, added string) string {
		return fmt.Sprintf(`{"added_tokens": [%s], "model": {"type": "BPE", "vocab": {%s}, "merges": [%s]}}`, added, vocab, merges)
	}
	eos := `{"id": 2, "content": "<|endoftext|>", "special": true}`
	tests := []struct {
		name, json, want string
	}{
		{"gap", doc(`"a": 0, "b": 1`, ``, `{"id": 3, "content": "<|endoftext|>", "special": true}`), "no token has id 2; ids must run from 0 to 3 without gaps"},
		{"duplicate id", doc(`"a": 0, "b": 0`, ``, eos), "model.vocab holds id 0 twice"},
		{"added clash", doc(`"a": 0, "b": 1`, ``, eos+`, {"id": 1, "content": "<x>", "special": false}`), `added token "<x>" has id 1, which already belongs to "b"`},
		{"no eos", doc(`"a": 0, "b": 1`, ``, `{"id": 2, "content": "<eos>", "special": true}`), `no added token "<|endoftext|>"`},
		{"negative id", doc(`"a": -1`, ``, eos), `model.vocab token "a" has id -1`},
		{"huge id", doc(`"a": 0`, ``, `{"id": 99999999, "content": "<|endoftext|>", "special": true}`), "has id 99999999"},
		{"merge without space", doc(`"a": 0, "b": 1`, `"ab"`, eos), `merge 0: "ab" is not of the form "a b"`},
		{"merge leading space", doc(`"a": 0, "b": 1`, `" ab"`, eos), `merge 0: " ab" is not of the form`},
		{"merge triple", doc(`"a": 0, "b": 1`, `["a", "b"], ["a", "b", "c"]`, eos), `merge 1: ["a", "b", "c"] is not a pair`},
		{"merge with space", doc(`"a": 0, "b": 1`, `["a b", "c"]`, eos), `merge 0: ["a b", "c"] holds a space`},
		{"merge number", doc(`"a": 0, "b": 1`, `7`, eos), "merge 0: 7 is neither a string nor a pair"},
		{"not bpe", `{"model": {"type": "Unigram", "vocab": {}}}`, `model.type is "Unigram", want "BPE"`},
		{"empty", doc(``, ``, ``), "the vocabulary is empty"},
		{"not json", `{"model": `, "unexpected end of JSON input"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "tokenizer.json")
			if err := os.WriteFile(p, []byte(tt.json), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := loadVocab(p)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("loadVocab error = %v, want one containing %q", err, tt.want)
			}
		})
	}
	if _, err := loadVocab(filepath.Join(t.TempDir(), "none.json")); err == nil || !strings.Contains(err.Error(), "scripts/fetch-tokenizer.sh") {
		t.Errorf("missing tokenizer error %v should point at scripts/fetch-tokenizer.sh", err)
	}
}

func miniOptions(t *testing.T, typ gguf.GGMLType, seed uint64) options {
	t.Helper()
	v, err := loadVocab(miniTokenizer)
	if err != nil {
		t.Fatal(err)
	}
	return options{shape: shapes["tiny"], typ: typ, seed: seed, name: "test-model", vocab: v}
}

func generateTemp(t *testing.T, o options) (string, summary) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "sub", "dir", "m.gguf") // parent dirs are created
	sum, err := generate(p, o)
	if err != nil {
		t.Fatal(err)
	}
	return p, sum
}

// TestMetadata pins every key with the exact GGUF value type llama.cpp's loader
// requires: it rejects, say, an int32 block count or a float64 epsilon.
func TestMetadata(t *testing.T) {
	p, _ := generateTemp(t, miniOptions(t, gguf.TypeF16, 1))
	f, err := gguf.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := []struct {
		key string
		val any
	}{
		{"general.architecture", "qwen3"},
		{"general.name", "test-model"},
		{"general.file_type", uint32(1)},
		{"qwen3.context_length", uint32(32768)},
		{"qwen3.embedding_length", uint32(64)},
		{"qwen3.block_count", uint32(2)},
		{"qwen3.feed_forward_length", uint32(192)},
		{"qwen3.attention.head_count", uint32(4)},
		{"qwen3.attention.head_count_kv", uint32(2)},
		{"qwen3.attention.key_length", uint32(16)},
		{"qwen3.attention.value_length", uint32(16)},
		{"qwen3.rope.freq_base", float32(1e6)},
		{"qwen3.attention.layer_norm_rms_epsilon", float32(1e-6)},
		{"qwen3.pooling_type", uint32(3)},
		{"tokenizer.ggml.model", "gpt2"},
		{"tokenizer.ggml.pre", "qwen2"},
		{"tokenizer.ggml.tokens", []string{"a", "b", "ab", "Ġ", "Ġa", "c", "<|endoftext|>", "<think>", "<|im_start|>"}},
		{"tokenizer.ggml.token_type", []int32{1, 1, 1, 1, 1, 1, 3, 4, 3}},
		{"tokenizer.ggml.merges", []string{"a b", "Ġ a"}},
		{"tokenizer.ggml.eos_token_id", uint32(6)},
		{"tokenizer.ggml.padding_token_id", uint32(6)},
		{"tokenizer.ggml.bos_token_id", uint32(6)},
		{"tokenizer.ggml.add_bos_token", false},
		{"tokenizer.ggml.add_eos_token", true},
	}
	var wantKeys []string
	for _, kv := range want {
		wantKeys = append(wantKeys, kv.key)
		got, ok := f.Get(kv.key)
		if !ok {
			t.Errorf("key %q missing", kv.key)
			continue
		}
		if !reflect.DeepEqual(got, kv.val) {
			t.Errorf("%s = %#v (%T), want %#v (%T)", kv.key, got, got, kv.val, kv.val)
		}
	}
	if !reflect.DeepEqual(f.Keys(), wantKeys) {
		t.Errorf("keys = %q\nwant %q", f.Keys(), wantKeys)
	}
}

func TestTensors(t *testing.T) {
	for _, typ := range []gguf.GGMLType{gguf.TypeF16, gguf.TypeF32, gguf.TypeBF16, gguf.TypeQ8_0} {
		t.Run(typ.String(), func(t *testing.T) {
			p, sum := generateTemp(t, miniOptions(t, typ, 1))
			f, err := gguf.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			mat, vec := typ, gguf.TypeF32
			type want struct {
				name string
				typ  gguf.GGMLType
				dims []uint64
			}
			wants := []want{{"token_embd.weight", mat, []uint64{64, 9}}}
			for l := range 2 {
				p := fmt.Sprintf("blk.%d.", l)
				wants = append(wants,
					want{p + "attn_norm.weight", vec, []uint64{64}},
					want{p + "attn_q.weight", mat, []uint64{64, 64}},
					want{p + "attn_k.weight", mat, []uint64{64, 32}},
					want{p + "attn_v.weight", mat, []uint64{64, 32}},
					want{p + "attn_output.weight", mat, []uint64{64, 64}},
					want{p + "attn_q_norm.weight", vec, []uint64{16}},
					want{p + "attn_k_norm.weight", vec, []uint64{16}},
					want{p + "ffn_norm.weight", vec, []uint64{64}},
					want{p + "ffn_gate.weight", mat, []uint64{64, 192}},
					want{p + "ffn_up.weight", mat, []uint64{64, 192}},
					want{p + "ffn_down.weight", mat, []uint64{192, 64}},
				)
			}
			wants = append(wants, want{"output_norm.weight", vec, []uint64{64}})
			got := f.Tensors()
			if len(got) != len(wants) || sum.tensors != len(wants) {
				t.Fatalf("%d tensors (summary says %d), want %d", len(got), sum.tensors, len(wants))
			}
			var params uint64
			for i, w := range wants {
				if got[i].Name != w.name || got[i].Type != w.typ || !reflect.DeepEqual(got[i].Dims, w.dims) {
					t.Errorf("tensor %d = %s %s %v, want %s %s %v", i, got[i].Name, got[i].Type, got[i].Dims, w.name, w.typ, w.dims)
				}
				params += got[i].Elements()
			}
			if sum.parameters != params {
				t.Errorf("summary reports %d parameters, the file holds %d", sum.parameters, params)
			}
			if ft, _ := f.Uint32("general.file_type"); ft != fileType[typ] {
				t.Errorf("general.file_type = %d, want %d", ft, fileType[typ])
			}
			if _, ok := f.Get("general.quantization_version"); ok != (typ == gguf.TypeQ8_0) {
				t.Errorf("general.quantization_version present = %v, want it only for Q8_0", ok)
			}
		})
	}
}

// TestWeightStatistics checks the initialisation scales the model relies on to keep
// activations healthy, with tolerances of several standard errors.
func TestWeightStatistics(t *testing.T) {
	p, _ := generateTemp(t, miniOptions(t, gguf.TypeF32, 1))
	f, err := gguf.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tests := []struct {
		name      string
		mean, std float64
		tol       float64
	}{
		{"token_embd.weight", 0, embeddingStd, 0.1},
		{"blk.0.attn_q.weight", 0, matrixGain / 8, 0.01},         // fan-in 64
		{"blk.1.ffn_down.weight", 0, matrixGain / 13.8564, 0.01}, // fan-in 192
		{"blk.1.ffn_up.weight", 0, matrixGain / 8, 0.01},
		{"blk.0.attn_norm.weight", 1, normNoise, 0.05},
	}
	for _, tt := range tests {
		vals, err := f.TensorFloat64(tt.name)
		if err != nil {
			t.Fatal(err)
		}
		var s, ss float64
		for _, v := range vals {
			s += v
		}
		mean := s / float64(len(vals))
		for _, v := range vals {
			ss += (v - mean) * (v - mean)
		}
		std := math.Sqrt(ss / float64(len(vals)))
		if math.Abs(mean-tt.mean) > tt.tol || math.Abs(std-tt.std) > tt.tol {
			t.Errorf("%s: mean %.4f std %.4f, want %.4f and %.4f (±%g)", tt.name, mean, std, tt.mean, tt.std, tt.tol)
		}
	}
}

func TestDeterministic(t *testing.T) {
	a, _ := generateTemp(t, miniOptions(t, gguf.TypeQ8_0, 7))
	b, _ := generateTemp(t, miniOptions(t, gguf.TypeQ8_0, 7))
	c, _ := generateTemp(t, miniOptions(t, gguf.TypeQ8_0, 8))
	ab, _ := os.ReadFile(a)
	bb, _ := os.ReadFile(b)
	cb, _ := os.ReadFile(c)
	if !bytes.Equal(ab, bb) {
		t.Error("the same seed gave different files")
	}
	if len(ab) != len(cb) || bytes.Equal(ab, cb) {
		t.Errorf("seeds 7 and 8: sizes %d and %d, equal bytes %v; want same size, different weights", len(ab), len(cb), bytes.Equal(ab, cb))
	}
}

// TestModelRuns loads a generated model into the reference forward pass: it must
// load, and different inputs must give clearly different vectors.
func TestModelRuns(t *testing.T) {
	p, _ := generateTemp(t, miniOptions(t, gguf.TypeF16, 1))
	m, err := reference.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if m.Dim() != 64 {
		t.Fatalf("Dim() = %d, want 64", m.Dim())
	}
	inputs := [][]int32{{0}, {1}, {0, 1, 6}, {1, 0, 6}, {2, 5, 5, 6}}
	var vecs [][]float64
	for _, in := range inputs {
		v, err := m.LastToken(in)
		if err != nil {
			t.Fatal(err)
		}
		vecs = append(vecs, v)
	}
	for i := range vecs {
		for j := i + 1; j < len(vecs); j++ {
			if c := cosine(vecs[i], vecs[j]); c > 0.99 {
				t.Errorf("inputs %v and %v give cosine %.4f, want < 0.99", inputs[i], inputs[j], c)
			}
		}
	}
}

// TestShapes pins the two shapes' hyperparameters, and the 0.6b parameter count
// (Qwen3-0.6B: 0.44B non-embedding, 151669 x 1024 tied embedding) without writing it.
func TestShapes(t *testing.T) {
	want := map[string]shape{
		"tiny": {name: "tiny", hidden: 64, layers: 2, heads: 4, kvHeads: 2, headDim: 16, ffn: 192, context: 32768},
		"0.6b": {name: "0.6b", hidden: 1024, layers: 28, heads: 16, kvHeads: 8, headDim: 128, ffn: 3072, context: 32768},
	}
	if !reflect.DeepEqual(shapes, want) {
		t.Fatalf("shapes = %+v, want %+v", shapes, want)
	}
	v := &vocab{tokens: make([]string, 151669), types: make([]int32, 151669), eosID: 151643}
	params, tensors, err := build(gguf.NewWriter(), options{shape: shapes["0.6b"], typ: gguf.TypeF16, vocab: v})
	if err != nil {
		t.Fatal(err)
	}
	if params != 595_776_512 || tensors != 310 {
		t.Errorf("0.6b: %d parameters in %d tensors, want 595776512 in 310", params, tensors)
	}
}

// TestBertShapes pins the encoder shapes and BERT-large's parameter count
// (bert-large-uncased's 335M: 334,092,288 with its 30522-token vocabulary, the
// pooler left out as llama.cpp's converter leaves it) without writing the file.
func TestBertShapes(t *testing.T) {
	want := map[string][5]uint32{ // hidden, layers, heads, ffn, context
		"tiny": {64, 2, 4, 128, 512}, "minilm": {384, 6, 12, 1536, 512}, "large": {1024, 24, 16, 4096, 512},
	}
	if len(bertShapes) != len(want) {
		t.Errorf("%d encoder shapes, want %d", len(bertShapes), len(want))
	}
	for name, w := range want {
		s, ok := bertShapes[name]
		if got := [5]uint32{s.hidden, s.layers, s.heads, s.ffn, s.context}; !ok || s.name != name || got != w {
			t.Errorf("bertShapes[%q] = %+v, want hidden, layers, heads, ffn, context %v", name, s, w)
		}
	}
	var params uint64
	ts := bertTensors(bertShapes["large"], 30522)
	for _, bt := range ts {
		n := uint64(1)
		for _, d := range bt.dims {
			n *= d
		}
		params += n
	}
	if params != 334_092_288 || len(ts) != 389 {
		t.Errorf("large: %d parameters in %d tensors, want 334092288 in 389", params, len(ts))
	}
}

func TestRunFlags(t *testing.T) {
	out := filepath.Join(t.TempDir(), "m.gguf")
	tests := []struct {
		name string
		args []string
		want string // in the error, or in stdout on success
	}{
		{"ok", []string{"-tokenizer", miniTokenizer, "-type", "q8_0", "-seed", "3", "-out", out}, "wrote " + out},
		{"no out", []string{"-tokenizer", miniTokenizer}, "-out is required"},
		{"bad shape", []string{"-shape", "7b", "-out", out}, `-shape "7b" is unknown; use 0.6b or tiny`},
		{"bad type", []string{"-type", "q4_0", "-out", out}, `-type "q4_0" is not supported`},
		{"stray arg", []string{"-out", out, "extra"}, "unexpected arguments"},
		{"no tokenizer", []string{"-tokenizer", filepath.Join(t.TempDir(), "x.json"), "-out", out}, "fetch-tokenizer.sh"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(tt.args, &stdout, &stderr)
			if tt.name == "ok" {
				if err != nil || !strings.Contains(stdout.String(), tt.want) {
					t.Fatalf("run: %v, stdout %q", err, stdout.String())
				}
				f, err := gguf.Open(out)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				if name, _ := f.String("general.name"); name != "qwen3-tiny-random-seed3" {
					t.Errorf("default general.name = %q", name)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("run error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// TestRealTokenizer checks the vocabulary built from the real Qwen3 tokenizer.json,
// when scripts/fetch-tokenizer.sh has fetched it.
func TestRealTokenizer(t *testing.T) {
	path := filepath.Join(testrepo.RootOf(t), ".cache", "qwen3", "tokenizer.json")
	if _, err := os.Stat(path); err != nil {
		t.Skipf("%s not present; run scripts/fetch-tokenizer.sh", path)
	}
	v, err := loadVocab(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(v.tokens) != 151669 || len(v.merges) != 151387 || v.eosID != 151643 {
		t.Fatalf("%d tokens, %d merges, eos %d; want 151669, 151387, 151643", len(v.tokens), len(v.merges), v.eosID)
	}
	counts := map[int32]int{}
	for _, typ := range v.types {
		counts[typ]++
	}
	if want := map[int32]int{tokenNormal: 151643, tokenControl: 14, tokenUserDefined: 12}; !reflect.DeepEqual(counts, want) {
		t.Errorf("token type counts %v, want %v", counts, want)
	}
	for id, tok := range map[int]string{0: "!", 151643: "<|endoftext|>", 151644: "<|im_start|>", 151668: "</think>"} {
		if v.tokens[id] != tok {
			t.Errorf("token %d = %q, want %q", id, v.tokens[id], tok)
		}
	}
	if v.types[151667] != tokenUserDefined || v.types[151645] != tokenControl {
		t.Errorf("<think> type %d, <|im_end|> type %d; want 4 and 3", v.types[151667], v.types[151645])
	}
	if v.merges[0] != "Ġ Ġ" {
		t.Errorf("first merge %q, want %q", v.merges[0], "Ġ Ġ")
	}
}

func cosine(a, b []float64) float64 {
	var ab, aa, bb float64
	for i := range a {
		ab += a[i] * b[i]
		aa += a[i] * a[i]
		bb += b[i] * b[i]
	}
	return ab / math.Sqrt(aa*bb)
}

// TestRerankLayout checks -task rerank: llama.cpp's layout of a converted
// Qwen3-Reranker (pooling type rank, labels yes and no, the rerank template, a
// two-row cls.output.weight) and a head whose scores P(yes) spread over (0, 1).
func TestRerankLayout(t *testing.T) {
	o := miniOptions(t, gguf.TypeQ8_0, 1)
	o.rerank = true
	p, sum := generateTemp(t, o)
	f, err := gguf.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if s, err := f.Shape(); err != nil || s.Pooling != gguf.PoolingRank || !s.HasClassifier {
		t.Errorf("pooling %v, classifier head %t (%v); want rank pooling and a head", s.Pooling, s.HasClassifier, err)
	}
	if v, _ := f.Strings("qwen3.classifier.output_labels"); !reflect.DeepEqual(v, []string{"yes", "no"}) {
		t.Errorf("classifier.output_labels = %q, want [yes no]", v)
	}
	if v, _ := f.String("tokenizer.chat_template.rerank"); !strings.Contains(v, "<Query>: {query}\n<Document>: {document}<|im_end|>") {
		t.Errorf("tokenizer.chat_template.rerank = %q", v)
	}
	head, ok := f.Tensor("cls.output.weight")
	if !ok || head.Type != gguf.TypeQ8_0 || !reflect.DeepEqual(head.Dims, []uint64{64, 2}) {
		t.Fatalf("cls.output.weight = %+v (present %v), want Q8_0 [64 2]", head, ok)
	}
	if sum.tensors != 25 {
		t.Errorf("%d tensors, want the embedder's 24 and the head", sum.tensors)
	}
	m, err := reference.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	lo, hi := 1.0, 0.0
	for _, in := range [][]int32{{0}, {1}, {0, 1, 6}, {1, 0, 6}, {2, 5, 5, 6}, {4, 4, 3, 2, 1, 0}, {8, 7, 6}, {5, 6}} {
		l, err := m.ClassifierLogits(in)
		if err != nil {
			t.Fatal(err)
		}
		p := 1 / (1 + math.Exp(l[1]-l[0]))
		lo, hi = min(lo, p), max(hi, p)
	}
	if lo > 0.3 || hi < 0.7 || lo < 1e-4 || hi > 1-1e-4 {
		t.Errorf("P(yes) over eight inputs spans [%.4f, %.4f]; want it to reach below 0.3 and above 0.7 without saturating", lo, hi)
	}
}

// TestHFSnapshot: -hf writes the GGUF's tensors, byte for byte, under their
// Hugging Face names with PyTorch-order shapes, and a Qwen3 config of the shape.
func TestHFSnapshot(t *testing.T) {
	o := miniOptions(t, gguf.TypeF16, 3)
	var tensors []tensorSpec
	o.record = &tensors
	p, _ := generateTemp(t, o)
	dir := filepath.Join(t.TempDir(), "hf")
	if err := writeHF(dir, o.shape, len(o.vocab.tokens), tensors); err != nil {
		t.Fatal(err)
	}
	st, err := os.ReadFile(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(st[:8])
	if n%8 != 0 {
		t.Errorf("header length %d is not a multiple of 8", n)
	}
	var header map[string]json.RawMessage
	if err := json.Unmarshal(st[8:8+n], &header); err != nil {
		t.Fatal(err)
	}
	data := st[8+n:]
	f, err := gguf.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if len(header) != len(f.Tensors())+1 {
		t.Errorf("%d safetensors entries, want the GGUF's %d tensors and __metadata__", len(header), len(f.Tensors()))
	}
	for _, ti := range f.Tensors() {
		name, err := hfName(ti.Name)
		if err != nil {
			t.Fatal(err)
		}
		var e struct {
			Dtype       string    `json:"dtype"`
			Shape       []uint64  `json:"shape"`
			DataOffsets [2]uint64 `json:"data_offsets"`
		}
		if err := json.Unmarshal(header[name], &e); err != nil {
			t.Fatalf("%s (%s): %v", name, ti.Name, err)
		}
		want := slices.Clone(ti.Dims)
		slices.Reverse(want)
		wantType := map[gguf.GGMLType]string{gguf.TypeF16: "F16", gguf.TypeF32: "F32"}[ti.Type]
		if e.Dtype != wantType || !slices.Equal(e.Shape, want) || e.DataOffsets[1]-e.DataOffsets[0] != ti.Bytes() {
			t.Errorf("%s: %+v, want %s %v of %d bytes", name, e, wantType, want, ti.Bytes())
			continue
		}
		raw, err := io.ReadAll(f.TensorReader(ti))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(raw, data[e.DataOffsets[0]:e.DataOffsets[1]]) {
			t.Errorf("%s: data differs from the GGUF's %s", name, ti.Name)
		}
	}
	var cfg map[string]any
	b, _ := os.ReadFile(filepath.Join(dir, "config.json"))
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]float64{"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 192, "rope_theta": 1e6, "rms_norm_eps": 1e-6, "vocab_size": float64(len(o.vocab.tokens))} {
		if cfg[k] != v {
			t.Errorf("config %s = %v, want %v", k, cfg[k], v)
		}
	}
	if cfg["model_type"] != "qwen3" || cfg["torch_dtype"] != "float16" {
		t.Errorf("config = %v", cfg)
	}
	if err := run([]string{"-tokenizer", miniTokenizer, "-type", "q8_0", "-out", filepath.Join(t.TempDir(), "q.gguf"), "-hf", dir}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "-hf needs -type f16 or f32") {
		t.Errorf("-hf with q8_0: %v", err)
	}
}

// TestBertWordPiece writes a tiny BERT with the real MiniLM vocabulary and checks the
// keys llama.cpp's converter writes for BertModel (as in llama.cpp's own
// ggml-vocab-bert-bge.gguf), every tensor llama.cpp's bert graph creates, and that
// package tokenizer reads the vocabulary back as HF's tokenizer (uncased, [CLS]/[SEP]).
func TestBertWordPiece(t *testing.T) {
	tokPath := filepath.Join(testrepo.RootOf(t), ".cache", "minilm", "tokenizer.json")
	if _, err := os.Stat(tokPath); err != nil {
		t.Skipf("%s is missing; run scripts/fetch-encoders.sh", tokPath)
	}
	out := filepath.Join(t.TempDir(), "bert.gguf")
	var stdout, stderr bytes.Buffer
	if err := run([]string{"-arch", "bert", "-tokenizer", tokPath, "-out", out}, &stdout, &stderr); err != nil {
		t.Fatalf("%v: %s", err, stderr.String())
	}
	f, err := gguf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for key, want := range map[string]any{
		"general.architecture": "bert", "bert.pooling_type": uint32(poolingMean), "bert.attention.causal": false,
		"bert.context_length": uint32(512), "bert.embedding_length": uint32(64), "bert.block_count": uint32(2),
		"tokenizer.ggml.model": "bert", "tokenizer.ggml.pre": "bert-bge", "tokenizer.ggml.token_type_count": uint32(2),
		"tokenizer.ggml.unknown_token_id": uint32(100), "tokenizer.ggml.cls_token_id": uint32(101),
		"tokenizer.ggml.seperator_token_id": uint32(102), "tokenizer.ggml.padding_token_id": uint32(0),
		"tokenizer.ggml.mask_token_id": uint32(103), "bert.attention.layer_norm_epsilon": float32(1e-12),
	} {
		if got, ok := f.Get(key); !ok || !reflect.DeepEqual(got, want) {
			t.Errorf("%s = %v (%T), want %v (%T)", key, got, got, want, want)
		}
	}
	toks, _ := f.Strings("tokenizer.ggml.tokens")
	if len(toks) != 30522 || toks[101] != "[CLS]" || toks[1996] != "\u2581the" || toks[2015] != "s" {
		t.Errorf("tokens: %d, [101] %q [1996] %q [2015] %q; want 30522, [CLS], ▁the, s (from ##s)", len(toks), toks[101], toks[1996], toks[2015])
	}
	tok, err := tokenizer.FromGGUF(out)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tok.Encode("Hello, World! café"), []int32{7592, 1010, 2088, 999, 7668}; !slices.Equal(got, want) {
		t.Errorf("Encode = %v, want HF's %v", got, want)
	}
	if sp := tok.Special(); sp.CLS != 101 || sp.SEP != 102 || sp.UNK != 100 || sp.PAD != 0 || !sp.AddBOS || !sp.AddSEP || sp.AddEOS {
		t.Errorf("Special() = %+v, want CLS 101, SEP 102, UNK 100, PAD 0, AddBOS and AddSEP but not AddEOS", sp)
	}
	if n := len(f.Tensors()); n != 5+16*2 {
		t.Errorf("%d tensors, want 37 (5 embedding tensors, 16 per layer)", n)
	}
	for _, ti := range f.Tensors() {
		wantF32 := len(ti.Dims) == 1 || ti.Name == "position_embd.weight" || ti.Name == "token_types.weight"
		if (ti.Type == gguf.TypeF32) != wantF32 {
			t.Errorf("tensor %s is %s", ti.Name, ti.Type)
		}
	}
}

// TestCrossEncoderLayouts checks -task rerank for every encoder architecture:
// bert, neo-bert and jina-bert-v2 get the head llama.cpp loads for them (the
// pooler and a one-output classifier; jina-reranker-v1's one-row cls.weight),
// with pooling type rank, which family.Arch.CrossEncoderHead accepts as the
// layout of family.RankHead; the others are refused, as llama.cpp loads no head
// for them.
func TestCrossEncoderLayouts(t *testing.T) {
	tokPath := filepath.Join(testrepo.RootOf(t), ".cache", "minilm", "tokenizer.json")
	if _, err := os.Stat(tokPath); err != nil {
		t.Skipf("%s is missing; run scripts/fetch-encoders.sh", tokPath)
	}
	for _, tt := range []struct {
		arch    string
		head    family.Head
		tensors map[string][]uint64 // the head's
		wantErr string
	}{
		{arch: "bert", head: family.Head{Dense: true, DenseRows: 64, Out: true},
			tensors: map[string][]uint64{"cls.weight": {64, 64}, "cls.bias": {64}, "cls.output.weight": {64, 1}, "cls.output.bias": {1}}},
		{arch: "neo-bert", head: family.Head{Dense: true, DenseRows: 64, Out: true},
			tensors: map[string][]uint64{"cls.weight": {64, 64}, "cls.bias": {64}, "cls.output.weight": {64, 1}, "cls.output.bias": {1}}},
		{arch: "jina-bert-v2", head: family.Head{Dense: true, DenseRows: 1},
			tensors: map[string][]uint64{"cls.weight": {64, 1}, "cls.bias": {1}}},
		{arch: "nomic-bert", wantErr: "-task rerank is for -arch qwen3, or -arch bert, neo-bert or jina-bert-v2 with random weights (a cross-encoder)"},
	} {
		t.Run(tt.arch, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "m.gguf")
			var stdout, stderr bytes.Buffer
			err := run([]string{"-arch", tt.arch, "-task", "rerank", "-tokenizer", tokPath, "-out", out}, &stdout, &stderr)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("%v: %s", err, stderr.String())
			}
			s, err := gguf.ReadShape(out)
			if err != nil {
				t.Fatal(err)
			}
			a, _ := family.Lookup(tt.arch)
			if head, err := a.CrossEncoderHead(s); err != nil || head != tt.head || s.Pooling != gguf.PoolingRank || !a.HasRankHead(s) {
				t.Errorf("head %+v, %v, pooling %s; want %+v and rank pooling", head, err, s.Pooling, tt.head)
			}
			f, err := gguf.Open(out)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			got := map[string][]uint64{}
			for _, ti := range f.Tensors() {
				if strings.HasPrefix(ti.Name, "cls.") {
					got[ti.Name] = ti.Dims
				}
			}
			if !reflect.DeepEqual(got, tt.tensors) {
				t.Errorf("head tensors %v, want %v", got, tt.tensors)
			}
			if name, _ := f.String("general.name"); name != tt.arch+"-reranker-tiny-random-seed1" {
				t.Errorf("general.name = %q", name)
			}
		})
	}
}
