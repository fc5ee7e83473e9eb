package llama

/*
#include "es.h"
*/
import "C"

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"unsafe"
)

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
		v := out[outInput[j]]
		e.readout(v, unsafe.Slice((*float32)(unsafe.Pointer(p)), e.info.Hidden))
		*finite = *finite && allFinite(v)
	}
	return false, nil
}

// readout writes a sequence's output v from h, the hidden state of its last token:
// h itself for an embedding, the "yes" and "no" logits for a reranker (yesNoHead).
// It and span.last (which tokens of a decode call are outputs) are where another
// pooling plugs in: an encoder family that pools the mean of every token or takes
// the first (issue 25) marks those tokens as outputs and combines their states
// here, across the decode calls a long sequence spans.
func (e *Engine) readout(v, h []float32) {
	if e.head != nil {
		e.head.apply(v, h)
		return
	}
	copy(v, h)
}

func allFinite(v []float32) bool {
	for _, x := range v {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return false
		}
	}
	return true
}
