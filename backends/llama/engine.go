// Package llama is embed-stack's llama.cpp embedding engine and its only cgo package.
//
// It loads a GGUF model through llama.cpp (linked from github.com/ollama/ollama/llama),
// takes token ids and returns each sequence's raw, un-normalised pooled vector: the
// last token's hidden state (Qwen3-Embedding), the mean of every token's (BERT-style
// sentence encoders such as all-MiniLM, nomic-embed, E5) or the first token's (CLS:
// BGE), as the model's GGUF declares or Config.Pooling says. Contexts are created
// with no pooling and only the tokens the pooling reads marked as outputs (a causal
// decoder's last token gives LAST pooling's vector without running the
// vocabulary-wide LM head over every token), and the engine pools those outputs
// itself, in float64, which keeps a vector the same bit for bit whatever it was
// packed with (see Open). A causal decoder's short sequences are packed into shared
// decode calls of a flash-attention context; each long one is decoded alone in a
// context without flash attention. An encoder (bert, nomic-bert, jina-bert-v2,
// t5encoder, ...: family.Arch.Encoder) attends both ways over one call with no KV cache, so
// each of its sequences is encoded whole in one call, the short ones packed. The KV
// cache is emptied between rounds, and a sequence's vector never depends on what it
// was packed with.
//
// For a Qwen3-Reranker (Config.Rerank) each sequence's output is instead the two
// logits its score needs, those of "yes" and "no" at the last token, computed from
// that hidden state and two rows of the LM head (see readYesNoHead). For a
// cross-encoder (Config.Rerank with a bert, neo-bert or jina-bert-v2 GGUF) it is
// [logit, 0], the score its classifier head gives from the [CLS] state as
// llama.cpp's rank pooling computes it (see readClassifierHead), with the
// document's tokens typed as the model was trained (see tokenInput).
//
// It knows nothing of text, tokenizers, HTTP, instructions, truncation to
// `dimensions` or normalisation: token ids in, raw vectors out.
//
// One job a file: engine.go (Open, Embed, Close), config.go (Config, and resolve,
// which sizes the contexts from the model's gguf.Shape without calling llama.cpp),
// schedule.go (the batching of each kind of device), device.go (GPU backends and
// the device), model.go (loading), context.go (the llama.cpp contexts), owner.go
// (the goroutine that owns them, and the job queue), pack.go (sequences into rounds
// and decode calls), decode.go (the decode calls, reading and pooling their outputs),
// yield.go (a long sequence giving way to short jobs), warmup.go, rerank.go (the
// rerankers' heads), tokeninput.go (a cross-encoder's token types), observe.go
// (spans), log.go (llama.cpp's log); crosscheck.go and encoders.go are llama.cpp's
// own pooling and tokenizer, references for the tests.
// The C helpers they call are in es.h.
package llama

/*
#include "es.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"os"
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
	// Architecture is general.architecture ("qwen3", "bert"); Encoder says the
	// engine runs it as an encoder (each sequence whole in one call, attending both
	// ways), else as a causal decoder over a KV cache.
	Architecture string
	Encoder      bool
	// Pooling is what a sequence's vector is: gguf.PoolingLast, PoolingMean or
	// PoolingCLS (Config.Pooling).
	Pooling gguf.Pooling
	// Device is where the engine computes, as the worker protocol reports it.
	Device backends.Device
	// ShortJobs bounds the Embed calls that run inside a long sequence's (see
	// YieldCallTokens): at most MaxSeqs sequences of at most MaxTokens tokens,
	// BatchTokens in all, one decode call of the short context. Its Fits is the
	// rule, shared with the router's batcher through the worker's /health. Nil when
	// the engine has no long context.
	ShortJobs *backends.ShortJobs
}

// Engine embeds token sequences with llama.cpp. It is safe for concurrent use: a
// single goroutine owns the contexts (llama.cpp contexts are not thread safe) and
// Embed calls queue for it.
type Engine struct {
	info    Info
	threads int
	nice    int
	// idleRelease is Config.IdleRelease (owner.go); kvReleases counts the
	// releases, for tests.
	idleRelease time.Duration
	kvReleases  atomic.Int64
	head        scoreHead // a reranker's head (yesNoHead, classifierHead); nil for embeddings
	// input feeds a cross-encoder's tokens as embeddings, for its token types;
	// nil where ids do (see tokenInput).
	input *tokenInput
	// encoder and pooling are Info's Encoder and Pooling; graphPooling is
	// Config.graphPooling.
	encoder      bool
	pooling      gguf.Pooling
	graphPooling bool
	// accelWeights: embed-stack's own kernels hold matrices of this model (BF16
	// weights repacked at load, accel.c), so its graphs alternate between them and
	// ggml's CPU backend as an encoder's do.
	accelWeights bool

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
//
//   - Without flash attention llama.cpp multiplies the KQ matrix out: cosine
//     0.9999998 at 8192 tokens, and 2.7 times as fast as flash attention on one 4096-
//     token sequence (46.7 against 17.3 tokens per CPU-second), but its sums run over
//     every cell of the round in 16-lane chunks, so a sequence's vector moves (by
//     about 1e-8 in cosine) with its offset in the KV cache.
//
//   - Where the CPU has AVX512_BF16, embed-stack's own flash attention (accel.c,
//     es_flash_attn) over a bf16 K and V cache computes in tiles what the plain
//     kernel writes out, normalises and reads back: one 4096-token input on the
//     0.6B shape in 9.3 to 10.6 s against 18.0 to 23.4 s with the plain kernel
//     (Zen 5, 2 threads); cosine 0.999996 to the float64 reference at 4096 tokens
//     of a repeated token (the K cache's bf16 rounding).
//
// So sequences of up to FlashMaxTokens tokens are packed into rounds of a flash-
// attention context over a bf16 V cache (a bf16 K cache too, and embed-stack's
// flash attention in its exact form, where the kernels hold the model's matrices:
// heldShort), and longer ones are decoded each alone,
// from KV cell 0, in a context of their own: embed-stack's flash attention where
// the CPU runs it (cpuLong), else the plain kernel in decode calls that keep the
// attention scores within AttentionBytes. Either way a sequence's vector is a
// function of the sequence alone, whatever it was sent with and whichever worker
// embeds it.
//
// An encoder has no KV cache: each sequence is encoded whole in one call, short
// ones (up to EncoderPackMaxTokens on the CPU) packed with flash attention
// (llama.cpp casts K and V to f16 there; all-MiniLM-L6-v2 keeps cosine 0.9999973
// to a float64 reference), longer ones alone in a call of their own length
// without it: a packed call's attention runs over every token of the call, masked
// or not, so packing longer ones costs more attention than it saves in calls. Mean pooling is
// summed by the engine over the sequence's own output rows in float64: llama.cpp's
// own MEAN pooling multiplies the whole call by a matrix of 1/n, whose rounding
// moves (1.2e-7) with a sequence's place in the call, and is no faster
// (docs/routing.md, "Encoders and pooling").
func Open(cfg Config) (*Engine, error) {
	if cfg.ModelPath == "" {
		return nil, errors.New("llama: Config.ModelPath is empty; give the path of a GGUF model")
	}
	if _, err := os.Stat(cfg.ModelPath); err != nil {
		return nil, fmt.Errorf("llama: model file: %w", err)
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if err := backendInit(); err != nil {
		return nil, err
	}
	dev, device, err := selectDevice(cfg.Device, cfg.BackendDir, cfg.BackendDir != "", cfg.CPUVariant)
	if err != nil {
		return nil, err
	}
	if dev == nil {
		device.CPUAccel, device.CPUAccelBF16 = setupAccel(cfg.CPUAccel)
	} else if err := hookBackendFree(dev); err != nil {
		return nil, err
	}
	shape, err := readShape(cfg.ModelPath)
	if err != nil {
		return nil, err
	}
	sz, err := resolve(cfg, shape, cpuLong(scheduleFor(device.GPU), device, shape))
	if err != nil {
		return nil, err
	}
	// One sequence id is reserved for the padding token (see decodeCall).
	if limit := int(C.llama_max_parallel_sequences()) - 1; sz.maxSeqs > limit {
		return nil, fmt.Errorf("llama: Config.MaxSeqs is %d; at most %d (llama.cpp's LLAMA_MAX_SEQ less one this engine reserves)", sz.maxSeqs, limit)
	}

	model, repacked, err := loadModel(cfg.ModelPath, shape, dev, sz.gpuLayers, !cfg.Rerank)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			C.llama_model_free(model)
		}
	}()
	if dev != nil {
		device.GPULayers = min(sz.gpuLayers, int(C.llama_model_n_layer(model))+1)
	}
	if cfg.attention == attnHybrid {
		sz = heldShort(sz, repacked > 0, device.GPU, shape)
	}
	hidden := int(C.llama_model_n_embd(model))
	var head scoreHead
	var input *tokenInput
	nOut := hidden
	switch {
	case cfg.Rerank && sz.encoder:
		// A cross-encoder: its classifier head over the [CLS] state.
		if head, err = readClassifierHead(cfg.ModelPath, shape, hidden); err != nil {
			return nil, err
		}
		if input, err = readTokenInput(cfg.ModelPath, hidden); err != nil {
			return nil, err
		}
		nOut = 2
	case cfg.Rerank:
		yn, err := readYesNoHead(cfg.ModelPath, hidden)
		if err != nil {
			return nil, err
		}
		head, nOut = yn, 2
	}
	e := &Engine{
		head:         head,
		input:        input,
		accelWeights: repacked > 0,
		crossover:    attentionCrossover(shape, int64(C.llama_model_n_params(model))),
		info: Info{
			NEmbd:         nOut,
			Hidden:        hidden,
			Rerank:        cfg.Rerank,
			NVocab:        int(C.llama_vocab_n_tokens(C.llama_model_get_vocab(model))),
			ContextTokens: sz.ctxTokens,
			BatchTokens:   sz.batchTokens,
			TrainContext:  shape.ContextLength,
			ModelName:     modelName(shape, cfg.ModelPath),
			Architecture:  shape.Architecture,
			Encoder:       sz.encoder,
			Pooling:       sz.pooling,
			Device:        device,
			ShortJobs:     sz.shortJobs,
		},
		threads:      sz.threads,
		nice:         cfg.Nice,
		idleRelease:  cfg.IdleRelease,
		encoder:      sz.encoder,
		pooling:      sz.pooling,
		graphPooling: cfg.graphPooling && sz.encoder,
		short:        &kctx{contextSize: sz.short},
		shortMax:     sz.shortMax,
		jobs:         make(chan func()),
		prio:         make(chan func()),
		quit:         make(chan struct{}),
		done:         make(chan struct{}),
		model:        model,
		dev:          dev,
		// Lets a cancelled or closing call stop inside a decode call, which can take
		// tens of seconds for a full batch of a large model on a small CPU.
		abort: (*C.es_abort)(C.calloc(1, C.sizeof_es_abort)),
	}
	if sz.long != nil {
		e.long = &kctx{contextSize: *sz.long}
	}
	e.abort.cancelled = -1 // jobs are numbered from 1; job 0 is the idle state
	// Create now the context every engine needs, so that a context too large for
	// the memory fails Open rather than the first request: the long one where there
	// is one (an ephemeral worker never needs the other), else the short one. The
	// other is created on first use (WarmUp, for the warm worker).
	first := e.short
	if e.long != nil {
		first = e.long
	}
	// On the owner goroutine, whose thread Config.Nice lowers first: the threads
	// the context starts with (embed-stack's kernels' pool, ggml's threadpool)
	// inherit the priority of the thread that creates them, and a thread cannot
	// get its priority back once lowered.
	go e.own()
	created := make(chan error, 1)
	e.jobs <- func() { created <- e.create(first) }
	if err := <-created; err != nil {
		close(e.quit)
		<-e.done
		C.free(unsafe.Pointer(e.abort))
		return nil, err
	}
	ok = true
	return e, nil
}

// Info describes the loaded model and context.
func (e *Engine) Info() Info { return e.info }

// Embed returns the raw (un-normalised) pooled vector of each sequence, in input
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

// Close stops the owner goroutine, aborting a decode call in flight, and frees the
// contexts and the model. Embed calls after Close return ErrClosed. Close is
// idempotent.
func (e *Engine) Close() error {
	e.closeOnce.Do(func() {
		close(e.quit)
		atomic.StoreInt64((*int64)(unsafe.Pointer(&e.abort.closed)), 1)
		<-e.done
		e.short.free()
		e.long.free()
		C.llama_model_free(e.model)
		C.free(unsafe.Pointer(e.abort))
		e.model, e.abort = nil, nil
	})
	return nil
}
