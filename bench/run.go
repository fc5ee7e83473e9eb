package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/embed-stack/embed-stack/backends/cpuvariant"
)

// Role says what a contender is to the report.
type Role string

const (
	// RoleFloor is the engine in-process: every figure's denominator.
	RoleFloor Role = "floor"
	// RoleOurs is the embed-stack server: held to its API contract (Shape.Contract).
	RoleOurs Role = "ours"
	// RolePeer is another server, compared with ours.
	RolePeer Role = "peer"
)

// Contender is one target of a run with what the report says about it.
type Contender struct {
	Name   string
	Role   Role
	Target Target
	// PID is the root of its process tree when it runs on this machine (0: its
	// memory is not measured).
	PID int
	// About says how it was set up: version, flags.
	About string
	// ColdStart is process start to its first 200, when the harness started it.
	ColdStart time.Duration
	// CacheMiB is the embedding cache the server runs with (serve --cache-size; 0:
	// none). A contender with a cache runs the re-index shape only: every other
	// shape sends texts no target has seen, where a cache is only overhead.
	CacheMiB int
}

// cpuClock returns how to read the CPU time c uses: its process tree when it runs
// locally, this process for the in-process floor; nil when it cannot be read.
func (c *Contender) cpuClock() func() (time.Duration, error) {
	switch {
	case c.PID > 0:
		return func() (time.Duration, error) { return TreeCPU(c.PID) }
	case c.Role == RoleFloor:
		if _, ok := c.Target.(*Floor); ok {
			self := os.Getpid()
			return func() (time.Duration, error) { return ProcCPU(self) }
		}
	}
	return nil
}

// Runner runs shapes against contenders. Its fields are set before Run.
type Runner struct {
	// Contenders; the first is the reference every other one's vectors are checked
	// against (the floor, when there is one).
	Contenders []*Contender
	Shapes     []Shape
	// Checks are the inputs of the vector check; MinCosine its threshold (0:
	// DefaultMinCosine).
	Checks    []Input
	MinCosine float64
	// Model, when set, turns tokens/s into achieved FLOP/s in the report.
	Model *Model
	// RequestTimeout bounds one request (0: 15 minutes).
	RequestTimeout time.Duration
	// SampleEvery is the memory sampling interval (0: 200ms).
	SampleEvery time.Duration
	// Log receives one line per step; nil discards them.
	Log io.Writer
	// CPUKernels names the CPU kernels the floor runs, for the report's host line
	// (Host.CPUKernels).
	CPUKernels string
}

func (r *Runner) logf(format string, args ...any) {
	if r.Log != nil {
		fmt.Fprintf(r.Log, "bench: "+format+"\n", args...)
	}
}

// Run checks every contender's vectors against the first's, then runs each shape
// on every contender that passed, repetitions interleaved across contenders, and
// samples the memory of the local ones throughout.
func (r *Runner) Run(ctx context.Context) (*Report, error) {
	if len(r.Contenders) == 0 {
		return nil, errors.New("bench: no contenders")
	}
	if r.MinCosine == 0 {
		r.MinCosine = DefaultMinCosine
	}
	if r.RequestTimeout == 0 {
		r.RequestTimeout = 15 * time.Minute
	}
	if r.SampleEvery == 0 {
		r.SampleEvery = 200 * time.Millisecond
	}
	rep := &Report{Started: time.Now().UTC(), Host: readHost(), Model: r.Model}
	rep.Host.CPUKernels = r.CPUKernels
	rep.Host.LoadStart = loadAvg()
	for _, s := range r.Shapes {
		rep.Shapes = append(rep.Shapes, ShapeInfo{ID: s.ID, Kind: s.Kind, About: s.About, Tokens: s.Tokens(), Warmup: s.Warmup, Reps: s.Reps, Expect: s.Expect})
	}

	cr := make([]*ContenderReport, len(r.Contenders))
	for i, c := range r.Contenders {
		cr[i] = &ContenderReport{Name: c.Name, Role: c.Role, About: c.About, PID: c.PID, CacheMiB: c.CacheMiB}
		if c.ColdStart > 0 {
			cr[i].ColdStartMS = ms(c.ColdStart)
		}
		rep.Contenders = append(rep.Contenders, cr[i])
	}

	// The vector check, before anything is timed.
	ref := r.Contenders[0]
	if len(r.Checks) > 0 {
		cctx, cancel := context.WithTimeout(ctx, r.RequestTimeout)
		o := ref.Target.Embed(cctx, r.Checks, true)
		cancel()
		if o.Err != nil {
			return nil, fmt.Errorf("bench: the reference %s failed the check inputs: %w", ref.Name, o.Err)
		}
		rep.CheckControl = r.control(ctx, ref, o.Vectors)
		for i, c := range r.Contenders[1:] {
			cctx, cancel := context.WithTimeout(ctx, r.RequestTimeout)
			res := Check(cctx, c.Target, r.Checks, o.Vectors, ref.Name, r.MinCosine)
			cancel()
			cr[i+1].Check = &res
			if !res.Pass {
				cr[i+1].Excluded = "vector check failed: " + res.Reason
				r.logf("%s is not timed: %s", c.Name, cr[i+1].Excluded)
			} else {
				r.logf("%s: vectors agree with %s (lowest cosine %.6f, separation %.4f)", c.Name, ref.Name, res.MinCosine, res.Separation)
			}
		}
	}

	// Memory: idle figures now, then a sampler per local contender.
	trees := make([]*Tree, len(r.Contenders))
	for i, c := range r.Contenders {
		if c.PID <= 0 {
			continue
		}
		if s, err := Snapshot(c.PID); err == nil {
			s.ReadPSS()
			cr[i].Idle = &s
			trees[i] = WatchTree(c.PID, r.SampleEvery)
		} else {
			cr[i].MemoryError = err.Error()
		}
	}
	defer func() {
		for _, t := range trees {
			if t != nil {
				t.Stop()
			}
		}
	}()

	maxLoad := rep.Host.LoadStart[0]
	for si := range r.Shapes {
		s := &r.Shapes[si]
		load := loadAvg()
		maxLoad = max(maxLoad, load[0])
		var active []int
		for i, c := range r.Contenders {
			if c.CacheMiB > 0 && s.Kind != KindReindex {
				continue // not a result: the cached server is there for the re-index shape
			}
			reason := ""
			switch {
			case cr[i].Excluded != "":
				reason = "not timed: " + cr[i].Excluded
			case s.ServersOnly && c.Role == RoleFloor:
				reason = "not applicable to the in-process engine"
			case s.Contract && c.Role != RoleOurs:
				reason = "embed-stack's API contract; other servers are not held to it"
			}
			if reason != "" {
				rep.Results = append(rep.Results, Result{Shape: s.ID, Contender: c.Name, Skipped: reason})
				continue
			}
			active = append(active, i)
		}
		r.logf("%s (%s), load %.2f", s.ID, s.About, load[0])
		var results map[int]*Result
		switch s.Kind {
		case KindRequest:
			results = r.runRequests(ctx, s, active)
		case KindClients:
			results = r.runClients(ctx, s, active)
		case KindInFlight:
			results = r.runInFlight(ctx, s, active)
		case KindReindex:
			results = r.runReindex(ctx, s, active)
		default:
			return nil, fmt.Errorf("bench: shape %s has unknown kind %q", s.ID, s.Kind)
		}
		for _, i := range active {
			res := results[i]
			res.Shape, res.Contender, res.LoadAvg1 = s.ID, r.Contenders[i].Name, load[0]
			if n := s.seqLen(); n > 0 && r.Model != nil && res.TokensPerSec.N > 0 {
				res.GFLOPS = res.TokensPerSec.Median * r.Model.FLOPsPerToken(n) / 1e9
			}
			rep.Results = append(rep.Results, *res)
			r.logf("  %-12s %s", r.Contenders[i].Name, res.line())
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}

	// Memory after the run: wait briefly for workers of the last request to exit,
	// so that what is left is what stays when idle.
	for i, c := range r.Contenders {
		if trees[i] == nil {
			continue
		}
		st, err := trees[i].Stop()
		trees[i] = nil
		if err != nil {
			cr[i].MemoryError = err.Error()
			continue
		}
		cr[i].Memory = &st
		deadline := time.Now().Add(5 * time.Second)
		for {
			s, err := Snapshot(c.PID)
			if err != nil {
				cr[i].MemoryError = err.Error()
				break
			}
			s.ReadPSS()
			cr[i].After = &s
			if cr[i].Idle == nil || len(s.Procs) <= len(cr[i].Idle.Procs) || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	rep.Host.LoadEnd = loadAvg()
	rep.Host.LoadMax1 = max(maxLoad, rep.Host.LoadEnd[0])
	rep.Finished = time.Now().UTC()
	rep.Seconds = rep.Finished.Sub(rep.Started).Seconds()
	return rep, nil
}

// control embeds the check inputs through the reference without their end-of-text
// token, what a server that forgets to append it computes, to show that the vector
// check catches such a server on this model. It needs a reference fed token ids
// (the floor); for any other it returns nil.
func (r *Runner) control(ctx context.Context, ref *Contender, want [][]float32) *Control {
	if ref.Role != RoleFloor {
		return nil
	}
	cut := make([]Input, 0, len(r.Checks))
	for _, in := range r.Checks {
		if len(in.Tokens) < 2 {
			return nil
		}
		cut = append(cut, Input{Tokens: in.Tokens[:len(in.Tokens)-1]})
	}
	ctx, cancel := context.WithTimeout(ctx, r.RequestTimeout)
	defer cancel()
	o := ref.Target.Embed(ctx, cut, true)
	if o.Err != nil {
		return &Control{What: controlWhat, Error: o.Err.Error()}
	}
	c := &Control{What: controlWhat, MaxCosine: -1}
	for i, v := range o.Vectors {
		c.MaxCosine = max(c.MaxCosine, Cosine(v, want[i]))
	}
	c.Caught = c.MaxCosine < r.MinCosine
	return c
}

const controlWhat = "the check inputs without their end-of-text token, through the floor"

// record accumulates one contender's outcomes on one shape.
type record struct {
	expect    int
	tokens    int // expected per request; 0 = do not check
	mu        sync.Mutex
	res       Result
	latencies []float64
	tokPerSec []float64
	reqPerSec []float64
	cpu       time.Duration // CPU time of the timed work, where measured
	cpuTokens int           // tokens embedded in it
}

// addCPU records CPU time spent embedding tokens.
func (rc *record) addCPU(d time.Duration, tokens int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.cpu += d
	rc.cpuTokens += tokens
}

func newRecord(s *Shape) *record {
	exp := s.Expect
	if exp == 0 {
		exp = http.StatusOK
	}
	return &record{expect: exp, res: Result{Statuses: map[string]int{}}}
}

// add records one timed outcome of a request of tokens tokens; it reports whether
// the outcome was what a correct server answers.
func (rc *record) add(o Outcome, tokens int) bool {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.res.Requests++
	key := strconv.Itoa(o.Status)
	if o.Status == 0 {
		key = "error"
	}
	rc.res.Statuses[key]++
	rc.latencies = append(rc.latencies, ms(o.Elapsed))
	ok := o.Status == rc.expect && (o.Err == nil || o.Status != http.StatusOK)
	if !ok {
		rc.res.Errors++
		if rc.res.FirstError == "" {
			if o.Err != nil {
				rc.res.FirstError = clip(o.Err.Error(), 300)
			} else {
				rc.res.FirstError = fmt.Sprintf("HTTP %d, expected %d", o.Status, rc.expect)
			}
		}
		return false
	}
	rc.mismatch(o, tokens)
	return true
}

// warmup records an untimed outcome: a failure, or a token count other than the
// one sent, is reported all the same.
func (rc *record) warmup(o Outcome, tokens int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if o.Status != rc.expect {
		rc.res.WarmupErrors++
		return
	}
	rc.mismatch(o, tokens)
}

// mismatch counts a 200 whose reported token count is not the count sent; rc.mu
// is held.
func (rc *record) mismatch(o Outcome, tokens int) {
	if o.Status == http.StatusOK && o.Tokens != 0 && tokens != 0 && o.Tokens != tokens {
		rc.res.TokenMismatches++
		if rc.res.FirstMismatch == "" {
			rc.res.FirstMismatch = fmt.Sprintf("reported %d tokens, %d were sent", o.Tokens, tokens)
		}
	}
}

func (rc *record) finish() *Result {
	rc.res.LatencyMS = Summarize(rc.latencies)
	rc.res.TokensPerSec = Summarize(rc.tokPerSec)
	rc.res.RequestsPerSec = Summarize(rc.reqPerSec)
	if rc.cpu > 0 && rc.cpuTokens > 0 {
		rc.res.CPUSeconds = rc.cpu.Seconds()
		rc.res.TokensPerCPUSec = float64(rc.cpuTokens) / rc.cpu.Seconds()
	}
	return &rc.res
}

// measureCPU runs fn and returns the CPU time clock saw it take (0 without a clock
// or when a reading fails).
func measureCPU(clock func() (time.Duration, error), fn func()) time.Duration {
	if clock == nil {
		fn()
		return 0
	}
	before, err := clock()
	fn()
	after, err2 := clock()
	if err != nil || err2 != nil || after < before {
		return 0
	}
	return after - before
}

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

// loadAvg reads the 1-, 5- and 15-minute load averages (zeros where /proc is
// missing).
func loadAvg() [3]float64 {
	var l [3]float64
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return l
	}
	f := strings.Fields(string(b))
	for i := 0; i < 3 && i < len(f); i++ {
		l[i], _ = strconv.ParseFloat(f[i], 64)
	}
	return l
}

func readHost() Host {
	h := Host{CPUs: runtime.NumCPU(), OS: runtime.GOOS, Arch: runtime.GOARCH, GoVersion: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		h.CPU, h.CPUID, h.SIMD = parseCPUInfo(string(b))
	}
	return h
}

// simdFlags are the /proc/cpuinfo flags that decide which of ggml's x86 kernels
// run (llamafile's tinyBLAS for F16, BF16 and Q8_0, and ggml's own dot products),
// in the order they are reported.
var simdFlags = []string{"avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile"}

// parseCPUInfo reads the first processor's name, x86 family and model, and those
// of simdFlags it has, from the text of /proc/cpuinfo.
func parseCPUInfo(text string) (name, id string, simd []string) {
	h := cpuvariant.ParseCPUInfo(runtime.GOARCH, text)
	for _, f := range simdFlags {
		if h.Flags[f] {
			simd = append(simd, f)
		}
	}
	if h.Family != "" && h.ModelNumber != "" {
		id = "family " + h.Family + " model " + h.ModelNumber
	}
	return h.Model, id, simd
}
