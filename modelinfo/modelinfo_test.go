package modelinfo

import (
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/embed-stack/embed-stack/gguf"
	"github.com/embed-stack/embed-stack/internal/testrepo"
	"github.com/embed-stack/embed-stack/tokenizer"
)

// writeFactsGGUF writes a GGUF holding only the metadata Read reads, with kv added,
// and with classifier a classifier head tensor, as llama.cpp's conversion of a
// reranker holds.
func writeFactsGGUF(t *testing.T, kv map[string]any, classifier bool) string {
	t.Helper()
	w := gguf.NewWriter()
	w.AddKV("general.architecture", "qwen3")
	w.AddKV("general.name", "Qwen3 Embedding 0.6B")
	w.AddKV("qwen3.embedding_length", uint32(1024))
	w.AddKV("qwen3.context_length", uint32(32768))
	if _, ok := kv["tokenizer.ggml.eos_token_id"]; !ok {
		w.AddKV("tokenizer.ggml.eos_token_id", uint32(151643))
	}
	for k, v := range kv {
		w.AddKV(k, v)
	}
	if classifier {
		w.AddTensor(gguf.TensorClassifier, gguf.TypeF32, []uint64{4, 2}, func(out io.Writer) error { _, err := out.Write(make([]byte, 4*2*4)); return err })
	}
	p := filepath.Join(t.TempDir(), "m.gguf")
	if err := w.WriteFile(p); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRead(t *testing.T) {
	base := Facts{Name: "qwen3-embedding-0.6b", Dim: 1024, TrainContext: 32768, EOS: 151643}
	with := func(change func(*Facts)) Facts {
		f := base
		change(&f)
		return f
	}
	tests := []struct {
		name       string
		kv         map[string]any
		classifier bool
		allow      bool
		task       string
		want       Facts
		wantErr    string
	}{
		{name: "last-token pooling", kv: map[string]any{"qwen3.pooling_type": uint32(3)}, want: with(func(f *Facts) { f.Pooling = gguf.PoolingLast })},
		{name: "no pooling declared", want: with(func(f *Facts) { f.Pooling = gguf.PoolingUnspecified })},
		{name: "mean pooling refused", kv: map[string]any{"qwen3.pooling_type": uint32(1)},
			wantErr: "declares pooling type 1 (mean); embed-stack computes last-token (3) pooling, as Qwen3-Embedding uses. Pass --allow-pooling-mismatch"},
		{name: "cls pooling refused", kv: map[string]any{"qwen3.pooling_type": uint32(2)}, wantErr: "declares pooling type 2 (cls)"},
		{name: "mean pooling allowed", kv: map[string]any{"qwen3.pooling_type": uint32(1)}, allow: true,
			want: with(func(f *Facts) { f.Pooling, f.PoolingMismatch = gguf.PoolingMean, true })},
		{name: "rank pooling is a reranker", kv: map[string]any{"qwen3.pooling_type": uint32(4)},
			want: with(func(f *Facts) { f.Pooling, f.Rerank = gguf.PoolingRank, true })},
		{name: "rank pooling served as embeddings", kv: map[string]any{"qwen3.pooling_type": uint32(4)}, task: "embed", wantErr: "declares pooling type 4 (rank)"},
		{name: "a classifier head is a reranker", classifier: true, want: with(func(f *Facts) { f.Pooling, f.Rerank = gguf.PoolingUnspecified, true })},
		{name: "task rerank without a head", kv: map[string]any{"qwen3.pooling_type": uint32(3)}, task: "rerank",
			want: with(func(f *Facts) { f.Pooling, f.Rerank = gguf.PoolingLast, true })},
		{name: "unknown task", task: "classify", wantErr: `--task "classify" is not one of auto, embed, rerank`},
		{name: "other eos id", kv: map[string]any{"tokenizer.ggml.eos_token_id": uint32(151645), "qwen3.pooling_type": uint32(3)},
			want: with(func(f *Facts) { f.Pooling, f.EOS = gguf.PoolingLast, 151645 })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeFactsGGUF(t, tt.kv, tt.classifier)
			got, err := Read(path, Options{Task: tt.task, AllowPoolingMismatch: tt.allow})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.HasPrefix(err.Error(), "model "+path) {
					t.Fatalf("err = %v, want it to name the model and contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Path != path || got.Shape.Architecture != "qwen3" {
				t.Errorf("path %q, shape %+v", got.Path, got.Shape)
			}
			got.Path, got.Shape = "", gguf.Shape{}
			if !reflect.DeepEqual(*got, tt.want) {
				t.Errorf("facts = %+v, want %+v", *got, tt.want)
			}
		})
	}
}

func TestFactsNames(t *testing.T) {
	for _, tt := range []struct {
		f          Facts
		name, task string
		outputs    int
	}{
		{Facts{Name: "qwen3-embedding-0.6b", Dim: 1024}, "qwen3-embedding-0.6b", "embedding", 1024},
		{Facts{Dim: 1024}, "qwen3-embedding", "embedding", 1024},
		{Facts{Dim: 1024, Rerank: true}, "qwen3-reranker", "rerank", 2},
	} {
		if got := tt.f.ServedName(); got != tt.name {
			t.Errorf("%+v: ServedName %q, want %q", tt.f, got, tt.name)
		}
		if got := tt.f.TaskName(); got != tt.task {
			t.Errorf("%+v: TaskName %q, want %q", tt.f, got, tt.task)
		}
		if got := tt.f.Outputs(); got != tt.outputs {
			t.Errorf("%+v: Outputs %d, want %d", tt.f, got, tt.outputs)
		}
	}
	if got := Slug("  Qwen3 Embedding 0.6B (GGUF) "); got != "qwen3-embedding-0.6b-gguf" {
		t.Errorf("Slug = %q", got)
	}
}

// TestKVBytesPerToken: layers x KV heads x (key + value width) x 2 bytes, on the
// generated models; a header without the counts is refused, naming the key.
func TestKVBytesPerToken(t *testing.T) {
	root := testrepo.RootOf(t)
	for _, tt := range []struct {
		model string
		want  int64
	}{
		{"models/tiny.gguf", 2 * 2 * (16 + 16) * 2},
		{"models/qwen3-0.6b-f16.gguf", 28 * 8 * (128 + 128) * 2}, // 112 KiB
	} {
		path := filepath.Join(root, tt.model)
		if _, err := os.Stat(path); err != nil {
			t.Logf("%s absent; skipped", tt.model)
			continue
		}
		f, err := Read(path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		got, err := f.KVBytesPerToken()
		if err != nil || got != tt.want {
			t.Errorf("KVBytesPerToken(%s) = %d, %v; want %d", tt.model, got, err, tt.want)
		}
	}
	path := writeFactsGGUF(t, nil, false)
	f, err := Read(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.KVBytesPerToken(); err == nil || err.Error() != "model "+path+`: gguf: key "qwen3.block_count": not found` {
		t.Errorf("no block count: %v", err)
	}
}

// TestCheckVocabulary: the test models' vocabulary (Qwen3's) holds the control
// tokens at routing's ids; one with two of them swapped is refused, naming the
// token, and a reranker's template tokens are checked for rerankers only.
func TestCheckVocabulary(t *testing.T) {
	if testing.Short() {
		t.Skip("loads Qwen3's vocabulary four times (seconds); make unit runs -short")
	}
	root := testrepo.RootOf(t)
	path := filepath.Join(root, "models", "tiny.gguf")
	if _, err := os.Stat(path); err != nil {
		t.Skip("models/tiny.gguf absent (make models)")
	}
	tok, err := tokenizer.FromGGUF(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := (&Facts{Rerank: true}).CheckVocabulary(tok); err != nil {
		t.Errorf("Qwen3's vocabulary: %v", err)
	}
	// A vocabulary with two control tokens swapped is refused, naming the token.
	rerank := &Facts{Rerank: true}
	for _, tt := range []struct {
		a, b string
		f    *Facts
		want string
	}{
		{"<|endoftext|>", "<|im_start|>", &Facts{}, "its vocabulary has no <|endoftext|> token at id 151643 (the end-of-text id every sequence is closed with); embed-stack serves Qwen3-Embedding models"},
		{"<think>", "</think>", rerank, "its vocabulary has no <think> token at id 151667, which the Qwen3-Reranker template needs; embed-stack reranks with Qwen3-Reranker models"},
		{"<think>", "</think>", &Facts{}, ""},
	} {
		tok := swappedTokenizer(t, path, tt.a, tt.b)
		err := tt.f.CheckVocabulary(tok)
		if (tt.want == "" && err != nil) || (tt.want != "" && (err == nil || err.Error() != tt.want)) {
			t.Errorf("%s and %s swapped, rerank %t: %v\nwant %q", tt.a, tt.b, tt.f.Rerank, err, tt.want)
		}
	}
}

// swappedTokenizer loads the tokenizer of the GGUF at path with tokens a and b
// swapped, from a copy of its tokenizer keys.
func swappedTokenizer(t *testing.T, path, a, b string) *tokenizer.Tokenizer {
	t.Helper()
	src, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	w := gguf.NewWriter()
	for _, k := range src.Keys() {
		if !strings.HasPrefix(k, "tokenizer.") {
			continue
		}
		v, _ := src.Get(k)
		if k == "tokenizer.ggml.tokens" {
			tokens := append([]string(nil), v.([]string)...)
			i, j := slices.Index(tokens, a), slices.Index(tokens, b)
			tokens[i], tokens[j] = tokens[j], tokens[i]
			v = tokens
		}
		w.AddKV(k, v)
	}
	out := filepath.Join(t.TempDir(), "swapped.gguf")
	if err := w.WriteFile(out); err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.FromGGUF(out)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}
