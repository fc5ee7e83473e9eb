package routing

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/embed-stack/embed-stack/telemetry/stage"
)

// DefaultBatchMaxTokens is Config.BatchMaxTokens's default: two of the warm
// engine's 1024-token decode calls. A batch is answered as a whole, so a larger one
// only makes its small members wait for its large ones; the engine's throughput
// does not grow with it, since it decodes in rounds of about that size anyway.
const DefaultBatchMaxTokens = 2048

// batcher packs the warm-path calls of concurrent requests into shared calls of the
// backend it wraps, so that many small requests arriving together are decoded
// together, as one request holding all their inputs would be.
//
// A call joins the newest batch that has room for it (BatchMaxTokens), or opens a
// new one. A batch may be sent once its first call has waited window, or at once
// when it is full; it is sent when the backend has no other batch in flight (the
// warm worker decodes one call at a time, so a second one would only queue there).
// While it waits for that, it keeps taking newcomers: the busier the worker, the
// larger the batches.
//
// A caller whose ctx ends leaves at once: out of a batch not yet sent, or, if it
// has been sent, leaving its share of the answer unread; a batch all of whose
// callers have left is cancelled. Every caller of a batch gets the batch's error.
// The vectors do not depend on the company: the engine packs sequences without
// letting them see each other (cosine ≥ 1 - 1e-6 to the sequence embedded alone).
//
// Short calls (queries, as the backend defines them: see Config.ShortCalls) are
// batched in a lane of their own, with its own batch in flight: the warm worker
// runs such a batch ahead of a long input it is decoding, so a query does not
// wait behind a batch of documents. Among themselves they batch as above.
//
// Safe for concurrent use.
type batcher struct {
	backend   Backend
	window    time.Duration
	maxTokens int
	// short says whether a call (or a batch of calls) is short; nil: one lane.
	short func(seqs [][]int32) bool
	// metricOpts label the batch-size histogram (the router's model).
	metricOpts []metric.RecordOption
	// idleSend sends a call at once, without its window, when its lane is idle and
	// the lane's last batch held one call: a server with one client at a time (no
	// company to wait for) then adds no delay, which on a GPU, where a query takes
	// a few milliseconds, is a large share of it. As soon as a batch holds several
	// calls, the window applies again. The router sets it; tests of the window
	// leave it off.
	idleSend bool

	mu    sync.Mutex // guards the fields below and every batch's unsent state
	lanes [2]lane    // bulk and short
}

// lane is a queue of batches of which one at a time is sent.
type lane struct {
	queue    []*batch // not yet sent, oldest first; only the last one takes newcomers
	inFlight bool     // a batch is being embedded
	// lastCalls is how many calls the lane's last sent batch held (0 before any).
	lastCalls int
}

const (
	bulkLane  = 0
	shortLane = 1
)

// batch is the calls sent to the backend together.
type batch struct {
	lane   int
	calls  []*call
	tokens int
	due    bool // its window has passed, or it is full
	timer  *time.Timer
	sent   bool

	cancel context.CancelFunc // set when sent; ends the backend call
	live   int                // calls still waiting for the answer, once sent
	stage  stage.Stage        // routing.batch, from sending until the answer; set when sent
}

// call is one caller's sequences.
type call struct {
	ctx    context.Context
	seqs   [][]int32
	tokens int
	b      *batch
	done   chan struct{} // closed when vecs or err is set
	vecs   [][]float32
	err    error
	queued stage.Stage // routing.queue: from joining until the batch is sent or the caller leaves
}

func newBatcher(backend Backend, window time.Duration, maxTokens int, short func([][]int32) bool) *batcher {
	return &batcher{backend: backend, window: window, maxTokens: maxTokens, short: short}
}

// Embed embeds seqs as part of a batch.
func (b *batcher) Embed(ctx context.Context, seqs [][]int32) ([][]float32, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c := &call{ctx: ctx, seqs: seqs, done: make(chan struct{})}
	for _, s := range seqs {
		c.tokens += len(s)
	}
	c.queued = startQueue(ctx, len(seqs), c.tokens)
	lane := bulkLane
	if b.short != nil && b.short(seqs) {
		lane = shortLane
	}
	b.mu.Lock()
	b.joinLocked(c, lane)
	b.dispatchLocked(lane)
	b.mu.Unlock()

	select {
	case <-c.done:
		return c.vecs, c.err
	case <-ctx.Done():
		b.leave(c)
		return nil, ctx.Err()
	}
}

// joinLocked adds c to the newest unsent batch of its lane if it has room (and, in
// the short lane, the batch stays short), else to a new one.
func (b *batcher) joinLocked(c *call, lane int) {
	l := &b.lanes[lane]
	var cur *batch
	if n := len(l.queue); n > 0 && b.room(l.queue[n-1], c) {
		cur = l.queue[n-1]
	} else {
		if n > 0 {
			// It has no room for this call, so no more company is coming its way.
			l.queue[n-1].due = true
		}
		cur = &batch{lane: lane}
		if b.idleSend && !l.inFlight && len(l.queue) == 0 && l.lastCalls <= 1 {
			cur.due = true
		}
		l.queue = append(l.queue, cur)
		cur.timer = time.AfterFunc(b.window, func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			cur.due = true
			b.dispatchLocked(lane)
		})
	}
	cur.calls = append(cur.calls, c)
	cur.tokens += c.tokens
	c.b = cur
	if cur.tokens >= b.maxTokens {
		cur.due = true
	}
}

// room says whether c may join bt.
func (b *batcher) room(bt *batch, c *call) bool {
	if bt.tokens+c.tokens > b.maxTokens {
		return false
	}
	if bt.lane != shortLane {
		return true
	}
	seqs := make([][]int32, 0, len(c.seqs)+len(bt.calls))
	for _, o := range bt.calls {
		seqs = append(seqs, o.seqs...)
	}
	return b.short(append(seqs, c.seqs...))
}

// dispatchLocked sends the lane's oldest batch when it is due and nothing of the
// lane is in flight.
func (b *batcher) dispatchLocked(lane int) {
	l := &b.lanes[lane]
	if l.inFlight || len(l.queue) == 0 || !l.queue[0].due {
		return
	}
	bt := l.queue[0]
	l.queue = l.queue[1:]
	bt.timer.Stop()
	bt.sent = true
	bt.live = len(bt.calls)
	l.lastCalls = len(bt.calls)
	// The backend call carries the first caller's trace, but no caller's deadline:
	// it ends when every caller has left (see leave).
	ctx, cancel := context.WithCancel(context.WithoutCancel(bt.calls[0].ctx))
	bt.cancel = cancel
	l.inFlight = true
	ctx, bt.stage = startBatch(ctx, bt, b.metricOpts)
	go b.run(ctx, bt)
}

// run embeds one batch and hands every caller its share.
func (b *batcher) run(ctx context.Context, bt *batch) {
	defer bt.cancel()
	seqs := make([][]int32, 0, len(bt.calls))
	for _, c := range bt.calls {
		seqs = append(seqs, c.seqs...)
	}
	vecs, err := b.backend.Embed(ctx, seqs)
	if err == nil && len(vecs) != len(seqs) {
		err = fmt.Errorf("the warm backend returned %d vectors for %d sequences", len(vecs), len(seqs))
	}
	bt.stage.End(err)
	at := 0
	for _, c := range bt.calls {
		if err != nil {
			c.err = err
		} else {
			c.vecs = vecs[at : at+len(c.seqs) : at+len(c.seqs)]
		}
		at += len(c.seqs)
		close(c.done)
	}
	b.mu.Lock()
	b.lanes[bt.lane].inFlight = false
	b.dispatchLocked(bt.lane)
	b.mu.Unlock()
}

// leave takes a caller whose ctx ended out of its batch: out of the queue when the
// batch has not been sent, and the whole batch cancelled when it has and nobody is
// left to read the answer.
func (b *batcher) leave(c *call) {
	b.mu.Lock()
	defer b.mu.Unlock()
	bt := c.b
	if bt.sent {
		bt.live--
		if bt.live == 0 {
			bt.cancel()
		}
		return
	}
	c.queued.End(c.ctx.Err())
	bt.calls = slices.DeleteFunc(bt.calls, func(x *call) bool { return x == c })
	bt.tokens -= c.tokens
	l := &b.lanes[bt.lane]
	if len(bt.calls) == 0 {
		bt.timer.Stop()
		l.queue = slices.DeleteFunc(l.queue, func(x *batch) bool { return x == bt })
	}
	b.dispatchLocked(bt.lane)
}
