package llama

import (
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/embed-stack/embed-stack/gguf"
)

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

// attentionCrossover is the position from which a token's attention (QKᵀ and
// softmax·V over every earlier cell: 4 x layers x heads x head_dim FLOPs per cell)
// costs more than its matrix products (2 FLOPs per weight of the layers, params
// less the token-embedding table, which is a lookup): 3840 for
// Qwen3-Embedding-0.6B. 0 if unknown.
func attentionCrossover(s gguf.Shape, params int64) int {
	linear := params - int64(s.VocabSize)*int64(s.EmbeddingLength)
	perCell := 2 * int64(s.Layers) * int64(s.Heads) * int64(s.KeyLength)
	if linear <= 0 || perCell <= 0 {
		return 0
	}
	return int(linear / perCell)
}
