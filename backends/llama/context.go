package llama

/*
#include "es.h"
#include "accel.h"
#include "kvpages.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// contextSize is the kernel and sizes of one llama.cpp context, as resolve chose them.
type contextSize struct {
	kernel      attentionKind // attnPlain, attnFlash, attnFlashBF16V or attnFlashBF16
	ctxTokens   int           // longest sequence, and the token budget of a round
	batchTokens int           // tokens per decode call
	maxSeqs     int           // sequences per round; seq id maxSeqs is the padding token's
}

// kctx is one llama.cpp context of its contextSize, and the batch its decode calls
// are built in. lctx is nil until the context is first needed (create). Both belong
// to the owner goroutine.
type kctx struct {
	contextSize

	lctx  *C.struct_llama_context
	batch C.struct_llama_batch
	pool  unsafe.Pointer // the CPU threads attached to lctx (es_threadpool_attach), or nil
	// kernels is embed-stack's device in lctx where its calls may run as one pool
	// (kernelsAlone), else nil; alone says whether the last call did (setPools).
	kernels unsafe.Pointer
	alone   bool
	// kv records the KV buffers llama.cpp cleared as it created lctx, for
	// releaseKV (kvpages.c): the long context's, where IdleRelease asks for it;
	// else nil.
	kv *C.struct_es_kv_pages
}

// create makes k's llama.cpp context if it has none yet.
func (e *Engine) create(k *kctx) error {
	if k.lctx != nil {
		return nil
	}
	// Room for the padding token (see decodeCall): one more sequence, decode calls of
	// at least two tokens, and one more KV cell where a round can need it (kvCells).
	callTokens := max(k.batchTokens, 2)
	cp := C.llama_context_default_params()
	cp.n_ctx = C.uint32_t(kvCells(k.ctxTokens, k.batchTokens))
	cp.n_batch = C.uint32_t(callTokens)
	cp.n_ubatch = C.uint32_t(callTokens)
	cp.n_seq_max = C.uint32_t(k.maxSeqs + 1)
	cp.n_threads = C.int32_t(e.threads)
	cp.n_threads_batch = C.int32_t(e.threads)
	kernelThreads := 0
	if e.kernelsAlone(k.kernel) {
		// the kernels on e.threads threads in every call, whatever setPools gives
		// ggml's operations (es_init_context)
		kernelThreads = e.threads
	}
	// The engine pools itself (decode.go), from the outputs it reads.
	cp.pooling_type = C.LLAMA_POOLING_TYPE_NONE
	if e.graphPooling {
		cp.pooling_type = C.enum_llama_pooling_type(e.pooling)
	}
	cp.embeddings = true
	// One KV buffer shared by all sequences of a round: with per-sequence streams each
	// sequence would get only n_ctx/n_seq_max cells, too few for one long sequence.
	cp.kv_unified = true
	cp.no_perf = true
	setKernel(&cp, k.kernel, e.info.Device.GPU)
	// Only the long context's cache is handed back while idle (releaseKV): the
	// short one's is a sixteenth of its size, and a query would fault its cells
	// in again after each idle spell (a first trial: 56 against 47 ms).
	if e.idleRelease > 0 && k == e.long && k.kv == nil {
		k.kv = C.es_kv_pages_new()
	}
	cp.abort_callback = C.es_abort_callback()
	cp.abort_callback_data = unsafe.Pointer(e.abort)
	// The short context packs sequences: embed-stack's flash attention there must
	// not depend on where a sequence's cells lie (es_init_context).
	exact := k == e.short && k.kernel == attnFlashBF16
	var kernels unsafe.Pointer
	lctx := C.es_init_context(e.model, cp, C.int(kernelThreads), C.bool(exact), &kernels, k.kv)
	if lctx == nil {
		return fmt.Errorf("llama: creating a context of %d tokens (batch %d, %d sequences) failed: %s", k.ctxTokens, k.batchTokens, k.maxSeqs, llamaReason("lower ContextTokens or BatchTokens"))
	}
	if C.llama_pooling_type(lctx) != cp.pooling_type {
		freeContext(lctx)
		return fmt.Errorf("llama: the context did not accept pooling_type %d", int(cp.pooling_type))
	}
	// An architecture the engine runs as a decoder must keep its prefix in a KV
	// cache (a long sequence's calls, and the outputs of the last token only); one
	// llama.cpp runs without is an encoder that family.Archs does not list yet.
	// And the other way round: an encoder's calls must be encoded as a whole, as
	// llama.cpp does for an architecture it gives no KV cache or calls an encoder.
	cached := C.llama_get_memory(lctx) != nil
	if !e.encoder && !cached {
		freeContext(lctx)
		return fmt.Errorf("llama: llama.cpp runs this model's architecture as an encoder, without a KV cache, which the engine does not know it for; it cannot be served")
	}
	if e.encoder && cached && !bool(C.llama_model_has_encoder(e.model)) {
		freeContext(lctx)
		return fmt.Errorf("llama: llama.cpp runs this model's architecture as a decoder over a KV cache, but family.Archs lists it as an encoder")
	}
	k.lctx = lctx
	// With embed-stack's own kernels taking part, an encoder's call runs as a couple
	// of dozen graphs alternating between them and ggml's CPU backend, which without
	// a pool of its own starts and joins its threads for each: that cost 2x on two
	// threads (docs/performance.md). A pool that lives with the context avoids it.
	// A decoder's short context (flash attention, F16 weights and KV cache) gives
	// the kernels nothing and stays one graph, which ran 0.9x as fast with the pool
	// on 1 x 16; with its BF16 weights held by the kernels it is split as an
	// encoder's is, and so is a long context whose attention the kernels compute.
	if e.info.Device.CPUAccel != "" && e.encoder || e.accelWeights || k.kernel == attnFlashBF16 {
		k.pool = C.es_threadpool_attach(lctx, C.int(e.threads))
	}
	k.kernels, k.alone = kernels, false
	// Each token belongs to exactly one sequence, hence n_seq_max 1 per token.
	// A cross-encoder with token types is fed input embeddings (tokenInput).
	embd := 0
	if e.input != nil {
		embd = e.input.hidden
	}
	k.batch = C.llama_batch_init(C.int32_t(callTokens), C.int32_t(embd), 1)
	return nil
}

// kernelsAlone says whether a decoder's context of kernel k leaves ggml's CPU
// backend only light operations: embed-stack's kernels hold the weights
// (accelWeights) and compute the attention (attnFlashBF16). Its forward is then a
// couple of hundred graphs alternating between the two, and with a pool of threads
// each the cores change hands at every one: the sleeping side's threads are woken
// each time, which after an idle spell cost a 17-token query 89 to 99 ms instead
// of 38 (0.6B BF16, 2 threads, Zen 5 VM; docs/performance.md). So such a context's
// short calls run as one pool (setPools).
func (e *Engine) kernelsAlone(k attentionKind) bool {
	return e.accelWeights && k == attnFlashBF16 && !e.encoder && !e.info.Device.GPU && e.threads > 1
}

// onePoolTokens is the longest call of a kernelsAlone context that runs as one
// pool: ggml's operations (norms, rope, sums, a few microseconds each at this
// size) on the caller alone, and the kernels' workers waiting for their next job
// awake (es_kernels_alone). The query then took 33 to 42 ms whatever came before
// it. On two threads every call measured as fast that way, up to 32 x 128 and
// 8 x 512; but ggml's share of a call grows with its tokens and does not shrink
// with threads, so on a host of many threads (or AMX tiles) a long call on one
// thread for those operations could lose more than the hand-offs cost it, and
// calls longer than a query keep both pools.
const onePoolTokens = 64

// setPools makes k's next call of tokens tokens run as one pool or as two
// (onePoolTokens), where k can (kernels).
func (e *Engine) setPools(k *kctx, tokens int) {
	alone := tokens <= onePoolTokens
	if k.kernels == nil || alone == k.alone {
		return
	}
	threads := C.int32_t(e.threads)
	if alone {
		threads = 1
		C.llama_detach_threadpool(k.lctx)
	} else if k.pool != nil {
		tp := C.ggml_threadpool_t(k.pool)
		C.llama_attach_threadpool(k.lctx, tp, tp)
	}
	C.llama_set_n_threads(k.lctx, threads, threads)
	C.es_kernels_alone(k.kernels, C.bool(alone))
	k.alone = alone
}

// kvCells is the KV cells a context of ctxTokens tokens asks llama.cpp for, its
// decode calls of batchTokens: ctxTokens, and one more for the padding token only
// where a round can fill every cell and then make a call of one token (a round of
// ctxTokens tokens whose last call holds one: ctxTokens ≡ 1 mod batchTokens, or
// calls of one token each); every other round leaves the padding token a free cell.
// llama.cpp rounds n_ctx up to a multiple of 256 cells, so an unneeded cell cost 256
// of them: 28 MiB in each of a 0.6B Qwen3 worker's two contexts, the margin by which
// the warm worker missed its memory goal (docs/performance.md).
func kvCells(ctxTokens, batchTokens int) int {
	if batchTokens <= 1 || ctxTokens%batchTokens == 1 {
		return ctxTokens + 1
	}
	return ctxTokens
}

// setKernel sets the attention kernel and V cache type of context parameters; gpu
// says the context's layers are on a GPU.
func setKernel(cp *C.struct_llama_context_params, k attentionKind, gpu bool) {
	switch flashFor(k, gpu) {
	case flashOff:
		cp.flash_attn_type = C.LLAMA_FLASH_ATTN_TYPE_DISABLED
	case flashOn:
		cp.flash_attn_type = C.LLAMA_FLASH_ATTN_TYPE_ENABLED
	case flashAuto:
		cp.flash_attn_type = C.LLAMA_FLASH_ATTN_TYPE_AUTO
	}
	switch k {
	case attnFlashBF16V:
		cp.type_v = C.GGML_TYPE_BF16
	case attnFlashBF16:
		cp.type_k = C.GGML_TYPE_BF16
		cp.type_v = C.GGML_TYPE_BF16
	}
}

// flashMode is how a context asks llama.cpp for flash attention.
type flashMode int

const (
	flashOff  flashMode = iota
	flashOn             // always, on whichever backend computes it
	flashAuto           // where the layers' device computes it, else the plain kernel
)

// flashFor is the flash attention of kernel k, on a GPU when gpu is set.
//
// On a GPU, flash attention is llama.cpp's auto: flash where the GPU's backend
// computes it for the model's heads, the plain kernel where it does not. Forced on,
// an operation the GPU lacks runs on the CPU instead, in ggml's f16-accumulating
// kernel: on an H200 the tiny test model (heads of 16, which CUDA's flash attention
// does not take) embedded 8192 repeated tokens in 11.4 s at cosine 0.9795 to the
// float64 reference, against 0.34 s and 0.999996 with the plain kernel on the GPU
// (docs/performance.md). On the CPU it stays forced: embed-stack's own device
// computes the BF16 kinds, and auto would turn those off for not being the CPU's.
func flashFor(k attentionKind, gpu bool) flashMode {
	switch {
	case k == attnPlain || k == attnHybrid:
		return flashOff
	case k == attnFlash && gpu:
		return flashAuto
	}
	return flashOn
}

// contextFor returns the context that embeds a sequence of n tokens.
func (e *Engine) contextFor(n int) *kctx {
	if n <= e.shortMax || e.long == nil {
		return e.short
	}
	return e.long
}

// free releases k's context and batch, if created. Only Close calls it, once the
// owner goroutine has returned.
func (k *kctx) free() {
	if k != nil && k.lctx != nil {
		C.llama_batch_free(k.batch)
		C.es_threadpool_free(k.lctx, k.pool)
		freeContext(k.lctx)
		k.lctx = nil
	}
	if k != nil && k.kv != nil {
		C.es_kv_pages_free(k.kv)
		k.kv = nil
	}
}
