package backends

// How Warm keeps its worker up: spawning one and waiting for it to be ready, and
// the one goroutine that notices its death and restarts it with backoff.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// spawn starts a worker under runCtx and waits, under waitCtx, until it is ready.
// On failure the process is killed and reaped.
func (w *Warm) spawn(runCtx, waitCtx context.Context) (*proc, Health, error) {
	w.mu.Lock()
	w.spawned++
	n, old := w.spawned, w.dir
	w.mu.Unlock()
	dir, fresh, err := ensureSocketDir(old, w.SocketDir)
	if err != nil {
		if exhausted(err) {
			err = &UnavailableError{RetryAfter: time.Second, Cause: err}
		}
		return nil, Health{}, err
	}
	if fresh {
		w.logger().Warn("the worker socket directory was gone or no longer private; made a new one", "old", old, "new", dir)
		w.mu.Lock()
		w.dir = dir
		w.mu.Unlock()
	}
	socket := filepath.Join(dir, fmt.Sprintf("warm-%d.sock", n))

	started := time.Now()
	sctx, spawn := startSpawn(runCtx, roleWarm, 0)
	p, err := startProc(sctx, w.Spec, socket, nil, w.stopTimeout())
	if err != nil {
		endSpawn(spawn, roleWarm, 0, started, err)
		return nil, Health{}, err
	}
	p.client.role = roleWarm
	w.mu.Lock()
	w.procs[p] = struct{}{}
	w.mu.Unlock()
	h, err := p.waitReady(waitCtx, w.readyTimeout())
	if err == nil && h.MaxTokens < w.MinTokens {
		err = &CapacityError{PID: p.pid, MaxTokens: h.MaxTokens, Want: w.MinTokens}
	}
	if err == nil && w.NEmbd > 0 && h.NEmbd != w.NEmbd {
		err = &DimensionError{PID: p.pid, NEmbd: h.NEmbd, Want: w.NEmbd}
	}
	endSpawn(spawn, roleWarm, p.pid, started, err)
	if err != nil {
		// Nothing to drain in a worker that is not ready; kill rather than stop.
		p.kill()
		w.forget(p)
		return nil, Health{}, err
	}
	return p, h, nil
}

// forget drops a reaped process and the socket it may have left behind (a killed
// worker cannot remove it).
func (w *Warm) forget(p *proc) {
	if err := os.Remove(p.socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		w.logger().Warn("removing a dead worker's socket", "path", p.socket, "err", err)
	}
	w.mu.Lock()
	delete(w.procs, p)
	w.mu.Unlock()
}

// supervise is the one goroutine that restarts workers. It watches the ready
// worker p until it dies, then starts replacements with backoff until one is ready,
// and repeats until ctx ends.
func (w *Warm) supervise(ctx context.Context, p *proc) {
	defer w.wg.Done()
	backoff := w.minBackoff()
	readyAt := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.done:
		}
		if ctx.Err() != nil {
			return // Close stopped it; not a death to report
		}
		exit := p.exitError()
		w.forget(p)
		if time.Since(readyAt) >= w.maxBackoff() {
			backoff = w.minBackoff() // it ran long enough: not a crash loop
		}
		w.mu.Lock()
		if w.cur == p {
			w.cur = nil
		}
		w.restarting = true
		w.cause = fmt.Errorf("the warm worker (pid %d) exited (%v) and is being restarted", exit.PID, exitReason(exit))
		w.broadcastLocked()
		w.mu.Unlock()
		w.logger().Error("warm worker died; restarting it", "pid", exit.PID, "err", exitReason(exit), "in", backoff, "output", exit.Output)

		for {
			w.mu.Lock()
			w.nextStart = time.Now().Add(backoff)
			w.mu.Unlock()
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			w.mu.Lock()
			w.nextStart = time.Time{}
			w.restarts++
			w.mu.Unlock()

			np, h, err := w.spawn(ctx, ctx)
			backoff = nextBackoff(backoff, w.maxBackoff())
			if err == nil {
				w.mu.Lock()
				// Close may have run since spawn returned; it stops np, but Ready and
				// PID must not report it.
				if !w.closed {
					w.cur, w.info, w.cause = np, h.Info(), nil
				}
				w.restarting, w.failures = false, 0
				w.attempts++
				w.broadcastLocked()
				w.mu.Unlock()
				w.logger().Info("warm worker restarted", "pid", np.pid, "restarts", w.Restarts())
				p, readyAt = np, time.Now()
				break
			}
			if ctx.Err() != nil {
				return
			}
			w.mu.Lock()
			w.cause = fmt.Errorf("restarting the warm worker failed (%s) and is retried", failureReason(err))
			w.attempts++
			w.failures++
			w.broadcastLocked()
			w.mu.Unlock()
			w.logger().Error("restarting the warm worker failed", "err", err, "retry_in", backoff)
		}
	}
}

// nextBackoff doubles d up to limit.
func nextBackoff(d, limit time.Duration) time.Duration {
	return min(2*d, limit)
}

// exitReason is an exit without the output tail, which is logged separately and
// would make an UnavailableError message long.
func exitReason(e *ExitError) string {
	if e.Err == nil {
		return "status 0"
	}
	return e.Err.Error()
}

// failureReason shortens a spawn error to its first line.
func failureReason(err error) string {
	var exit *ExitError
	if errors.As(err, &exit) {
		return fmt.Sprintf("worker (pid %d) exited: %s", exit.PID, exitReason(exit))
	}
	first, _, _ := strings.Cut(err.Error(), "\n")
	return first
}
