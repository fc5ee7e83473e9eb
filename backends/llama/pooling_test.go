package llama

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/embed-stack/embed-stack/gguf"
)

// openModel opens the model at rel (relative to the repository root) with cfg.
func openModel(tb testing.TB, rel string, cfg Config) *Engine {
	tb.Helper()
	cfg.ModelPath = encoderModelTB(tb, rel)
	e, err := Open(cfg)
	if err != nil {
		tb.Fatalf("Open(%s, %+v): %v", rel, cfg, err)
	}
	tb.Cleanup(func() { e.Close() })
	return e
}

// encoderModelTB is encoderModel for a testing.TB.
func encoderModelTB(tb testing.TB, rel string) string {
	tb.Helper()
	if t, ok := tb.(*testing.T); ok {
		return encoderModel(t, rel)
	}
	return modelFile(tb, rel)
}

// readMiniLMReference reads backends/llama/testdata/minilm-reference.json: the texts,
// HF's ids ([CLS] ... [SEP]) and the float64 reference's mean-pooled vectors.
func readMiniLMReference(t *testing.T) (minilmReference, [][]float32) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "minilm-reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref minilmReference
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatal(err)
	}
	want := make([][]float32, len(ref.Vectors))
	for i, b := range ref.Vectors {
		bs, err := base64.StdEncoding.DecodeString(b)
		if err != nil {
			t.Fatal(err)
		}
		want[i] = make([]float32, len(bs)/4)
		for j := range want[i] {
			want[i][j] = math.Float32frombits(binary.LittleEndian.Uint32(bs[4*j:]))
		}
	}
	return ref, want
}

// TestEngineMiniLM runs the real all-MiniLM-L6-v2 through the engine as a worker
// runs it (the model's mean pooling, computed by the engine over every token's
// output, short texts packed into flash-attention calls) and holds it to the float64
// reference of the original checkpoint: cosine >= 0.9999 (F32) and >= 0.999 (F16)
// on every text, the same nearest neighbour for each retrieval query, and to
// llama.cpp's own MEAN pooling of each text alone.
func TestEngineMiniLM(t *testing.T) {
	ref, want := readMiniLMReference(t)
	for _, tc := range []struct {
		model string
		min   float64
	}{{minilmF32Model, 0.9999}, {minilmF16Model, 0.999}} {
		t.Run(filepath.Base(tc.model), func(t *testing.T) {
			path := encoderModel(t, tc.model)
			e := openModel(t, tc.model, Config{Threads: 1})
			info := e.Info()
			if !info.Encoder || info.Pooling != gguf.PoolingMean || info.Architecture != "bert" || info.NEmbd != 384 || info.ContextTokens != 512 {
				t.Fatalf("Info() = %+v; want a bert encoder, mean pooling, 384 dimensions, 512 tokens", info)
			}
			got, err := e.Embed(context.Background(), ref.IDs)
			if err != nil {
				t.Fatal(err)
			}
			lowest, at := holdToReference(t, "the engine", got, want, ref, tc.min)
			theirs, err := llamaPooled(path, ref.IDs, 1)
			if err != nil {
				t.Fatal(err)
			}
			lowestLlama := 1.0
			for i := range got {
				lowestLlama = min(lowestLlama, cosine32(got[i], theirs[i]))
			}
			t.Logf("%d texts: lowest cosine %.7f with the reference (text %d), %.7f with llama.cpp's own mean pooling; %d retrieval queries agree",
				len(got), lowest, at, lowestLlama, len(ref.Queries))
			if lowestLlama < 0.9999 {
				t.Errorf("lowest cosine with llama.cpp's own mean pooling %.7f, want >= 0.9999", lowestLlama)
			}
		})
	}
}

// TestEncoderPackingInvariance embeds encoder sequences of 1 to 512 tokens alone
// and packed in several ways, with each pooling: the vectors are bit-identical
// (x86), whatever a sequence was sent with.
func TestEncoderPackingInvariance(t *testing.T) {
	lengths := []int{3, 250, 1, 40, 77, 128, 9, 300, 2, 512, 64, 33, 5, 190, 129, 100, 7, 256, 50, 1, 20}
	tol := 1e-5
	if runtime.GOARCH == "amd64" {
		tol = 0
	}
	for _, rel := range []string{bertTinyModel, xlmrTinyModel} {
		for _, pooling := range []gguf.Pooling{gguf.PoolingMean, gguf.PoolingCLS, gguf.PoolingLast} {
			t.Run(filepath.Base(rel)+"/"+pooling.String(), func(t *testing.T) {
				alone := openModel(t, rel, Config{MaxSeqs: 1, Threads: 1, Pooling: pooling})
				vocab := alone.Info().NVocab
				seqs := make([][]int32, len(lengths))
				want := make([][]float32, len(lengths))
				for i, n := range lengths {
					seqs[i] = randomSeq(uint64(300+i), n, vocab)
					want[i] = embedOne(t, alone, seqs[i])
				}
				for _, cfg := range []Config{
					{BatchTokens: 512, MaxSeqs: 32},
					{BatchTokens: 160, MaxSeqs: 32},
					{BatchTokens: 512, MaxSeqs: 3},
				} {
					cfg.Threads, cfg.Pooling = 1, pooling
					e := openModel(t, rel, cfg)
					got, err := e.Embed(context.Background(), seqs)
					if err != nil {
						t.Fatal(err)
					}
					for i := range seqs {
						if d := maxAbsDiff(got[i], want[i]); d > tol {
							t.Errorf("batch %d, %d a round: input %d (%d tokens) differs from itself alone by %.3g", cfg.BatchTokens, cfg.MaxSeqs, i, len(seqs[i]), d)
						}
					}
				}
			})
		}
	}
}

// TestDecoderPoolingOverride pools a causal decoder (the tiny Qwen3) by the mean
// and by its first token instead of its last, for sequences packed short and
// decoded long over several calls, and holds the vectors to llama.cpp's own MEAN
// and CLS pooling of each sequence alone.
func TestDecoderPoolingOverride(t *testing.T) {
	for _, tc := range []struct {
		pooling gguf.Pooling
		cpool   gguf.Pooling
	}{{gguf.PoolingMean, gguf.PoolingMean}, {gguf.PoolingCLS, gguf.PoolingCLS}} {
		t.Run(tc.pooling.String(), func(t *testing.T) {
			e := openTiny(t, Config{ContextTokens: 1024, Pooling: tc.pooling, Threads: 1})
			if got := e.Info().Pooling; got != tc.pooling {
				t.Fatalf("Info().Pooling = %s, want %s", got, tc.pooling)
			}
			vocab := e.Info().NVocab
			lengths := []int{1, 5, 60, 128, 129, 600}
			seqs := make([][]int32, len(lengths))
			for i, n := range lengths {
				seqs[i] = randomSeq(uint64(700+i), n, vocab)
			}
			got, err := e.Embed(context.Background(), seqs)
			if err != nil {
				t.Fatal(err)
			}
			for i, seq := range seqs {
				want, err := e.pooledBy(context.Background(), seq, tc.cpool)
				if err != nil {
					t.Fatal(err)
				}
				if c := cosine32(got[i], want); c < 0.99999 {
					t.Errorf("%d tokens: cosine %.7f with llama.cpp's %s pooling, want >= 0.99999", len(seq), c, tc.cpool)
				}
				if alone := embedOne(t, e, seq); maxAbsDiff(alone, got[i]) != 0 && runtime.GOARCH == "amd64" {
					t.Errorf("%d tokens: packed and alone differ by %.3g", len(seq), maxAbsDiff(alone, got[i]))
				}
			}
		})
	}
}

// TestGraphPoolingPacking is why the engine pools an encoder's outputs itself
// rather than asking llama.cpp to (its context's pooling_type): llama.cpp's MEAN
// pooling multiplies the call's token states by a tokens x sequences matrix of
// 1/n, a sum over every token of the call, zeros included, whose rounding moves
// with a sequence's place in the call. The engine's sum runs over the sequence's
// own rows, in order, in float64.
func TestGraphPoolingPacking(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("measured with x86 SIMD kernels")
	}
	lengths := []int{3, 40, 77, 128, 9, 64, 33, 5, 100, 7, 50, 20}
	for _, tc := range []struct {
		graph     bool
		identical bool
	}{{false, true}, {true, false}} {
		alone := openModel(t, minilmF32Model, Config{MaxSeqs: 1, Threads: 1, graphPooling: tc.graph})
		// 31 sequences a round, 32 with the engine's padding slot: llama.cpp's graph
		// with MEAN pooling fails an assertion (ggml_can_mul_mat, aborting the
		// process) when creating a context whose sequences do not divide its
		// 512-token calls, as the default 64 + 1 do not.
		packed := openModel(t, minilmF32Model, Config{Threads: 1, MaxSeqs: 31, graphPooling: tc.graph})
		vocab := alone.Info().NVocab
		seqs := make([][]int32, len(lengths))
		for i, n := range lengths {
			seqs[i] = randomSeq(uint64(900+i), n, vocab)
		}
		got, err := packed.Embed(context.Background(), seqs)
		if err != nil {
			t.Fatal(err)
		}
		worst, lowest := 0.0, 1.0
		for i, seq := range seqs {
			want := embedOne(t, alone, seq)
			worst = max(worst, maxAbsDiff(got[i], want))
			lowest = min(lowest, cosine32(got[i], want))
		}
		t.Logf("llama.cpp pools: %v; packed against alone: max abs diff %.3g, lowest cosine %.9f", tc.graph, worst, lowest)
		if (worst == 0) != tc.identical {
			t.Errorf("llama.cpp pools: %v; packed and alone identical: %v, want %v", tc.graph, worst == 0, tc.identical)
		}
	}
}

// archModels are the random-weight test models of every encoder architecture
// embed-stack serves beside bert (`make models`; cmd/genmodel -arch), with the
// pooling genmodel gives each.
var archModels = []struct {
	rel     string
	pooling gguf.Pooling
}{
	{"models/nomic-bert-tiny.gguf", gguf.PoolingMean},
	{"models/nomic-bert-moe-tiny.gguf", gguf.PoolingMean},
	{"models/jina-bert-v2-tiny.gguf", gguf.PoolingMean},
	{"models/jina-bert-v3-tiny.gguf", gguf.PoolingMean},
	{"models/neo-bert-tiny.gguf", gguf.PoolingCLS},
	{"models/t5encoder-tiny.gguf", gguf.PoolingMean},
	// Mean pooling, then the two dense projections, which llama.cpp's pooled graph
	// applies to the mean and the engine's context to every token.
	{"models/gemma-embedding-tiny.gguf", gguf.PoolingMean},
}

// TestEncoderArchitectures runs every encoder architecture's test model through
// the engine: llama.cpp loads what cmd/genmodel writes and runs it without a KV
// cache (create's checks), the engine's vectors are those of llama.cpp's own
// pooling of each sequence alone (cosine >= 0.999999, the same kernel), finite and
// different for different inputs, and the same bit for bit packed or alone.
func TestEncoderArchitectures(t *testing.T) {
	lengths := []int{2, 9, 40, 128, 129, 300, 512}
	for _, tc := range archModels {
		t.Run(filepath.Base(tc.rel), func(t *testing.T) {
			e := openModel(t, tc.rel, Config{Threads: 1})
			info := e.Info()
			if !info.Encoder || info.Pooling != tc.pooling || info.NEmbd != 64 || info.ContextTokens != 512 {
				t.Fatalf("Info() = %+v; want an encoder pooling %s, 64 dimensions, 512 tokens", info, tc.pooling)
			}
			seqs := make([][]int32, len(lengths))
			for i, n := range lengths {
				seqs[i] = randomSeq(uint64(40+i), n, info.NVocab)
			}
			got, err := e.Embed(context.Background(), seqs)
			if err != nil {
				t.Fatal(err)
			}
			for i, seq := range seqs {
				for _, x := range got[i] {
					if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
						t.Fatalf("%d tokens: %v in the vector", len(seq), x)
					}
				}
				want, err := e.pooledBy(context.Background(), seq, tc.pooling)
				if err != nil {
					t.Fatal(err)
				}
				if c := cosine32(got[i], want); c < 0.999999 {
					t.Errorf("%d tokens: cosine %.9f with llama.cpp's own %s pooling, want >= 0.999999", len(seq), c, tc.pooling)
				}
				if alone := embedOne(t, e, seq); maxAbsDiff(alone, got[i]) != 0 && runtime.GOARCH == "amd64" {
					t.Errorf("%d tokens: packed and alone differ by %.3g", len(seq), maxAbsDiff(alone, got[i]))
				}
			}
			if c := cosine32(got[0], got[1]); c > 0.9999 {
				t.Errorf("two different inputs give vectors of cosine %.6f: the model ignores its input", c)
			}
			// Attention runs both ways: the first token's state depends on the last
			// token, which in a causal decoder it could not.
			cls := openModel(t, tc.rel, Config{Threads: 1, Pooling: gguf.PoolingCLS})
			a := randomSeq(77, 40, info.NVocab)
			b := append([]int32(nil), a...)
			b[len(b)-1] = (b[len(b)-1] + 1) % int32(info.NVocab)
			if va, vb := embedOne(t, cls, a), embedOne(t, cls, b); maxAbsDiff(va, vb) == 0 {
				t.Error("the first token's state does not depend on the last token: the model ran causally")
			}
		})
	}
}
