package llama

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestMeasure prints the figures docs/engine.md records; it runs only when
// EMBED_STACK_MEASURE names workloads, comma-separated, each NxLEN (N sequences of
// LEN tokens, embedded in one call, best of EMBED_STACK_MEASURE_RUNS runs, default 2).
// EMBED_STACK_BENCH_MODEL picks the model (default the tiny one),
// EMBED_STACK_MEASURE_ATTN the kernel (plain or flash), EMBED_STACK_MEASURE_CTX and
// EMBED_STACK_BENCH_BATCH the context and decode-call sizes, EMBED_STACK_BENCH_THREADS
// the threads. Peak RSS is the whole test process's, so measure one setting per run:
//
//	EMBED_STACK_MEASURE=32x256,1x4096 EMBED_STACK_BENCH_MODEL=models/qwen3-0.6b-f16.gguf \
//	  go test ./backends/llama -run TestMeasure -v
func TestMeasure(t *testing.T) {
	spec := os.Getenv("EMBED_STACK_MEASURE")
	if spec == "" {
		t.Skip("set EMBED_STACK_MEASURE to measure (see the doc comment)")
	}
	rel := os.Getenv("EMBED_STACK_BENCH_MODEL")
	if rel == "" {
		rel = tinyModel
	}
	cfg := Config{ModelPath: modelFile(t, rel), ContextTokens: envInt(t, "EMBED_STACK_MEASURE_CTX"),
		BatchTokens: envInt(t, "EMBED_STACK_BENCH_BATCH"), Threads: envInt(t, "EMBED_STACK_BENCH_THREADS")}
	switch a := os.Getenv("EMBED_STACK_MEASURE_ATTN"); a {
	case "", "plain":
	case "flash":
		cfg.attention = attnFlash
	default:
		t.Fatalf("EMBED_STACK_MEASURE_ATTN=%q: want plain or flash", a)
	}
	runs := max(1, envInt(t, "EMBED_STACK_MEASURE_RUNS"))
	if os.Getenv("EMBED_STACK_MEASURE_RUNS") == "" {
		runs = 2
	}
	start := time.Now()
	e, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	info := e.Info()
	t.Logf("%s: ctx %d, batch %d, attention %v, opened in %s, peak RSS %d MiB", rel, info.ContextTokens, info.BatchTokens,
		cfg.attention, time.Since(start).Round(time.Millisecond), peakRSS(t)>>10)
	for _, w := range strings.Split(spec, ",") {
		var n, length int
		if _, err := fmt.Sscanf(w, "%dx%d", &n, &length); err != nil {
			t.Fatalf("workload %q: want NxLEN", w)
		}
		seqs := make([][]int32, n)
		for i := range seqs {
			seqs[i] = randomSeq(uint64(500+i), length, info.NVocab)
		}
		best := time.Duration(1<<63 - 1)
		for range runs {
			st := time.Now()
			if _, err := e.Embed(context.Background(), seqs); err != nil {
				t.Fatal(err)
			}
			best = min(best, time.Since(st))
		}
		t.Logf("%s: best of %d %s, %.1f tokens/s; peak RSS so far %d MiB", w, runs, best.Round(time.Millisecond),
			float64(n*length)/best.Seconds(), peakRSS(t)>>10)
	}
}

func (a attentionKind) String() string {
	if a == attnFlash {
		return "flash"
	}
	return "plain"
}

func envInt(t *testing.T, name string) int {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return 0
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, s, err)
	}
	return n
}

// peakRSS is this process's VmHWM in KiB (0 where /proc is absent).
func peakRSS(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
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
	mix := os.Getenv("EMBED_STACK_MEASURE_MIX")
	if mix == "" {
		t.Skip("set EMBED_STACK_MEASURE_MIX to measure (see the doc comment)")
	}
	rel := os.Getenv("EMBED_STACK_BENCH_MODEL")
	if rel == "" {
		rel = tinyModel
	}
	model := modelFile(t, rel)
	threads := envInt(t, "EMBED_STACK_BENCH_THREADS")
	buckets := []int{256, 1024, 8192}
	if s := os.Getenv("EMBED_STACK_MEASURE_BUCKETS"); s != "" {
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
		start := time.Now()
		for i, g := range groups {
			if len(g) == 0 {
				continue
			}
			if _, err := engines[i].Embed(context.Background(), g); err != nil {
				t.Fatal(err)
			}
		}
		took := time.Since(start)
		t.Logf("%-40s %8s  %6.1f tokens/s", name, took.Round(time.Millisecond), float64(tokens)/took.Seconds())
	}
	t.Logf("%s: %d sequences, %d tokens (%s), buckets %v", rel, len(seqs), tokens, mix, buckets)
	run("per-bucket contexts, 1 sequence a round", 1, true)
	run("per-bucket contexts, packed", DefaultMaxSeqs, true)
	run("one context, 1 sequence a round", 1, false)
	run("one context, packed", DefaultMaxSeqs, false)
}
