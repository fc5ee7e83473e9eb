package llama

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/embed-stack/embed-stack/internal/reference"
	"github.com/embed-stack/embed-stack/internal/testenv"
	"github.com/embed-stack/embed-stack/internal/testrepo"
)

// endOfText is Qwen3's <|endoftext|>, the last token of every sequence routing sends.
const endOfText = 151643

// tinyModel is the generated test model, relative to the repository root.
const tinyModel = "models/tiny.gguf"

// modelFile returns the path of a model relative to the repository root, skipping the
// test only when the file does not exist.
func modelFile(tb testing.TB, rel string) string {
	tb.Helper()
	path := rel
	if !filepath.IsAbs(path) {
		path = filepath.Join(testrepo.RootOf(tb), rel)
	}
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		hint := "generate it with `make models`"
		if rel != tinyModel {
			hint = "generate the 0.6B shape with `make bench-model`, or point EMBED_STACK_BENCH_MODEL at an existing GGUF"
		}
		tb.Skipf("%s is absent; %s", rel, hint)
	}
	return path
}

func openTiny(tb testing.TB, cfg Config) *Engine {
	tb.Helper()
	cfg.ModelPath = modelFile(tb, tinyModel)
	e, err := Open(cfg)
	if err != nil {
		tb.Fatalf("Open(%+v): %v", cfg, err)
	}
	tb.Cleanup(func() { e.Close() })
	return e
}

// randomSeq returns n token ids drawn from [0, vocab), deterministic in seed, ending
// with Qwen3's <|endoftext|> when the vocabulary has it, as routing sends them.
func randomSeq(seed uint64, n, vocab int) []int32 {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	s := make([]int32, n)
	for i := range s {
		s[i] = int32(rng.IntN(vocab))
	}
	if vocab > endOfText {
		s[n-1] = endOfText
	}
	return s
}

func maxAbsDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	m := 0.0
	for i := range a {
		m = max(m, math.Abs(float64(a[i])-float64(b[i])))
	}
	return m
}

func norm(v []float32) float64 {
	s := 0.0
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	return math.Sqrt(s)
}

func embedOne(tb testing.TB, e *Engine, seq []int32) []float32 {
	tb.Helper()
	v, err := e.Embed(context.Background(), [][]int32{seq})
	if err != nil {
		tb.Fatalf("Embed(%d tokens): %v", len(seq), err)
	}
	return v[0]
}

func TestInfo(t *testing.T) {
	e := openTiny(t, Config{ContextTokens: 1024, MaxSeqs: 8})
	info := e.Info()
	if info.ContextTokens != 1024 || info.BatchTokens != 512 {
		t.Errorf("ContextTokens, BatchTokens = %d, %d; want 1024, 512 (batch defaults to min(ctx, 512))", info.ContextTokens, info.BatchTokens)
	}
	if info.NEmbd <= 0 || info.NVocab <= 0 || info.TrainContext < 512 || info.ModelName == "" {
		t.Errorf("Info = %+v; want positive sizes, a training context ≥ 512 and a name", info)
	}
	v := embedOne(t, e, randomSeq(1, 9, info.NVocab))
	if len(v) != info.NEmbd {
		t.Errorf("vector length %d, Info.NEmbd %d", len(v), info.NEmbd)
	}
}

// TestMatchesLlamaLastPooling holds engine mode (pooling NONE, only the last token an
// output) against llama.cpp's own LAST pooling over all-token outputs, within 1e-5.
//
// A one-token sequence is the exception: llama.cpp decodes it as a single row, through
// ggml's matrix-vector kernel, while the engine always decodes at least two rows
// (see decodeCall); the kernels round differently and the f16 weights amplify that, so it
// is held to 1e-3 here and to the float64 reference in TestAgainstReference.
func TestMatchesLlamaLastPooling(t *testing.T) {
	e := openTiny(t, Config{ContextTokens: 1024, BatchTokens: 128, MaxSeqs: 8})
	vocab := e.Info().NVocab
	lengths := []int{1, 2, 17, 128, 300, 1000}
	seqs := make([][]int32, len(lengths))
	for i, n := range lengths {
		seqs[i] = randomSeq(uint64(100+i), n, vocab)
	}
	got, err := e.Embed(context.Background(), seqs)
	if err != nil {
		t.Fatal(err)
	}
	worst := 0.0
	for i, seq := range seqs {
		want, err := e.pooledLast(context.Background(), seq)
		if err != nil {
			t.Fatal(err)
		}
		if norm(want) == 0 {
			t.Fatalf("len %d: LAST pooling gave a zero vector", len(seq))
		}
		d := maxAbsDiff(got[i], want)
		tol := 1e-5
		if len(seq) == 1 {
			tol = 1e-3
		} else {
			worst = max(worst, d)
		}
		t.Logf("len %d: max abs diff %.3g", len(seq), d)
		if d > tol {
			t.Errorf("len %d: max |engine - LAST pooling| = %.3g, want ≤ %g", len(seq), d, tol)
		}
	}
	t.Logf("max abs diff against llama.cpp LAST pooling, sequences of 2 or more tokens: %.3g", worst)
	if d := maxAbsDiff(got[2], got[3]); d < 1e-3 {
		t.Errorf("different sequences gave nearly equal vectors (max diff %.3g)", d)
	}
}

func cosine(a []float32, b []float64) float64 {
	var ab, aa, bb float64
	for i := range a {
		ab += float64(a[i]) * b[i]
		aa += float64(a[i]) * float64(a[i])
		bb += b[i] * b[i]
	}
	return ab / math.Sqrt(aa*bb)
}

// TestAgainstReference holds the engine against the float64 forward pass over the same
// GGUF: cosine similarity ≥ 0.9999 for every sequence, one-token sequences included.
func TestAgainstReference(t *testing.T) {
	e := openTiny(t, Config{ContextTokens: 1024, BatchTokens: 64, MaxSeqs: 8})
	ref, err := reference.Load(modelFile(t, tinyModel))
	if err != nil {
		t.Fatal(err)
	}
	vocab := e.Info().NVocab
	lengths := []int{1, 2, 5, 31, 64, 65, 200, 513}
	seqs := make([][]int32, len(lengths))
	for i, n := range lengths {
		seqs[i] = randomSeq(uint64(600+i), n, vocab)
	}
	got, err := e.Embed(context.Background(), seqs)
	if err != nil {
		t.Fatal(err)
	}
	worst := 1.0
	for i, seq := range seqs {
		want, err := ref.LastToken(seq)
		if err != nil {
			t.Fatal(err)
		}
		c := cosine(got[i], want)
		t.Logf("len %d: cosine %.9f", len(seq), c)
		worst = min(worst, c)
		if !(c >= 0.9999) {
			t.Errorf("len %d: cosine to the float64 reference %.9f, want ≥ 0.9999", len(seq), c)
		}
	}
	t.Logf("worst cosine to the float64 reference over %v tokens: %.9f", lengths, worst)
	// The reference can tell sequences apart, so a cosine near 1 means something.
	if want, _ := ref.LastToken(seqs[3]); cosine(got[4], want) > 0.99 {
		t.Errorf("engine vector of one sequence is as close to another's reference (cosine %.6f)", cosine(got[4], want))
	}
}

// TestPackingInvariance embeds the same sequences alone, packed 20 to a call, split
// over many small decode calls, and spread over several rounds: the vectors are
// bit-identical. Short sequences are packed in a flash-attention context, whose
// kernel skips the cells of other sequences; the two long ones are decoded alone,
// from KV cell 0, whatever they came with.
func TestPackingInvariance(t *testing.T) {
	alone := openTiny(t, Config{ContextTokens: 1024, MaxSeqs: 1})
	vocab := alone.Info().NVocab
	lengths := []int{3, 250, 1, 40, 77, 128, 9, 300, 2, 700, 64, 33, 5, 190, 12, 100, 7, 256, 50, 1, 900, 20}
	seqs := make([][]int32, len(lengths))
	want := make([][]float32, len(lengths))
	for i, n := range lengths {
		seqs[i] = randomSeq(uint64(200+i), n, vocab)
		want[i] = embedOne(t, alone, seqs[i])
	}
	configs := []struct {
		name string
		cfg  Config
	}{
		{"one call", Config{ContextTokens: 2048, BatchTokens: 2048, MaxSeqs: 32}},
		{"16-token calls", Config{ContextTokens: 2048, BatchTokens: 16, MaxSeqs: 32}},
		{"61-token calls", Config{ContextTokens: 2048, BatchTokens: 61, MaxSeqs: 32}},
		{"4 sequences a round", Config{ContextTokens: 2048, BatchTokens: 256, MaxSeqs: 4}},
		{"1024-token context, 100-token calls", Config{ContextTokens: 1024, BatchTokens: 100, MaxSeqs: 64}},
	}
	// Bit-identical where ggml multiplies every row count ≥ 2 with one kernel
	// (tinyBLAS on x86); elsewhere (ARM switches kernels at 8 rows) within 1e-5.
	tol := 1e-5
	if runtime.GOARCH == "amd64" {
		tol = 0
	}
	overall := 0.0
	for _, c := range configs {
		t.Run(c.name, func(t *testing.T) {
			e := openTiny(t, c.cfg)
			got, err := e.Embed(context.Background(), seqs)
			if err != nil {
				t.Fatal(err)
			}
			worst := 0.0
			for i := range seqs {
				if d := maxAbsDiff(got[i], want[i]); d != 0 {
					t.Logf("input %d (%d tokens): max abs diff %.3g", i, len(seqs[i]), d)
				}
				worst = max(worst, maxAbsDiff(got[i], want[i]))
			}
			overall = max(overall, worst)
			t.Logf("max abs diff against the sequence embedded alone: %.3g", worst)
			if worst > tol {
				t.Errorf("max abs diff %.3g, want ≤ %g", worst, tol)
			}
		})
	}
	t.Logf("packing invariance over %d configurations: max abs diff %.3g", len(configs), overall)
}

// TestCellOffsetInvariance pins down why long sequences are decoded alone. A
// sequence placed behind a filler of k tokens: with flash attention (short
// sequences) it is bit-identical to itself alone at every offset; without it (the
// kernel long sequences get) only where k is a multiple of 16, the AVX-512 lane
// count of its sums over KV cells (8 with AVX2), and within cosine 1 - 1e-6
// elsewhere.
func TestCellOffsetInvariance(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the 16-cell period is that of x86 SIMD kernels")
	}
	for _, tt := range []struct {
		name  string
		attn  attentionKind
		exact func(k int) bool
	}{
		{"flash attention, bf16 V", attnFlashBF16V, func(int) bool { return true }},
		{"plain attention", attnPlain, func(k int) bool { return k%16 == 0 }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := openTiny(t, Config{ContextTokens: 512, BatchTokens: 256, MaxSeqs: 2, attention: tt.attn})
			vocab := e.Info().NVocab
			x := randomSeq(1234, 100, vocab)
			want := embedOne(t, e, x)
			for _, k := range []int{1, 3, 16, 32} {
				got, err := e.Embed(context.Background(), [][]int32{randomSeq(99, k, vocab), x})
				if err != nil {
					t.Fatal(err)
				}
				d, c := maxAbsDiff(got[1], want), cosine(got[1], f64(want))
				t.Logf("behind %d tokens: max abs diff %.3g, cosine %.12f", k, d, c)
				if tt.exact(k) && d != 0 {
					t.Errorf("behind %d tokens: max abs diff %.3g; want bit-identical", k, d)
				}
				if !(c >= 1-1e-6) {
					t.Errorf("behind %d tokens: cosine %.12f, want ≥ 1 - 1e-6", k, c)
				}
			}
		})
	}
}

// TestLongSequenceAgainstReference guards the attention precision of both kernels
// with runs of one repeated token (the input most sensitive to the attention
// accumulator, since every cell gets the same weight) against the float64
// reference: FlashMaxTokens of them through flash attention over a bf16 V cache,
// and 4096 without flash attention. ggml's flash attention over an f16 V cache,
// which accumulates in f16, scored cosine 0.9991 at 2048 tokens and 0.979 at 8192.
func TestLongSequenceAgainstReference(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the float64 reference of 4096 tokens takes seconds")
	}
	e := openTiny(t, Config{ContextTokens: 4096})
	ref, err := reference.Load(modelFile(t, tinyModel))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{FlashMaxTokens, 4096} {
		seq := make([]int32, n)
		for i := range seq {
			seq[i] = 264 // " a"
		}
		seq[n-1] = endOfText
		want, err := ref.LastToken(seq)
		if err != nil {
			t.Fatal(err)
		}
		c := cosine(embedOne(t, e, seq), want)
		t.Logf("%d tokens of one repeated token (%v): cosine to the float64 reference %.9f", n, e.contextFor(n).kernel, c)
		if !(c >= 0.9999) {
			t.Errorf("%d tokens: cosine %.9f, want ≥ 0.9999", n, c)
		}
	}
}

func f64(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

func TestInputErrors(t *testing.T) {
	e := openTiny(t, Config{ContextTokens: 256, MaxSeqs: 4})
	vocab := e.Info().NVocab
	ok := randomSeq(7, 5, vocab)
	tests := []struct {
		name      string
		seqs      [][]int32
		wantIndex int
		wantIn    string
	}{
		{"empty", [][]int32{ok, {}}, 1, "empty"},
		{"too long", [][]int32{randomSeq(8, 257, vocab)}, 0, "257 tokens; the limit is 256"},
		{"id = vocab", [][]int32{ok, ok, {1, 2, int32(vocab)}}, 2, fmt.Sprintf("token 2 is id %d, outside the vocabulary [0, %d)", vocab, vocab)},
		{"negative id", [][]int32{{-1}}, 0, "token 0 is id -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.Embed(context.Background(), tt.seqs)
			var ie *InputError
			if !errors.As(err, &ie) || !errors.Is(err, ErrInvalidInput) {
				t.Fatalf("err = %v; want an *InputError wrapping ErrInvalidInput", err)
			}
			if ie.Index != tt.wantIndex || !strings.Contains(ie.Reason, tt.wantIn) {
				t.Errorf("InputError{%d, %q}; want index %d, reason containing %q", ie.Index, ie.Reason, tt.wantIndex, tt.wantIn)
			}
		})
	}
	// The engine is untouched: a good call still gives its exact vector.
	if d := maxAbsDiff(embedOne(t, e, ok), embedOne(t, e, ok)); d != 0 {
		t.Errorf("repeat embedding differs by %.3g after refused inputs", d)
	}
}

func TestCancellation(t *testing.T) {
	var decodes atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e := openTiny(t, Config{ContextTokens: 1024, BatchTokens: 32, MaxSeqs: 4})
	// Set before any Embed: the owner goroutine reads it.
	e.decodeHook = func(int) { decodes.Add(1); cancel() }
	seq := randomSeq(9, 200, e.Info().NVocab) // 7 decode calls of 32 tokens

	t.Run("already cancelled", func(t *testing.T) {
		done, stop := context.WithCancel(context.Background())
		stop()
		if _, err := e.Embed(done, [][]int32{seq}); !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v; want context.Canceled", err)
		}
		if n := decodes.Load(); n != 0 {
			t.Fatalf("%d decode calls ran for a cancelled context", n)
		}
	})
	t.Run("cancelled between decode calls", func(t *testing.T) {
		if _, err := e.Embed(ctx, [][]int32{seq}); !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v; want context.Canceled", err)
		}
		// Embed may return before the owner notices; the next call queues behind it.
		v := embedOne(t, e, seq)
		if n := decodes.Load(); n != 1+7 {
			t.Errorf("%d decode calls in all; want 1 before the cancellation stopped it, then 7", n)
		}
		// The cancelled call left no state behind: a fresh engine agrees exactly.
		fresh := openTiny(t, Config{ContextTokens: 1024, BatchTokens: 32, MaxSeqs: 4})
		if d := maxAbsDiff(v, embedOne(t, fresh, seq)); d != 0 {
			t.Errorf("vector after a cancelled call differs by %.3g", d)
		}
	})
}

// TestCancellationInsideDecode cancels while a decode call is about to run: llama.cpp's
// abort callback stops it, Embed returns ctx.Err(), and the engine stays usable.
func TestCancellationInsideDecode(t *testing.T) {
	e := openTiny(t, Config{ContextTokens: 1024, BatchTokens: 32, MaxSeqs: 4})
	seq := randomSeq(10, 100, e.Info().NVocab)
	want := embedOne(t, e, seq)

	var decodes atomic.Int64
	var cancelNext atomic.Pointer[context.CancelFunc]
	e.beforeDecode = func() {
		if c := cancelNext.Swap(nil); c != nil {
			(*c)()
			// Wait for Embed's caller side to ask for the abort, so llama_decode
			// certainly sees it.
			for !e.abortRequested() {
				runtime.Gosched()
			}
		}
	}
	e.decodeHook = func(int) { decodes.Add(1) }

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cancelNext.Store(&cancel)
	if _, err := e.Embed(ctx, [][]int32{seq}); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v; want context.Canceled", err)
	}
	if n := decodes.Load(); n != 0 {
		t.Errorf("%d decode calls completed; want the first one aborted", n)
	}
	if d := maxAbsDiff(embedOne(t, e, seq), want); d != 0 {
		t.Errorf("vector after an aborted decode differs by %.3g", d)
	}
	if n := decodes.Load(); n != 4 {
		t.Errorf("%d decode calls after the abort; want 4 (100 tokens in calls of 32)", n)
	}
}

func TestConcurrentEmbed(t *testing.T) {
	e := openTiny(t, Config{ContextTokens: 512, BatchTokens: 64, MaxSeqs: 8})
	vocab := e.Info().NVocab
	const workers = 8
	seqs := make([][][]int32, workers)
	want := make([][][]float32, workers)
	for w := range workers {
		seqs[w] = [][]int32{randomSeq(uint64(300+w), 10+w*13, vocab), randomSeq(uint64(400+w), 3, vocab)}
		var err error
		if want[w], err = e.Embed(context.Background(), seqs[w]); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for w := range workers {
		wg.Go(func() {
			for range 3 {
				got, err := e.Embed(context.Background(), seqs[w])
				if err != nil {
					errs[w] = err
					return
				}
				for i := range got {
					if d := maxAbsDiff(got[i], want[w][i]); d != 0 {
						errs[w] = fmt.Errorf("worker %d seq %d differs by %.3g", w, i, d)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

// recordHandler keeps the records slog hands it.
type recordHandler struct {
	level slog.Level
	mu    sync.Mutex // guards recs
	recs  []slog.Record
}

func (h *recordHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }
func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	return nil
}
func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordHandler) WithGroup(string) slog.Handler      { return h }

// TestLogRouting checks that llama.cpp's log reaches slog at debug level only.
func TestLogRouting(t *testing.T) {
	model := modelFile(t, tinyModel)
	for _, tt := range []struct {
		level    slog.Level
		wantSome bool
	}{{slog.LevelInfo, false}, {slog.LevelDebug, true}} {
		t.Run(tt.level.String(), func(t *testing.T) {
			h := &recordHandler{level: tt.level}
			prev := slog.Default()
			slog.SetDefault(slog.New(h))
			defer slog.SetDefault(prev)
			e, err := Open(Config{ModelPath: model, ContextTokens: 256, MaxSeqs: 2})
			if err != nil {
				t.Fatal(err)
			}
			e.Close()
			h.mu.Lock()
			defer h.mu.Unlock()
			sawLoader := false
			for _, r := range h.recs {
				if r.Level != slog.LevelDebug {
					t.Errorf("llama.cpp line logged at %v, want debug: %q", r.Level, r.Message)
				}
				sawLoader = sawLoader || strings.Contains(r.Message, "llama_model_loader")
			}
			if tt.wantSome && !sawLoader {
				t.Errorf("at %v: %d records, none from llama_model_loader", tt.level, len(h.recs))
			}
			if !tt.wantSome && len(h.recs) != 0 {
				t.Errorf("at %v: %d records; want none (first %q)", tt.level, len(h.recs), h.recs[0].Message)
			}
		})
	}
}

func TestClose(t *testing.T) {
	e := openTiny(t, Config{ContextTokens: 256, MaxSeqs: 2})
	seq := randomSeq(11, 4, e.Info().NVocab)
	embedOne(t, e, seq)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := e.Embed(context.Background(), [][]int32{seq}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Embed after Close: err = %v; want ErrClosed", err)
	}
}

func TestOpenErrors(t *testing.T) {
	model := modelFile(t, tinyModel)
	probe, err := Open(Config{ModelPath: model, ContextTokens: 256, MaxSeqs: 1})
	if err != nil {
		t.Fatal(err)
	}
	train := probe.Info().TrainContext
	probe.Close()

	notGGUF := filepath.Join(t.TempDir(), "not.gguf")
	if err := os.WriteFile(notGGUF, []byte("this is not a model"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		cfg    Config
		wantIn string
	}{
		{"no path", Config{}, "ModelPath is empty"},
		{"missing file", Config{ModelPath: filepath.Join(t.TempDir(), "absent.gguf")}, "no such file"},
		{"not a GGUF", Config{ModelPath: notGGUF}, "loading model"},
		{"negative threads", Config{ModelPath: model, Threads: -1}, "Config.Threads is -1"},
		{"too many sequences", Config{ModelPath: model, MaxSeqs: 256}, "Config.MaxSeqs is 256; at most 255"},
		{"batch above context", Config{ModelPath: model, ContextTokens: 256, BatchTokens: 512}, "Config.BatchTokens is 512, more than ContextTokens 256"},
		{"context above training", Config{ModelPath: model, ContextTokens: train + 1}, fmt.Sprintf("Config.ContextTokens is %d but the model was trained on at most %d", train+1, train)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := Open(tt.cfg)
			if err == nil {
				e.Close()
				t.Fatalf("Open(%+v) succeeded; want an error containing %q", tt.cfg, tt.wantIn)
			}
			if !strings.Contains(err.Error(), tt.wantIn) {
				t.Errorf("Open error %q; want it to contain %q", err, tt.wantIn)
			}
		})
	}
}

// BenchmarkEmbed measures tokens/s for 32 sequences of 256 tokens and the latency of
// one 20-token query on the model EMBED_STACK_BENCH_MODEL names (default the tiny
// model); EMBED_STACK_BENCH_BATCH and EMBED_STACK_BENCH_THREADS set BatchTokens and
// Threads.
func BenchmarkEmbed(b *testing.B) {
	rel := testenv.Get("EMBED_STACK_BENCH_MODEL")
	if rel == "" {
		rel = tinyModel
	}
	cfg := Config{ModelPath: modelFile(b, rel)}
	for name, field := range map[string]*int{"EMBED_STACK_BENCH_BATCH": &cfg.BatchTokens, "EMBED_STACK_BENCH_THREADS": &cfg.Threads} {
		if s := testenv.Get(name); s != "" {
			if _, err := fmt.Sscan(s, field); err != nil {
				b.Fatalf("%s=%q: %v", name, s, err)
			}
		}
	}
	e, err := Open(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { e.Close() })
	vocab := e.Info().NVocab
	for _, shape := range []struct{ n, length int }{{32, 256}, {1, 20}} {
		seqs := make([][]int32, shape.n)
		for i := range seqs {
			seqs[i] = randomSeq(uint64(500+i), shape.length, vocab)
		}
		b.Run(fmt.Sprintf("%dx%d", shape.n, shape.length), func(b *testing.B) {
			for b.Loop() {
				if _, err := e.Embed(context.Background(), seqs); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(shape.n*shape.length*b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

// TestWarmUp: WarmUp creates and runs every context the given lengths would use,
// and changes no vector.
func TestWarmUp(t *testing.T) {
	e := openTiny(t, Config{ContextTokens: 2048})
	if e.long == nil || e.long.lctx == nil || e.short.lctx != nil {
		t.Fatalf("after Open: long context %v, short created %v; want the long one only", e.long, e.short.lctx != nil)
	}
	seqs := [][]int32{randomSeq(5, 20, e.Info().NVocab), randomSeq(6, 900, e.Info().NVocab)}
	cold, err := e.Embed(context.Background(), seqs)
	if err != nil {
		t.Fatal(err)
	}
	var decodes atomic.Int64
	w := openTiny(t, Config{ContextTokens: 2048})
	w.decodeHook = func(int) { decodes.Add(1) }
	if err := w.WarmUp(context.Background(), []int{256, 1024, 2048, 4096}); err != nil {
		t.Fatal(err)
	}
	if w.short.lctx == nil {
		t.Error("WarmUp(256, ...) did not create the short context that queries use")
	}
	// One decode call per context: the short one, which WarmUp always readies, and
	// the long one, which 256, 1024, 2048 and 4096 (capped at the context) go to.
	if n := decodes.Load(); n != 2 {
		t.Errorf("WarmUp made %d decode calls, want 2", n)
	}
	warm, err := w.Embed(context.Background(), seqs)
	if err != nil {
		t.Fatal(err)
	}
	for i := range seqs {
		if d := maxAbsDiff(cold[i], warm[i]); d != 0 {
			t.Errorf("sequence %d differs by %.3g after WarmUp", i, d)
		}
	}
}

// TestFullContextLoneCall embeds a sequence that fills its context and ends in a
// decode call of one token (256 tokens in calls of 255), the one round whose padding
// token (see decodeCall) needs a KV cell beyond the context's (kvCells): it must
// succeed, with the vector a context of twice the cells gives bit for bit. And
// kvCells asks for that cell there only: llama.cpp rounds n_ctx up to 256 cells.
func TestFullContextLoneCall(t *testing.T) {
	for _, c := range []struct{ ctx, batch, want int }{
		{8192, 256, 8192}, {512, 512, 512}, {256, 255, 257}, {513, 256, 514}, {100, 1, 101}, {1024, 100, 1024},
	} {
		if got := kvCells(c.ctx, c.batch); got != c.want {
			t.Errorf("kvCells(%d, %d) = %d; want %d", c.ctx, c.batch, got, c.want)
		}
	}
	full := openTiny(t, Config{ContextTokens: 256, BatchTokens: 255, MaxSeqs: 1, attention: attnPlain})
	roomy := openTiny(t, Config{ContextTokens: 512, BatchTokens: 255, MaxSeqs: 1, attention: attnPlain})
	seq := randomSeq(7, 256, full.Info().NVocab)
	got, want := embedOne(t, full, seq), embedOne(t, roomy, seq)
	if !slices.Equal(got, want) {
		t.Errorf("256 tokens in a 256-token context: max |Δ| %g to a 512-token context's vector; want the same bits", maxAbsDiff(got, want))
	}
}
