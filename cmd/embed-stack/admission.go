package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"

	"github.com/embed-stack/embed-stack/backends"
	"github.com/embed-stack/embed-stack/gguf"
	"github.com/embed-stack/embed-stack/internal/hostmem"
)

// kvBytesPerToken is what one token costs in a worker's KV cache: K and V, f16, in
// every layer, for the model's KV heads (gguf.Shape.KVBytesPerToken). 114688 bytes
// (112 KiB) for Qwen3-Embedding-0.6B.
func kvBytesPerToken(path string) (int64, error) {
	s, err := gguf.ReadShape(path)
	if err == nil {
		err = s.Require(gguf.KeyBlockCount, gguf.KeyHeadCount, gguf.KeyEmbeddingLength)
	}
	if err != nil {
		return 0, fmt.Errorf("model %s: %w", path, err)
	}
	const f16 = 2
	return s.KVBytesPerToken(f16), nil
}

const (
	// ephemeralShare is the part of the available memory that ephemeral workers
	// may use by default; the rest is the warm worker's, the page cache's (the
	// weights are memory-mapped) and everybody else's.
	ephemeralShare = 2
	// fallbackMemory is assumed available where it cannot be read.
	fallbackMemory = 8 << 30
	// workerOverhead is what an ephemeral worker holds besides its KV cache: the
	// attention scores and other compute buffers (llama.DefaultAttentionBytes, 512
	// MiB, at most, and about half that again for the rest), and the process.
	workerOverhead = 768 << 20
)

// ephemeralLimits are the admission bounds of the ephemeral workers.
type ephemeralLimits struct {
	workers int // --max-ephemeral
	tokens  int // --max-ephemeral-tokens
	// basis says how the defaults were reached, for the log.
	basis string
}

// defaultEphemeralLimits fills the bounds a flag left at 0 from the machine: half
// the available memory (avail, or fallbackMemory when unknown) is the ephemeral
// workers'; each costs workerOverhead plus kvPerToken per token of its input. The
// worker count is what that memory holds for inputs of maxInput tokens, and at most
// one per 8 CPUs (each worker decodes with every CPU, so more at once only take
// turns), at least 1. The token bound is what the memory left after the workers'
// overhead holds, but no more than the workers can hold at once (each one input
// of at most maxInput tokens: a bigger figure bounds nothing, and a small model's
// few bytes per token made it tens of millions), and never less than one input of
// maxInput tokens, which could otherwise never be admitted.
func defaultEphemeralLimits(workers, tokens, maxInput int, kvPerToken, avail int64, cpus int) ephemeralLimits {
	return sharedEphemeralLimits(workers, tokens, maxInput, kvPerToken, avail, cpus, memShare{})
}

// memShare describes the other models of a server with several (issue 17), whose
// workers take from the same memory as this model's.
type memShare struct {
	// warm is every model's warm worker memory (warmBytes), this one's included;
	// a worker stopped by --keep-alive counts, since the next request starts it.
	warm []int64
}

// extra is the warm memory beyond the largest worker's: the half of the memory
// that is not the ephemeral workers' was sized for one warm worker, so any other
// comes off the ephemeral half.
func (s memShare) extra() int64 {
	var sum, largest int64
	for _, b := range s.warm {
		sum, largest = sum+b, max(largest, b)
	}
	return sum - largest
}

// models is how many models split the ephemeral budget (at least 1).
func (s memShare) models() int64 { return int64(max(1, len(s.warm))) }

// sharedEphemeralLimits is defaultEphemeralLimits for one of several models: the
// ephemeral half, less the warm workers beyond the largest (memShare.extra), is
// split evenly between the models, each of which runs its own ephemeral workers.
// An even split bounds the sum whatever the traffic; a model may get fewer
// workers than a shared pool would give it, never more memory than there is.
func sharedEphemeralLimits(workers, tokens, maxInput int, kvPerToken, avail int64, cpus int, s memShare) ephemeralLimits {
	known := avail > 0
	if !known {
		avail = fallbackMemory
	}
	budget := max(0, avail/ephemeralShare-s.extra()) / s.models()
	maxCtx := int64(backends.EphemeralContextSize(maxInput))
	l := ephemeralLimits{workers: workers, tokens: tokens}
	if l.workers == 0 {
		perWorker := workerOverhead + kvPerToken*maxCtx
		l.workers = int(max(1, min(budget/perWorker, int64(max(1, cpus/8)))))
	}
	if l.tokens == 0 {
		fit := (budget - int64(l.workers)*workerOverhead) / max(kvPerToken, 1)
		l.tokens = int(max(maxCtx, min(fit, int64(l.workers)*maxCtx)))
	}
	src := fmt.Sprintf("%d MiB available", avail>>20)
	if !known {
		src = fmt.Sprintf("available memory unknown, %d MiB assumed", avail>>20)
	}
	l.basis = fmt.Sprintf("%s, half of it for ephemeral workers at %s of KV cache per token and %d MiB each besides, %d CPUs",
		src, kvSize(kvPerToken), workerOverhead>>20, cpus)
	if s.models() > 1 {
		l.basis += fmt.Sprintf("; %d models: %d MiB off for the warm workers beyond the largest, the rest split %d ways", s.models(), s.extra()>>20, s.models())
	}
	return l
}

// kvSize words a KV cost per token for the log: "112 KiB" for Qwen3-Embedding-0.6B,
// "256 bytes" for the tiny test model (in KiB it would read 0).
func kvSize(b int64) string {
	if b >= 1<<10 && b%(1<<10) == 0 {
		return fmt.Sprintf("%d KiB", b>>10)
	}
	return fmt.Sprintf("%d bytes", b)
}

// GPU sizing. NOT MEASURED: chosen by reasoning, to be checked on a GPU
// (scripts/gpu-check.sh).
const (
	// gpuShareNum/gpuShareDen of the device's free memory is the workers', the
	// rest is left for the driver and fragmentation.
	gpuShareNum, gpuShareDen = 9, 10
	// gpuWorkerOverhead is a worker's device memory besides weights and KV cache:
	// the CUDA context and the compute buffers of 2048-token decode calls.
	gpuWorkerOverhead = 1 << 30
	// gpuMaxEphemeral caps the count: the workers share one GPU's compute, so
	// more at once mostly take turns.
	gpuMaxEphemeral = 4
)

// gpuEphemeralLimits fills the bounds a flag left at 0 for workers on a GPU, where
// each ephemeral worker holds its own copy of the weights (weightBytes) and its KV
// cache in device memory. free is the device's free memory before any worker has
// loaded; the warm worker's share (weights, a warmCtx-token KV cache, overhead)
// comes off first. The count is what the rest holds for inputs of maxInput tokens
// (1 to gpuMaxEphemeral), the token bound what it holds after the workers' weights
// and overhead, never less than one maxInput input.
func gpuEphemeralLimits(workers, tokens, maxInput, warmCtx int, kvPerToken, weightBytes, free int64, device string) ephemeralLimits {
	return sharedGPUEphemeralLimits(workers, tokens, maxInput, warmCtx, kvPerToken, weightBytes, free, device, memShare{})
}

// sharedGPUEphemeralLimits is gpuEphemeralLimits for one of several models: every
// model's warm worker comes off the device's memory first (s.warm, this one's
// included), and the rest is split evenly between the models.
func sharedGPUEphemeralLimits(workers, tokens, maxInput, warmCtx int, kvPerToken, weightBytes, free int64, device string, s memShare) ephemeralLimits {
	perWorker := weightBytes + gpuWorkerOverhead
	budget := free/gpuShareDen*gpuShareNum - perWorker - kvPerToken*int64(warmCtx)
	if len(s.warm) > 0 {
		var sum int64
		for _, b := range s.warm {
			sum += b
		}
		budget = (free/gpuShareDen*gpuShareNum - sum) / s.models()
	}
	maxCtx := int64(backends.EphemeralContextSize(maxInput))
	l := ephemeralLimits{workers: workers, tokens: tokens}
	if l.workers == 0 {
		l.workers = int(max(1, min(budget/(perWorker+kvPerToken*maxCtx), gpuMaxEphemeral)))
	}
	if l.tokens == 0 {
		fit := (budget - int64(l.workers)*perWorker) / max(kvPerToken, 1)
		l.tokens = int(max(maxCtx, min(fit, 1<<30)))
	}
	l.basis = fmt.Sprintf("%s: %d MiB free, %d/%d of it for the workers, the warm worker's share off first; each ephemeral worker %d MiB of weights and %d MiB besides, %s of KV cache per token, at most %d workers",
		device, free>>20, gpuShareNum, gpuShareDen, weightBytes>>20, gpuWorkerOverhead>>20, kvSize(kvPerToken), gpuMaxEphemeral)
	if s.models() > 1 {
		l.basis += fmt.Sprintf("; %d models: all their warm workers off first, the rest split %d ways", s.models(), s.models())
	}
	return l
}

// checkEphemeralLimits refuses bounds under which the longest accepted input could
// never run.
func checkEphemeralLimits(l ephemeralLimits, maxInput int) error {
	if l.tokens < maxInput {
		return fmt.Errorf("--max-ephemeral-tokens (%d) is below --max-input-tokens (%d): the longest inputs would only ever run alone; raise it or lower --max-input-tokens", l.tokens, maxInput)
	}
	if l.workers < 1 {
		return errors.New("--max-ephemeral must be at least 1")
	}
	return nil
}

// checkRoutingFlags checks and parses serve's flags for long inputs and batching.
func checkRoutingFlags(f *serveFlags) error {
	for _, c := range []struct {
		name string
		v    int
	}{{"--max-ephemeral", f.maxEphemeral}, {"--max-ephemeral-tokens", f.maxEphemeralTokens}, {"--ephemeral-queue", f.ephemeralQueue}, {"--ephemeral-nice", f.ephemeralNice}} {
		if c.v < 0 {
			return fmt.Errorf("%s must not be negative (0 picks the default); got %d", c.name, c.v)
		}
	}
	if f.ephemeralNice > 19 {
		return fmt.Errorf("--ephemeral-nice must be 0 to 19; got %d", f.ephemeralNice)
	}
	if f.batchMaxTokens < 1 {
		return fmt.Errorf("--batch-max-tokens must be at least 1; got %d", f.batchMaxTokens)
	}
	if f.batchWindow < 0 {
		return fmt.Errorf("--batch-window must not be negative (0 turns batching off); got %s", f.batchWindow)
	}
	buckets, err := backends.ParseLengths(f.warmBuckets)
	if err != nil {
		return fmt.Errorf("--warm-buckets: %w; give comma-separated token counts such as 256,1024,8192", err)
	}
	for i, b := range buckets {
		buckets[i] = min(b, f.warmMaxTokens)
	}
	f.buckets = slices.Compact(buckets)
	return nil
}

// warmStartError words a failed start of the warm worker, naming the flag to change
// when the worker holds shorter inputs than --warm-max-tokens.
func warmStartError(err error, warmMax int) error {
	var ce *backends.CapacityError
	if errors.As(err, &ce) {
		return fmt.Errorf("--warm-max-tokens is %d but the warm worker holds inputs of at most %d tokens; lower --warm-max-tokens to %d (longer inputs then go to ephemeral workers): %w",
			warmMax, ce.MaxTokens, ce.MaxTokens, err)
	}
	var de *backends.DimensionError
	if errors.As(err, &de) {
		return fmt.Errorf("the warm worker computes %d-dimensional vectors but --model has %d; with --warm-backend mlx, give --mlx-model the same model as --model: %w", de.NEmbd, de.Want, err)
	}
	return fmt.Errorf("warm worker: %w", err)
}

// ephemeralLimits returns the admission bounds of the ephemeral workers: the flags,
// with those left at 0 sized to this machine and model (defaultEphemeralLimits).
func (e *engine) ephemeralLimits(workers, tokens, maxInput, warmCtx int) (ephemeralLimits, error) {
	return e.sharedEphemeralLimits(workers, tokens, maxInput, warmCtx, memShare{})
}

// sharedEphemeralLimits is ephemeralLimits for one of several models (s).
func (e *engine) sharedEphemeralLimits(workers, tokens, maxInput, warmCtx int, s memShare) (ephemeralLimits, error) {
	kv, err := kvBytesPerToken(e.modelPath)
	if err != nil {
		return ephemeralLimits{}, err
	}
	if d := e.device; d != nil && d.GPU {
		st, err := os.Stat(e.modelPath)
		if err != nil {
			return ephemeralLimits{}, fmt.Errorf("model: %w", err)
		}
		l := sharedGPUEphemeralLimits(workers, tokens, maxInput, warmCtx, kv, st.Size(), d.MemoryFree, d.Name+" ("+d.Description+")", s)
		return l, checkEphemeralLimits(l, maxInput)
	}
	mem, _ := hostmem.Read()
	avail := mem.Available
	l := sharedEphemeralLimits(workers, tokens, maxInput, kv, avail, runtime.NumCPU(), s)
	return l, checkEphemeralLimits(l, maxInput)
}

// warmBytes is what the engine's warm worker holds once loaded: the weights
// (memory-mapped on the CPU, copied to a GPU), a KV cache of warmCtx tokens, and a
// worker's compute buffers and process (workerOverhead, gpuWorkerOverhead on a GPU).
func (e *engine) warmBytes(warmCtx int) (int64, error) {
	kv, err := kvBytesPerToken(e.modelPath)
	if err != nil {
		return 0, err
	}
	st, err := os.Stat(e.modelPath)
	if err != nil {
		return 0, fmt.Errorf("model: %w", err)
	}
	overhead := int64(workerOverhead)
	if d := e.device; d != nil && d.GPU {
		overhead = gpuWorkerOverhead
	}
	return st.Size() + kv*int64(warmCtx) + overhead, nil
}

// ephemeralQueue turns --ephemeral-queue into routing.Config.EphemeralQueue, where
// 0 means the default and a negative value none.
func ephemeralQueue(flag int) int {
	if flag == 0 {
		return -1
	}
	return flag
}
