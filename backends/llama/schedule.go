package llama

import (
	"runtime"

	"github.com/embed-stack/embed-stack/backends"
	"github.com/embed-stack/embed-stack/gguf"
)

// schedule is how an engine batches its work on one kind of device: the defaults
// of the Config fields left at 0, and the kernel and split that no Config field
// sets (they are part of what a vector is; see FlashMaxTokens).
type schedule struct {
	// batchTokens is DefaultBatchTokens' counterpart: tokens per decode call and
	// per round of short sequences.
	batchTokens int
	// maxSeqs is DefaultMaxSeqs' counterpart: sequences per round.
	maxSeqs int
	// shortMax is FlashMaxTokens' counterpart: the longest sequence of a decoder
	// packed with others into the short context; longer ones are decoded alone from
	// KV cell 0.
	shortMax int
	// encoderPackMax is EncoderPackMaxTokens' counterpart: the longest encoder
	// sequence packed with others into a flash-attention call; longer ones are
	// encoded alone without flash attention.
	encoderPackMax int
	// longCallTokens is LongCallTokens' counterpart: the most tokens one decode
	// call of a long sequence takes.
	longCallTokens int
	// short and long are the attention kernels of the two contexts.
	short, long attentionKind
	// threads is the default of Config.Threads.
	threads func() int
}

// cpuSchedule is the CPU's: every value measured on the 0.6B shape (see the
// constants it names and Open).
var cpuSchedule = schedule{
	batchTokens:    DefaultBatchTokens,
	maxSeqs:        DefaultMaxSeqs,
	shortMax:       FlashMaxTokens,
	encoderPackMax: EncoderPackMaxTokens,
	longCallTokens: LongCallTokens,
	short:          attnFlashBF16V,
	long:           attnPlain,
	threads:        runtime.NumCPU,
}

// gpuSchedule is for CUDA and Metal. Mostly NOT MEASURED: these are defaults chosen
// by reasoning, to be replaced by the figures of scripts/gpu-check.sh on a GPU
// (docs/performance.md says how to run it, and gives the first figures, from one
// H200 run). The reasoning:
//
//   - Attention: flash attention over the default f16 KV cache at every length,
//     where the GPU's backend computes it for the model's heads, else the plain
//     kernel (flashFor: measured on the H200, where a forced flash attention over
//     heads CUDA does not take ran on the CPU, 34x slower and at cosine 0.9795).
//     The CPU's reasons for the plain kernel on long sequences do not carry over:
//     llama.cpp asks ggml for f32 precision in flash attention (the CPU kernel's
//     f16 accumulation over an f16 V cache is what cost accuracy there), and on a
//     GPU flash attention is the fast kernel, where the plain one writes a
//     cells x tokens x heads f32 score matrix per layer to device memory. A bf16 V
//     cache (the CPU's short-sequence choice) is not among the types CUDA's flash
//     attention kernels take; ggml would run that operation on the CPU.
//   - 2048-token decode calls: a GPU needs thousands of rows per matrix product
//     to fill its tensor cores on the 1024-wide 0.6B model, and the compute
//     buffers this costs (tens of MiB per activation) are small beside the
//     weights; long sequences take whole calls, as no score matrix bounds them.
//   - Sequences of up to 512 tokens are packed (a 32 x 512 batch fills 8 calls
//     of 2048), longer ones decoded alone from KV cell 0 as on the CPU, and 128
//     sequences a round, so that short queries fill a call too. An encoder's too:
//     the CPU packs only up to EncoderPackMaxTokens because its attention over a
//     packed call's masked cells costs more than a small call alone, where a GPU
//     has the rows of a packed call to spare.
//   - 4 threads: on a GPU the host runs only the token-embedding lookup and the
//     graph scheduling, and ggml's idle threads spin.
var gpuSchedule = schedule{
	batchTokens:    2048,
	maxSeqs:        128,
	shortMax:       512,
	encoderPackMax: 512,
	longCallTokens: 2048,
	short:          attnFlash,
	long:           attnFlash,
	threads:        func() int { return min(4, runtime.NumCPU()) },
}

// cpuLong gives a CPU schedule the long-sequence kernel of this host and model:
// embed-stack's flash attention over a BF16 KV cache (attnFlashBF16) where its
// kernels compute it (AVX512_BF16, heads of widths they take), the plain kernel
// elsewhere. Measured on the 0.6B shape, 2 threads: one 4096-token input in 9.3 to
// 10.6 s against 18.0 to 23.4 s with the plain kernel on an AMD EPYC Zen 5, which
// spent two thirds of its time writing, normalising and reading back the scores;
// one 2048-token input in 18.7 to 19.7 s (F16 weights) against 23.5 to 26.3 s on an
// Intel Emerald Rapids, where the kernel computes in float32 FMAs
// (docs/performance.md). device is the engine's: a GPU keeps its schedule.
func cpuLong(s schedule, device backends.Device, shape gguf.Shape) schedule {
	if !device.GPU && s.long == attnPlain && accelFlashBF16(shape) {
		s.long = attnFlashBF16
	}
	return s
}

// heldShort gives a decoder's short sequences embed-stack's flash attention over
// a BF16 KV cache too where the kernels hold the model's matrices (held: BF16
// copies, panels or Q8_0 products) and compute that attention: their forward is
// split between the kernels and ggml anyway, and ggml's kernel over an f16 K
// cache was the heaviest of its operations left. Measured on the 0.6B shape, BF16
// copy, 2 threads, Zen 5 (docs/performance.md), with its exact form (a packed
// sequence's vector must not depend on its place): 8 x 128 in 1.17 to 1.23 s
// against 1.71 to 1.84 s, 32 x 128 in 4.72 to 4.80 s against 6.87 to 7.28 s, 1 x 16
// no slower. Its short calls then run as one pool (kernelsAlone). A GPU, an
// encoder, a measurement's single kernel and the hosts without the kernel keep
// theirs.
func heldShort(z sizes, held, gpu bool, shape gguf.Shape) sizes {
	if held && !gpu && !z.encoder && z.short.kernel == attnFlashBF16V && accelFlashBF16(shape) {
		z.short.kernel = attnFlashBF16
	}
	return z
}

// scheduleFor returns the schedule of a device: gpu is backends.Device.GPU.
func scheduleFor(gpu bool) schedule {
	if gpu {
		return gpuSchedule
	}
	return cpuSchedule
}
