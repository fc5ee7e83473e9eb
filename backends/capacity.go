package backends

import (
	"fmt"
	"os"
	"runtime"

	"github.com/embed-stack/embed-stack/internal/hostmem"
)

// Host memory sizing of the ephemeral workers.
const (
	// ephemeralShare: 1/ephemeralShare of the available memory is what ephemeral
	// workers may use by default; the rest is the warm worker's, the page cache's
	// (the weights are memory-mapped) and everybody else's.
	ephemeralShare = 2
	// fallbackMemory is assumed available where it cannot be read.
	fallbackMemory = 8 << 30
	// workerOverhead is what a worker on the CPU holds besides its KV cache: the
	// attention scores and other compute buffers (llama.DefaultAttentionBytes, 512
	// MiB, at most, and about half that again for the rest), and the process.
	workerOverhead = 768 << 20
)

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

// CapacityConfig is what one model's ephemeral workers are sized from: the bounds
// asked for, the model's costs and the machine. Fill it with the model's figures
// and HostMemory, then call Capacity.
type CapacityConfig struct {
	// Workers and Tokens are the bounds asked for (serve's --max-ephemeral and
	// --max-ephemeral-tokens); 0 sizes one from the memory.
	Workers, Tokens int
	// MaxInput is the longest input in tokens (--max-input-tokens); an ephemeral
	// worker for it has a context of EphemeralContextSize(MaxInput).
	MaxInput int
	// WarmContext is the warm worker's context in tokens (--warm-max-tokens).
	WarmContext int
	// KVBytesPerToken is what one token costs in a worker's KV cache.
	KVBytesPerToken int64
	// WeightBytes is the size of the GGUF: what each worker on a GPU copies to
	// device memory (on the CPU the weights are memory-mapped and shared).
	WeightBytes int64
	// Device is where the workers compute; nil, or a device that is not a GPU,
	// means the CPU and the host's memory.
	Device *Device
	// Available is the host's available memory in bytes (MemAvailable); 0 when
	// unknown, when fallbackMemory is assumed.
	Available int64
	// CPUs is the number of CPUs the workers decode with.
	CPUs int
	// Warm is every model's warm worker memory (WarmBytes) when a server runs
	// several models, whose workers draw on the same memory, this one's included
	// (a worker stopped by --keep-alive counts, since the next request starts it).
	// nil or one entry: this model alone.
	Warm []int64
}

// HostMemory fills c's Available and CPUs from this machine.
func (c *CapacityConfig) HostMemory() {
	mem, _ := hostmem.Read()
	c.Available, c.CPUs = mem.Available, runtime.NumCPU()
}

// WeightsOf fills c's WeightBytes with the size of the GGUF at path.
func (c *CapacityConfig) WeightsOf(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("model: %w", err)
	}
	c.WeightBytes = st.Size()
	return nil
}

// gpu says the workers compute on a GPU.
func (c CapacityConfig) gpu() bool { return c.Device != nil && c.Device.GPU }

// WarmBytes is what the model's warm worker holds once loaded: the weights
// (memory-mapped on the CPU, copied to a GPU), a KV cache of WarmContext tokens,
// and a worker's compute buffers and process (workerOverhead, gpuWorkerOverhead on
// a GPU).
func (c CapacityConfig) WarmBytes() int64 {
	overhead := int64(workerOverhead)
	if c.gpu() {
		overhead = gpuWorkerOverhead
	}
	return c.WeightBytes + c.KVBytesPerToken*int64(c.WarmContext) + overhead
}

// Capacity is the admission bound of one model's ephemeral workers, and what it
// was reckoned from, so that it explains itself (Basis) in the log. Workers and
// Tokens are the bounds asked for where they were set.
type Capacity struct {
	// Workers is how many ephemeral workers may run at once.
	Workers int
	// Tokens is how many tokens the running ephemeral workers may hold together,
	// which bounds their KV cache memory.
	Tokens int

	// GPU says the workers compute on Device ("CUDA0 (NVIDIA H200)"); else on the
	// CPU.
	GPU    bool
	Device string
	// Memory is the host memory available (MemoryKnown false: fallbackMemory,
	// assumed), or the device's free memory before any worker loaded.
	Memory      int64
	MemoryKnown bool
	// Budget is the memory this model's ephemeral workers may use: on the CPU the
	// ephemeral half of Memory, less the warm workers beyond the largest
	// (WarmExtra); on a GPU 9/10 of Memory less every warm worker; split between
	// Models.
	Budget int64
	// WorkerBytes is what each ephemeral worker holds besides its KV cache:
	// workerOverhead on the CPU, the weights (WeightBytes) and gpuWorkerOverhead
	// on a GPU.
	WorkerBytes, WeightBytes int64
	// KVBytesPerToken is the KV cache's cost of one token.
	KVBytesPerToken int64
	// CPUs the workers decode with.
	CPUs int
	// Models is how many models split the memory, and WarmExtra (on the CPU) the
	// warm memory beyond the largest model's that came off the ephemeral half.
	Models    int
	WarmExtra int64
}

// Capacity sizes the bounds c leaves at 0.
//
// On the CPU, half the available memory (or fallbackMemory when unknown) is the
// ephemeral workers'; each costs workerOverhead plus KVBytesPerToken per token of
// its input. The worker count is what that memory holds for inputs of MaxInput
// tokens, and at most one per 8 CPUs (each worker decodes with every CPU, so more
// at once only take turns), at least 1. The token bound is what the memory left
// after the workers' overhead holds, but no more than the workers can hold at once
// (each one input of at most MaxInput tokens: a bigger figure bounds nothing, and a
// small model's few bytes per token made it tens of millions), and never less than
// one input of MaxInput tokens, which could otherwise never be admitted.
//
// On a GPU each ephemeral worker holds its own copy of the weights and its KV cache
// in device memory. The device's free memory is read before any worker has loaded;
// the warm worker's share (weights, a WarmContext-token KV cache, overhead) comes
// off first. The count is what the rest holds for inputs of MaxInput tokens (1 to
// gpuMaxEphemeral), the token bound what it holds after the workers' weights and
// overhead, never less than one MaxInput input.
//
// With several models (Warm), on the CPU the ephemeral half less the warm workers
// beyond the largest (the other half was sized for one) is split evenly between
// the models, each of which runs its own ephemeral workers; on a GPU every model's
// warm worker comes off first and the rest is split evenly. An even split bounds
// the sum whatever the traffic: a model may get fewer workers than a shared pool
// would give it, never more memory than there is.
func (c CapacityConfig) Capacity() Capacity {
	if c.gpu() {
		return c.gpuCapacity()
	}
	l := Capacity{Workers: c.Workers, Tokens: c.Tokens, Memory: c.Available, MemoryKnown: c.Available > 0,
		WorkerBytes: workerOverhead, KVBytesPerToken: c.KVBytesPerToken, CPUs: c.CPUs, Models: max(1, len(c.Warm))}
	if !l.MemoryKnown {
		l.Memory = fallbackMemory
	}
	var sum, largest int64
	for _, b := range c.Warm {
		sum, largest = sum+b, max(largest, b)
	}
	l.WarmExtra = sum - largest
	l.Budget = max(0, l.Memory/ephemeralShare-l.WarmExtra) / int64(l.Models)
	maxCtx := int64(EphemeralContextSize(c.MaxInput))
	if l.Workers == 0 {
		perWorker := workerOverhead + c.KVBytesPerToken*maxCtx
		l.Workers = int(max(1, min(l.Budget/perWorker, int64(max(1, c.CPUs/8)))))
	}
	if l.Tokens == 0 {
		fit := (l.Budget - int64(l.Workers)*workerOverhead) / max(c.KVBytesPerToken, 1)
		l.Tokens = int(max(maxCtx, min(fit, int64(l.Workers)*maxCtx)))
	}
	return l
}

func (c CapacityConfig) gpuCapacity() Capacity {
	d := c.Device
	l := Capacity{Workers: c.Workers, Tokens: c.Tokens, GPU: true, Device: d.Name + " (" + d.Description + ")",
		Memory: d.MemoryFree, MemoryKnown: true, WorkerBytes: c.WeightBytes + gpuWorkerOverhead, WeightBytes: c.WeightBytes,
		KVBytesPerToken: c.KVBytesPerToken, CPUs: c.CPUs, Models: max(1, len(c.Warm))}
	usable := d.MemoryFree / gpuShareDen * gpuShareNum
	l.Budget = usable - l.WorkerBytes - c.KVBytesPerToken*int64(c.WarmContext)
	if len(c.Warm) > 0 {
		var sum int64
		for _, b := range c.Warm {
			sum += b
		}
		l.Budget = (usable - sum) / int64(l.Models)
	}
	maxCtx := int64(EphemeralContextSize(c.MaxInput))
	if l.Workers == 0 {
		l.Workers = int(max(1, min(l.Budget/(l.WorkerBytes+c.KVBytesPerToken*maxCtx), gpuMaxEphemeral)))
	}
	if l.Tokens == 0 {
		fit := (l.Budget - int64(l.Workers)*l.WorkerBytes) / max(c.KVBytesPerToken, 1)
		l.Tokens = int(max(maxCtx, min(fit, 1<<30)))
	}
	return l
}

// Basis says in a sentence how the bounds were reached, for the log line of the
// ephemeral workers (docs/routing.md shows it).
func (l Capacity) Basis() string {
	var s string
	if l.GPU {
		s = fmt.Sprintf("%s: %d MiB free, %d/%d of it for the workers, the warm worker's share off first; each ephemeral worker %d MiB of weights and %d MiB besides, %s of KV cache per token, at most %d workers",
			l.Device, l.Memory>>20, gpuShareNum, gpuShareDen, l.WeightBytes>>20, gpuWorkerOverhead>>20, kvSize(l.KVBytesPerToken), gpuMaxEphemeral)
		if l.Models > 1 {
			s += fmt.Sprintf("; %d models: all their warm workers off first, the rest split %d ways", l.Models, l.Models)
		}
		return s
	}
	src := fmt.Sprintf("%d MiB available", l.Memory>>20)
	if !l.MemoryKnown {
		src = fmt.Sprintf("available memory unknown, %d MiB assumed", l.Memory>>20)
	}
	s = fmt.Sprintf("%s, half of it for ephemeral workers at %s of KV cache per token and %d MiB each besides, %d CPUs",
		src, kvSize(l.KVBytesPerToken), l.WorkerBytes>>20, l.CPUs)
	if l.Models > 1 {
		s += fmt.Sprintf("; %d models: %d MiB off for the warm workers beyond the largest, the rest split %d ways", l.Models, l.WarmExtra>>20, l.Models)
	}
	return s
}

// kvSize words a KV cost per token for the log: "112 KiB" for Qwen3-Embedding-0.6B,
// "256 bytes" for the tiny test model (in KiB it would read 0).
func kvSize(b int64) string {
	if b >= 1<<10 && b%(1<<10) == 0 {
		return fmt.Sprintf("%d KiB", b>>10)
	}
	return fmt.Sprintf("%d bytes", b)
}
