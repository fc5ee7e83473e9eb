package backends

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// Defaults of the supervisor settings.
const (
	DefaultReadyTimeout = 2 * time.Minute
	DefaultMinBackoff   = 250 * time.Millisecond
	DefaultMaxBackoff   = 30 * time.Second
	DefaultStopTimeout  = 10 * time.Second
	// DefaultUnhealthyAfter is Warm.UnhealthyAfter's default: with the default
	// backoff, five failed restarts take about 8 s, long enough to ride out a
	// passing fault, short enough that a liveness probe soon sees one that stays.
	DefaultUnhealthyAfter = 5
	// unreachableGrace is how long a worker that refused a connection may take to
	// be seen exiting before it is killed as unreachable (its socket gone).
	unreachableGrace = time.Second
)

// Warm supervises the long-lived worker: it starts it, waits until it is ready,
// serves Embed through it, and restarts it with exponential backoff when it dies
// (a llama.cpp GGML_ASSERT aborts the worker, never the server).
//
// Only a worker that exits is noticed: one that hangs while alive keeps its
// requests until their contexts end, so callers bound requests with a deadline.
//
// Configure the exported fields, then call Start once and Close once. The methods
// are safe for concurrent use, but Start must have returned before Close is called
// (cancel Start's ctx to abandon a start).
type Warm struct {
	// Spec starts the worker; "--socket PATH" is appended to its Args.
	Spec WorkerSpec

	// SocketDir is where the private (0700) directory holding the worker's socket is
	// created; Close removes that directory. "" means os.TempDir(). Unix socket paths
	// are short (107 bytes on Linux, 103 on macOS), so keep it short.
	SocketDir string

	// ReadyTimeout is how long a starting worker may go without progress (output on
	// stderr, or its socket starting to answer) before it is killed as hung. It is a
	// stall timer, not a deadline: a slow load that keeps logging is not cut short.
	// 0 means DefaultReadyTimeout (2m).
	ReadyTimeout time.Duration

	// MinBackoff and MaxBackoff bound the delay before restarting a worker that died:
	// MinBackoff first, doubling with each further death or failed start, at most
	// MaxBackoff. A worker that stays ready for MaxBackoff resets the delay to
	// MinBackoff. 0 means DefaultMinBackoff (250ms) and DefaultMaxBackoff (30s).
	MinBackoff, MaxBackoff time.Duration

	// StopTimeout is the grace between SIGTERM and SIGKILL when the worker is
	// stopped (exec.Cmd.WaitDelay). Keep it above the worker's own
	// WorkerConfig.ShutdownTimeout. 0 means DefaultStopTimeout (10s).
	StopTimeout time.Duration

	// Logger receives deaths, restarts and readiness. nil means slog.Default().
	Logger *slog.Logger

	// MinTokens is the longest sequence the caller will send: a worker whose
	// /health reports a smaller max_tokens is refused (killed, and Start fails with a
	// *CapacityError) rather than left to fail those requests one by one. 0 accepts
	// any worker.
	MinTokens int

	// NEmbd is the model's embedding width: a worker whose /health reports another
	// is refused (killed, and Start fails with a *DimensionError). 0 accepts any.
	NEmbd int

	// UnhealthyAfter is how many restarts in a row may fail before Healthy reports
	// false, so that an orchestrator's liveness probe replaces the process. 0 means
	// DefaultUnhealthyAfter (5).
	UnhealthyAfter int

	wg sync.WaitGroup // the supervisor goroutine

	mu        sync.Mutex // guards the fields below
	started   bool
	closed    bool
	dir       string             // the private socket directory
	cancel    context.CancelFunc // ends the supervisor and SIGTERMs every worker
	cur       *proc              // the ready worker; nil while there is none
	info      EngineInfo         // from the last ready worker's /health
	cause     error              // why cur is nil, for UnavailableError
	nextStart time.Time          // when the next restart is due; zero while none is scheduled
	restarts  int
	spawned   int                // numbers socket names, so a new worker never meets an old socket
	procs     map[*proc]struct{} // started and not yet cleaned up
	// restarting is set from a worker's death until its replacement is ready:
	// calls that find no worker then wait for the next start attempt.
	restarting bool
	attempts   int           // restart attempts finished, ready or not
	failures   int           // restart attempts failed since the last ready worker
	changed    chan struct{} // closed and replaced when cur, attempts or closed change
}

// Start creates the socket directory, starts the worker and returns once it is
// ready. On failure nothing is left running and the error carries the tail of the
// worker's output; Start may then be called again. ctx bounds the start only; the
// worker runs until Close.
func (w *Warm) Start(ctx context.Context) error {
	w.mu.Lock()
	switch {
	case w.closed:
		w.mu.Unlock()
		return errors.New("backends: Warm.Start after Close")
	case w.started:
		w.mu.Unlock()
		return errors.New("backends: Warm.Start called twice")
	}
	w.started = true
	w.mu.Unlock()

	removeStaleSocketDirs(w.SocketDir, w.logger())
	dir, err := newSocketDir(w.SocketDir) // mode 0700
	if err != nil {
		w.abortStart("")
		return fmt.Errorf("creating the worker socket directory (Warm.SocketDir %q): %w", w.SocketDir, err)
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w.mu.Lock()
	w.dir, w.cancel = dir, cancel
	w.procs = make(map[*proc]struct{})
	w.changed = make(chan struct{})
	w.mu.Unlock()

	p, h, err := w.spawn(runCtx, ctx)
	if err != nil {
		cancel()
		w.abortStart(dir)
		return fmt.Errorf("starting the warm worker: %w", err)
	}
	w.mu.Lock()
	w.cur, w.info = p, h.Info()
	w.mu.Unlock()
	attrs := []any{"pid", p.pid, "model", h.Model, "n_embd", h.NEmbd, "max_tokens", h.MaxTokens}
	if d := h.Device; d != nil {
		attrs = append(attrs, "device", d.Name, "device_description", d.Description, "backend", d.Backend,
			"gpu_layers", d.GPULayers, "device_memory_total_mib", d.MemoryTotal>>20, "device_memory_free_mib", d.MemoryFree>>20)
		if d.Note != "" {
			attrs = append(attrs, "device_note", d.Note)
		}
		if d.CPUVariant != "" {
			attrs = append(attrs, "cpu_variant", d.CPUVariant)
		}
	}
	w.logger().Info("warm worker ready", attrs...)
	if d := h.Device; d != nil && d.Warning != "" {
		w.logger().Warn("slower CPU kernels than this CPU allows", "pid", p.pid, "cpu_variant", d.CPUVariant, "warning", d.Warning)
	}

	w.wg.Add(1)
	go w.supervise(runCtx, p)
	return nil
}

// abortStart undoes a failed Start; spawn has already killed its process.
func (w *Warm) abortStart(dir string) {
	if dir != "" {
		if err := os.RemoveAll(dir); err != nil {
			w.logger().Warn("removing the worker socket directory", "dir", dir, "err", err)
		}
	}
	w.mu.Lock()
	w.started, w.dir, w.cancel, w.procs, w.changed = false, "", nil, nil, nil
	w.mu.Unlock()
}

// Embed embeds the sequences on the warm worker. While the first worker loads it
// returns at once an *UnavailableError (errors.Is ErrUnavailable) with a retry
// hint. While a worker that died is being replaced, it waits for the replacement's
// start: the call runs there if it starts, and gets an *UnavailableError if that
// attempt fails. A call that was sent to a worker that dies also gets an
// *UnavailableError and is not retried: the request itself may be what killed the
// worker, and replaying it would kill the next one. A call that never reached the
// worker (its socket refused the connection: the worker had died, or its socket
// was removed, in which case the worker is killed as unreachable) waits for the
// replacement the same way. Input refused by the worker comes back as
// *WorkerInputError.
func (w *Warm) Embed(ctx context.Context, seqs [][]int32) ([][]float32, error) {
	var dead *proc
	for attempt := 0; ; attempt++ {
		p, err := w.worker(ctx, dead)
		if err != nil {
			return nil, err
		}
		vecs, err := p.client.Embed(ctx, seqs)
		var ue *UnavailableError
		if err == nil || ctx.Err() != nil || !errors.As(err, &ue) {
			return vecs, err
		}
		if ue.undelivered && attempt < 3 {
			w.unreachable(p)
			dead = p
			continue
		}
		w.mu.Lock()
		hint := w.retryAfterLocked()
		w.mu.Unlock()
		return nil, &UnavailableError{
			RetryAfter: max(hint, ue.RetryAfter),
			Cause:      fmt.Errorf("the warm worker (pid %d) failed during the request, which is not retried: %w", p.pid, ue.Cause),
		}
	}
}

// worker returns the ready worker, unless it is dead (the one a call could not
// reach), waiting for a restart in progress and its outcome.
func (w *Warm) worker(ctx context.Context, dead *proc) (*proc, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	attempts := w.attempts
	for {
		p, cause := w.cur, w.cause
		switch {
		case w.closed:
			return nil, &UnavailableError{Cause: ErrClosed}
		case !w.started:
			return nil, errors.New("backends: Warm.Embed called before Start")
		case p != nil && p != dead:
			return p, nil
		case p == nil && (!w.restarting || w.attempts != attempts):
			// The first start, or the restart this call waited for failed.
			if cause == nil {
				cause = errors.New("the warm worker is starting")
			}
			return nil, &UnavailableError{RetryAfter: w.retryAfterLocked(), Cause: cause}
		}
		// Dead but not yet reaped, or being replaced: wait for news.
		ch := w.changed
		w.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			w.mu.Lock()
			return nil, fmt.Errorf("waiting for the warm worker's replacement: %w", ctx.Err())
		}
		w.mu.Lock()
	}
}

// unreachable handles a worker whose socket refused a call: normally it has just
// died and is reaped at once; one still running after unreachableGrace has lost
// its socket (a tmp cleaner) and can never be reached again, so it is killed to be
// replaced.
func (w *Warm) unreachable(p *proc) {
	t := time.NewTimer(unreachableGrace)
	defer t.Stop()
	select {
	case <-p.done:
		return
	case <-t.C:
	}
	w.logger().Error("the warm worker does not accept connections on its socket; killing it so that it is replaced", "pid", p.pid, "socket", p.socket)
	_ = p.cmd.Process.Kill() // fails only if it has exited meanwhile
}

// broadcastLocked wakes the calls waiting in worker. w.mu must be held.
func (w *Warm) broadcastLocked() {
	if w.changed != nil {
		close(w.changed)
	}
	w.changed = make(chan struct{})
}

// Healthy reports false once UnhealthyAfter restarts in a row have failed: the
// process cannot serve and should be replaced (GET /health). It is true while
// the first worker loads and while restarts are still being tried.
func (w *Warm) Healthy() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := w.UnhealthyAfter
	if n <= 0 {
		n = DefaultUnhealthyAfter
	}
	return w.failures < n
}

// retryAfterLocked estimates when a worker may be ready again: the scheduled
// restart plus a second for it to load. w.mu must be held.
func (w *Warm) retryAfterLocked() time.Duration {
	d := time.Second
	if !w.nextStart.IsZero() {
		d += max(0, time.Until(w.nextStart))
	}
	return d
}

// Ready reports whether a worker is ready to embed.
func (w *Warm) Ready() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cur != nil && !w.closed
}

// Info describes the engine of the last worker that became ready (zero before
// Start returns).
func (w *Warm) Info() EngineInfo {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.info
}

// Device asks the ready worker for its device and that device's memory now. ok
// is false while no worker is ready, when the worker does not report a device, or
// when it does not answer within ctx.
func (w *Warm) Device(ctx context.Context) (d Device, ok bool) {
	w.mu.Lock()
	p := w.cur
	w.mu.Unlock()
	if p == nil {
		return Device{}, false
	}
	h, err := p.client.Health(ctx)
	if err != nil || h.Device == nil {
		return Device{}, false
	}
	return *h.Device, true
}

// Restarts counts the attempts to start a replacement worker, whether or not it
// became ready: a number that grows while Ready stays false is a crash loop.
func (w *Warm) Restarts() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.restarts
}

// PID returns the process id of the ready worker, or 0 while there is none.
func (w *Warm) PID() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cur == nil {
		return 0
	}
	return w.cur.pid
}

// Close stops the supervisor and the worker: it closes the worker's stdin and sends
// SIGTERM so the worker drains its requests, sends SIGKILL after StopTimeout or as
// soon as ctx ends, waits until the process is reaped, and removes the socket
// directory. It returns an error if a worker had to be killed. Further calls return
// nil; Embed then returns an *UnavailableError wrapping ErrClosed.
func (w *Warm) Close(ctx context.Context) error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	w.cur = nil
	w.broadcastLocked()
	started, cancel := w.started, w.cancel
	w.mu.Unlock()
	if !started {
		return nil
	}

	cancel()
	// Every wait of the supervisor also selects on its context, so this is quick.
	w.wg.Wait()

	w.mu.Lock()
	procs := make([]*proc, 0, len(w.procs))
	for p := range w.procs {
		procs = append(procs, p)
	}
	dir := w.dir
	w.mu.Unlock()

	var errs []error
	for _, p := range procs {
		if err := p.stop(ctx); err != nil {
			errs = append(errs, err)
		}
		w.forget(p)
	}
	// Cleanup that must happen whatever ctx says.
	if err := os.RemoveAll(dir); err != nil {
		errs = append(errs, fmt.Errorf("removing the worker socket directory: %w", err))
	}
	return errors.Join(errs...)
}

func (w *Warm) logger() *slog.Logger {
	if w.Logger != nil {
		return w.Logger
	}
	return slog.Default()
}

func (w *Warm) readyTimeout() time.Duration { return orDefault(w.ReadyTimeout, DefaultReadyTimeout) }
func (w *Warm) minBackoff() time.Duration   { return orDefault(w.MinBackoff, DefaultMinBackoff) }
func (w *Warm) stopTimeout() time.Duration  { return orDefault(w.StopTimeout, DefaultStopTimeout) }

func (w *Warm) maxBackoff() time.Duration {
	return max(orDefault(w.MaxBackoff, DefaultMaxBackoff), w.minBackoff())
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}
