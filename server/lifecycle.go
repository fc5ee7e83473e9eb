package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"runtime/debug"
	"time"
)

// Lifecycle is a serving process's life around a Server (embed-stack serve's):
// it answers HTTP at once while the warm workers start beside it (GET /ready and
// requests get 503 until they are ready), serves until its context ends or serving
// fails, and then stops in order: /ready answers 503 for DrainDelay, the listener
// closes, requests in flight get ShutdownGrace to finish, and the workers stop.
// A second signal (Forced) cuts the stop short. The fields are set before Serve,
// which is called once.
type Lifecycle struct {
	API    *Server
	Logger *slog.Logger
	// Start starts the workers and returns when they are ready, or with why they
	// are not; a stop that comes first cancels its ctx, and Start must then return
	// promptly. Close stops them; its ctx ends when Forced is closed.
	Start func(ctx context.Context) error
	Close func(ctx context.Context) error
	// Started is when the process began loading, for the "warm worker ready" line.
	Started time.Time
	// ShutdownGrace is how long requests in flight may take to finish once the
	// listener is closed; DrainDelay is how long to serve on with /ready
	// answering 503 before it is (drain).
	ShutdownGrace, DrainDelay time.Duration
	// Forced, once closed, ends a graceful stop at once: the connections are
	// closed (cancelling their requests) and the workers are killed rather than
	// drained.
	Forced <-chan struct{}
	// Cause names what ended Serve's context, for the "shutting down" line
	// (the signal's name); nil or "" logs none.
	Cause func(ctx context.Context) string
	// IdleRelease, when positive, returns the Go heap's free memory to the OS
	// once per idle spell, after no work request has been in flight for
	// IdleRelease to twice that (idle.go); 0 leaves it to the Go runtime.
	IdleRelease time.Duration

	srv      *http.Server
	serveErr chan error // the HTTP server's end
	warmErr  chan error // Start's result
	// warmDone says warmErr has been received; abandonStart ends a start still
	// in progress.
	warmDone     bool
	abandonStart context.CancelFunc
}

// Serve serves l.API on ln and starts the workers, until ctx ends or serving
// fails (the HTTP server's error, or the workers' failure to start), then stops
// everything and returns that error, or the second signal's cut.
func (l *Lifecycle) Serve(ctx context.Context, ln net.Listener) error {
	l.srv = l.API.HTTPServer()
	l.serveErr, l.warmErr = make(chan error, 1), make(chan error, 1)
	// The warm workers start under their own context, so that a shutdown can
	// abandon a start still in progress.
	var warmCtx context.Context
	warmCtx, l.abandonStart = context.WithCancel(ctx)
	defer l.abandonStart()
	go func() { l.warmErr <- l.Start(warmCtx) }()
	go func() { l.serveErr <- l.srv.Serve(ln) }()
	if l.IdleRelease > 0 {
		idleCtx, stopIdle := context.WithCancel(ctx)
		defer stopIdle()
		go l.API.releaseWhenIdle(idleCtx, l.IdleRelease, l.releaseHeap)
	}
	runErr := l.wait(ctx)
	return l.shutdown(ctx, runErr)
}

// wait returns when ctx ends, or with the error that ended serving: the HTTP
// server's, or a warm worker's that failed to start.
func (l *Lifecycle) wait(ctx context.Context) error {
	select {
	case <-ctx.Done():
	case err := <-l.serveErr:
		return fmt.Errorf("http server: %w", err)
	case err := <-l.warmErr:
		l.warmDone = true
		if err != nil {
			return err
		}
		l.Logger.Info("warm worker ready", "duration", time.Since(l.Started).Round(time.Millisecond))
		select {
		case <-ctx.Done():
		case err := <-l.serveErr:
			return fmt.Errorf("http server: %w", err)
		}
	}
	cause := ""
	if l.Cause != nil {
		cause = l.Cause(ctx)
	}
	l.Logger.Info("shutting down", "grace", l.ShutdownGrace, "signal", cause)
	return nil
}

// shutdown stops what Serve started and returns runErr, or the second signal's
// cut. Cleanup must run even though ctx is done; Forced (a second signal) cuts it
// short.
func (l *Lifecycle) shutdown(ctx context.Context, runErr error) error {
	logger := l.Logger
	cleanup, force := context.WithCancel(context.WithoutCancel(ctx))
	defer force()
	go func() {
		select {
		case <-l.Forced:
			logger.Warn("second signal: stopping now, abandoning the requests in flight")
			force()
		case <-cleanup.Done():
		}
	}()
	if ctx.Err() != nil {
		drain(cleanup, l.API, l.DrainDelay, logger)
	}
	sctx, cancel := context.WithTimeout(cleanup, l.ShutdownGrace)
	defer cancel()
	drainStart := time.Now()
	if err := l.srv.Shutdown(sctx); err != nil {
		logger.Warn("requests still in flight when the shutdown grace ended; closing their connections", "grace", l.ShutdownGrace, "error", err)
		_ = l.srv.Close()
	} else {
		logger.Info("requests drained", "duration", time.Since(drainStart).Round(time.Millisecond))
	}
	l.abandonStart()
	if !l.warmDone {
		<-l.warmErr // Start returns promptly once its context has ended
	}
	if err := l.Close(cleanup); err != nil {
		logger.Warn("stop warm worker", "error", err)
	} else {
		logger.Info("warm worker stopped")
	}
	if cleanup.Err() != nil && runErr == nil {
		runErr = errors.New("stopped by a second signal before the shutdown finished")
	}
	return runErr
}

// drain keeps serving for delay with /ready answering 503 (Server.Drain), so
// that a balancer stops sending before the listener closes; a second signal (ctx)
// cuts it short. Without it a balancer learns of the stop only from refused
// connections, which it retries only if configured to.
func drain(ctx context.Context, api *Server, delay time.Duration, logger *slog.Logger) {
	api.Drain()
	if delay <= 0 {
		return
	}
	logger.Info("draining: /ready answers 503 until the listener closes", "delay", delay)
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// releaseHeap returns the Go heap's free pages to the OS (IdleRelease) and logs, at
// debug level, how much went back: once per idle spell, so reading the runtime's
// statistics around it costs nothing that matters.
func (l *Lifecycle) releaseHeap() {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	debug.FreeOSMemory()
	runtime.ReadMemStats(&after)
	l.Logger.Debug("idle: returned the heap's free pages to the OS", "released_bytes", int64(after.HeapReleased)-int64(before.HeapReleased),
		"heap_in_use_bytes", after.HeapInuse)
}
