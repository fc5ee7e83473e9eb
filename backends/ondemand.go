package backends

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// OnDemand is a warm worker that may be stopped when idle and is started again by
// the next call (serve --keep-alive, as Ollama's keep_alive): a server with several
// models holds memory only for those in use, and one that is used now and then
// pays a cold start instead of a worker's memory all day.
//
// With KeepAlive 0 it is a [Warm] (watched by a [HangWatch] when HangTimeout is
// set) and nothing else: Start starts it, Close stops it.
//
// Calls while the first worker loads get an *UnavailableError at once, as from
// Warm (the server answers 503 and /ready says loading). Calls after an idle stop
// wait for the new worker instead: a client cannot know the model was unloaded,
// and the load takes about as long as a retry would wait. Concurrent calls share
// one load; a call whose context ends stops waiting, but the load goes on for the
// others. A load that fails fails the calls that waited for it; the next call
// tries again.
//
// Set the fields, call Start once and Close once; the other methods are safe for
// concurrent use.
type OnDemand struct {
	// Warm holds the settings of every worker: each start runs a fresh copy of it
	// (Warm.Fresh), since a Warm is started only once. It is never started itself.
	Warm *Warm
	// KeepAlive is how long the worker may go without a call in flight before it
	// is stopped; 0 means never.
	KeepAlive time.Duration
	// HangTimeout, above 0, watches each worker with a HangWatch of that timeout.
	HangTimeout time.Duration
	// Logger receives the stops and cold starts. nil means slog.Default().
	Logger *slog.Logger

	mu       sync.Mutex // guards the fields below
	runCtx   context.Context
	cancel   context.CancelFunc // abandons a load in progress (Close)
	cur      *Warm              // the running supervisor; nil while stopped
	hang     *HangWatch         // cur's watch, when HangTimeout > 0
	stopHang context.CancelFunc
	// unloaded says cur was stopped for idleness: a call starts a new one.
	unloaded bool
	closed   bool
	loading  *load // the start in progress after an idle stop; nil while none
	stopping chan struct{}
	// stoppingPID is the process of the worker stopped for idleness, until it has
	// exited: PID reports it meanwhile, so that 0 means no process.
	stoppingPID int
	inflight    int       // calls on cur
	lastUse     time.Time // when inflight last fell to 0
	idle        *time.Timer
	// Counters of the workers already stopped, so that the totals do not fall.
	restarts, kills int
	loads           int // cold starts after an idle stop, done or failed
	loadFailures    int // in a row
	lastLoad        time.Duration
	info            EngineInfo
}

// load is one start after an idle stop; done is closed when err is set.
type load struct {
	done chan struct{}
	err  error
}

// Fresh returns an unstarted Warm with w's settings (its exported fields).
func (w *Warm) Fresh() *Warm {
	return &Warm{
		Spec: w.Spec, SocketDir: w.SocketDir, ReadyTimeout: w.ReadyTimeout,
		MinBackoff: w.MinBackoff, MaxBackoff: w.MaxBackoff, StopTimeout: w.StopTimeout,
		Logger: w.Logger, MinTokens: w.MinTokens, NEmbd: w.NEmbd, UnhealthyAfter: w.UnhealthyAfter,
	}
}

// Start starts the first worker and returns once it is ready, as Warm.Start; ctx
// bounds this start only.
func (o *OnDemand) Start(ctx context.Context) error {
	o.mu.Lock()
	if o.closed || o.runCtx != nil {
		o.mu.Unlock()
		return errors.New("backends: OnDemand.Start called twice or after Close")
	}
	o.runCtx, o.cancel = context.WithCancel(context.WithoutCancel(ctx))
	o.mu.Unlock()
	w := o.Warm.Fresh()
	if err := w.Start(ctx); err != nil {
		return err
	}
	return o.install(w)
}

// install makes the started w the current worker, unless Close came first.
func (o *OnDemand) install(w *Warm) error {
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		_ = w.Close(context.Background())
		return &UnavailableError{Cause: ErrClosed}
	}
	o.cur, o.unloaded, o.info = w, false, w.Info()
	if o.HangTimeout > 0 {
		var hctx context.Context
		hctx, o.stopHang = context.WithCancel(o.runCtx)
		o.hang = &HangWatch{Warm: w, Timeout: o.HangTimeout, Logger: w.Logger}
		go o.hang.Run(hctx)
	}
	o.lastUse = time.Now()
	o.armLocked()
	o.mu.Unlock()
	return nil
}

// armLocked (re)starts the idle timer. o.mu must be held.
func (o *OnDemand) armLocked() {
	if o.KeepAlive <= 0 {
		return
	}
	if o.idle == nil {
		o.idle = time.AfterFunc(o.KeepAlive, o.stopIfIdle)
		return
	}
	o.idle.Reset(o.KeepAlive)
}

// stopIfIdle stops the worker if no call has been in flight for KeepAlive.
func (o *OnDemand) stopIfIdle() {
	o.mu.Lock()
	if o.closed || o.cur == nil || o.inflight > 0 {
		o.mu.Unlock()
		return
	}
	if left := o.KeepAlive - time.Since(o.lastUse); left > 0 {
		o.idle.Reset(left) // a call came and went since the timer was set
		o.mu.Unlock()
		return
	}
	w, pid := o.cur, o.cur.PID()
	o.detachLocked()
	o.unloaded = true
	stopped := make(chan struct{})
	o.stopping, o.stoppingPID = stopped, pid
	o.mu.Unlock()

	o.logger().Info("warm worker stopped after its keep-alive", "pid", pid, "keep_alive", o.KeepAlive)
	if err := w.Close(context.Background()); err != nil {
		o.logger().Warn("stop idle warm worker", "error", err)
	}
	o.mu.Lock()
	o.stopping, o.stoppingPID = nil, 0
	o.mu.Unlock()
	close(stopped)
}

// detachLocked takes cur out of service, keeping its counters. o.mu must be held.
func (o *OnDemand) detachLocked() {
	o.restarts += o.cur.Restarts()
	if o.hang != nil {
		o.kills += o.hang.Kills()
		o.stopHang()
		o.hang, o.stopHang = nil, nil
	}
	o.cur = nil
}

// Embed embeds through the current worker, starting one first if the last was
// stopped for idleness.
func (o *OnDemand) Embed(ctx context.Context, seqs [][]int32) ([][]float32, error) {
	o.mu.Lock()
	for o.cur == nil {
		switch {
		case o.closed:
			o.mu.Unlock()
			return nil, &UnavailableError{Cause: ErrClosed}
		case !o.unloaded:
			o.mu.Unlock()
			return nil, &UnavailableError{RetryAfter: time.Second, Cause: errors.New("the warm worker is starting")}
		}
		l := o.loading
		if l == nil {
			l = &load{done: make(chan struct{})}
			o.loading = l
			go o.reload(l, o.stopping)
		}
		o.mu.Unlock()
		select {
		case <-l.done:
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the warm worker to start after its keep-alive: %w", ctx.Err())
		}
		if l.err != nil {
			return nil, l.err
		}
		o.mu.Lock()
	}
	o.inflight++
	w, h := o.cur, o.hang
	o.mu.Unlock()
	defer o.release()
	if h != nil {
		return h.Embed(ctx, seqs)
	}
	return w.Embed(ctx, seqs)
}

// release ends a call: the last one out arms the idle timer.
func (o *OnDemand) release() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.inflight--
	if o.inflight == 0 {
		o.lastUse = time.Now()
		o.armLocked()
	}
}

// reload starts a worker after an idle stop, once the stopped one is gone
// (stopping), so that two never hold memory at once.
func (o *OnDemand) reload(l *load, stopping chan struct{}) {
	if stopping != nil {
		<-stopping
	}
	start := time.Now()
	w := o.Warm.Fresh()
	err := w.Start(o.runCtx)
	if err == nil {
		err = o.install(w)
	}
	took := time.Since(start)
	o.mu.Lock()
	o.loads++
	if err != nil {
		o.loadFailures++
		err = &UnavailableError{RetryAfter: time.Second, Cause: fmt.Errorf("starting the warm worker after its keep-alive: %w", err)}
	} else {
		o.loadFailures, o.lastLoad = 0, took
	}
	l.err = err
	o.loading = nil
	o.mu.Unlock()
	close(l.done)
	if err != nil {
		o.logger().Error("cold start of the warm worker failed", "error", err, "duration", took.Round(time.Millisecond))
		return
	}
	o.logger().Info("warm worker started on demand (cold start)", "pid", w.PID(), "duration_ms", took.Milliseconds())
}

// Ready reports whether calls are served: a worker is ready, or it was stopped for
// idleness and starts on the next call.
func (o *OnDemand) Ready() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	switch {
	case o.closed:
		return false
	case o.cur != nil:
		return o.cur.Ready()
	}
	return o.unloaded
}

// Healthy is the worker's Warm.Healthy; while it is stopped, false once as many
// cold starts in a row as Warm.UnhealthyAfter have failed.
func (o *OnDemand) Healthy() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.cur != nil {
		return o.cur.Healthy()
	}
	n := o.Warm.UnhealthyAfter
	if n <= 0 {
		n = DefaultUnhealthyAfter
	}
	return o.loadFailures < n
}

// PID is the ready worker's process id, or that of the worker being stopped for
// idleness until it has exited; 0 while there is no worker process.
func (o *OnDemand) PID() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.cur == nil {
		return o.stoppingPID
	}
	return o.cur.PID()
}

// LoadState is a snapshot of an OnDemand's worker, for a listing of the loaded
// models (GET /api/ps).
type LoadState struct {
	// Loaded: a worker holds the model (it may be restarting after a crash).
	Loaded bool
	PID    int
	// InFlight counts the calls on the worker now.
	InFlight int
	// IdleSince is when the last call ended (or the worker became ready), zero
	// while calls are in flight or no worker is loaded.
	IdleSince time.Time
	// Expires is when the keep-alive will stop the worker if no call comes (while
	// calls are in flight, the keep-alive from now: the earliest it can), zero
	// when it never will (no keep-alive, not loaded).
	Expires time.Time
}

// State returns the worker's LoadState.
func (o *OnDemand) State() LoadState {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.cur == nil || o.closed {
		return LoadState{}
	}
	st := LoadState{Loaded: true, PID: o.cur.PID(), InFlight: o.inflight}
	if o.inflight == 0 {
		st.IdleSince = o.lastUse
	}
	if o.KeepAlive > 0 {
		st.Expires = time.Now().Add(o.KeepAlive)
		if o.inflight == 0 {
			st.Expires = o.lastUse.Add(o.KeepAlive)
		}
	}
	return st
}

// Restarts counts the restarts of every worker, those stopped included.
func (o *OnDemand) Restarts() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := o.restarts
	if o.cur != nil {
		n += o.cur.Restarts()
	}
	return n
}

// Kills counts the workers killed as hung.
func (o *OnDemand) Kills() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := o.kills
	if o.hang != nil {
		n += o.hang.Kills()
	}
	return n
}

// Loads counts the cold starts after an idle stop, and says how long the last
// successful one took.
func (o *OnDemand) Loads() (n int, last time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.loads, o.lastLoad
}

// Info describes the engine of the last worker that became ready.
func (o *OnDemand) Info() EngineInfo {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.cur != nil {
		return o.cur.Info()
	}
	return o.info
}

// Device is the ready worker's Warm.Device; ok is false while there is none.
func (o *OnDemand) Device(ctx context.Context) (Device, bool) {
	o.mu.Lock()
	w := o.cur
	o.mu.Unlock()
	if w == nil {
		return Device{}, false
	}
	return w.Device(ctx)
}

// Close stops the worker, abandoning a start in progress, and waits until it is
// gone (Warm.Close).
func (o *OnDemand) Close(ctx context.Context) error {
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return nil
	}
	o.closed = true
	if o.idle != nil {
		o.idle.Stop()
	}
	if o.cancel != nil {
		o.cancel()
	}
	w, l, stopping := o.cur, o.loading, o.stopping
	if w != nil {
		o.detachLocked()
	}
	o.mu.Unlock()
	if l != nil {
		<-l.done // the start returns promptly once runCtx has ended
	}
	if stopping != nil {
		<-stopping
	}
	if w == nil {
		return nil
	}
	return w.Close(ctx)
}

func (o *OnDemand) logger() *slog.Logger {
	if o.Logger != nil {
		return o.Logger
	}
	return slog.Default()
}
