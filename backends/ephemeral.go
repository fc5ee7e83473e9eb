package backends

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/embed-stack/embed-stack/telemetry/stage"
)

// contextGranule is the rounding of an ephemeral worker's context: sizes repeat,
// and llama.cpp pads its KV cache to such multiples anyway.
const contextGranule = 64

// EphemeralContextSize is the --ctx an ephemeral worker gets for a sequence of n
// tokens: n rounded up to a multiple of 64.
func EphemeralContextSize(n int) int {
	return (n + contextGranule - 1) / contextGranule * contextGranule
}

// Ephemeral runs one worker per sequence, sized to it: for sequences longer than
// the warm worker's context, whose KV cache would cost too much memory to keep
// around. It holds no state, so its methods are safe for concurrent use; how many
// run at once is the caller's admission decision.
type Ephemeral struct {
	// Spec starts the worker; "--ctx N --socket PATH" is appended to its Args.
	Spec WorkerSpec

	// SocketDir is where each worker's private (0700) socket directory is created
	// and removed again. "" means os.TempDir().
	SocketDir string

	// ReadyTimeout is the stall timer of a starting worker; see Warm.ReadyTimeout.
	// 0 means DefaultReadyTimeout (2m).
	ReadyTimeout time.Duration

	// StopTimeout is the grace between SIGTERM and SIGKILL once the vector is
	// back; see Warm.StopTimeout. 0 means DefaultStopTimeout (10s).
	StopTimeout time.Duration

	// Logger receives one debug line per worker. nil means slog.Default().
	Logger *slog.Logger

	// NEmbd is the model's embedding width; see Warm.NEmbd. 0 accepts any.
	NEmbd int

	// HangTimeout is how long a worker embedding its sequence may go without
	// answering a /health probe before it is killed as hung (stopped, or wedged
	// so that it no longer serves its socket); its caller then gets an
	// *UnavailableError. A worker that computes keeps answering, however long its
	// sequence takes. 0 means DefaultHangTimeout; negative turns the watch off.
	HangTimeout time.Duration
}

// Embed starts a worker with --ctx EphemeralContextSize(len(seq)), waits until it is
// ready, embeds seq and stops the worker before returning, whatever happened: no
// process and no socket survive the call. When ctx ends the worker is killed at
// once.
//
// Errors: *WorkerInputError for refused input; ctx's error when ctx ended; otherwise
// a plain error (the worker failed to start, or died while embedding, with the tail
// of its output). A dying ephemeral worker is not ErrUnavailable: it was started for
// this sequence only, so a retry would most likely fail the same way.
func (e *Ephemeral) Embed(ctx context.Context, seq []int32) (_ []float32, err error) {
	if len(seq) == 0 {
		return nil, &WorkerInputError{Index: 0, Message: "the sequence is empty"}
	}
	nCtx := EphemeralContextSize(len(seq))
	ctx, st := startEphemeral(ctx, len(seq), nCtx)
	defer func() { st.End(err) }()
	logger := e.Logger
	if logger == nil {
		logger = slog.Default()
	}

	dir, err := newSocketDir(e.SocketDir) // mode 0700
	if err != nil {
		err = fmt.Errorf("creating an ephemeral worker's socket directory (Ephemeral.SocketDir %q): %w", e.SocketDir, err)
		if exhausted(err) {
			return nil, &UnavailableError{RetryAfter: time.Second, Cause: err}
		}
		return nil, err
	}
	defer func() {
		if err := os.RemoveAll(dir); err != nil {
			logger.Warn("removing an ephemeral worker's socket directory", "dir", dir, "err", err)
		}
	}()

	started := time.Now()
	sctx, spawn := startSpawn(ctx, roleEphemeral, nCtx)
	// The process outlives ctx only as long as stopping it takes.
	p, err := startProc(context.WithoutCancel(sctx), e.Spec, filepath.Join(dir, "worker.sock"),
		WorkerArgs{Ctx: nCtx}.Args(), orDefault(e.StopTimeout, DefaultStopTimeout))
	if err != nil {
		endSpawn(spawn, roleEphemeral, 0, started, err)
		err = fmt.Errorf("ephemeral worker: %w", err)
		if exhausted(err) {
			return nil, &UnavailableError{RetryAfter: time.Second, Cause: err}
		}
		return nil, err
	}
	p.client.role = roleEphemeral
	if st.Recording() {
		st.SetAttributes(attrRole.String(roleEphemeral), attrPID.Int(p.pid))
	}
	vec, err := e.embed(ctx, p, seq, nCtx, spawn, started)
	_, stop := stage.Start(ctx, tracer, "backends.stop")
	stopErr := e.stop(ctx, p)
	if stopErr != nil {
		logger.Warn("stopping an ephemeral worker", "err", stopErr)
	}
	stop.End(stopErr)
	logger.Debug("ephemeral worker done", "pid", p.pid, "tokens", len(seq), "ctx", nCtx,
		"took", time.Since(started).Round(time.Millisecond), "err", err)
	if err == nil {
		return vec, nil
	}

	var inputErr *WorkerInputError
	var hung *hungError
	switch {
	case errors.As(err, &hung):
		return nil, &UnavailableError{RetryAfter: time.Second, Cause: err}
	case errors.As(err, &inputErr):
		return nil, err
	case ctx.Err() != nil:
		return nil, fmt.Errorf("ephemeral worker for %d tokens: %w", len(seq), ctx.Err())
	case errors.Is(err, ErrUnavailable):
		// The worker went away mid-request. It has been reaped by now, so its output
		// says why; report that rather than a retryable 503.
		return nil, fmt.Errorf("the ephemeral worker (--ctx %d) failed while embedding %d tokens: %w",
			nCtx, len(seq), p.exitError())
	default:
		return nil, fmt.Errorf("ephemeral worker (--ctx %d): %w", nCtx, err)
	}
}

// embed waits for the worker, ending the stage spawn, and embeds one sequence on it,
// under the hang watch (which covers the load too: a loading worker answers
// "loading").
func (e *Ephemeral) embed(ctx context.Context, p *proc, seq []int32, nCtx int, spawn stage.Stage, started time.Time) ([]float32, error) {
	hung := e.watch(ctx, p, logger(e.Logger))
	vec, err := e.embedOn(ctx, p, seq, nCtx, spawn, started)
	if h := hung(); h != nil {
		return nil, h
	}
	return vec, err
}

func (e *Ephemeral) embedOn(ctx context.Context, p *proc, seq []int32, nCtx int, spawn stage.Stage, started time.Time) ([]float32, error) {
	h, err := p.waitReady(ctx, orDefault(e.ReadyTimeout, DefaultReadyTimeout))
	endSpawn(spawn, roleEphemeral, p.pid, started, err)
	if err != nil {
		return nil, fmt.Errorf("starting: %w", err)
	}
	if h.MaxTokens < len(seq) {
		return nil, fmt.Errorf("started with --ctx %d it reports max_tokens %d, fewer than the %d tokens to embed", nCtx, h.MaxTokens, len(seq))
	}
	if e.NEmbd > 0 && h.NEmbd != e.NEmbd {
		return nil, &DimensionError{PID: p.pid, NEmbd: h.NEmbd, Want: e.NEmbd}
	}
	vecs, err := p.client.Embed(ctx, [][]int32{seq})
	if err != nil {
		return nil, err
	}
	return vecs[0], nil
}

// hungError is an ephemeral worker killed by its hang watch.
type hungError struct {
	pid     int
	timeout time.Duration
}

func (e *hungError) Error() string {
	return fmt.Sprintf("the ephemeral worker (pid %d) answered no health probe for %s (the hang timeout) and was killed", e.pid, e.timeout)
}

// watch probes p's /health while its call runs and kills p when no probe has been
// answered for HangTimeout: a stopped or wedged worker would otherwise hold its
// request, and the admission slot other long inputs queue for, until the request's
// deadline. Probes go to the worker's HTTP server, which answers while the engine
// decodes. The returned function ends the watch and reports a kill.
func (e *Ephemeral) watch(ctx context.Context, p *proc, logger *slog.Logger) (stop func() *hungError) {
	timeout := orDefault(e.HangTimeout, DefaultHangTimeout)
	if e.HangTimeout < 0 {
		return func() *hungError { return nil }
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan *hungError, 1)
	go func() {
		defer close(done)
		t := time.NewTicker(max(timeout/10, 10*time.Millisecond))
		defer t.Stop()
		last := time.Now()
		for {
			select {
			case <-wctx.Done():
				return
			case <-p.done:
				return
			case <-t.C:
			}
			hctx, hcancel := context.WithTimeout(wctx, min(healthTimeout, timeout/2))
			_, err := p.client.Health(hctx)
			hcancel()
			if err == nil {
				last = time.Now()
				continue
			}
			if wctx.Err() != nil || time.Since(last) < timeout {
				continue
			}
			logger.Error("an ephemeral worker answered nothing for the hang timeout; killing it", "pid", p.pid, "timeout", timeout)
			done <- &hungError{pid: p.pid, timeout: timeout}
			_ = p.cmd.Process.Kill() // fails only if it has exited already
			return
		}
	}()
	return func() *hungError {
		cancel()
		return <-done
	}
}

func logger(l *slog.Logger) *slog.Logger {
	if l != nil {
		return l
	}
	return slog.Default()
}

// stop ends the worker: gently when the call went its course, at once when ctx
// has ended (nobody waits for it, and a decode in progress could take long).
func (e *Ephemeral) stop(ctx context.Context, p *proc) error {
	if ctx.Err() != nil || p.exited() {
		p.kill()
		return nil
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), orDefault(e.StopTimeout, DefaultStopTimeout))
	defer cancel()
	return p.stop(sctx)
}
