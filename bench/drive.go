package bench

// How each kind of shape is driven against the contenders: single requests
// (runRequests), concurrent clients (runClients) and queries beside a long input in
// flight (runInFlight).

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

func (r *Runner) embed(ctx context.Context, t Target, in []Input) Outcome {
	ctx, cancel := context.WithTimeout(ctx, r.RequestTimeout)
	defer cancel()
	return t.Embed(ctx, in, false)
}

// runRequests sends the shape's requests, each to every active contender in turn
// (starting with a different one each repetition) before the next.
func (r *Runner) runRequests(ctx context.Context, s *Shape, active []int) map[int]*Result {
	recs := map[int]*record{}
	clocks := map[int]func() (time.Duration, error){}
	for _, i := range active {
		recs[i] = newRecord(s)
		recs[i].res.Tokens = s.Tokens()
		clocks[i] = r.Contenders[i].cpuClock()
	}
	for k, req := range s.Requests {
		tokens := 0
		for _, in := range req {
			tokens += len(in.Tokens)
		}
		for j := range active {
			i := active[(j+k)%len(active)]
			var o Outcome
			cpu := measureCPU(clocks[i], func() { o = r.embed(ctx, r.Contenders[i].Target, req) })
			if k < s.Warmup {
				recs[i].warmup(o, tokens)
				continue
			}
			if recs[i].add(o, tokens) && o.Status == http.StatusOK && o.Elapsed > 0 {
				sec := o.Elapsed.Seconds()
				recs[i].tokPerSec = append(recs[i].tokPerSec, float64(tokens)/sec)
				recs[i].reqPerSec = append(recs[i].reqPerSec, 1/sec)
				recs[i].addCPU(cpu, tokens)
			}
		}
	}
	out := map[int]*Result{}
	for _, i := range active {
		out[i] = recs[i].finish()
	}
	return out
}

// runClients runs the concurrency level on each contender in turn, each repetition.
func (r *Runner) runClients(ctx context.Context, s *Shape, active []int) map[int]*Result {
	recs := map[int]*record{}
	for _, i := range active {
		recs[i] = newRecord(s)
	}
	for k := range max(1, s.Reps) {
		for j := range active {
			i := active[(j+k)%len(active)]
			c := r.Contenders[i]
			var tokens int
			cpu := measureCPU(c.cpuClock(), func() {
				if c.Role == RoleFloor {
					tokens = r.floorClients(ctx, s, c.Target, recs[i])
				} else {
					tokens = r.serverClients(ctx, s, c.Target, recs[i])
				}
			})
			recs[i].addCPU(cpu, tokens)
		}
	}
	out := map[int]*Result{}
	for _, i := range active {
		out[i] = recs[i].finish()
		out[i].Tokens = len(s.Pool[0].Tokens)
	}
	return out
}

// serverClients runs s.Clients clients for s.Duration; it returns the tokens
// embedded.
func (r *Runner) serverClients(ctx context.Context, s *Shape, t Target, rc *record) int {
	var next atomic.Int64
	var tokens atomic.Int64
	var done atomic.Int64
	start := time.Now()
	deadline := start.Add(s.Duration)
	var wg sync.WaitGroup
	for range s.Clients {
		wg.Go(func() {
			for time.Now().Before(deadline) && ctx.Err() == nil {
				in := s.Pool[int(next.Add(1)-1)%len(s.Pool)]
				o := r.embed(ctx, t, []Input{in})
				if rc.add(o, len(in.Tokens)) {
					tokens.Add(int64(len(in.Tokens)))
					done.Add(1)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	rc.mu.Lock()
	rc.tokPerSec = append(rc.tokPerSec, float64(tokens.Load())/elapsed)
	rc.reqPerSec = append(rc.reqPerSec, float64(done.Load())/elapsed)
	rc.mu.Unlock()
	return int(tokens.Load())
}

// floorClients embeds the pool's queries s.Clients at a time, one call after
// another, for s.Duration: each query's latency is its call's. It returns the
// tokens embedded.
func (r *Runner) floorClients(ctx context.Context, s *Shape, t Target, rc *record) int {
	start := time.Now()
	deadline := start.Add(s.Duration)
	next, tokens, done := 0, 0, 0
	for time.Now().Before(deadline) && ctx.Err() == nil {
		batch := make([]Input, s.Clients)
		n := 0
		for b := range batch {
			batch[b] = s.Pool[next%len(s.Pool)]
			next++
			n += len(batch[b].Tokens)
		}
		o := r.embed(ctx, t, batch)
		for range batch {
			if rc.add(o, 0) {
				done++
			}
		}
		if o.Err == nil {
			tokens += n
		}
	}
	elapsed := time.Since(start).Seconds()
	rc.mu.Lock()
	rc.tokPerSec = append(rc.tokPerSec, float64(tokens)/elapsed)
	rc.reqPerSec = append(rc.reqPerSec, float64(done)/elapsed)
	rc.mu.Unlock()
	return tokens
}

// runInFlight measures each contender alone: idle queries, then queries beside the
// long input, then waits until the server is idle again before the next one.
func (r *Runner) runInFlight(ctx context.Context, s *Shape, active []int) map[int]*Result {
	out := map[int]*Result{}
	for _, i := range active {
		out[i] = r.inFlight(ctx, s, r.Contenders[i].Target)
	}
	return out
}

func (r *Runner) inFlight(ctx context.Context, s *Shape, t Target) *Result {
	rc := newRecord(s)
	q := 0
	query := func(qctx context.Context) (Outcome, Input) {
		in := s.Pool[q%len(s.Pool)]
		q++
		return r.embed(qctx, t, []Input{in}), in
	}
	var idle []float64
	for range s.Idle {
		o, in := query(ctx)
		if rc.add(o, len(in.Tokens)) {
			idle = append(idle, ms(o.Elapsed))
		}
	}
	idleSum := Summarize(idle)

	longCtx, cancelLong := context.WithCancel(ctx)
	defer cancelLong()
	longDone := make(chan Outcome, 1)
	longStart := time.Now()
	go func() { longDone <- r.embed(longCtx, t, []Input{s.Long}) }()

	var during []float64
	var longOut *Outcome
	windowEnd := longStart.Add(s.Window)
	for longOut == nil && time.Now().Before(windowEnd) {
		// A query stuck behind the long input is given the window once more before
		// it counts as failed.
		qctx, cancel := context.WithDeadline(ctx, time.Now().Add(2*s.Window))
		o, in := query(qctx)
		cancel()
		rc.add(o, len(in.Tokens))
		// A query given up on counts at the time it was given up: a lower bound
		// of its latency, and the head-of-line blocking this shape is after.
		during = append(during, ms(o.Elapsed))
		select {
		case lo := <-longDone:
			longOut = &lo
		default:
		}
	}
	res := rc.finish()
	res.Tokens = len(s.Pool[0].Tokens)
	res.IdleMS = &idleSum
	d := Summarize(during)
	res.InFlightMS = &d
	if longOut == nil {
		cancelLong()
		lo := <-longDone
		longOut = &lo
		res.LongCancelled = true
	}
	res.LongMS = ms(time.Since(longStart))
	if !res.LongCancelled && longOut.Err != nil {
		res.FirstError = clip("the long input: "+longOut.Err.Error(), 300)
		res.Errors++
	}
	// Drain: a server that goes on computing a cancelled input would slow whatever
	// runs next. Wait until a query is again within twice the idle median (or 50ms
	// of it, for medians of a few milliseconds that a busy machine easily doubles).
	drainStart := time.Now()
	settled := max(2*idleSum.Median, idleSum.Median+50)
	for time.Since(drainStart) < 5*time.Minute && ctx.Err() == nil {
		o, _ := query(ctx)
		if o.Err == nil && (idleSum.N == 0 || ms(o.Elapsed) <= settled) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	res.DrainMS = ms(time.Since(drainStart))
	return res
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
