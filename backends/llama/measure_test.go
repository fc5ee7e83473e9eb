package llama

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/embed-stack/embed-stack/backends"
	"github.com/embed-stack/embed-stack/internal/reference"
	"github.com/embed-stack/embed-stack/internal/testenv"
)

// TestMeasure prints the figures docs/engine.md records; it runs only when
// EMBED_STACK_MEASURE names workloads, comma-separated, each NxLEN (N sequences of
// LEN tokens, embedded in one call, best of EMBED_STACK_MEASURE_RUNS runs, default 2).
// EMBED_STACK_BENCH_MODEL picks the model (default the tiny one),
// EMBED_STACK_MEASURE_ATTN the kernel (hybrid, what Open does; or plain, flash or
// flash-bf16v for every sequence), EMBED_STACK_MEASURE_PACK an encoder's pack limit
// (the longest sequence packed with flash attention; 0 packs none, unset keeps
// EncoderPackMaxTokens), EMBED_STACK_MEASURE_CTX and
// EMBED_STACK_BENCH_BATCH the context and decode-call sizes, EMBED_STACK_BENCH_THREADS
// the threads. Peak RSS is the whole test process's, so measure one setting per run:
//
//	EMBED_STACK_MEASURE=32x256,1x4096 EMBED_STACK_BENCH_MODEL=models/qwen3-0.6b-f16.gguf \
//	  go test ./backends/llama -run TestMeasure -v
func TestMeasure(t *testing.T) {
	spec := testenv.Get("EMBED_STACK_MEASURE")
	if spec == "" {
		t.Skip("set EMBED_STACK_MEASURE to measure (see the doc comment)")
	}
	rel := testenv.Get("EMBED_STACK_BENCH_MODEL")
	if rel == "" {
		rel = tinyModel
	}
	cfg := Config{ModelPath: modelFile(t, rel), ContextTokens: testenv.Int(t, "EMBED_STACK_MEASURE_CTX", 0),
		BatchTokens: testenv.Int(t, "EMBED_STACK_BENCH_BATCH", 0), Threads: testenv.Int(t, "EMBED_STACK_BENCH_THREADS", 0)}
	switch a := testenv.Get("EMBED_STACK_MEASURE_ATTN"); a {
	case "", "hybrid":
	case "plain":
		cfg.attention = attnPlain
	case "flash":
		cfg.attention = attnFlash
	case "flash-bf16v":
		cfg.attention = attnFlashBF16V
	case "flash-bf16":
		cfg.attention = attnFlashBF16
	default:
		t.Fatalf("EMBED_STACK_MEASURE_ATTN=%q: want hybrid, plain, flash, flash-bf16v or flash-bf16", a)
	}
	// EMBED_STACK_MEASURE_POOL=graph has llama.cpp pool an encoder's sequences
	// (its context's pooling_type) instead of the engine; 31 sequences a round,
	// since llama.cpp's MEAN graph aborts on the default 64 (see
	// TestGraphPoolingPacking). EMBED_STACK_MEASURE_SEQS sets the sequences a round.
	switch p := testenv.Get("EMBED_STACK_MEASURE_POOL"); p {
	case "", "engine":
	case "graph":
		cfg.graphPooling, cfg.MaxSeqs = true, 31
	default:
		t.Fatalf("EMBED_STACK_MEASURE_POOL=%q: want engine or graph", p)
	}
	if p := testenv.Get("EMBED_STACK_MEASURE_PACK"); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			t.Fatalf("EMBED_STACK_MEASURE_PACK=%q: want 0 or a positive number of tokens", p)
		}
		cfg.encoderPack = n
		if n == 0 {
			cfg.encoderPack = -1
		}
	}
	if n := testenv.Int(t, "EMBED_STACK_MEASURE_SEQS", 0); n > 0 {
		cfg.MaxSeqs = n
	}
	runs := max(1, testenv.Int(t, "EMBED_STACK_MEASURE_RUNS", 0))
	if testenv.Get("EMBED_STACK_MEASURE_RUNS") == "" {
		runs = 2
	}
	// llama.cpp logs the sizes of the buffers it reserves at debug level.
	logs := &recordHandler{level: slog.LevelDebug}
	prev := slog.Default()
	slog.SetDefault(slog.New(logs))
	start := time.Now()
	e, err := Open(cfg)
	slog.SetDefault(prev)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	info := e.Info()
	var buffers []string
	logs.mu.Lock()
	for _, r := range logs.recs {
		if strings.Contains(r.Message, "buffer size") {
			buffers = append(buffers, strings.TrimSpace(r.Message))
		}
	}
	logs.mu.Unlock()
	t.Logf("%s: ctx %d, batch %d, attention %v, encoders pack up to %d tokens, pooling %s (llama.cpp's: %v), opened in %s; RSS %d MiB (peak %d MiB); %s", rel, info.ContextTokens, info.BatchTokens,
		cfg.attention, e.shortMax, info.Pooling, cfg.graphPooling, time.Since(start).Round(time.Millisecond), statusKiB(t, "VmRSS")>>10, peakRSS(t)>>10, strings.Join(buffers, "; "))
	if spec == "open" {
		return
	}
	for _, w := range strings.Split(spec, ",") {
		var n, length int
		if _, err := fmt.Sscanf(w, "%dx%d", &n, &length); err != nil {
			t.Fatalf("workload %q: want NxLEN", w)
		}
		seqs := make([][]int32, n)
		for i := range seqs {
			seqs[i] = randomSeq(uint64(500+i), length, info.NVocab)
		}
		best, bestCPU := time.Duration(1<<63-1), time.Duration(1<<63-1)
		for range runs {
			st, cpu := time.Now(), cpuTime(t)
			if _, err := e.Embed(context.Background(), seqs); err != nil {
				t.Fatal(err)
			}
			best = min(best, time.Since(st))
			bestCPU = min(bestCPU, cpuTime(t)-cpu)
		}
		t.Logf("%s: best of %d %s wall, %s CPU: %.1f tokens/s, %.1f tokens per CPU-second; peak RSS so far %d MiB", w, runs,
			best.Round(time.Millisecond), bestCPU.Round(time.Millisecond), float64(n*length)/best.Seconds(),
			float64(n*length)/bestCPU.Seconds(), peakRSS(t)>>10)
	}
}

func (a attentionKind) String() string {
	switch a {
	case attnPlain:
		return "plain"
	case attnFlash:
		return "flash"
	case attnFlashBF16V:
		return "flash-bf16v"
	case attnFlashBF16:
		return "flash-bf16"
	}
	return "hybrid"
}

// cpuTime is the CPU time this process has used. On a machine shared with other
// work, CPU time per token (with one thread, where ggml's threads never spin
// waiting for each other) is the figure that does not depend on the others' load.
func cpuTime(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// peakRSS is this process's VmHWM in KiB (0 where /proc is absent).
func peakRSS(t *testing.T) int64 { return statusKiB(t, "VmHWM") }

// statusKiB reads a field of /proc/self/status in KiB (0 where /proc is absent).
func statusKiB(t *testing.T, field string) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return 0
}

// TestMeasureBuckets compares, on a mixed workload, the seed system's per-bucket
// contexts (one context per bucket of EMBED_STACK_MEASURE_BUCKETS, default
// 256,1024,8192; each sequence in the smallest that holds it) with one context of
// the largest bucket packing every sequence. Both run with one sequence per round
// (the seed's "x [1]") and with packing (64 sequences a round). It runs only when
// EMBED_STACK_MEASURE_MIX names the workload, NxLEN terms joined by "+" (for example
// 16x40+8x200+2x700); the model and threads are as for TestMeasure.
func TestMeasureBuckets(t *testing.T) {
	mix := testenv.Get("EMBED_STACK_MEASURE_MIX")
	if mix == "" {
		t.Skip("set EMBED_STACK_MEASURE_MIX to measure (see the doc comment)")
	}
	rel := testenv.Get("EMBED_STACK_BENCH_MODEL")
	if rel == "" {
		rel = tinyModel
	}
	model := modelFile(t, rel)
	threads := testenv.Int(t, "EMBED_STACK_BENCH_THREADS", 0)
	buckets := []int{256, 1024, 8192}
	if s := testenv.Get("EMBED_STACK_MEASURE_BUCKETS"); s != "" {
		buckets = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(f)
			if err != nil {
				t.Fatal(err)
			}
			buckets = append(buckets, n)
		}
	}
	var seqs [][]int32
	tokens := 0
	for _, term := range strings.Split(mix, "+") {
		var n, length int
		if _, err := fmt.Sscanf(term, "%dx%d", &n, &length); err != nil {
			t.Fatalf("term %q: want NxLEN", term)
		}
		for range n {
			seqs = append(seqs, randomSeq(uint64(900+len(seqs)), length, 151669))
			tokens += length
		}
	}
	// Interleave lengths as requests would arrive.
	rng := rand.New(rand.NewPCG(1, 2))
	rng.Shuffle(len(seqs), func(i, j int) { seqs[i], seqs[j] = seqs[j], seqs[i] })

	run := func(name string, maxSeqs int, perBucket bool) {
		ctxs := buckets[len(buckets)-1:]
		if perBucket {
			ctxs = buckets
		}
		engines := make([]*Engine, len(ctxs))
		for i, c := range ctxs {
			e, err := Open(Config{ModelPath: model, ContextTokens: c, MaxSeqs: maxSeqs, Threads: threads})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			engines[i] = e
			// One throwaway call, so that no configuration pays first-use costs.
			if _, err := e.Embed(context.Background(), [][]int32{randomSeq(1, 8, 151669)}); err != nil {
				t.Fatal(err)
			}
		}
		groups := make([][][]int32, len(ctxs))
		for _, s := range seqs {
			for i, c := range ctxs {
				if len(s) <= c {
					groups[i] = append(groups[i], s)
					break
				}
			}
		}
		start, cpu := time.Now(), cpuTime(t)
		for i, g := range groups {
			if len(g) == 0 {
				continue
			}
			if _, err := engines[i].Embed(context.Background(), g); err != nil {
				t.Fatal(err)
			}
		}
		took, used := time.Since(start), cpuTime(t)-cpu
		t.Logf("%-42s %8s wall %8s CPU  %6.1f tokens per CPU-second", name, took.Round(time.Millisecond), used.Round(time.Millisecond), float64(tokens)/used.Seconds())
	}
	t.Logf("%s: %d sequences, %d tokens (%s), buckets %v", rel, len(seqs), tokens, mix, buckets)
	run("per-bucket contexts, 1 sequence a round", 1, true)
	run("per-bucket contexts, packed", DefaultMaxSeqs, true)
	run("one context, 1 sequence a round", 1, false)
	run("one context, packed", DefaultMaxSeqs, false)
}

// TestMeasureWarmUp prints, for a fresh engine without and with WarmUp of the
// buckets in EMBED_STACK_MEASURE_BUCKETS (default 256,1024,8192), the CPU time of
// the first and the second input of each length in EMBED_STACK_MEASURE_WARMUP
// (comma-separated). Model, context and threads are as for TestMeasure.
func TestMeasureWarmUp(t *testing.T) {
	spec := testenv.Get("EMBED_STACK_MEASURE_WARMUP")
	if spec == "" {
		t.Skip("set EMBED_STACK_MEASURE_WARMUP to measure (see the doc comment)")
	}
	rel := testenv.Get("EMBED_STACK_BENCH_MODEL")
	if rel == "" {
		rel = tinyModel
	}
	var lengths []int
	for _, f := range strings.Split(spec, ",") {
		n, err := strconv.Atoi(f)
		if err != nil {
			t.Fatal(err)
		}
		lengths = append(lengths, n)
	}
	buckets := []int{256, 1024, 8192}
	cfg := Config{ModelPath: modelFile(t, rel), ContextTokens: testenv.Int(t, "EMBED_STACK_MEASURE_CTX", 0), Threads: testenv.Int(t, "EMBED_STACK_BENCH_THREADS", 0)}
	for _, warm := range []bool{false, true} {
		e, err := Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if warm {
			start := time.Now()
			if err := e.WarmUp(context.Background(), buckets); err != nil {
				t.Fatal(err)
			}
			t.Logf("WarmUp(%v) took %s", buckets, time.Since(start).Round(time.Millisecond))
		}
		for _, n := range lengths {
			seq := randomSeq(uint64(n), n, e.Info().NVocab)
			var cpu [2]time.Duration
			for i := range cpu {
				c := cpuTime(t)
				if _, err := e.Embed(context.Background(), [][]int32{seq}); err != nil {
					t.Fatal(err)
				}
				cpu[i] = cpuTime(t) - c
			}
			t.Logf("warm-up %-5v %5d tokens: first %s CPU, second %s CPU (first/second %.2f)", warm, n,
				cpu[0].Round(time.Millisecond), cpu[1].Round(time.Millisecond), cpu[0].Seconds()/cpu[1].Seconds())
		}
		e.Close()
	}
}

// TestMeasurePrecision prints the cosine to the float64 reference, on the tiny model,
// of a run of one repeated token and of random tokens of each length in
// EMBED_STACK_MEASURE_PRECISION (comma-separated), embedded the way Open does and,
// for comparison, with every kernel named in EMBED_STACK_MEASURE_ATTN (plain,
// flash, flash-bf16v, flash-bf16; comma-separated). The reference of 32768 tokens takes minutes.
func TestMeasurePrecision(t *testing.T) {
	spec := testenv.Get("EMBED_STACK_MEASURE_PRECISION")
	if spec == "" {
		t.Skip("set EMBED_STACK_MEASURE_PRECISION to measure (see the doc comment)")
	}
	kinds := []attentionKind{attnHybrid}
	for _, a := range strings.Split(testenv.Get("EMBED_STACK_MEASURE_ATTN"), ",") {
		switch a {
		case "plain":
			kinds = append(kinds, attnPlain)
		case "flash":
			kinds = append(kinds, attnFlash)
		case "flash-bf16v":
			kinds = append(kinds, attnFlashBF16V)
		case "flash-bf16":
			kinds = append(kinds, attnFlashBF16)
		}
	}
	ref, err := reference.Load(modelFile(t, tinyModel))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range strings.Split(spec, ",") {
		n, err := strconv.Atoi(f)
		if err != nil {
			t.Fatal(err)
		}
		rep := make([]int32, n)
		for i := range rep {
			rep[i] = 264 // " a"
		}
		rep[n-1] = endOfText
		for _, in := range []struct {
			name string
			seq  []int32
		}{{"repeated token", rep}, {"random tokens", randomSeq(77, n, 151669)}} {
			start := time.Now()
			want, err := ref.LastToken(in.seq)
			if err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			for _, k := range kinds {
				e := openTiny(t, Config{ContextTokens: (n + 63) / 64 * 64, attention: k})
				start := time.Now()
				got := embedOne(t, e, in.seq)
				t.Logf("%6d %-14s %-12v cosine %.9f (engine %s, reference %s)", n, in.name, k, cosine(got, want),
					time.Since(start).Round(time.Millisecond), took.Round(time.Millisecond))
				e.Close()
			}
		}
	}
}

// TestMeasureFlashAttention times embed-stack's flash attention (es_flash_attn) on
// one decode call of a long sequence of the 0.6B shape: EMBED_STACK_MEASURE_FA=N
// queries (a call's tokens) over N.. cells (EMBED_STACK_MEASURE_FA_CELLS, 4096 by
// default), 16 heads over 8 KV heads of 128, causal, on EMBED_STACK_BENCH_THREADS
// threads (2 by default), and prints its GFLOP/s (the scores and the product with
// V over the cells each query sees, two FLOPs a multiply-add).
func TestMeasureFlashAttention(t *testing.T) {
	n := testenv.Int(t, "EMBED_STACK_MEASURE_FA", 0)
	if n == 0 {
		t.Skip("set EMBED_STACK_MEASURE_FA to measure (see the doc comment)")
	}
	bf16Kernels(t)
	cells := testenv.Int(t, "EMBED_STACK_MEASURE_FA_CELLS", 4096)
	threads := testenv.Int(t, "EMBED_STACK_BENCH_THREADS", 2)
	setupAccel(backends.CPUAccelAuto)
	t.Cleanup(func() { accelBF16FMA(-1) })
	for _, fma := range []bool{false, true} {
		accelBF16FMA(boolInt(fma))
		a := accelAttention{Dim: 128, Cells: cells, QTokens: n, Heads: 16, KVHeads: 8}
		a.Timed = &struct {
			Runs    int
			Seconds float64
		}{Runs: 20}
		if _, _, _, ok := accelFlashAttn(a, threads, 1); !ok {
			t.Fatal("refused")
		}
		seen := float64(n)*float64(cells-n) + float64(n)*float64(n+1)/2
		flops := 4 * seen * 128 * 16
		t.Logf("%d queries over %d cells, %d threads, FMAs %v: %.2f ms, %.0f GFLOP/s", n, cells, threads, fma, a.Timed.Seconds*1e3, flops/a.Timed.Seconds/1e9)
	}
}

// TestMeasureIdle prints how long one short sequence takes after idle pauses: for
// each pause in EMBED_STACK_MEASURE_IDLE (milliseconds, comma-separated) it embeds
// EMBED_STACK_MEASURE_LEN tokens (default 17) eight times, sleeping the pause
// before each, over EMBED_STACK_MEASURE_RUNS rounds (default 3) that interleave the
// pauses. A query arriving after a quiet spell is what a search box sends.
func TestMeasureIdle(t *testing.T) {
	spec := testenv.Get("EMBED_STACK_MEASURE_IDLE")
	if spec == "" {
		t.Skip("set EMBED_STACK_MEASURE_IDLE to measure (see the doc comment)")
	}
	var pauses []time.Duration
	for _, f := range strings.Split(spec, ",") {
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 {
			t.Fatalf("EMBED_STACK_MEASURE_IDLE: %q is not a number of milliseconds", f)
		}
		pauses = append(pauses, time.Duration(n)*time.Millisecond)
	}
	rel := testenv.Get("EMBED_STACK_BENCH_MODEL")
	if rel == "" {
		rel = tinyModel
	}
	e, err := Open(Config{ModelPath: modelFile(t, rel), Threads: testenv.Int(t, "EMBED_STACK_BENCH_THREADS", 0)})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	length := max(1, testenv.Int(t, "EMBED_STACK_MEASURE_LEN", 17))
	seq := randomSeq(7, length, e.Info().NVocab)
	embed := func() time.Duration {
		st := time.Now()
		if _, err := e.Embed(context.Background(), [][]int32{seq}); err != nil {
			t.Fatal(err)
		}
		return time.Since(st)
	}
	for range 3 {
		embed()
	}
	runs := max(1, testenv.Int(t, "EMBED_STACK_MEASURE_RUNS", 3))
	for r := range runs {
		for _, p := range pauses {
			var ms []string
			var sum time.Duration
			for range 8 {
				time.Sleep(p)
				d := embed()
				sum += d
				ms = append(ms, strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', 1, 64))
			}
			t.Logf("round %d, pause %v: mean %.1f ms; %s", r+1, p, float64(sum.Microseconds())/8000, strings.Join(ms, " "))
		}
	}
}
