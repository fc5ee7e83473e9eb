package backends

import (
	"strings"
	"testing"
)

const (
	kv06 = 114688 // Qwen3-Embedding-0.6B's KV cache bytes per token, f16
	gib  = int64(1) << 30
)

// cpuCapacity sizes 32k inputs on the CPU.
func cpuCapacity(workers, tokens int, kvPerToken, avail int64, cpus int, warm ...int64) Capacity {
	return CapacityConfig{Workers: workers, Tokens: tokens, MaxInput: 32768, WarmContext: 8192, KVBytesPerToken: kvPerToken,
		Available: avail, CPUs: cpus, Warm: warm}.Capacity()
}

// gpuCapacity sizes 32k inputs beside an 8192-token warm worker on a GPU with free
// bytes free.
func gpuCapacity(workers, tokens int, weights, free int64, name string, warm ...int64) Capacity {
	d := &Device{Name: name, GPU: true, MemoryFree: free}
	if n, desc, ok := strings.Cut(name, " ("); ok {
		d.Name, d.Description = n, strings.TrimSuffix(desc, ")")
	}
	return CapacityConfig{Workers: workers, Tokens: tokens, MaxInput: 32768, WarmContext: 8192, KVBytesPerToken: kv06,
		WeightBytes: weights, Device: d, Warm: warm}.Capacity()
}

// admits says the bounds admit the longest input, as serve checks them.
func admits(l Capacity) bool { return l.Workers >= 1 && l.Tokens >= 32768 }

func TestCapacityCPU(t *testing.T) {
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
			l := cpuCapacity(tt.workers, tt.tokens, kv06, tt.avail, tt.cpus)
			if l.Workers != tt.wantWorkers || l.Tokens != tt.wantToks {
				t.Errorf("limits %d workers, %d tokens; want %d, %d (%s)", l.Workers, l.Tokens, tt.wantWorkers, tt.wantToks, l.Basis())
			}
			if !admits(l) {
				t.Errorf("the defaults do not admit the longest input: %+v", l)
			}
		})
	}
	// The tiny test model: 256 bytes of KV cache per token. The bound used to be what
	// 4 GiB hold at that cost (13 million tokens), logged as "0 KiB" per token.
	tiny := cpuCapacity(0, 0, 256, 0, 4)
	const tinyBasis = "available memory unknown, 8192 MiB assumed, half of it for ephemeral workers at 256 bytes of KV cache per token and 768 MiB each besides, 4 CPUs"
	if tiny.Workers != 1 || tiny.Tokens != 32768 || tiny.Basis() != tinyBasis {
		t.Errorf("tiny model: %d workers, %d tokens, basis %q; want 1, 32768, %q", tiny.Workers, tiny.Tokens, tiny.Basis(), tinyBasis)
	}
	const basis06 = "24576 MiB available, half of it for ephemeral workers at 112 KiB of KV cache per token and 768 MiB each besides, 2 CPUs"
	if got := cpuCapacity(0, 0, kv06, 24*gib, 2); got.Basis() != basis06 || got.Budget != 12*gib {
		t.Errorf("0.6B: basis %q, budget %d; want %q, 12 GiB", got.Basis(), got.Budget, basis06)
	}
}

// TestCapacityGPU: on a GPU every ephemeral worker holds its own weights and KV
// cache in device memory, after the warm worker's share.
func TestCapacityGPU(t *testing.T) {
	const weights = 1_200_000_000
	// An H200 (140 GiB free), 32k inputs, an 8192-token warm worker:
	// budget = 126 GiB - (weights + 1 GiB) - 8192 x 112 KiB; per worker
	// weights + 1 GiB + 32768 x 112 KiB = 6.7 GiB, so the cap of 4 applies.
	l := gpuCapacity(0, 0, weights, 140*gib, "CUDA0 (NVIDIA H200)")
	budget := 140*gib/10*9 - (weights + gib) - kv06*8192
	if wantTokens := int((budget - 4*(weights+gib)) / kv06); l.Workers != 4 || l.Tokens != wantTokens || l.Budget != budget {
		t.Errorf("H200: %d workers, %d tokens, budget %d; want 4, %d, %d", l.Workers, l.Tokens, l.Budget, wantTokens, budget)
	}
	const h200 = "CUDA0 (NVIDIA H200): 143360 MiB free, 9/10 of it for the workers, the warm worker's share off first; each ephemeral worker 1144 MiB of weights and 1024 MiB besides, 112 KiB of KV cache per token, at most 4 workers"
	if l.Basis() != h200 {
		t.Errorf("basis = %q\nwant    %q", l.Basis(), h200)
	}
	// A 12 GiB card: room for one 32k worker, and the token bound never below one
	// such input.
	if l := gpuCapacity(0, 0, weights, 12*gib, "CUDA0"); l.Workers != 1 || !admits(l) {
		t.Errorf("12 GiB: %d workers, %d tokens; want 1 and at least 32768", l.Workers, l.Tokens)
	}
	// Flags win.
	if l := gpuCapacity(2, 50000, weights, 140*gib, "x"); l.Workers != 2 || l.Tokens != 50000 {
		t.Errorf("flags: %+v", l)
	}
}

// TestCapacitySeveralModels: with several models, every warm worker beyond the
// largest comes off the ephemeral half of the memory (the other half was sized for
// one), and the rest is split evenly; one model is sized as before.
func TestCapacitySeveralModels(t *testing.T) {
	one := cpuCapacity(0, 0, kv06, 64*gib, 64)
	if alone := cpuCapacity(0, 0, kv06, 64*gib, 64, 3*gib); alone != one {
		t.Errorf("one model in Warm: %+v, want %+v", alone, one)
	}
	// 64 GiB: 32 for ephemeral workers; two more warm workers of 3 GiB leave 26,
	// 8.7 each. A 32k input costs 3.5 GiB of KV cache + 0.75: 2 workers fit, where
	// one model alone gets 7 (64 CPUs allow 8).
	three := cpuCapacity(0, 0, kv06, 64*gib, 64, 3*gib, 3*gib, 3*gib)
	perModel := (32*gib - 6*gib) / 3
	wantWorkers := int(perModel / (workerOverhead + kv06*32768))
	if three.Workers != wantWorkers || wantWorkers != 2 || three.Tokens != 2*32768 || one.Workers != 7 || three.Budget != perModel {
		t.Errorf("three models: %d workers, %d tokens (one model: %d); want %d, %d (%s)", three.Workers, three.Tokens, one.Workers, wantWorkers, 2*32768, three.Basis())
	}
	if !strings.HasSuffix(three.Basis(), "; 3 models: 6144 MiB off for the warm workers beyond the largest, the rest split 3 ways") {
		t.Errorf("basis %q", three.Basis())
	}
	// Warm workers that take all the memory still leave one admitted input per model.
	if none := cpuCapacity(0, 0, kv06, 8*gib, 64, 6*gib, 6*gib); none.Workers != 1 || none.Tokens != 32768 || !admits(none) {
		t.Errorf("no memory left: %+v", none)
	}
	// On a GPU every model's warm worker comes off first, this one's included.
	weights := int64(640 << 20)
	c := CapacityConfig{WarmContext: 8192, KVBytesPerToken: kv06, WeightBytes: weights, Device: &Device{GPU: true}}
	warm := c.WarmBytes()
	if warm != weights+kv06*8192+gpuWorkerOverhead {
		t.Errorf("WarmBytes on a GPU = %d", warm)
	}
	g1 := gpuCapacity(0, 0, weights, 40*gib, "GPU")
	g2 := gpuCapacity(0, 0, weights, 40*gib, "GPU", warm, warm)
	budget := (40 * gib / 10 * 9) - 2*warm
	if want := int(max(1, min(budget/2/(weights+gpuWorkerOverhead+kv06*32768), gpuMaxEphemeral))); g2.Workers != want || g2.Workers >= g1.Workers {
		t.Errorf("GPU, two models: %d workers (one model: %d); want %d", g2.Workers, g1.Workers, want)
	}
	if !strings.HasSuffix(g2.Basis(), "; 2 models: all their warm workers off first, the rest split 2 ways") {
		t.Errorf("GPU basis %q", g2.Basis())
	}
	c.Device = nil
	if got := c.WarmBytes(); got != weights+kv06*8192+workerOverhead {
		t.Errorf("WarmBytes on the CPU = %d", got)
	}
}
