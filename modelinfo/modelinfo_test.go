package modelinfo

import (
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/embed-stack/embed-stack/family"
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
	qwen3, _ := family.Lookup("qwen3")
	qwen3Prompts, _ := family.PromptsNamed("qwen3")
	base := Facts{Name: "qwen3-embedding-0.6b", Arch: qwen3, Dim: 1024, TrainContext: 32768, MaxTokens: 32768, EOS: 151643,
		Prompts: qwen3Prompts, Pooling: gguf.PoolingLast, DeclaredPooling: gguf.PoolingLast, PoolingFrom: "model"}
	with := func(change func(*Facts)) Facts {
		f := base
		change(&f)
		return f
	}
	tests := []struct {
		name       string
		kv         map[string]any
		classifier bool
		o          Options
		want       Facts
		wantErr    string
	}{
		{name: "last-token pooling", kv: map[string]any{"qwen3.pooling_type": uint32(3)}, want: base},
		{name: "no pooling declared: a chat model", wantErr: `it declares no pooling type (qwen3.pooling_type), so it is not known how its vectors are made: a decoder-only chat model has none, and a qwen3 embedding model should (Qwen3-Embedding's GGUFs declare last). Pass --pooling last, mean or cls to serve it all the same`},
		{name: "no pooling declared, --pooling last", o: Options{Pooling: "last"},
			want: with(func(f *Facts) { f.DeclaredPooling, f.PoolingFrom = gguf.PoolingUnspecified, "--pooling" })},
		{name: "pooling none declared", kv: map[string]any{"qwen3.pooling_type": uint32(0)}, wantErr: "it declares pooling type 0 (none: one vector per token) (qwen3.pooling_type)"},
		{name: "mean pooling declared", kv: map[string]any{"qwen3.pooling_type": uint32(1)},
			want: with(func(f *Facts) { f.Pooling, f.DeclaredPooling = gguf.PoolingMean, gguf.PoolingMean })},
		{name: "cls pooling overridden", kv: map[string]any{"qwen3.pooling_type": uint32(2)}, o: Options{Pooling: "last"},
			want: with(func(f *Facts) { f.DeclaredPooling, f.PoolingFrom = gguf.PoolingCLS, "--pooling" })},
		{name: "mean pooling, --allow-pooling-mismatch", kv: map[string]any{"qwen3.pooling_type": uint32(1)}, o: Options{AllowPoolingMismatch: true},
			want: with(func(f *Facts) { f.DeclaredPooling, f.PoolingFrom = gguf.PoolingMean, "--pooling" })},
		{name: "unknown pooling number", kv: map[string]any{"qwen3.pooling_type": uint32(7)}, wantErr: "it declares pooling type 7 (unknown); embed-stack pools mean, cls or last. Pass --pooling"},
		{name: "bad --pooling", o: Options{Pooling: "max"}, wantErr: `--pooling "max" is not one of mean, cls, last`},
		{name: "rank pooling is a reranker", kv: map[string]any{"qwen3.pooling_type": uint32(4)},
			want: with(func(f *Facts) { f.DeclaredPooling, f.Rerank = gguf.PoolingRank, true })},
		{name: "rank pooling served as embeddings", kv: map[string]any{"qwen3.pooling_type": uint32(4)}, o: Options{Task: "embed"}, wantErr: "it declares pooling type 4 (rank)"},
		{name: "a classifier head is a reranker", classifier: true,
			want: with(func(f *Facts) { f.DeclaredPooling, f.Rerank = gguf.PoolingUnspecified, true })},
		{name: "task rerank without a head", kv: map[string]any{"qwen3.pooling_type": uint32(3)}, o: Options{Task: "rerank"},
			want: with(func(f *Facts) { f.Rerank = true })},
		{name: "unknown task", o: Options{Task: "classify"}, wantErr: `--task "classify" is not one of auto, embed, rerank`},
		{name: "other eos id", kv: map[string]any{"tokenizer.ggml.eos_token_id": uint32(151645), "qwen3.pooling_type": uint32(3)},
			want: with(func(f *Facts) { f.EOS = 151645 })},
		{name: "prompts named", kv: map[string]any{"qwen3.pooling_type": uint32(3)}, o: Options{Prompts: "none"},
			want: with(func(f *Facts) { f.Prompts, _ = family.PromptsNamed("none") })},
		{name: "unknown prompts", kv: map[string]any{"qwen3.pooling_type": uint32(3)}, o: Options{Prompts: "bert"},
			wantErr: `--prompts "bert" is not one of auto, qwen3, nomic, e5, e5-instruct, bge, bge-zh, arctic-v2, gemma, jina-v3, none`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeFactsGGUF(t, tt.kv, tt.classifier)
			got, err := Read(path, tt.o)
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
			got.Path, got.Shape, got.Vocab = "", gguf.Shape{}, ""
			if !reflect.DeepEqual(*got, tt.want) {
				t.Errorf("facts = %+v, want %+v", *got, tt.want)
			}
		})
	}
}

// writeArchGGUF writes the header of a model of architecture arch with the given
// name, context, heads and keys; a key whose value is a []uint64 is a tensor of
// those dims, and gguf.TensorClassifier: true a one-output classifier head.
func writeArchGGUF(t *testing.T, arch, name string, ctx, heads uint32, kv map[string]any) string {
	t.Helper()
	w := gguf.NewWriter()
	w.AddKV("general.architecture", arch)
	w.AddKV("general.name", name)
	w.AddKV(arch+".embedding_length", uint32(768))
	w.AddKV(arch+".context_length", ctx)
	w.AddKV(arch+".attention.head_count", heads)
	for k, v := range kv {
		dims, isTensor := v.([]uint64)
		if k == gguf.TensorClassifier && v == true {
			// A one-output classifier head, as a cross-encoder's.
			dims, isTensor = []uint64{768, 1}, true
		}
		if isTensor {
			// A tensor of these dims (a classifier head's).
			n := 4
			for _, d := range dims {
				n *= int(d)
			}
			w.AddTensor(k, gguf.TypeF32, dims, func(out io.Writer) error { _, err := out.Write(make([]byte, n)); return err })
			continue
		}
		w.AddKV(k, v)
	}
	p := filepath.Join(t.TempDir(), "m.gguf")
	if err := w.WriteFile(p); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestReadFamilies: architectures other than Qwen3, their pooling conventions and
// limits, and the refusals.
func TestReadFamilies(t *testing.T) {
	for _, tt := range []struct {
		arch, name string
		ctx, heads uint32
		kv         map[string]any
		o          Options
		pooling    gguf.Pooling
		from       string
		maxTokens  int
		prompts    string
		wantErr    string
		// crossEncoder: served as a cross-encoder reranker.
		crossEncoder bool
	}{
		{arch: "bert", name: "all-MiniLM-L6-v2", ctx: 512, heads: 12, kv: map[string]any{"bert.pooling_type": uint32(1)},
			pooling: gguf.PoolingMean, from: "model", maxTokens: 512, prompts: "none"},
		{arch: "bert", name: "bge-small-en-v1.5", ctx: 512, heads: 12, kv: map[string]any{"bert.pooling_type": uint32(2)},
			pooling: gguf.PoolingCLS, from: "model", maxTokens: 512, prompts: "bge"},
		{arch: "bert", name: "e5-small-v2", ctx: 512, heads: 12, kv: map[string]any{"bert.pooling_type": uint32(1)}, o: Options{Pooling: "cls", Prompts: "none"},
			pooling: gguf.PoolingCLS, from: "--pooling", maxTokens: 512, prompts: "none"},
		{arch: "bert", name: "some-bert", ctx: 512, heads: 12, wantErr: "it declares no pooling type (bert.pooling_type)"},
		{arch: "nomic-bert", name: "nomic-embed-text-v1.5", ctx: 2048, heads: 12,
			pooling: gguf.PoolingMean, from: "family", maxTokens: 2048, prompts: "nomic"},
		// 8192 tokens of 12 heads do not fit one call's 512 MiB of scores.
		{arch: "jina-bert-v2", name: "jina-embeddings-v2-base-en", ctx: 8192, heads: 12, kv: map[string]any{"jina-bert-v2.pooling_type": uint32(1)},
			pooling: gguf.PoolingMean, from: "model", maxTokens: 3328, prompts: "none"},
		{arch: "t5encoder", name: "sentence-t5", heads: 12, kv: map[string]any{"t5encoder.pooling_type": uint32(1)},
			pooling: gguf.PoolingMean, from: "model", maxTokens: 512, prompts: "none"},
		{arch: "llama", name: "Llama 3.2 1B Instruct", ctx: 131072, heads: 32,
			wantErr: `its architecture "llama" is not one embed-stack serves (qwen3, bert, nomic-bert, nomic-bert-moe, neo-bert, jina-bert-v2, jina-bert-v3, gemma-embedding, t5encoder); a decoder-only model can be served as an embedding model all the same with --pooling last, mean or cls`},
		{arch: "llama", name: "e5-mistral-7b-instruct", ctx: 32768, heads: 32, o: Options{Pooling: "last"},
			pooling: gguf.PoolingLast, from: "--pooling", maxTokens: 32768, prompts: "e5-instruct"},
		{arch: "bert", name: "bge-reranker-base", ctx: 512, heads: 12, kv: map[string]any{"bert.pooling_type": uint32(4)},
			wantErr: "it is a bert reranker (rank pooling declared): it has no classifier head (cls.output.weight), so there is nothing to score a pair with. Pass --task embed"},
		{arch: "bert", name: "ms-marco-MiniLM-L6-v2", ctx: 512, heads: 12, kv: map[string]any{"bert.pooling_type": uint32(4), gguf.TensorClassifier: true},
			pooling: gguf.PoolingCLS, from: "model", maxTokens: 512, prompts: "none", crossEncoder: true},
		{arch: "bert", name: "bge-reranker-base", ctx: 512, heads: 12, kv: map[string]any{gguf.TensorClassifier: true}, o: Options{Pooling: "mean"},
			wantErr: "--pooling mean: a cross-encoder's classifier head reads its [CLS] token"},
		{arch: "nomic-bert", name: "some-reranker", ctx: 512, heads: 12, kv: map[string]any{"nomic-bert.pooling_type": uint32(4)},
			wantErr: "it is a nomic-bert reranker (rank pooling declared): llama.cpp loads no classifier head for nomic-bert, so its rank pooling cannot score a pair; embed-stack reranks with Qwen3-Reranker models and the cross-encoders of bert (bge-reranker, ms-marco MiniLM), neo-bert and jina-bert-v2 (jina-reranker-v1). Pass --task embed"},
		{arch: "bert", name: "bge-reranker-base", ctx: 512, heads: 12, kv: map[string]any{"bert.pooling_type": uint32(4)}, o: Options{Task: "embed", Pooling: "cls"},
			pooling: gguf.PoolingCLS, from: "--pooling", maxTokens: 512, prompts: "none"},
	} {
		t.Run(tt.arch+"/"+tt.name, func(t *testing.T) {
			path := writeArchGGUF(t, tt.arch, tt.name, tt.ctx, tt.heads, tt.kv)
			f, err := Read(path, tt.o)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if f.CrossEncoder != tt.crossEncoder || f.Rerank != tt.crossEncoder {
				t.Errorf("facts: Rerank %t, CrossEncoder %t; want %t", f.Rerank, f.CrossEncoder, tt.crossEncoder)
			}
			if f.Pooling != tt.pooling || f.PoolingFrom != tt.from || f.MaxTokens != tt.maxTokens || f.Prompts.Name != tt.prompts || f.Arch.Name != tt.arch {
				t.Errorf("facts: pooling %s from %s, max tokens %d, prompts %s, arch %+v; want %s from %s, %d, %s",
					f.Pooling, f.PoolingFrom, f.MaxTokens, f.Prompts.Name, f.Arch, tt.pooling, tt.from, tt.maxTokens, tt.prompts)
			}
		})
	}
}

// TestReadCrossEncoders: which encoder GGUFs are served as cross-encoders, with the
// head llama.cpp's rank pooling computes for their architecture (bert, neo-bert,
// jina-bert-v2: family.RankHead), and the exact refusal of every layout llama.cpp
// cannot score or that is not a relevance score. On the old code only bert was a
// cross-encoder, and a jina-bert-v2 GGUF with its one-row cls.weight was an
// embedding model.
func TestReadCrossEncoders(t *testing.T) {
	const rank = uint32(4)
	one, square := []uint64{768, 1}, []uint64{768, 768}
	for _, tt := range []struct {
		name, arch string
		kv         map[string]any
		o          Options
		head       family.Head // the cross-encoder's, when wantErr is ""
		servedName string
		wantErr    string // the whole error after "model PATH: "
	}{
		{name: "bert: pooler and classifier", arch: "bert", kv: map[string]any{"bert.pooling_type": rank, gguf.TensorClassifier: one, gguf.TensorClassifierDense: square},
			head: family.Head{Dense: true, DenseRows: 768, Out: true}},
		{name: "neo-bert: dense and classifier, cls pooling declared as its conversion does", arch: "neo-bert",
			kv:   map[string]any{"neo-bert.pooling_type": uint32(2), gguf.TensorClassifier: one, gguf.TensorClassifierDense: square},
			head: family.Head{Dense: true, DenseRows: 768, Out: true}},
		{name: "jina-bert-v2: one-row classifier, no pooling declared", arch: "jina-bert-v2", kv: map[string]any{gguf.TensorClassifierDense: one},
			head: family.Head{Dense: true, DenseRows: 1}},
		{name: "jina-bert-v2: one-row classifier, rank pooling", arch: "jina-bert-v2", kv: map[string]any{"jina-bert-v2.pooling_type": rank, gguf.TensorClassifierDense: one},
			head: family.Head{Dense: true, DenseRows: 1}},

		{name: "jina-bert-v2: --task embed serves the encoder", arch: "jina-bert-v2", kv: map[string]any{"jina-bert-v2.pooling_type": uint32(1), gguf.TensorClassifierDense: one},
			o: Options{Task: "embed"}},
		{name: "bert: a dense layer alone is an embedding model", arch: "bert", kv: map[string]any{"bert.pooling_type": uint32(2), gguf.TensorClassifierDense: square}},

		{name: "jina-bert-v2: rank pooling, no classifier", arch: "jina-bert-v2", kv: map[string]any{"jina-bert-v2.pooling_type": rank},
			wantErr: "it is a jina-bert-v2 reranker (rank pooling declared): it has no classifier head (cls.weight, one row), so there is nothing to score a pair with. Pass --task embed to serve it as an embedding model"},
		{name: "jina-bert-v2: pooler and classifier, as bert's", arch: "jina-bert-v2", kv: map[string]any{gguf.TensorClassifier: one, gguf.TensorClassifierDense: square},
			wantErr: "it is a jina-bert-v2 reranker (a classifier head): it has cls.output.weight, which llama.cpp's jina-bert-v2 does not load (its classifier is a one-row cls.weight). Pass --task embed to serve it as an embedding model"},
		{name: "jina-bert-v2: two labels", arch: "jina-bert-v2", kv: map[string]any{gguf.TensorClassifierDense: []uint64{768, 2}},
			wantErr: "it is a jina-bert-v2 reranker (a classifier head): its cls.weight has dims [768 2], 2 outputs; a cross-encoder reranker has one (a relevance logit), and llama.cpp's jina-bert-v2 loads one row there. Pass --task embed to serve it as an embedding model"},
		{name: "bert: three labels (an NLI model)", arch: "bert", kv: map[string]any{gguf.TensorClassifier: []uint64{768, 3}, gguf.TensorClassifierDense: square},
			wantErr: "it is a bert reranker (a classifier head): its cls.output.weight has dims [768 3], 3 outputs; a cross-encoder reranker has one (a relevance logit), and a head of several labels (an NLI or classification model) is not a reranker. Pass --task embed to serve it as an embedding model"},
		{name: "neo-bert: a one-row dense layer", arch: "neo-bert", kv: map[string]any{gguf.TensorClassifier: one, gguf.TensorClassifierDense: one},
			wantErr: "it is a neo-bert reranker (a classifier head): its cls.weight has dims [768 1]; llama.cpp's neo-bert loads a dense layer of [768 768] there. Pass --task embed to serve it as an embedding model"},
		{name: "nomic-bert-moe: a classifier head", arch: "nomic-bert-moe", kv: map[string]any{gguf.TensorClassifier: one},
			wantErr: "it is a nomic-bert-moe reranker (a classifier head): llama.cpp loads no classifier head for nomic-bert-moe, so its rank pooling cannot score a pair; embed-stack reranks with Qwen3-Reranker models and the cross-encoders of bert (bge-reranker, ms-marco MiniLM), neo-bert and jina-bert-v2 (jina-reranker-v1). Pass --task embed to serve it as an embedding model"},
		{name: "t5encoder: --task rerank", arch: "t5encoder", kv: map[string]any{"t5encoder.pooling_type": uint32(1)}, o: Options{Task: "rerank"},
			wantErr: "it is a t5encoder reranker (--task rerank): llama.cpp loads no classifier head for t5encoder, so its rank pooling cannot score a pair; embed-stack reranks with Qwen3-Reranker models and the cross-encoders of bert (bge-reranker, ms-marco MiniLM), neo-bert and jina-bert-v2 (jina-reranker-v1). Pass --task embed to serve it as an embedding model"},
		{name: "a decoder of no known family, --task rerank", arch: "llama", kv: map[string]any{}, o: Options{Task: "rerank", Pooling: "last"},
			wantErr: "it is a llama reranker (--task rerank); embed-stack reranks with Qwen3-Reranker models and the cross-encoders of bert (bge-reranker, ms-marco MiniLM), neo-bert and jina-bert-v2 (jina-reranker-v1). Pass --task embed to serve it as an embedding model"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := writeArchGGUF(t, tt.arch, "", 512, 12, tt.kv)
			f, err := Read(path, tt.o)
			if tt.wantErr != "" {
				if want := "model " + path + ": " + tt.wantErr; err == nil || err.Error() != want {
					t.Fatalf("err = %v\nwant %s", err, want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			ce := tt.head != family.Head{}
			if f.CrossEncoder != ce || f.Rerank != ce || f.CrossEncoderHead != tt.head {
				t.Fatalf("Rerank %t, CrossEncoder %t, head %+v; want %t, %t, %+v", f.Rerank, f.CrossEncoder, f.CrossEncoderHead, ce, ce, tt.head)
			}
			if !ce {
				return
			}
			if f.Pooling != gguf.PoolingCLS || f.Outputs() != 2 || f.WorkerPooling() != "" || f.ServedName() != tt.arch+"-reranker" || f.TaskName() != "rerank" {
				t.Errorf("pooling %s, outputs %d, worker pooling %q, served as %q, task %s; want cls, 2, \"\", %s-reranker, rerank",
					f.Pooling, f.Outputs(), f.WorkerPooling(), f.ServedName(), f.TaskName(), tt.arch)
			}
		})
	}
}

// TestWorkerPooling: a worker is told the pooling only where its default (the
// header's, else last) differs.
func TestWorkerPooling(t *testing.T) {
	for _, tt := range []struct {
		declared, pooling gguf.Pooling
		rerank            bool
		want              string
	}{
		{gguf.PoolingLast, gguf.PoolingLast, false, ""},
		{gguf.PoolingMean, gguf.PoolingMean, false, ""},
		{gguf.PoolingUnspecified, gguf.PoolingMean, false, "mean"},
		{gguf.PoolingUnspecified, gguf.PoolingLast, false, ""},
		{gguf.PoolingMean, gguf.PoolingCLS, false, "cls"},
		{gguf.PoolingCLS, gguf.PoolingLast, false, "last"},
		{gguf.PoolingRank, gguf.PoolingLast, true, ""},
	} {
		f := Facts{DeclaredPooling: tt.declared, Pooling: tt.pooling, Rerank: tt.rerank}
		if got := f.WorkerPooling(); got != tt.want {
			t.Errorf("declared %s, pooling %s: WorkerPooling %q, want %q", tt.declared, tt.pooling, got, tt.want)
		}
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
	path := writeFactsGGUF(t, map[string]any{"qwen3.pooling_type": uint32(3)}, false)
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

// TestFrame: the special tokens of each generated model's vocabulary, as its
// Hugging Face tokenizer's post-processor adds them: BERT's [CLS] text [SEP],
// XLM-R's <s> text </s>, Qwen3's text <|endoftext|>.
func TestFrame(t *testing.T) {
	root := testrepo.RootOf(t)
	for _, tt := range []struct {
		model           string
		head, tail, sep []int32
		text            string
	}{
		// sep joins a cross-encoder's pair as HF's post-processors do: BERT's
		// [SEP], RoBERTa's (XLM-R's) </s></s>.
		{"models/bert-tiny.gguf", []int32{101}, []int32{102}, []int32{102}, "[CLS] and [SEP]"},
		{"models/bert-reranker-tiny.gguf", []int32{101}, []int32{102}, []int32{102}, "[CLS] and [SEP]"},
		{"models/xlmr-tiny.gguf", []int32{0}, []int32{2}, []int32{2, 2}, "<s> and </s>"},
		{"models/minilm-f32.gguf", []int32{101}, []int32{102}, []int32{102}, "[CLS] and [SEP]"},
		{"models/tiny.gguf", nil, []int32{151643}, nil, "<|endoftext|>"},
	} {
		t.Run(tt.model, func(t *testing.T) {
			path := filepath.Join(root, tt.model)
			if _, err := os.Stat(path); err != nil {
				t.Skipf("%s absent (make models)", tt.model)
			}
			f, err := Read(path, Options{})
			if err != nil {
				t.Fatal(err)
			}
			tok, err := tokenizer.FromGGUF(path)
			if err != nil {
				t.Fatal(err)
			}
			fr, err := f.Frame(tok)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(fr.Head, tt.head) || !slices.Equal(fr.Tail, tt.tail) || !slices.Equal(fr.Sep, tt.sep) || fr.Text != tt.text {
				t.Errorf("Frame = %+v, want head %v, tail %v, sep %v, %q", fr, tt.head, tt.tail, tt.sep, tt.text)
			}
		})
	}
}
