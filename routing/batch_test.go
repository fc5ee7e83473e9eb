package routing

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// gatedBackend answers each call with vectorFor after its gate opens, and records
// the calls and the contexts they came with.
type gatedBackend struct {
	mu    sync.Mutex // guards calls and ctxs
	calls [][][]int32
	ctxs  []context.Context
	gate  chan struct{} // nil: answer at once
	err   error
}

func (g *gatedBackend) Embed(ctx context.Context, seqs [][]int32) ([][]float32, error) {
	g.mu.Lock()
	g.calls = append(g.calls, seqs)
	g.ctxs = append(g.ctxs, ctx)
	g.mu.Unlock()
	if g.gate != nil {
		select {
		case <-g.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if g.err != nil {
		return nil, g.err
	}
	out := make([][]float32, len(seqs))
	for i, s := range seqs {
		out[i] = vectorFor(s, 4)
	}
	return out, nil
}

func (g *gatedBackend) callCount() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.calls)
}

func (g *gatedBackend) waitCalls(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for g.callCount() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d backend calls, want %d", g.callCount(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// queued is the number of calls waiting in unsent batches, and the batches.
func (b *batcher) queued() (calls, batches int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, l := range b.lanes {
		for _, bt := range l.queue {
			calls += len(bt.calls)
		}
		batches += len(l.queue)
	}
	return calls, batches
}

func waitBatcher(t *testing.T, b *batcher, calls, batches int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, n := b.queued()
		if c == calls && n == batches {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d calls in %d unsent batches, want %d in %d", c, n, calls, batches)
		}
		time.Sleep(time.Millisecond)
	}
}

type result struct {
	vecs [][]float32
	err  error
}

func goEmbed(ctx context.Context, b *batcher, seqs ...[]int32) <-chan result {
	ch := make(chan result, 1)
	go func() {
		v, err := b.Embed(ctx, seqs)
		ch <- result{v, err}
	}()
	return ch
}

func seqOf(n int, first int32) []int32 {
	s := make([]int32, n)
	s[0] = first
	return s
}

// requireOwn checks that a caller got exactly its own vectors.
func requireOwn(t *testing.T, r result, seqs ...[]int32) {
	t.Helper()
	if r.err != nil {
		t.Fatal(r.err)
	}
	if len(r.vecs) != len(seqs) {
		t.Fatalf("%d vectors for %d sequences", len(r.vecs), len(seqs))
	}
	for i, s := range seqs {
		if !slices.Equal(r.vecs[i], vectorFor(s, 4)) {
			t.Fatalf("vector %d = %v, want %v", i, r.vecs[i], vectorFor(s, 4))
		}
	}
}

func TestBatcherPacksUntilFull(t *testing.T) {
	g := &gatedBackend{}
	b := newBatcher(g, time.Hour, 10, nil) // only a full batch is sent
	a1, a2 := seqOf(3, 1), seqOf(2, 2)
	ra := goEmbed(context.Background(), b, a1, a2)
	waitBatcher(t, b, 1, 1)
	if g.callCount() != 0 {
		t.Fatal("a batch with room was sent before its window")
	}
	c1 := seqOf(5, 3)
	rc := goEmbed(context.Background(), b, c1)
	requireOwn(t, <-ra, a1, a2)
	requireOwn(t, <-rc, c1)
	if got := lens(g.calls); !slices.Equal(got, []int{3, 2, 5}) {
		t.Fatalf("backend calls %v, want one call of 3+2+5 tokens", got)
	}
}

func TestBatcherWindow(t *testing.T) {
	g := &gatedBackend{}
	const window = 30 * time.Millisecond
	b := newBatcher(g, window, 1000, nil)
	start := time.Now()
	v, err := b.Embed(context.Background(), [][]int32{seqOf(4, 7)})
	took := time.Since(start)
	requireOwn(t, result{v, err}, seqOf(4, 7))
	if took < window {
		t.Errorf("a lone call returned after %s, before the %s window", took, window)
	}
}

// TestBatcherAccumulatesWhileBusy: while one batch is in flight the next grows past
// its window, up to the token budget, and the overflow opens a third.
func TestBatcherAccumulatesWhileBusy(t *testing.T) {
	g := &gatedBackend{gate: make(chan struct{})}
	b := newBatcher(g, time.Millisecond, 10, nil)
	first := goEmbed(context.Background(), b, seqOf(2, 1))
	g.waitCalls(t, 1)

	var rs []<-chan result
	for i := range 4 {
		rs = append(rs, goEmbed(context.Background(), b, seqOf(3, int32(10+i))))
		waitBatcher(t, b, i+1, 1+i/3)
	}
	time.Sleep(5 * time.Millisecond) // past the window: still held, the backend is busy
	if n := g.callCount(); n != 1 {
		t.Fatalf("%d backend calls while the first is in flight, want 1", n)
	}
	close(g.gate)
	requireOwn(t, <-first, seqOf(2, 1))
	for i, r := range rs {
		requireOwn(t, <-r, seqOf(3, int32(10+i)))
	}
	if got := lens(g.calls); !slices.Equal(got, []int{2, 3, 3, 3, 3}) {
		t.Fatalf("sequence lengths by call %v", got)
	}
	if sizes := callSizes(g); !slices.Equal(sizes, []int{1, 3, 1}) {
		t.Fatalf("calls held %v sequences, want [1 3 1]: three of 3 tokens fill a 10-token budget", sizes)
	}
}

func TestBatcherCallerLeaves(t *testing.T) {
	t.Run("before the batch is sent", func(t *testing.T) {
		g := &gatedBackend{}
		b := newBatcher(g, time.Hour, 10, nil)
		ctx, cancel := context.WithCancel(context.Background())
		gone := goEmbed(ctx, b, seqOf(4, 1))
		waitBatcher(t, b, 1, 1)
		cancel()
		if r := <-gone; !errors.Is(r.err, context.Canceled) {
			t.Fatalf("err = %v", r.err)
		}
		waitBatcher(t, b, 0, 0)
		stay := seqOf(10, 2)
		requireOwn(t, <-goEmbed(context.Background(), b, stay), stay)
		if got := lens(g.calls); !slices.Equal(got, []int{10}) {
			t.Fatalf("backend got %v; the caller that left was sent anyway", got)
		}
	})
	t.Run("after it is sent", func(t *testing.T) {
		g := &gatedBackend{gate: make(chan struct{})}
		b := newBatcher(g, time.Hour, 4, nil)
		ctx1, cancel1 := context.WithCancel(context.Background())
		ctx2, cancel2 := context.WithCancel(context.Background())
		r1 := goEmbed(ctx1, b, seqOf(2, 1))
		waitBatcher(t, b, 1, 1)
		r2 := goEmbed(ctx2, b, seqOf(2, 2))
		g.waitCalls(t, 1)
		cancel1()
		if r := <-r1; !errors.Is(r.err, context.Canceled) {
			t.Fatalf("first caller: err = %v", r.err)
		}
		if err := g.ctxs[0].Err(); err != nil {
			t.Fatalf("the batch was cancelled (%v) while a caller still waits", err)
		}
		cancel2()
		<-r2
		select {
		case <-g.ctxs[0].Done():
		case <-time.After(5 * time.Second):
			t.Fatal("the batch was not cancelled once every caller had left")
		}
	})
}

func TestBatcherErrorReachesEveryCaller(t *testing.T) {
	g := &gatedBackend{err: &UnavailableError{RetryAfter: 2 * time.Second}}
	b := newBatcher(g, time.Hour, 4, nil)
	r1 := goEmbed(context.Background(), b, seqOf(2, 1))
	r2 := goEmbed(context.Background(), b, seqOf(2, 2))
	for _, r := range []result{<-r1, <-r2} {
		if !errors.Is(r.err, ErrUnavailable) {
			t.Errorf("err = %v, want ErrUnavailable", r.err)
		}
	}
}

// TestRouterBatching runs concurrent requests through a router with a batch
// window: they share backend calls, and each gets the vectors it gets alone. The
// first call is held until the other requests wait in the batcher, so the test does
// not depend on how the goroutines are scheduled (on a loaded machine each request
// could otherwise find the lane idle and go alone, as idleSend allows).
func TestRouterBatching(t *testing.T) {
	alone, _, _ := newRouter(Config{})
	r, warm, _ := newRouter(Config{BatchWindow: 50 * time.Millisecond, BatchMaxTokens: 1 << 20})
	const n = 16
	r.init() // builds the batcher that queuedCalls reads
	release := make(chan struct{})
	warm.hold = func(call int) {
		if call == 0 {
			<-release
		}
	}
	go func() {
		defer close(release)
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			if queuedCalls(r) == n-1 {
				return
			}
		}
	}()
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			req := &Request{Texts: []string{fmt.Sprintf("request %d", i), "shared"}}
			got, err := r.Embed(context.Background(), req)
			if err != nil {
				errs[i] = err
				return
			}
			want, err := alone.Embed(context.Background(), req)
			if err != nil {
				errs[i] = err
				return
			}
			for j := range want.Vectors {
				if !slices.Equal(got.Vectors[j], want.Vectors[j]) {
					errs[i] = fmt.Errorf("request %d input %d differs batched", i, j)
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	warm.mu.Lock()
	calls := len(warm.calls)
	warm.mu.Unlock()
	// The first request alone, then the other n-1 in one batch.
	if calls != 2 {
		t.Errorf("%d warm calls for %d concurrent requests, want 2 (the first alone, then the rest batched)", calls, n)
	}
}

// queuedCalls counts the calls waiting in a router's batcher, over both lanes.
func queuedCalls(r *Router) int {
	b, ok := r.warm.(*batcher)
	if !ok {
		return -1
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, l := range b.lanes {
		for _, bt := range l.queue {
			n += len(bt.calls)
		}
	}
	return n
}

// shortOf is a ShortCalls for tests: at most 4 sequences of at most 8 tokens, 16 in
// all.
func shortOf(seqs [][]int32) bool {
	total := 0
	for _, q := range seqs {
		if len(q) > 8 {
			return false
		}
		total += len(q)
	}
	return len(seqs) <= 4 && total <= 16
}

// TestBatcherShortLane checks that short calls go to the backend while a batch of
// documents is in flight, batched among themselves within the short limit, while
// a second batch of documents still waits for the first.
func TestBatcherShortLane(t *testing.T) {
	g := &gatedBackend{gate: make(chan struct{})}
	b := newBatcher(g, time.Millisecond, 1000, shortOf)
	doc1, doc2 := seqOf(50, 1), seqOf(40, 2)
	r1 := goEmbed(context.Background(), b, doc1)
	g.waitCalls(t, 1)
	// A query is sent beside the document in flight.
	q1 := seqOf(5, 3)
	rq1 := goEmbed(context.Background(), b, q1)
	g.waitCalls(t, 2)
	// A second document waits for the first; so do queries, for the query in
	// flight, and they share a batch while it stays short: q2+q3 (12 tokens), then
	// q4 (6 more would make 18).
	r2 := goEmbed(context.Background(), b, doc2)
	q2, q3, q4 := seqOf(6, 4), seqOf(6, 5), seqOf(6, 6)
	rq2 := goEmbed(context.Background(), b, q2)
	waitBatcher(t, b, 2, 2)
	rq3 := goEmbed(context.Background(), b, q3)
	waitBatcher(t, b, 3, 2)
	rq4 := goEmbed(context.Background(), b, q4)
	waitBatcher(t, b, 4, 3)
	if n := g.callCount(); n != 2 {
		t.Fatalf("%d backend calls with one batch of each lane in flight; want 2", n)
	}
	close(g.gate)
	requireOwn(t, <-r1, doc1)
	requireOwn(t, <-rq1, q1)
	requireOwn(t, <-r2, doc2)
	requireOwn(t, <-rq2, q2)
	requireOwn(t, <-rq3, q3)
	requireOwn(t, <-rq4, q4)
	g.mu.Lock()
	defer g.mu.Unlock()
	var sizes []int
	for _, c := range g.calls {
		sizes = append(sizes, len(c))
	}
	// doc1, q1, then in some order doc2, [q2 q3], q4.
	if len(sizes) != 5 || sizes[0] != 1 || sizes[1] != 1 {
		t.Fatalf("backend call sizes %v; want doc1, q1, then doc2, q2+q3 and q4", sizes)
	}
	slices.Sort(sizes[2:])
	if !slices.Equal(sizes[2:], []int{1, 1, 2}) {
		t.Fatalf("backend call sizes %v; want doc2, q4 alone and q2+q3 together", sizes)
	}
}

// TestBatcherIdleSend: with idleSend (the router's setting), a lone call on an idle
// lane goes at once even with an hour's window; once a batch has held several
// calls, the next lone call waits for its window again.
func TestBatcherIdleSend(t *testing.T) {
	g := &gatedBackend{gate: make(chan struct{})}
	b := newBatcher(g, time.Hour, 1000, nil)
	b.idleSend = true
	first := goEmbed(context.Background(), b, seqOf(2, 1))
	g.waitCalls(t, 1) // sent without its hour's window

	// Two calls arriving while it is in flight share a batch, sent when it is done
	// and their window has passed: shorten the window for them.
	b.mu.Lock()
	b.window = 20 * time.Millisecond
	b.mu.Unlock()
	second := goEmbed(context.Background(), b, seqOf(3, 2))
	third := goEmbed(context.Background(), b, seqOf(3, 3))
	waitBatcher(t, b, 2, 1)
	close(g.gate)
	requireOwn(t, <-first, seqOf(2, 1))
	requireOwn(t, <-second, seqOf(3, 2))
	requireOwn(t, <-third, seqOf(3, 3))
	if sizes := callSizes(g); !slices.Equal(sizes, []int{1, 2}) {
		t.Fatalf("calls held %v sequences, want [1 2]", sizes)
	}

	// The last batch held two calls: a lone call now waits for the window.
	b.mu.Lock()
	b.window = time.Hour
	b.mu.Unlock()
	fourth := goEmbed(context.Background(), b, seqOf(4, 4))
	waitBatcher(t, b, 1, 1)
	if n := g.callCount(); n != 2 {
		t.Fatalf("%d backend calls, want 2: after a batch of two the window applies", n)
	}
	b.mu.Lock()
	b.lanes[bulkLane].queue[0].due = true
	b.dispatchLocked(bulkLane)
	b.mu.Unlock()
	requireOwn(t, <-fourth, seqOf(4, 4))

	// Off (the tests' default), a lone call on a fresh batcher waits: see
	// TestBatcherWindow.
}

func callSizes(g *gatedBackend) []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	sizes := []int{}
	for _, c := range g.calls {
		sizes = append(sizes, len(c))
	}
	return sizes
}
