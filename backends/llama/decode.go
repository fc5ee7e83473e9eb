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

	"github.com/embed-stack/embed-stack/gguf"
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

	// An encoder's call holds its sequences whole, so there is nothing to give way
	// between.
	yieldable := k == e.long && !e.nested && !e.encoder
	var sums map[int][]float64 // mean pooling's, across a long sequence's calls
	if e.pooling == gguf.PoolingMean {
		sums = map[int][]float64{}
	}
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
				gaveWay, err := e.decodeCall(ctx, k, seqs, idx, call, out, mayYield, &finite, sums)
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
// so the same call can be made again. sums holds mean pooling's running sums of the
// sequences that span several calls, by input index.
func (e *Engine) decodeCall(ctx context.Context, k *kctx, seqs [][]int32, idx []int, d []span, out [][]float32, mayYield bool, finite *bool, sums map[int][]float64) (gaveWay bool, err error) {
	mem := C.llama_get_memory(k.lctx)
	padSeq := C.llama_seq_id(k.maxSeqs) // the slot no input sequence uses
	reads := make([]outputRead, 0, len(d))
	marked := make([]C.int32_t, 0, 2) // batch indices of the first two outputs
	k.batch.n_tokens = 0
	for _, sp := range d {
		toks := seqs[idx[sp.input]][sp.from:sp.to]
		n := C.int32_t(len(toks))
		r, mode := e.outputsOf(sp, len(toks))
		var first C.int32_t
		if e.input != nil {
			first = e.input.add(&k.batch, seqs[idx[sp.input]], sp.from, sp.to, C.llama_seq_id(sp.slot), mode)
		} else {
			first = C.es_batch_add(&k.batch, (*C.llama_token)(unsafe.Pointer(&toks[0])), n,
				C.llama_seq_id(sp.slot), C.llama_pos(sp.from), mode)
		}
		switch mode {
		case C.ES_OUT_ALL:
			for i := first; i < first+n && len(marked) < 2; i++ {
				marked = append(marked, i)
			}
		case C.ES_OUT_FIRST:
			marked = append(marked, first)
		case C.ES_OUT_LAST:
			marked = append(marked, first+n-1)
		}
		if r.rows > 0 {
			r.at += first
			r.input = idx[sp.input]
			reads = append(reads, r)
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
		if e.input != nil {
			C.es_batch_add_embd(&k.batch, k.batch.embd, 1, C.int32_t(e.input.hidden), padSeq, 0, C.ES_OUT_ALL)
		} else {
			C.es_batch_add(&k.batch, k.batch.token, 1, padSeq, 0, C.ES_OUT_ALL)
		}
		padded = true
	case len(marked) == 1:
		other := C.int32_t(0)
		if marked[0] == 0 {
			other = 1
		}
		C.es_batch_mark_output(&k.batch, other)
	}
	e.setPools(k, int(k.batch.n_tokens))
	if e.beforeDecode != nil {
		e.beforeDecode()
	}
	yield := (*int64)(unsafe.Pointer(&e.abort.yield))
	if mayYield {
		atomic.StoreInt64(yield, 1)
	}
	var rc C.int32_t
	if e.encoder {
		rc = C.llama_encode(k.lctx, k.batch)
	} else {
		rc = C.llama_decode(k.lctx, k.batch)
	}
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
	for _, r := range reads {
		if err := e.readOutputs(k, r, len(seqs[r.input]), out[r.input], sums); err != nil {
			return false, err
		}
		if r.done {
			*finite = *finite && allFinite(out[r.input])
		}
	}
	return false, nil
}

// outputRead is what decodeCall reads of one span after the call: rows output
// rows from batch index at, for input sequence input, whose vector is complete
// once they are read when done.
type outputRead struct {
	input int
	slot  int
	at    C.int32_t
	rows  int
	done  bool
}

// outputsOf says which of a span's n tokens are outputs (es_batch_add's mode), and
// which rows the pooling reads, at an index relative to the span's first token:
//
//   - last: the last token of the sequence, in the span that ends it;
//   - cls: the first token, in the span that starts it (complete then: a causal
//     decoder's first token attends to itself alone);
//   - mean: every token, summed over the spans of the sequence.
//
// An encoder call outputs every token whatever is read (llama.cpp's encoder does).
func (e *Engine) outputsOf(sp span, n int) (outputRead, C.int) {
	r := outputRead{slot: sp.slot, done: sp.last}
	mode := C.int(C.ES_OUT_NONE)
	switch {
	case e.graphPooling:
		// llama.cpp pools the sequence, which an encoder call holds whole.
		return outputRead{slot: sp.slot, rows: 1, done: true}, C.ES_OUT_ALL
	case e.pooling == gguf.PoolingMean:
		r.rows, mode = n, C.ES_OUT_ALL
	case e.pooling == gguf.PoolingCLS && sp.from == 0:
		r.rows, r.done, mode = 1, true, C.ES_OUT_FIRST
	case e.pooling == gguf.PoolingLast && sp.last:
		r.at, r.rows, mode = C.int32_t(n-1), 1, C.ES_OUT_LAST
	}
	if e.encoder {
		mode = C.ES_OUT_ALL
	}
	return r, mode
}

// readOutputs reads the rows r names into the vector v of a sequence of length
// tokens: the row itself (through the reranker's head, if any) for last and cls
// pooling; for mean pooling, the rows are added to the sequence's sum in sums,
// which becomes v, divided by length, with the span that ends it.
func (e *Engine) readOutputs(k *kctx, r outputRead, length int, v []float32, sums map[int][]float64) error {
	hidden := e.info.Hidden
	switch {
	case e.graphPooling:
		p := C.llama_get_embeddings_seq(k.lctx, C.llama_seq_id(r.slot))
		if p == nil {
			return fmt.Errorf("llama: no pooled embedding for sequence %d: %s", r.slot, llamaReason("see the debug log"))
		}
		copy(v, unsafe.Slice((*float32)(unsafe.Pointer(p)), hidden))
	case e.pooling == gguf.PoolingMean:
		acc := sums[r.input]
		if acc == nil {
			acc = make([]float64, hidden)
			sums[r.input] = acc
		}
		if !C.es_sum_rows(k.lctx, r.at, C.int32_t(r.rows), C.int32_t(hidden), (*C.double)(unsafe.Pointer(&acc[0]))) {
			return fmt.Errorf("llama: no embedding for batch indices %d to %d: %s", int(r.at), int(r.at)+r.rows-1, llamaReason("see the debug log"))
		}
		if r.done {
			for j := range v {
				v[j] = float32(acc[j] / float64(length))
			}
			delete(sums, r.input)
		}
	default:
		p := C.llama_get_embeddings_ith(k.lctx, r.at)
		if p == nil {
			return fmt.Errorf("llama: no embedding for batch index %d: %s", int(r.at), llamaReason("see the debug log"))
		}
		e.readout(v, unsafe.Slice((*float32)(unsafe.Pointer(p)), hidden))
	}
	return nil
}

// readout writes a sequence's output v from h, the hidden state of the token its
// pooling reads: h itself for an embedding, the "yes" and "no" logits for a
// reranker (yesNoHead).
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
