package llama

import (
	"context"
	"fmt"
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
