package llama

import (
	"fmt"
	"time"

	"github.com/embed-stack/embed-stack/backends"
	"github.com/embed-stack/embed-stack/backends/cpuvariant"
	"github.com/embed-stack/embed-stack/family"
	"github.com/embed-stack/embed-stack/gguf"
)

// Defaults for the zero values of Config.
const (
	DefaultContextTokens = 8192
	// DefaultBatchTokens sizes the packed rounds of short sequences. Measured on the
	// 0.6B shape (f16, one thread, tokens per CPU-second) for 64 x 16, 32 x 64 and
	// 16 x 128 tokens: 88.7, 91.0 and 87.9 with 512-token calls; 85.6, 86.5 and 82.9
	// with 1024.
	DefaultBatchTokens = 512
	DefaultMaxSeqs     = 64
	// DefaultAttentionBytes bounds the attention scores of a long sequence's decode
	// call at 512 MiB: the 0.6B model (16 heads) keeps LongCallTokens up to a
	// 32768-token context.
	DefaultAttentionBytes = family.DefaultAttentionBytes
)

// FlashMaxTokens is the longest sequence of a decoder embedded with flash attention;
// longer ones are decoded alone without it (see Open; an encoder's counterpart is
// EncoderPackMaxTokens). It is a constant, not a setting, because the kernel is part
// of what a vector is: every engine, warm or ephemeral, must pick the same one for
// the same sequence for their vectors to agree bit for bit.
//
// It is where the kernels cross over on the 0.6B shape (one thread, one sequence
// alone, tokens per CPU-second): flash attention 86.8 / 84.6 / 78.3 / 66.8 at 64 /
// 128 / 256 / 512 tokens, the plain kernel 81.1 / 85.1 / 87.0 / 81.0. Flash
// attention's edge below it is packing: it skips the cells of the other sequences
// of a round, where the plain kernel would multiply them out and mask them.
const FlashMaxTokens = 128

// LongCallTokens is the most tokens a long sequence's decode call takes (fewer
// where AttentionBytes or BatchTokens says so). The plain kernel computes each
// call's attention over every cell up to the call's last token, so larger calls
// waste more on the masked, causal half; smaller ones stream the weights more
// often. On the 0.6B shape, one thread, 1024 and 2048 tokens: 76.7 and 66.2 tokens
// per CPU-second with 256-token calls, 73.9 and 64.0 with 512, 68.5 and 59.8 with
// 1024; 128 and 192 within 1% of 256.
const LongCallTokens = 256

// EncoderPackMaxTokens is the longest encoder sequence (family.Arch.Encoder) packed
// with others into a flash-attention call on the CPU; longer ones are encoded each
// alone in a call of their own with the plain kernel. Like FlashMaxTokens it is a
// constant because the kernel is part of what a vector is.
//
// An encoder has no KV cache, so llama.cpp's encoder attends over every token of a
// call under a mask: four 128-token inputs packed into one 512-token call cost the
// attention of one 512-token input, four times their own, and ggml's flash
// attention still walks the masked cells. Alone, an input's attention is its own
// length squared, and the plain kernel is the faster one there. Packing only pays
// for short inputs, where a call of its own would be too small to keep the matrix
// kernels busy. Measured on the real all-MiniLM-L6-v2 (F32, one thread, tokens per
// CPU-second, medians of 7 rounds; AMD EPYC Zen 5, AVX-512, at load 15-24), packing
// up to 0 / 16 / 32 / 64 / 128 tokens: 32 x 16: 2747 / 3144 / 3370 / 3377 / 3067;
// 32 x 32: 3039 / 2938 / 2879 / 2793 / 2850; 32 x 64: 3220 / 3234 / 3476 / 2200 /
// 2157; 32 x 128: 2961 / 2895 / 3231 / 3159 / 1464 (docs/performance.md). So
// 16-token inputs gain from packing, 64-token ones lose a third, and at 32 the two
// ways are level within the host's noise (Zen 3 measured the same cut: 32 x 128 at
// 1.22-1.34 times the old limit's tokens per CPU-second).
const EncoderPackMaxTokens = 32

// Config says which model to load and how to size the context. The zero value of every
// field but ModelPath picks a documented default.
type Config struct {
	// ModelPath is the GGUF file. It is memory-mapped, so workers started one after
	// another share the page cache instead of each reading the weights.
	ModelPath string

	// ContextTokens (n_ctx) is the longest single sequence accepted, and so the size
	// of the KV cache. 0 means min(8192, the model's training context).
	ContextTokens int

	// BatchTokens (n_batch = n_ubatch) is the number of tokens per decode call, and
	// the token budget of one packed round of short sequences (see plan); a long
	// sequence's calls take at most LongCallTokens of it. 0 means
	// min(ContextTokens, 512) on the CPU, and the GPU schedule's (see schedule)
	// on a GPU.
	BatchTokens int

	// Threads is llama.cpp's thread count for decoding. 0 means runtime.NumCPU()
	// on the CPU and at most 4 on a GPU (see gpuSchedule).
	// ggml's threads spin while they wait for each other, so more threads than free
	// cores makes decoding slower, not faster.
	Threads int

	// MaxSeqs is the number of sequences packed into one round. 0 means 64 on the
	// CPU (128 on a GPU); llama.cpp allows at most 256 (LLAMA_MAX_SEQ).
	MaxSeqs int

	// Device is where the model runs: "auto" (or ""), "cpu", "cuda", "cuda:N" or
	// "metal" (see ParseDevice). auto takes the first GPU ggml has, after loading
	// the backends of BackendDir, and else the CPU, which Info().Device.Note then
	// explains; a device asked for by name that is not there fails Open with a
	// *DeviceError, never falling back to the CPU. cpu loads no backend library.
	// The device picks the batching defaults (see schedule): on the CPU they are
	// the measured ones the constants of this package state.
	Device string

	// GPULayers is the number of layers whose weights live on the GPU, the output
	// layer counting as one, when Device is a GPU. 0 means all of them.
	GPULayers int

	// BackendDir is the folder of loadable ggml backends (libggml-cuda.so); "" means
	// DefaultBackendDir(), where a missing folder just means no GPU backend, while a
	// folder given here must exist. ggml's registry is per process: a folder is
	// loaded once and stays loaded, and every file in it that is a backend must
	// load (a *BackendError otherwise).
	BackendDir string

	// CPUVariant chooses the build of ggml's CPU kernels: "auto" (or "") loads the
	// best variant library (libggml-cpu-NAME.so) of BackendDir for this CPU,
	// "builtin" keeps the kernels compiled into the binary, a variant's name
	// loads that one (see backends/cpuvariant, which refuses a variant the CPU
	// lacks an instruction set of). A missing or damaged library falls back to
	// the compiled-in kernels with Info().Device.Warning. Chosen once per process.
	CPUVariant string

	// CPUAccel switches embed-stack's own CPU kernels (accel.c) for the operations
	// ggml's CPU backend computes slowly: "auto" (or "") uses them where the CPU has
	// AVX-512F or AVX2 with FMA, "off" leaves every operation to ggml. They serve
	// a model that runs on the CPU; on a GPU they stay off. Chosen once per
	// process (ggml's registry has no way back): a later "auto" after "off" keeps
	// them off, a later "off" after "auto" turns them off for contexts created
	// after it.
	CPUAccel string

	// AttentionBytes bounds the attention scores of one decode call of a long
	// sequence: without flash attention llama.cpp materialises them as an f32 matrix
	// of cells x tokens x heads per layer, 4 x ContextTokens x calls x heads bytes at
	// worst, so long sequences are decoded in calls of at most LongCallTokens and
	// BatchTokens tokens and at most what fits. 0 means DefaultAttentionBytes.
	AttentionBytes int64

	// Nice lowers the CPU priority of the decoding threads by this much (0 to 19),
	// so that another engine's work on the same cores goes first: ephemeral workers
	// can run at 10 beside the warm worker, whose short requests then barely slow
	// down. On Linux only the decoding threads are affected (the owner goroutine's OS
	// thread, and the threads started from it: ggml's and embed-stack's kernels'
	// pools); elsewhere the whole process.
	// 0 leaves the priority alone.
	Nice int

	// IdleRelease, when positive, hands the pages of the KV cache for long
	// sequences back to the OS once the engine has had no work for this long,
	// once per idle spell (kvpages.c): the 0.6B model's warm worker then waits
	// holding 940 MB less. The next long sequence faults in the pages it writes;
	// the short sequences' cache stays. A KV cache in a GPU's memory, or off
	// Linux, is left as it is. 0 keeps the pages.
	IdleRelease time.Duration

	// Pooling is how a sequence's per-token states become its vector:
	// gguf.PoolingLast (the last token's), PoolingMean (the mean of every token's)
	// or PoolingCLS (the first token's). 0 (PoolingNone, which makes no vector)
	// means the model's declared pooling_type, and last-token when it declares none
	// (or "none").
	// The engine pools itself, from the outputs of a context without pooling (see
	// Open); a reranker (Rerank) always reads its last token.
	Pooling gguf.Pooling

	// Rerank makes the engine a Qwen3-Reranker scorer: each sequence's output is
	// [logit("yes"), logit("no")] at its last token instead of the hidden state, and
	// Info.NEmbd is 2. The two rows of the LM head come from the GGUF (see
	// readYesNoHead); the rest of the head is never computed, as for embeddings.
	// For an encoder (a cross-encoder of an architecture with a
	// family.RankHead) it is [logit, 0]: its classifier head over the first
	// token's ([CLS]) state (readClassifierHead).
	Rerank bool

	// attention overrides the kernel choice, for measurements only.
	attention attentionKind
	// graphPooling has llama.cpp pool an encoder's sequences in its graph (the
	// context's pooling_type) instead of the engine, for measurements only.
	graphPooling bool
	// encoderPack overrides the schedule's encoderPackMax, for measurements only:
	// 0 keeps it, a negative value packs no sequence (each goes alone).
	encoderPack int
}

// attentionKind says which kernel a context uses, or (attnHybrid) how sequences are
// shared between two contexts.
type attentionKind int

const (
	// attnHybrid is what Open does: flash attention over a bf16 V cache for
	// sequences of up to FlashMaxTokens tokens, packed; plain attention for longer
	// ones, alone.
	attnHybrid attentionKind = iota
	// attnPlain: no flash attention. llama.cpp materialises the KQ matrix; softmax
	// and softmax·V run in f32 through matrix kernels.
	attnPlain
	// attnFlash: ggml's flash attention over the default f16 V cache, which
	// accumulates softmax·V in f16.
	attnFlash
	// attnFlashBF16V: flash attention over a bf16 V cache, which ggml accumulates in
	// f32.
	attnFlashBF16V
	// attnFlashBF16: flash attention over a bf16 K and V cache, which embed-stack's
	// own kernel computes (accel.c, es_flash_attn) where the CPU has AVX512_BF16: the
	// CPU's long context there (see Open).
	attnFlashBF16
)

// check refuses Config fields out of range before anything is loaded; the checks
// that need the model are resolve's.
func (cfg Config) check() error {
	for _, f := range []struct {
		name string
		v    int64
	}{{"ContextTokens", int64(cfg.ContextTokens)}, {"BatchTokens", int64(cfg.BatchTokens)}, {"Threads", int64(cfg.Threads)}, {"MaxSeqs", int64(cfg.MaxSeqs)}, {"GPULayers", int64(cfg.GPULayers)}, {"AttentionBytes", cfg.AttentionBytes}} {
		if f.v < 0 {
			return fmt.Errorf("llama: Config.%s is %d; it must be 0 (default) or positive", f.name, f.v)
		}
	}
	if cfg.Nice < 0 || cfg.Nice > 19 {
		return fmt.Errorf("llama: Config.Nice is %d; it must be 0 to 19", cfg.Nice)
	}
	switch cfg.Pooling {
	case gguf.PoolingNone, gguf.PoolingMean, gguf.PoolingCLS, gguf.PoolingLast:
	default:
		return fmt.Errorf("llama: Config.Pooling is %d (%s); the engine pools mean, cls or last", cfg.Pooling, cfg.Pooling)
	}
	if err := backends.CheckCPUAccel(cpuvariant.ReadHost(), cfg.CPUAccel); err != nil {
		return fmt.Errorf("llama: Config.CPUAccel: %w", err)
	}
	return nil
}

// pooling is the pooling an engine computes for a model whose header declares
// declared (see Config.Pooling).
func (cfg Config) pooling(declared gguf.Pooling) (gguf.Pooling, error) {
	p := cfg.Pooling
	switch {
	case cfg.Rerank:
		// A Qwen3-Reranker's score is read at the last token, whatever it declares
		// (llama.cpp's conversion declares rank).
		if p != gguf.PoolingNone && p != gguf.PoolingLast {
			return 0, fmt.Errorf("llama: Config.Pooling is %s; a reranker reads its last token", p)
		}
		return gguf.PoolingLast, nil
	case p != gguf.PoolingNone:
		return p, nil
	}
	switch declared {
	case gguf.PoolingUnspecified, gguf.PoolingNone:
		return gguf.PoolingLast, nil
	case gguf.PoolingMean, gguf.PoolingCLS, gguf.PoolingLast:
		return declared, nil
	}
	return 0, fmt.Errorf("llama: the model declares pooling type %d (%s); the engine pools mean, cls or last: set Config.Pooling", declared, declared)
}

// sizes is what a Config comes to for one model on one kind of device (resolve).
type sizes struct {
	ctxTokens   int // Info.ContextTokens: the longest sequence accepted
	batchTokens int // Info.BatchTokens: tokens per decode call
	maxSeqs     int // sequences per round of the short context
	threads     int // llama.cpp's decoding threads
	// gpuLayers is how many layers go to the GPU when the device is one: more than
	// the model has means all of them, the output layer too (999, llama.cpp's own
	// default).
	gpuLayers int

	// short takes the sequences of up to shortMax tokens, long the others; long is
	// nil when no sequence can be longer.
	short    contextSize
	long     *contextSize
	shortMax int
	// shortJobs is Info.ShortJobs: what may run inside a long sequence's decoding
	// (one decode call of the short context); nil without a long context, and for
	// an encoder, whose sequences each take one call.
	shortJobs *backends.ShortJobs

	// encoder says the model is an encoder (family.Arch): each sequence is encoded
	// whole in one call. pooling is what the engine computes (Config.pooling).
	encoder bool
	pooling gguf.Pooling
}

// resolve sizes the contexts of an engine for a model of shape s on a device that
// batches as sched says: the defaults of the Config fields left at 0 (see Config
// and the constants above for the measurements behind them), and the checks that
// need the model (a context longer than its training, a decode call longer than
// the context). It calls nothing of llama.cpp, so the sizing is unit-tested without
// a model (config_test.go); Open turns its result into contexts.
//
// An encoder (family.Arch.Encoder) has no KV cache: llama.cpp attends over the tokens of
// one call, both ways, so a sequence is never split over calls. Its short
// sequences (up to the schedule's encoderPackMax, EncoderPackMaxTokens on the CPU)
// are packed into calls of a flash-attention context (which skips the cells of the
// other sequences, so a vector does not depend on its neighbours); longer ones, and
// every sequence of an architecture without flash attention, are encoded alone, in
// a call as long as the sequence, without flash attention.
func resolve(cfg Config, s gguf.Shape, sched schedule) (sizes, error) {
	z := sizes{maxSeqs: cfg.MaxSeqs, threads: cfg.Threads, gpuLayers: 999}
	var err error
	if z.pooling, err = cfg.pooling(s.Pooling); err != nil {
		return sizes{}, err
	}
	arch, _ := family.Lookup(s.Architecture)
	z.encoder = arch.Encoder
	if z.encoder && cfg.Rerank {
		// A cross-encoder's head reads the first token's ([CLS]) state, as
		// llama.cpp's rank pooling does for every architecture but qwen3.
		if _, err := arch.CrossEncoderHead(s); err != nil {
			return sizes{}, fmt.Errorf("llama: Config.Rerank: a %s cross-encoder: %w", s.Architecture, err)
		}
		z.pooling = gguf.PoolingCLS
	}
	if z.maxSeqs == 0 {
		z.maxSeqs = sched.maxSeqs
	}
	if z.threads == 0 {
		z.threads = sched.threads()
	}
	if cfg.GPULayers > 0 {
		z.gpuLayers = cfg.GPULayers
	}

	trainCtx := s.ContextLength
	z.ctxTokens = cfg.ContextTokens
	if z.ctxTokens == 0 {
		z.ctxTokens = DefaultContextTokens
		if trainCtx > 0 {
			z.ctxTokens = min(z.ctxTokens, trainCtx)
		}
	}
	if trainCtx > 0 && z.ctxTokens > trainCtx {
		return sizes{}, fmt.Errorf("llama: Config.ContextTokens is %d but the model was trained on at most %d tokens; positions beyond that give degraded vectors, lower ContextTokens", z.ctxTokens, trainCtx)
	}
	z.batchTokens = cfg.BatchTokens
	switch {
	case z.batchTokens == 0:
		z.batchTokens = min(z.ctxTokens, sched.batchTokens)
	case z.batchTokens > z.ctxTokens:
		return sizes{}, fmt.Errorf("llama: Config.BatchTokens is %d, more than ContextTokens %d; a decode call cannot hold more tokens than the context, lower BatchTokens", z.batchTokens, z.ctxTokens)
	}
	attnBytes := cfg.AttentionBytes
	if attnBytes == 0 {
		attnBytes = DefaultAttentionBytes
	}
	plainBatch := min(z.batchTokens, sched.longCallTokens, attentionFit(attnBytes, z.ctxTokens, s.Heads))

	switch {
	case z.encoder && cfg.attention == attnHybrid:
		return z, z.resolveEncoder(arch, attnBytes, s, sched, cfg.encoderPack)
	case z.encoder:
		// A measurement's one kernel for every sequence: whole sequences, packed
		// into calls of the context's size.
		z.batchTokens = z.ctxTokens
		z.short = contextSize{kernel: cfg.attention, ctxTokens: z.ctxTokens, batchTokens: z.ctxTokens, maxSeqs: z.maxSeqs}
		z.shortMax = z.ctxTokens
		return z, nil
	}
	switch cfg.attention {
	case attnHybrid:
		// A round of short sequences holds at most a decode call's worth, or one
		// sequence of the schedule's shortMax (FlashMaxTokens on the CPU) split over
		// several calls (see plan).
		shortCtx := min(z.ctxTokens, max(z.batchTokens, sched.shortMax))
		z.short = contextSize{kernel: sched.short, ctxTokens: shortCtx, batchTokens: min(z.batchTokens, shortCtx), maxSeqs: z.maxSeqs}
		z.shortMax = min(z.ctxTokens, sched.shortMax)
		if z.ctxTokens > sched.shortMax {
			// One sequence a round, so that each starts at KV cell 0.
			longBatch := min(z.batchTokens, sched.longCallTokens)
			if sched.long == attnPlain {
				longBatch = plainBatch
			}
			z.long = &contextSize{kernel: sched.long, ctxTokens: z.ctxTokens, batchTokens: longBatch, maxSeqs: 1}
			z.shortJobs = &backends.ShortJobs{MaxTokens: z.shortMax, BatchTokens: z.short.batchTokens, MaxSeqs: z.short.maxSeqs}
		}
	case attnPlain:
		z.short = contextSize{kernel: attnPlain, ctxTokens: z.ctxTokens, batchTokens: plainBatch, maxSeqs: z.maxSeqs}
		z.shortMax = z.ctxTokens
	default:
		z.short = contextSize{kernel: cfg.attention, ctxTokens: z.ctxTokens, batchTokens: z.batchTokens, maxSeqs: z.maxSeqs}
		z.shortMax = z.ctxTokens
	}
	return z, nil
}

// resolveEncoder sizes an encoder's contexts (see resolve): the short one packs
// sequences of up to shortMax tokens (the schedule's encoderPackMax, or pack where
// a measurement sets it) into calls of batchTokens with flash attention; the long
// one encodes each longer sequence alone in one call of up to ctxTokens, without
// flash attention, whose f32 scores (ctxTokens squared, per head) must fit
// attnBytes.
func (z *sizes) resolveEncoder(arch family.Arch, attnBytes int64, s gguf.Shape, sched schedule, pack int) error {
	if pack == 0 {
		pack = sched.encoderPackMax
	}
	z.shortMax = 0
	if arch.Flash && pack > 0 {
		z.shortMax = min(z.ctxTokens, pack, z.batchTokens)
		// Flash attention over no KV cache: llama.cpp casts K and V to f16.
		z.short = contextSize{kernel: attnFlash, ctxTokens: z.batchTokens, batchTokens: z.batchTokens, maxSeqs: z.maxSeqs}
	}
	if z.ctxTokens > z.shortMax {
		if b := attentionBytes(z.ctxTokens, z.ctxTokens, s.Heads); b > attnBytes {
			return fmt.Errorf("llama: an encoder attends over a whole sequence in one call, and at Config.ContextTokens %d the attention scores of one call take %d MiB, more than AttentionBytes (%d MiB); lower ContextTokens to %d or raise AttentionBytes",
				z.ctxTokens, b>>20, attnBytes>>20, family.EncoderMaxTokens(s.Heads, attnBytes))
		}
		z.long = &contextSize{kernel: attnPlain, ctxTokens: z.ctxTokens, batchTokens: z.ctxTokens, maxSeqs: 1}
	}
	if z.shortMax == 0 {
		// Every sequence goes alone; the short context is never used.
		z.short = *z.long
	}
	return nil
}

// attentionBytes is the size of the f32 attention scores of one decode call of
// tokens tokens over a full context of ctx cells with heads query heads.
func attentionBytes(tokens, ctx, heads int) int64 {
	return 4 * int64(tokens) * int64(ctx) * int64(heads)
}

// attentionFit is the largest decode call, a multiple of 32 tokens (at least 32),
// whose attention scores fit budget bytes.
func attentionFit(budget int64, ctx, heads int) int {
	n := budget / attentionBytes(1, ctx, max(heads, 1))
	return int(max(32, n/32*32))
}
