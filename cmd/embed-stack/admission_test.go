package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/embed-stack/embed-stack/backends"
	"github.com/embed-stack/embed-stack/internal/testrepo"
)

// TestKVBytesPerToken: layers x KV heads x (key + value width) x 2 bytes.
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
		got, err := kvBytesPerToken(path)
		if err != nil || got != tt.want {
			t.Errorf("kvBytesPerToken(%s) = %d, %v; want %d", tt.model, got, err, tt.want)
		}
	}
}

func TestDefaultEphemeralLimits(t *testing.T) {
	const kv06 = 114688 // 0.6B
	const gib = int64(1) << 30
	tests := []struct {
		name                  string
		workers, tokens       int
		avail                 int64
		cpus                  int
		wantWorkers, wantToks int
	}{
		// 24 GiB: 12 GiB for ephemeral workers; a 32k input costs 3.5 GiB + 0.75. The
		// memory would hold more tokens than the workers can: the workers bound them.
		{"0.6B, 24 GiB, 2 CPUs", 0, 0, 24 * gib, 2, 1, 32768},
		{"0.6B, 64 GiB, 16 CPUs", 0, 0, 64 * gib, 16, 2, 2 * 32768},
		{"0.6B, 128 GiB, 64 CPUs: memory bounds the count", 0, 0, 128 * gib, 64, 8, 8 * 32768},
		// More workers than the memory holds at full length: the memory bounds the tokens.
		{"0.6B, 24 GiB, 8 workers by flag", 8, 0, 24 * gib, 2, 8, int((12*gib - 8*workerOverhead) / kv06)},
		// Too little memory for one longest input: it is still admitted (alone).
		{"0.6B, 4 GiB", 0, 0, 4 * gib, 8, 1, 32768},
		{"flags win", 3, 50000, 64 * gib, 16, 3, 50000},
		{"unknown memory: 8 GiB assumed, too little for more", 0, 0, 0, 4, 1, 32768},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := defaultEphemeralLimits(tt.workers, tt.tokens, 32768, kv06, tt.avail, tt.cpus)
			if l.workers != tt.wantWorkers || l.tokens != tt.wantToks {
				t.Errorf("limits %d workers, %d tokens; want %d, %d (%s)", l.workers, l.tokens, tt.wantWorkers, tt.wantToks, l.basis)
			}
			if err := checkEphemeralLimits(l, 32768); err != nil {
				t.Errorf("the defaults fail their own check: %v", err)
			}
		})
	}
	// The tiny test model: 256 bytes of KV cache per token. The bound used to be what
	// 4 GiB hold at that cost (13 million tokens), logged as "0 KiB" per token.
	tiny := defaultEphemeralLimits(0, 0, 32768, 256, 0, 4)
	const tinyBasis = "available memory unknown, 8192 MiB assumed, half of it for ephemeral workers at 256 bytes of KV cache per token and 768 MiB each besides, 4 CPUs"
	if tiny.workers != 1 || tiny.tokens != 32768 || tiny.basis != tinyBasis {
		t.Errorf("tiny model: %d workers, %d tokens, basis %q; want 1, 32768, %q", tiny.workers, tiny.tokens, tiny.basis, tinyBasis)
	}
	if got := defaultEphemeralLimits(0, 0, 32768, kv06, 24*gib, 2).basis; !strings.Contains(got, " at 112 KiB of KV cache per token ") {
		t.Errorf("0.6B basis %q, want 112 KiB per token", got)
	}
	err := checkEphemeralLimits(ephemeralLimits{workers: 1, tokens: 1000}, 32768)
	if err == nil || err.Error() != "--max-ephemeral-tokens (1000) is below --max-input-tokens (32768): the longest inputs would only ever run alone; raise it or lower --max-input-tokens" {
		t.Errorf("checkEphemeralLimits: %v", err)
	}
}

func TestCheckRoutingFlags(t *testing.T) {
	base := func() *serveFlags {
		return &serveFlags{warmBuckets: "256,1024,8192", warmMaxTokens: 4096, batchMaxTokens: 2048, ephemeralQueue: 8, batchWindow: time.Millisecond}
	}
	f := base()
	if err := checkRoutingFlags(f); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(f.buckets, []int{256, 1024, 4096}) {
		t.Errorf("buckets %v, want [256 1024 4096]: capped at --warm-max-tokens", f.buckets)
	}
	for _, tt := range []struct {
		change func(*serveFlags)
		want   string
	}{
		{func(f *serveFlags) { f.warmBuckets = "256,big" }, `--warm-buckets: "big" is not a positive number of tokens; give comma-separated token counts such as 256,1024,8192`},
		{func(f *serveFlags) { f.maxEphemeral = -1 }, "--max-ephemeral must not be negative (0 picks the default); got -1"},
		{func(f *serveFlags) { f.batchMaxTokens = 0 }, "--batch-max-tokens must be at least 1; got 0"},
		{func(f *serveFlags) { f.batchWindow = -time.Second }, "--batch-window must not be negative (0 turns batching off); got -1s"},
	} {
		f := base()
		tt.change(f)
		if err := checkRoutingFlags(f); err == nil || err.Error() != tt.want {
			t.Errorf("err = %v\nwant %s", err, tt.want)
		}
	}
}

func TestWarmStartError(t *testing.T) {
	err := warmStartError(fmt.Errorf("starting the warm worker: %w", &backends.CapacityError{PID: 7, MaxTokens: 4096, Want: 8192}), 8192)
	const want = "--warm-max-tokens is 8192 but the warm worker holds inputs of at most 4096 tokens; lower --warm-max-tokens to 4096"
	if !strings.HasPrefix(err.Error(), want) {
		t.Errorf("message %q\nwant it to start %q", err, want)
	}
	err = warmStartError(fmt.Errorf("starting the warm worker: %w", &backends.DimensionError{PID: 7, NEmbd: 768, Want: 1024}), 8192)
	const wantDim = "the warm worker computes 768-dimensional vectors but --model has 1024; with --warm-backend mlx, give --mlx-model the same model as --model: starting the warm worker: the worker (pid 7) computes 768-dimensional vectors, but the model has 1024: is it running another model?"
	if err.Error() != wantDim {
		t.Errorf("message %q\nwant %q", err, wantDim)
	}
	other := errors.New("boom")
	if err := warmStartError(other, 8192); !errors.Is(err, other) || err.Error() != "warm worker: boom" {
		t.Errorf("other failure: %v", err)
	}
}
