package llama

/*
#include "es.h"
*/
import "C"

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/embed-stack/embed-stack/gguf"
)

// pooledLast embeds one sequence the slow, obvious way: a fresh context with
// llama.cpp's own LAST pooling and every token an output. It exists so tests can
// hold the engine-mode vector (pooling NONE, last token only) against llama.cpp's
// definition, with the attention kernel the engine uses for that length; it runs on
// the owner goroutine because it shares the model.
func (e *Engine) pooledLast(ctx context.Context, seq []int32) ([]float32, error) {
	return e.pooled(ctx, seq, C.LLAMA_POOLING_TYPE_LAST, e.info.Hidden)
}

// pooledBy embeds one sequence alone with llama.cpp's own pooling p (mean, cls or
// last) over every token's output, the reference of the engine's pooling.
func (e *Engine) pooledBy(ctx context.Context, seq []int32, p gguf.Pooling) ([]float32, error) {
	return e.pooled(ctx, seq, C.enum_llama_pooling_type(p), e.info.Hidden)
}

// pooledRank scores one sequence as llama-server --reranking does: a context with
// llama.cpp's RANK pooling, which for a Qwen3 model with a classifier head
// (cls.output.weight) takes the last token's hidden state through that head and a
// softmax, giving [P(yes), P(no)].
func (e *Engine) pooledRank(ctx context.Context, seq []int32) ([]float32, error) {
	return e.pooled(ctx, seq, C.LLAMA_POOLING_TYPE_RANK, 2)
}

// pooledRankTyped scores one pair of a cross-encoder with llama.cpp's RANK pooling
// (its classifier head in its own graph) over the same input rows the engine feeds:
// for a model of two token types (tokenInput) each token's embedding with the
// document's type folded in, so that llama.cpp's head and the engine's differ only
// in how the head is computed, not in how the pair is typed. It returns the score.
func (e *Engine) pooledRankTyped(ctx context.Context, seq []int32) (float32, error) {
	v, err := e.pooledWith(ctx, seq, C.LLAMA_POOLING_TYPE_RANK, 1, e.input)
	if err != nil {
		return 0, err
	}
	return v[0], nil
}

// pooled decodes seq alone in a fresh context with llama.cpp's pooling of the given
// type and returns the sequence's first n pooled values.
func (e *Engine) pooled(ctx context.Context, seq []int32, pooling C.enum_llama_pooling_type, n int) ([]float32, error) {
	return e.pooledWith(ctx, seq, pooling, n, nil)
}

// pooledWith is pooled with the tokens fed as ids, or with in as input embeddings.
func (e *Engine) pooledWith(ctx context.Context, seq []int32, pooling C.enum_llama_pooling_type, n int, in *tokenInput) ([]float32, error) {
	if err := e.validate([][]int32{seq}); err != nil {
		return nil, err
	}
	return do(ctx, e, false, func() ([]float32, error) {
		nt := len(seq)
		cp := C.llama_context_default_params()
		cp.n_ctx = C.uint32_t(nt)
		cp.n_batch = C.uint32_t(nt)
		cp.n_ubatch = C.uint32_t(nt)
		cp.n_seq_max = 1
		cp.n_threads = C.int32_t(e.threads)
		cp.n_threads_batch = C.int32_t(e.threads)
		cp.pooling_type = pooling
		cp.embeddings = true
		cp.no_perf = true
		// The same attention kernel as the engine's context for this length (see Open).
		setKernel(&cp, e.contextFor(nt).kernel, e.info.Device.GPU)
		lctx := C.llama_init_from_model(e.model, cp)
		if lctx == nil {
			return nil, fmt.Errorf("llama: creating a pooling context failed: %s", llamaReason("see the debug log"))
		}
		defer freeContext(lctx)
		var batch C.struct_llama_batch
		if in != nil {
			batch = C.llama_batch_init(C.int32_t(nt), C.int32_t(in.hidden), 1)
			in.add(&batch, seq, 0, nt, 0, C.ES_OUT_ALL)
		} else {
			batch = C.llama_batch_init(C.int32_t(nt), 0, 1)
			C.es_batch_fill_all(&batch, (*C.llama_token)(unsafe.Pointer(&seq[0])), C.int32_t(nt))
		}
		defer C.llama_batch_free(batch)
		var rc C.int32_t
		if e.encoder {
			rc = C.llama_encode(lctx, batch)
		} else {
			rc = C.llama_decode(lctx, batch)
		}
		if rc != 0 {
			return nil, fmt.Errorf("llama: pooling decode returned %d: %s", int(rc), llamaReason("see the debug log"))
		}
		p := C.llama_get_embeddings_seq(lctx, 0)
		if p == nil {
			return nil, fmt.Errorf("llama: pooling context returned no sequence embedding")
		}
		v := make([]float32, n)
		copy(v, unsafe.Slice((*float32)(unsafe.Pointer(p)), n))
		return v, nil
	})
}
