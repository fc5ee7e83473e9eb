package backends

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
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

	dir, err := os.MkdirTemp(e.SocketDir, "embed-stack-") // mode 0700
	if err != nil {
		return nil, fmt.Errorf("creating an ephemeral worker's socket directory (Ephemeral.SocketDir %q): %w", e.SocketDir, err)
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
		[]string{"--ctx", strconv.Itoa(nCtx)}, orDefault(e.StopTimeout, DefaultStopTimeout))
	if err != nil {
		endSpawn(spawn, roleEphemeral, 0, started, err)
		return nil, fmt.Errorf("ephemeral worker: %w", err)
	}
	p.client.role = roleEphemeral
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
	switch {
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

// embed waits for the worker, ending the stage spawn, and embeds one sequence on it.
func (e *Ephemeral) embed(ctx context.Context, p *proc, seq []int32, nCtx int, spawn stage.Stage, started time.Time) ([]float32, error) {
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
