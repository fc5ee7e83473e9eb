package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/embed-stack/embed-stack/weights"
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
	// IdleSettle is how long the contenders are left alone after the vector checks
	// before their idle memory is read (0: at once). Idle means idle for a while:
	// serve hands the free pages of its heap back 2 to 4 s after its last request
	// (server.Lifecycle.IdleRelease), and read at once it still held the checks'.
	IdleSettle time.Duration
	// Log receives one line per step; nil discards them.
	Log io.Writer
	// CPUKernels names the CPU kernels the floor runs, and Weights the weights it
	// computes with, for the report's host line (Host.CPUKernels, Host.Weights).
	CPUKernels string
	Weights    weights.Result
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
	rep.Host.CPUKernels, rep.Host.Weights, rep.Host.WeightsConvertedFrom = r.CPUKernels, r.Weights.Type, r.Weights.From
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

	// Memory: idle figures once the contenders have been left alone for
	// IdleSettle, then a sampler per local contender.
	if r.IdleSettle > 0 {
		r.logf("leaving the servers idle for %s before reading their memory", r.IdleSettle)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(r.IdleSettle):
		}
	}
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
