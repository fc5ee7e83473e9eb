// Package llama is embed-stack's llama.cpp embedding engine and its only cgo package.
//
// It loads a GGUF model through llama.cpp (linked from github.com/ollama/ollama/llama),
// takes token ids and returns each sequence's raw, un-normalised last-token hidden
// state: the vector Qwen3-Embedding's LAST pooling yields. Contexts are created with
// no pooling and only each sequence's last token marked as an output, which gives the
// same vector as LAST pooling without running the vocabulary-wide LM head over every
// token. Short sequences are packed into shared decode calls of a flash-attention
// context; each long one is decoded alone in a context without flash attention (see
// Open for why, and docs/routing.md for the measurements). The KV cache is emptied
// between rounds, and a sequence's vector never depends on what it was packed with.
//
// For a Qwen3-Reranker (Config.Rerank) each sequence's output is instead the two
// logits its score needs, those of "yes" and "no" at the last token, computed from
// that hidden state and two rows of the LM head (see readYesNoHead).
//
// It knows nothing of text, tokenizers, HTTP, instructions, truncation to
// `dimensions` or normalisation: token ids in, raw vectors out.
package llama

/*
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llama.h"
#include "ggml-backend.h"

// es_batch_add appends n tokens of one sequence, at positions pos0.., to b and marks
// the last of them as an output when output_last is set. It returns the batch index
// of the last token added. One call per span keeps cgo crossings per decode call at
// the number of sequences, not the number of tokens.
static int32_t es_batch_add(struct llama_batch *b, const llama_token *tokens, int32_t n,
                            llama_seq_id seq, llama_pos pos0, bool output_last) {
	int32_t at = b->n_tokens;
	for (int32_t i = 0; i < n; i++) {
		b->token[at + i] = tokens[i];
		b->pos[at + i] = pos0 + i;
		b->n_seq_id[at + i] = 1;
		b->seq_id[at + i][0] = seq;
		b->logits[at + i] = 0;
	}
	if (output_last && n > 0) {
		b->logits[at + n - 1] = 1;
	}
	b->n_tokens = at + n;
	return at + n - 1;
}

// es_abort is what llama.cpp's abort callback reads, between graph nodes, to stop a
// decode call early. Jobs are numbered; a caller that gives up raises cancelled to its
// job's number (never lowers it), so a late cancellation cannot abort a later job.
//
// A decode call of a long sequence is also stopped when a short job is waiting
// (preempt > 0) while that call may give way (yield != 0): see Engine.yield.
typedef struct {
	int64_t closed;    // non-zero once the engine is closing
	int64_t job;       // number of the job now running
	int64_t cancelled; // highest job number whose caller gave up
	int64_t preempt;   // short jobs waiting to be taken
	int64_t yield;     // non-zero while the decode call in flight may give way to them
} es_abort;

static bool es_should_abort(void *data) {
	es_abort *a = data;
	return __atomic_load_n(&a->closed, __ATOMIC_RELAXED) != 0 ||
	       __atomic_load_n(&a->cancelled, __ATOMIC_RELAXED) == __atomic_load_n(&a->job, __ATOMIC_RELAXED) ||
	       (__atomic_load_n(&a->yield, __ATOMIC_RELAXED) != 0 && __atomic_load_n(&a->preempt, __ATOMIC_RELAXED) > 0);
}

// es_abort_callback hands Go the address of the static es_should_abort.
static ggml_abort_callback es_abort_callback(void) { return es_should_abort; }

// es_no_vocab fills o[0..2] with the metadata overrides that load a model without
// its tokenizer: tokenizer model "none" and n_vocab dummy tokens (o[2] ends the
// list). See Open.
static void es_no_vocab(struct llama_model_kv_override *o, const char *arch, int64_t n_vocab) {
	memset(o, 0, 3 * sizeof *o);
	o[0].tag = LLAMA_KV_OVERRIDE_TYPE_STR;
	strncpy(o[0].key, "tokenizer.ggml.model", sizeof o[0].key - 1);
	strncpy(o[0].val_str, "none", sizeof o[0].val_str - 1);
	o[1].tag = LLAMA_KV_OVERRIDE_TYPE_INT;
	snprintf(o[1].key, sizeof o[1].key, "%s.vocab_size", arch);
	o[1].val_i64 = n_vocab;
}

// es_batch_mark_output makes token i of b an output too.
static void es_batch_mark_output(struct llama_batch *b, int32_t i) {
	b->logits[i] = 1;
}
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/embed-stack/embed-stack/backends"
	"github.com/embed-stack/embed-stack/gguf"

	// Links llama.cpp and ggml (CPU backend included) into the binary; this package
	// calls the C API itself because ollama's wrapper does not expose pooling_type.
	_ "github.com/ollama/ollama/llama"
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
	DefaultAttentionBytes = 512 << 20
)

// FlashMaxTokens is the longest sequence embedded with flash attention; longer ones
// are decoded alone without it (see Open). It is a constant, not a setting, because
// the kernel is part of what a vector is: every engine, warm or ephemeral, must pick
// the same one for the same sequence for their vectors to agree bit for bit.
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

// YieldCallTokens and YieldSmallCalls bound how long a short job (a query) waits
// behind a long sequence on the same engine. A long sequence's decode call gives
// way as soon as a short job is waiting (it is aborted, the short job runs, the
// call is done again); after that its next YieldSmallCalls calls are small and
// not aborted, so that a stream of queries cannot stall it, while a query arriving
// meanwhile waits at most one such call. A small call takes YieldCallTokens
// tokens at the start of the sequence and fewer further in, where attention adds
// to each token's cost (smallCallTokens), so that it costs about what a 32-token
// query does on the 0.6B shape wherever it falls.
const (
	YieldCallTokens = 32
	YieldSmallCalls = 8
)

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
	// thread and the threads ggml starts from it); elsewhere the whole process.
	// 0 leaves the priority alone.
	Nice int

	// Rerank makes the engine a Qwen3-Reranker scorer: each sequence's output is
	// [logit("yes"), logit("no")] at its last token instead of the hidden state, and
	// Info.NEmbd is 2. The two rows of the LM head come from the GGUF (see
	// readYesNoHead); the rest of the head is never computed, as for embeddings.
	Rerank bool

	// attention overrides the kernel choice, for measurements only.
	attention attentionKind
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
)

// Info describes a loaded engine.
type Info struct {
	NEmbd         int    // output length: the hidden size, or 2 for a reranker
	Hidden        int    // the model's hidden size (qwen3.embedding_length)
	Rerank        bool   // outputs are [logit("yes"), logit("no")] (Config.Rerank)
	NVocab        int    // token ids must lie in [0, NVocab)
	ContextTokens int    // longest sequence accepted
	BatchTokens   int    // tokens per decode call
	TrainContext  int    // the model's training context
	ModelName     string // general.name from the GGUF, else the file name
	// Device is where the engine computes, as the worker protocol reports it.
	Device backends.Device
	// ShortJobs bounds the Embed calls that run inside a long sequence's (see
	// YieldCallTokens): at most MaxSeqs sequences of at most MaxTokens tokens,
	// BatchTokens in all, one decode call of the short context. Its Fits is the
	// rule, shared with the router's batcher through the worker's /health. Nil when
	// the engine has no long context.
	ShortJobs *backends.ShortJobs
}

// kctx is one llama.cpp context, with its kernel and sizes, and the batch its decode
// calls are built in. lctx is nil until the context is first needed.
type kctx struct {
	kernel      attentionKind // attnPlain, attnFlash or attnFlashBF16V
	ctxTokens   int           // longest sequence, and the token budget of a round
	batchTokens int           // tokens per decode call
	maxSeqs     int           // sequences per round; seq id maxSeqs is the padding token's

	lctx  *C.struct_llama_context
	batch C.struct_llama_batch
}

// Engine embeds token sequences with llama.cpp. It is safe for concurrent use: a
// single goroutine owns the contexts (llama.cpp contexts are not thread safe) and
// Embed calls queue for it.
type Engine struct {
	info    Info
	threads int
	nice    int
	head    *yesNoHead // the reranker's two LM-head rows; nil for embeddings

	// short takes the sequences of up to shortMax tokens, long the others (nil when
	// no sequence can be longer).
	short, long *kctx
	shortMax    int

	jobs chan func() // work for the owner goroutine
	// prio takes the jobs that may run inside another job (see yield); the owner
	// goroutine also takes them from it when idle.
	prio chan func()
	quit chan struct{} // closed by Close
	done chan struct{} // closed when the owner goroutine has returned

	closeOnce sync.Once
	jobNum    atomic.Int64 // numbers jobs for abort

	// abort is C memory (llama.cpp reads it from its threads); written with atomics.
	abort *C.es_abort

	// nested is set while a job runs inside another (yield); smallCalls is how many
	// more of the current long sequence's decode calls are cut small after short
	// jobs ran inside it (smallCallTokens). Both belong to the owner goroutine.
	nested     bool
	smallCalls int
	// crossover is attentionCrossover's figure for this model.
	crossover int

	// Owned by the owner goroutine after Open returns (and the contexts' lctx and
	// batch with it); freed by Close once the owner has returned.
	model *C.struct_llama_model
	dev   C.ggml_backend_dev_t // the GPU the layers are offloaded to; nil on the CPU

	// Test hooks, set before the first Embed and called on the owner goroutine:
	// beforeDecode just before each llama_decode, decodeHook after each successful
	// one with the number of calls so far in the current job.
	beforeDecode func()
	decodeHook   func(decodes int)
}

var backendInit = sync.OnceValue(func() error {
	C.llama_backend_init()
	// The CPU backend is compiled in (ggml is built with GGML_USE_CPU) and registers
	// itself statically, as Metal does on darwin/arm64; loadable GPU backends come
	// from Config.BackendDir (loadBackends), not from ollama's ggml.OnceLoad, which
	// this package never calls.
	if C.ggml_backend_dev_count() == 0 {
		return errors.New("llama: no ggml compute device is registered; the binary was built without ggml's CPU backend")
	}
	return nil
})

// Open loads the model and creates the contexts. Errors name the Config field to
// change.
//
// Two attention kernels, chosen by length. Measured against the float64 reference
// and on the 0.6B shape (docs/routing.md):
//
//   - ggml's CPU flash attention accumulates softmax·V in f16 whenever the V cache
//     is f16, and llama.cpp casts an f32 V cache back to f16 for it, so its error
//     grows with the cells attended: cosine 0.9991 at 2048 tokens and 0.979 at 8192
//     on a repeated token. Over a bf16 V cache the kernel accumulates in f32 instead:
//     0.999996 at any length, the one rounding of V to bf16. It skips the cells a
//     sequence may not see, so a sequence's vector does not depend on what else
//     shares the round, bit for bit; and on packed short sequences it is the faster
//     kernel, but it slows down with length faster than the plain kernel
//     (FlashMaxTokens has the crossover).
//   - Without flash attention llama.cpp multiplies the KQ matrix out: cosine
//     0.9999998 at 8192 tokens, and 2.7 times as fast as flash attention on one 4096-
//     token sequence (46.7 against 17.3 tokens per CPU-second), but its sums run over
//     every cell of the round in 16-lane chunks, so a sequence's vector moves (by
//     about 1e-8 in cosine) with its offset in the KV cache.
//
// So sequences of up to FlashMaxTokens tokens are packed into rounds of a flash-
// attention context over a bf16 V cache, and longer ones are decoded each alone,
// from KV cell 0, in a plain context whose decode calls keep the attention scores
// within AttentionBytes. Either way a sequence's vector is a function of the
// sequence alone, whatever it was sent with and whichever worker embeds it.
func Open(cfg Config) (*Engine, error) {
	if cfg.ModelPath == "" {
		return nil, errors.New("llama: Config.ModelPath is empty; give the path of a GGUF model")
	}
	if _, err := os.Stat(cfg.ModelPath); err != nil {
		return nil, fmt.Errorf("llama: model file: %w", err)
	}
	for _, f := range []struct {
		name string
		v    int64
	}{{"ContextTokens", int64(cfg.ContextTokens)}, {"BatchTokens", int64(cfg.BatchTokens)}, {"Threads", int64(cfg.Threads)}, {"MaxSeqs", int64(cfg.MaxSeqs)}, {"GPULayers", int64(cfg.GPULayers)}, {"AttentionBytes", cfg.AttentionBytes}} {
		if f.v < 0 {
			return nil, fmt.Errorf("llama: Config.%s is %d; it must be 0 (default) or positive", f.name, f.v)
		}
	}
	if cfg.Nice < 0 || cfg.Nice > 19 {
		return nil, fmt.Errorf("llama: Config.Nice is %d; it must be 0 to 19", cfg.Nice)
	}
	if err := backendInit(); err != nil {
		return nil, err
	}
	dev, device, err := selectDevice(cfg.Device, cfg.BackendDir, cfg.BackendDir != "")
	if err != nil {
		return nil, err
	}
	sched := scheduleFor(device.GPU)
	maxSeqs := cfg.MaxSeqs
	if maxSeqs == 0 {
		maxSeqs = sched.maxSeqs
	}
	// One sequence id is reserved for the padding token (see embed).
	if limit := int(C.llama_max_parallel_sequences()) - 1; maxSeqs > limit {
		return nil, fmt.Errorf("llama: Config.MaxSeqs is %d; at most %d (llama.cpp's LLAMA_MAX_SEQ less one this engine reserves)", maxSeqs, limit)
	}
	threads := cfg.Threads
	if threads == 0 {
		threads = sched.threads()
	}

	mp := C.llama_model_default_params()
	// One device or none: split mode NONE keeps the model on devices[main_gpu],
	// and main_gpu -1 on no GPU at all, whatever backends are registered.
	mp.split_mode = C.LLAMA_SPLIT_MODE_NONE
	mp.main_gpu = -1
	mp.n_gpu_layers = 0
	if dev != nil {
		devs := (*[2]C.ggml_backend_dev_t)(C.calloc(2, C.size_t(unsafe.Sizeof(dev))))
		defer C.free(unsafe.Pointer(devs))
		devs[0] = dev
		mp.devices = &devs[0]
		mp.main_gpu = 0
		// More layers than the model has means all of them, the output layer too
		// (999 is llama.cpp's own default).
		mp.n_gpu_layers = 999
		if cfg.GPULayers > 0 {
			mp.n_gpu_layers = C.int32_t(cfg.GPULayers)
		}
	}
	mp.use_mmap = true
	mp.use_mlock = false
	// Load the model without its tokenizer: the engine takes token ids, and building
	// llama.cpp's BPE tables (151k tokens, 151k merges) was two thirds of a worker's
	// start, which every ephemeral worker pays. The vocabulary size, which the
	// embedding table's shape and the id check need, comes from that table.
	shape, err := readShape(cfg.ModelPath)
	if err != nil {
		return nil, err
	}
	overrides := (*C.struct_llama_model_kv_override)(C.calloc(3, C.sizeof_struct_llama_model_kv_override))
	defer C.free(unsafe.Pointer(overrides))
	carch := C.CString(shape.Architecture)
	defer C.free(unsafe.Pointer(carch))
	C.es_no_vocab(overrides, carch, C.int64_t(shape.VocabSize))
	mp.kv_overrides = overrides
	cpath := C.CString(cfg.ModelPath)
	defer C.free(unsafe.Pointer(cpath))
	takeLastError()
	model := C.llama_model_load_from_file(cpath, mp)
	if model == nil {
		return nil, fmt.Errorf("llama: loading model %s failed: %s", cfg.ModelPath, llamaReason("is it a GGUF file of a supported architecture?"))
	}
	ok := false
	defer func() {
		if !ok {
			C.llama_model_free(model)
		}
	}()

	trainCtx := int(C.llama_model_n_ctx_train(model))
	ctxTokens := cfg.ContextTokens
	if ctxTokens == 0 {
		ctxTokens = DefaultContextTokens
		if trainCtx > 0 {
			ctxTokens = min(ctxTokens, trainCtx)
		}
	}
	if trainCtx > 0 && ctxTokens > trainCtx {
		return nil, fmt.Errorf("llama: Config.ContextTokens is %d but the model was trained on at most %d tokens; positions beyond that give degraded vectors, lower ContextTokens", ctxTokens, trainCtx)
	}
	batchTokens := cfg.BatchTokens
	switch {
	case batchTokens == 0:
		batchTokens = min(ctxTokens, sched.batchTokens)
	case batchTokens > ctxTokens:
		return nil, fmt.Errorf("llama: Config.BatchTokens is %d, more than ContextTokens %d; a decode call cannot hold more tokens than the context, lower BatchTokens", batchTokens, ctxTokens)
	}
	attnBytes := cfg.AttentionBytes
	if attnBytes == 0 {
		attnBytes = DefaultAttentionBytes
	}
	plainBatch := min(batchTokens, sched.longCallTokens, attentionFit(attnBytes, ctxTokens, int(C.llama_model_n_head(model))))
	if dev != nil {
		device.GPULayers = min(int(mp.n_gpu_layers), int(C.llama_model_n_layer(model))+1)
	}

	hidden := int(C.llama_model_n_embd(model))
	var head *yesNoHead
	nOut := hidden
	if cfg.Rerank {
		if head, err = readYesNoHead(cfg.ModelPath, hidden); err != nil {
			return nil, err
		}
		nOut = 2
	}
	e := &Engine{
		head:      head,
		crossover: attentionCrossover(shape, int64(C.llama_model_n_params(model))),
		info: Info{
			NEmbd:         nOut,
			Hidden:        hidden,
			Rerank:        cfg.Rerank,
			NVocab:        int(C.llama_vocab_n_tokens(C.llama_model_get_vocab(model))),
			ContextTokens: ctxTokens,
			BatchTokens:   batchTokens,
			TrainContext:  trainCtx,
			ModelName:     modelName(model, cfg.ModelPath),
			Device:        device,
		},
		threads: threads,
		nice:    cfg.Nice,
		jobs:    make(chan func()),
		prio:    make(chan func()),
		quit:    make(chan struct{}),
		done:    make(chan struct{}),
		model:   model,
		dev:     dev,
		// Lets a cancelled or closing call stop inside a decode call, which can take
		// tens of seconds for a full batch of a large model on a small CPU.
		abort: (*C.es_abort)(C.calloc(1, C.sizeof_es_abort)),
	}
	e.abort.cancelled = -1 // jobs are numbered from 1; job 0 is the idle state
	switch cfg.attention {
	case attnHybrid:
		// A round of short sequences holds at most a decode call's worth, or one
		// sequence of the schedule's shortMax (FlashMaxTokens on the CPU) split over
		// several calls (see plan).
		shortCtx := min(ctxTokens, max(batchTokens, sched.shortMax))
		e.short = &kctx{kernel: sched.short, ctxTokens: shortCtx, batchTokens: min(batchTokens, shortCtx), maxSeqs: maxSeqs}
		e.shortMax = min(ctxTokens, sched.shortMax)
		if ctxTokens > sched.shortMax {
			// One sequence a round, so that each starts at KV cell 0.
			longBatch := min(batchTokens, sched.longCallTokens)
			if sched.long == attnPlain {
				longBatch = plainBatch
			}
			e.long = &kctx{kernel: sched.long, ctxTokens: ctxTokens, batchTokens: longBatch, maxSeqs: 1}
			e.info.ShortJobs = &backends.ShortJobs{MaxTokens: e.shortMax, BatchTokens: e.short.batchTokens, MaxSeqs: e.short.maxSeqs}
		}
	case attnPlain:
		e.short = &kctx{kernel: attnPlain, ctxTokens: ctxTokens, batchTokens: plainBatch, maxSeqs: maxSeqs}
		e.shortMax = ctxTokens
	default:
		e.short = &kctx{kernel: cfg.attention, ctxTokens: ctxTokens, batchTokens: batchTokens, maxSeqs: maxSeqs}
		e.shortMax = ctxTokens
	}
	// Create now the context every engine needs, so that a context too large for
	// the memory fails Open rather than the first request: the long one where there
	// is one (an ephemeral worker never needs the other), else the short one. The
	// other is created on first use (WarmUp, for the warm worker).
	first := e.short
	if e.long != nil {
		first = e.long
	}
	if err := e.create(first); err != nil {
		C.free(unsafe.Pointer(e.abort))
		return nil, err
	}
	ok = true
	go e.own()
	return e, nil
}

// create makes k's llama.cpp context if it has none yet.
func (e *Engine) create(k *kctx) error {
	if k.lctx != nil {
		return nil
	}
	// Room for the padding token (see embed): one more KV cell, one more sequence, and
	// decode calls of at least two tokens.
	callTokens := max(k.batchTokens, 2)
	cp := C.llama_context_default_params()
	cp.n_ctx = C.uint32_t(k.ctxTokens + 1)
	cp.n_batch = C.uint32_t(callTokens)
	cp.n_ubatch = C.uint32_t(callTokens)
	cp.n_seq_max = C.uint32_t(k.maxSeqs + 1)
	cp.n_threads = C.int32_t(e.threads)
	cp.n_threads_batch = C.int32_t(e.threads)
	cp.pooling_type = C.LLAMA_POOLING_TYPE_NONE
	cp.embeddings = true
	// One KV buffer shared by all sequences of a round: with per-sequence streams each
	// sequence would get only n_ctx/n_seq_max cells, too few for one long sequence.
	cp.kv_unified = true
	cp.no_perf = true
	setKernel(&cp, k.kernel)
	cp.abort_callback = C.es_abort_callback()
	cp.abort_callback_data = unsafe.Pointer(e.abort)
	lctx := C.llama_init_from_model(e.model, cp)
	if lctx == nil {
		return fmt.Errorf("llama: creating a context of %d tokens (batch %d, %d sequences) failed: %s", k.ctxTokens, k.batchTokens, k.maxSeqs, llamaReason("lower ContextTokens or BatchTokens"))
	}
	if C.llama_pooling_type(lctx) != C.LLAMA_POOLING_TYPE_NONE {
		C.llama_free(lctx)
		return errors.New("llama: the context did not accept pooling_type NONE")
	}
	k.lctx = lctx
	// Each token belongs to exactly one sequence, hence n_seq_max 1 per token.
	k.batch = C.llama_batch_init(C.int32_t(callTokens), 0, 1)
	return nil
}

// setKernel sets the attention kernel and V cache type of context parameters.
func setKernel(cp *C.struct_llama_context_params, k attentionKind) {
	cp.flash_attn_type = C.LLAMA_FLASH_ATTN_TYPE_DISABLED
	switch k {
	case attnFlash:
		cp.flash_attn_type = C.LLAMA_FLASH_ATTN_TYPE_ENABLED
	case attnFlashBF16V:
		cp.flash_attn_type = C.LLAMA_FLASH_ATTN_TYPE_ENABLED
		cp.type_v = C.GGML_TYPE_BF16
	}
}

// contextFor returns the context that embeds a sequence of n tokens.
func (e *Engine) contextFor(n int) *kctx {
	if n <= e.shortMax || e.long == nil {
		return e.short
	}
	return e.long
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

// readShape reads the model's shape from the GGUF header (gguf.Shape): the
// architecture, and the rows of its token-embedding table, which the model is
// loaded with as its vocabulary size (see Open).
func readShape(path string) (gguf.Shape, error) {
	s, err := gguf.ReadShape(path)
	if err != nil {
		return s, fmt.Errorf("llama: loading model %s failed: %w", path, err)
	}
	if s.VocabSize == 0 {
		return s, fmt.Errorf("llama: model %s has no two-dimensional %s; is it a GGUF file of a supported architecture?", path, gguf.TensorTokenEmbedding)
	}
	return s, nil
}

// attentionCrossover is the position from which a token's attention (QKᵀ and
// softmax·V over every earlier cell: 4 x layers x heads x head_dim FLOPs per cell)
// costs more than its matrix products (2 FLOPs per weight of the layers, params
// less the token-embedding table, which is a lookup): 3837 for
// Qwen3-Embedding-0.6B. 0 if unknown.
func attentionCrossover(s gguf.Shape, params int64) int {
	linear := params - int64(s.VocabSize)*int64(s.EmbeddingLength)
	perCell := 2 * int64(s.Layers) * int64(s.Heads) * int64(s.KeyLength)
	if linear <= 0 || perCell <= 0 {
		return 0
	}
	return int(linear / perCell)
}

// llamaReason returns the last error llama.cpp logged, or hint when it logged none.
func llamaReason(hint string) string {
	if msg := takeLastError(); msg != "" {
		return "llama.cpp: " + msg
	}
	return hint
}

func modelName(model *C.struct_llama_model, path string) string {
	key := C.CString("general.name")
	defer C.free(unsafe.Pointer(key))
	var buf [256]C.char
	if n := C.llama_model_meta_val_str(model, key, &buf[0], C.size_t(len(buf))); n > 0 {
		return C.GoString(&buf[0])
	}
	return filepath.Base(path)
}

// Info describes the loaded model and context.
func (e *Engine) Info() Info { return e.info }

// own is the owner goroutine: the only one that touches the llama context after Open.
func (e *Engine) own() {
	defer close(e.done)
	if e.nice > 0 {
		// ggml starts the threads of each decode call from the calling thread, and
		// they inherit its priority; keeping this goroutine on one OS thread keeps
		// every decode call on the thread lowered here.
		runtime.LockOSThread()
		if err := lowerPriority(e.nice); err != nil {
			slog.Warn("llama: lowering the decoding threads' priority failed; they run at normal priority", "nice", e.nice, "err", err)
		}
	}
	for {
		select {
		case <-e.quit:
			return
		case job := <-e.jobs:
			job()
		case job := <-e.prio:
			job()
		}
	}
}

// do runs fn on the owner goroutine and returns its result. If ctx ends while fn
// runs, it aborts the decode call in flight and waits for fn to return before
// returning ctx.Err(): fn reads the caller's slices, which must not be in use once
// Embed has returned.
//
// A short job (see Engine.short) may also run inside a long one, where that job
// gives way (yield); fn must then touch only the short context.
func do[T any](ctx context.Context, e *Engine, short bool, fn func() (T, error)) (T, error) {
	var zero T
	type result struct {
		v   T
		err error
	}
	num := e.jobNum.Add(1)
	reply := make(chan result, 1)
	job := func() {
		atomic.StoreInt64((*int64)(unsafe.Pointer(&e.abort.job)), num)
		v, err := fn()
		reply <- result{v, err}
	}
	var prio chan func() // nil: never ready
	if short {
		prio = e.prio
		// Counted before offering the job, so that a decode call in flight gives
		// way at once; uncounted as soon as the job is taken (or given up).
		atomic.AddInt64((*int64)(unsafe.Pointer(&e.abort.preempt)), 1)
	}
	uncount := func() {
		if short {
			atomic.AddInt64((*int64)(unsafe.Pointer(&e.abort.preempt)), -1)
		}
	}
	select {
	case e.jobs <- job:
		uncount()
	case prio <- job:
		uncount()
	case <-ctx.Done():
		uncount()
		return zero, ctx.Err()
	case <-e.quit:
		uncount()
		return zero, ErrClosed
	}
	select {
	case r := <-reply:
		return r.v, r.err
	case <-ctx.Done():
		cancelled := (*int64)(unsafe.Pointer(&e.abort.cancelled))
		for {
			old := atomic.LoadInt64(cancelled)
			if old >= num || atomic.CompareAndSwapInt64(cancelled, old, num) {
				break
			}
		}
		<-reply
		return zero, ctx.Err()
	}
}

// Embed returns the raw (un-normalised) last-token vector of each sequence, in input
// order. Every sequence must be non-empty, at most Info().ContextTokens long and hold
// ids in [0, Info().NVocab); otherwise it returns an *InputError and nothing reaches
// llama.cpp. The vectors do not depend on how sequences are packed together.
func (e *Engine) Embed(ctx context.Context, seqs [][]int32) (_ [][]float32, err error) {
	ctx, st := e.startEmbed(ctx, seqs)
	defer func() { st.End(err) }()
	if err := e.validate(seqs); err != nil {
		return nil, err
	}
	if len(seqs) == 0 {
		return [][]float32{}, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	select {
	case <-e.quit:
		return nil, ErrClosed
	default:
	}
	return e.run(ctx, seqs)
}

func (e *Engine) validate(seqs [][]int32) error {
	for i, s := range seqs {
		switch {
		case len(s) == 0:
			return &InputError{Index: i, Reason: "the sequence is empty"}
		case len(s) > e.info.ContextTokens:
			return &InputError{Index: i, Reason: fmt.Sprintf("the sequence has %d tokens; the limit is %d", len(s), e.info.ContextTokens)}
		}
		for j, t := range s {
			if t < 0 || int(t) >= e.info.NVocab {
				return &InputError{Index: i, Reason: fmt.Sprintf("token %d is id %d, outside the vocabulary [0, %d)", j, t, e.info.NVocab)}
			}
		}
	}
	return nil
}

// embed runs on the owner goroutine: each context embeds the sequences it takes.
func (e *Engine) embed(ctx context.Context, seqs [][]int32) ([][]float32, error) {
	nEmbd := e.info.NEmbd
	flat := make([]float32, len(seqs)*nEmbd)
	out := make([][]float32, len(seqs))
	for i := range out {
		out[i] = flat[i*nEmbd : (i+1)*nEmbd : (i+1)*nEmbd]
	}
	decodes := 0
	for _, k := range []*kctx{e.short, e.long} {
		if k == nil {
			continue
		}
		var idx []int
		for i, s := range seqs {
			if e.contextFor(len(s)) == k {
				idx = append(idx, i)
			}
		}
		if len(idx) == 0 {
			continue
		}
		if err := e.create(k); err != nil {
			return nil, err
		}
		if err := e.decodeAll(ctx, k, seqs, idx, out, &decodes); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// decodeAll embeds the sequences seqs[idx...] in context k, writing each vector to
// out at the sequence's index.
func (e *Engine) decodeAll(ctx context.Context, k *kctx, seqs [][]int32, idx []int, out [][]float32, decodes *int) error {
	lengths := make([]int, len(idx))
	for j, i := range idx {
		lengths[j] = len(seqs[i])
	}
	mem := C.llama_get_memory(k.lctx)
	// Whatever happens, leave an empty cache for the next round or call. Emptying
	// it only marks the cells free: zeroing the buffer too (data = true) would write
	// the whole KV cache, 950 MB for the 0.6B model at 8192 tokens, after every round.
	// Stale cells are harmless as long as they are finite: a sequence's attention
	// skips (flash) or gives a weight of exactly 0 (plain) to every cell that is not
	// its own. A NaN or infinity would not be harmless to the plain kernel (0 x NaN is
	// NaN), so the buffer is zeroed after a round that produced one (any non-finite
	// KV value reaches the round's outputs: every row of a decode call reads every
	// cell of the round) and after a round cut short.
	clean := false
	defer func() { C.llama_memory_clear(mem, C.bool(!clean)) }()

	yieldable := k == e.long && !e.nested
	if !e.nested {
		e.smallCalls = 0
	}
	for _, r := range plan(lengths, k.ctxTokens, k.batchTokens, k.maxSeqs) {
		// Between rounds the cache is empty, so short jobs waiting can use the short
		// context (this one, or idle) before the round starts.
		if !e.nested && atomic.LoadInt64((*int64)(unsafe.Pointer(&e.abort.preempt))) > 0 {
			e.yield()
		}
		finite := true
		for _, d := range r.decodes {
			for len(d) > 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
				select {
				case <-e.quit:
					return ErrClosed
				default:
				}
				// A long sequence's calls give way to short jobs: between calls, and
				// during one by aborting it (the call is then done again). Once short
				// jobs have run, the next calls are cut small and run to the end, so
				// that the sequence makes progress however many short jobs come,
				// and a short job arriving meanwhile waits at most a small call.
				call, rest, mayYield := d, [][]span(nil), false
				if yieldable {
					if atomic.LoadInt64((*int64)(unsafe.Pointer(&e.abort.preempt))) > 0 {
						e.yield()
					}
					if e.smallCalls > 0 {
						call, rest = cutSpan(d, e.smallCallTokens(d[0].from))
						e.smallCalls--
					} else {
						mayYield = true
					}
				}
				gaveWay, err := e.decodeCall(ctx, k, seqs, idx, call, out, mayYield, &finite)
				if err != nil {
					return err
				}
				if gaveWay {
					e.yield()
					continue
				}
				*decodes++
				if e.decodeHook != nil {
					e.decodeHook(*decodes)
				}
				if rest == nil {
					break
				}
				d = rest[0]
			}
		}
		C.llama_memory_clear(mem, C.bool(!finite))
	}
	clean = true
	return nil
}

// decodeCall runs one decode call of the spans d of context k and reads its
// outputs into out. With mayYield the call is aborted when a short job is waiting;
// it then returns gaveWay, llama.cpp having removed the call's tokens from the cache,
// so the same call can be made again.
func (e *Engine) decodeCall(ctx context.Context, k *kctx, seqs [][]int32, idx []int, d []span, out [][]float32, mayYield bool, finite *bool) (gaveWay bool, err error) {
	mem := C.llama_get_memory(k.lctx)
	padSeq := C.llama_seq_id(k.maxSeqs) // the slot no input sequence uses
	outIdx := make([]C.int32_t, 0, len(d))
	outInput := make([]int, 0, len(d))
	k.batch.n_tokens = 0
	for _, sp := range d {
		toks := seqs[idx[sp.input]][sp.from:sp.to]
		last := C.es_batch_add(&k.batch, (*C.llama_token)(unsafe.Pointer(&toks[0])), C.int32_t(len(toks)),
			C.llama_seq_id(sp.slot), C.llama_pos(sp.from), C.bool(sp.last))
		if sp.last {
			outIdx = append(outIdx, last)
			outInput = append(outInput, idx[sp.input])
		}
	}
	// Two rows, always. ggml multiplies a single row through its matrix-vector
	// kernel and several rows through its matrix-matrix one (llamafile's
	// tinyBLAS); the two round differently, and through f16 weights that grew
	// to 1e-4 on a test model. A decode call's row count is its token count,
	// and in the last layer (where llama.cpp keeps only output rows) its output
	// count. Keeping both at two or more sends every vector through the same
	// kernels, so the result is bit-identical however sequences were packed.
	padded := false
	switch {
	case k.batch.n_tokens == 1:
		// A lone token: add a throwaway token of another sequence as a second
		// row and second output; its cell is removed after the call.
		C.es_batch_add(&k.batch, k.batch.token, 1, padSeq, 0, true)
		padded = true
	case len(outIdx) == 1:
		other := C.int32_t(0)
		if outIdx[0] == 0 {
			other = 1
		}
		C.es_batch_mark_output(&k.batch, other)
	}
	if e.beforeDecode != nil {
		e.beforeDecode()
	}
	yield := (*int64)(unsafe.Pointer(&e.abort.yield))
	if mayYield {
		atomic.StoreInt64(yield, 1)
	}
	rc := C.llama_decode(k.lctx, k.batch)
	atomic.StoreInt64(yield, 0)
	if padded {
		C.llama_memory_seq_rm(mem, padSeq, -1, -1)
	}
	if rc == 2 { // aborted through es_should_abort
		if err := ctx.Err(); err != nil {
			return false, err
		}
		if atomic.LoadInt64((*int64)(unsafe.Pointer(&e.abort.closed))) != 0 {
			return false, ErrClosed
		}
		if mayYield {
			return true, nil
		}
		return false, ErrClosed
	}
	if rc != 0 {
		return false, fmt.Errorf("llama: decode of %d tokens failed (llama_decode returned %d): %s", int(k.batch.n_tokens), int(rc), llamaReason("see the debug log"))
	}
	// Outputs live only until the next decode call, so read them now.
	for j, bi := range outIdx {
		p := C.llama_get_embeddings_ith(k.lctx, bi)
		if p == nil {
			return false, fmt.Errorf("llama: no embedding for batch index %d: %s", int(bi), llamaReason("see the debug log"))
		}
		v, h := out[outInput[j]], unsafe.Slice((*float32)(unsafe.Pointer(p)), e.info.Hidden)
		if e.head != nil {
			e.head.apply(v, h)
		} else {
			copy(v, h)
		}
		*finite = *finite && allFinite(v)
	}
	return false, nil
}

// smallCallTokens is the size of a small call (see YieldCallTokens) starting at
// position pos: YieldCallTokens near the start, fewer further in, where each token
// also attends to every cell before it, so that a small call costs about the same
// anywhere in the sequence (at least 2 tokens: see decodeCall).
func (e *Engine) smallCallTokens(pos int) int {
	if e.crossover <= 0 {
		return YieldCallTokens
	}
	return max(2, YieldCallTokens*e.crossover/(e.crossover+pos))
}

// cutSpan splits a long sequence's call (one span: the long context takes one
// sequence a round) after n tokens; rest is nil when nothing is left over.
func cutSpan(d []span, n int) (call []span, rest [][]span) {
	sp := d[0]
	if len(d) != 1 || sp.to-sp.from <= n {
		return d, nil
	}
	head, tail := sp, sp
	head.to, head.last = sp.from+n, false
	tail.from = sp.from + n
	return []span{head}, [][]span{{tail}}
}

// yield runs the short jobs waiting (see do) inside the job now running, which
// must have nothing of its own in the short context: the short jobs use it. It
// runs as many as were waiting when it was called, fewer if some give up, so that
// clients sending queries back to back cannot keep it from returning. Their
// vectors are what they would be alone, as the short context's always are; the
// job they ran inside is not touched.
func (e *Engine) yield() {
	preempt := (*int64)(unsafe.Pointer(&e.abort.preempt))
	job := (*int64)(unsafe.Pointer(&e.abort.job))
	running := atomic.LoadInt64(job)
	e.nested = true
	ran := int64(0)
	waiting := atomic.LoadInt64(preempt)
	wait := time.NewTimer(time.Millisecond)
	defer wait.Stop()
	for ran < waiting && atomic.LoadInt64(preempt) > 0 {
		select {
		case job := <-e.prio:
			job()
			ran++
		case <-e.quit:
			atomic.StoreInt64(preempt, 0)
		case <-wait.C:
			// A short job counted but not yet offered, or given up: look again.
			wait.Reset(time.Millisecond)
		}
	}
	e.nested = false
	// Each job marks itself as running (for cancellation); mark this one again.
	atomic.StoreInt64(job, running)
	if ran > 0 {
		e.smallCalls = YieldSmallCalls
	}
}

func allFinite(v []float32) bool {
	for _, x := range v {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return false
		}
	}
	return true
}

// warmUpTokens is the length of WarmUp's throwaway sequences.
const warmUpTokens = 32

// WarmUp readies the engine for inputs of the given lengths, so that the first real
// one is as fast as later ones: for each context that would embed such an input it
// creates the context if it is not yet there and decodes one short throwaway
// sequence in it. That is all a first input pays for on the CPU. Measured on the
// 0.6B shape, without WarmUp the first 20-token input took 1.25 times as long as the
// second (the short context's creation and first decode); after WarmUp, and after
// any first input for the sizes that came next, the first and second inputs of 20,
// 256 and 1024 tokens were within 1% (docs/routing.md). Decoding a whole input of
// each length would cost what the input costs (8192 tokens of the 0.6B model: about
// a minute on two cores) for nothing measurable.
//
// Given any length, WarmUp readies the short-input context as well: queries, the
// inputs whose latency matters most, go there, whether or not the bucket list names
// a length under FlashMaxTokens (the seed list, 256, 1024 and 8192, does not).
func (e *Engine) WarmUp(ctx context.Context, lengths []int) error {
	if len(lengths) == 0 {
		return nil
	}
	done := map[*kctx]bool{}
	for _, n := range append([]int{1}, lengths...) {
		n = min(max(n, 1), e.info.ContextTokens)
		k := e.contextFor(n)
		if done[k] {
			continue
		}
		done[k] = true
		seq := make([]int32, min(n, warmUpTokens))
		for i := range seq {
			seq[i] = int32(i % e.info.NVocab)
		}
		_, err := do(ctx, e, false, func() (struct{}, error) {
			if err := e.create(k); err != nil {
				return struct{}{}, err
			}
			decodes := 0
			return struct{}{}, e.decodeAll(ctx, k, [][]int32{seq}, []int{0}, [][]float32{make([]float32, e.info.NEmbd)}, &decodes)
		})
		if err != nil {
			return fmt.Errorf("llama: warming up the context for %d-token inputs: %w", n, err)
		}
	}
	return nil
}

// abortRequested reports whether llama.cpp's abort callback would now stop the
// running job.
func (e *Engine) abortRequested() bool {
	return bool(C.es_should_abort(unsafe.Pointer(e.abort)))
}

// Close stops the owner goroutine, aborting a decode call in flight, and frees the
// contexts and the model. Embed calls after Close return ErrClosed. Close is
// idempotent.
func (e *Engine) Close() error {
	e.closeOnce.Do(func() {
		close(e.quit)
		atomic.StoreInt64((*int64)(unsafe.Pointer(&e.abort.closed)), 1)
		<-e.done
		for _, k := range []*kctx{e.short, e.long} {
			if k != nil && k.lctx != nil {
				C.llama_batch_free(k.batch)
				C.llama_free(k.lctx)
				k.lctx = nil
			}
		}
		C.llama_model_free(e.model)
		C.free(unsafe.Pointer(e.abort))
		e.model, e.abort = nil, nil
	})
	return nil
}
