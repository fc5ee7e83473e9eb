package backends

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// DefaultHangTimeout is HangWatch.Timeout's default: far longer than one packed
// batch takes on a CPU (seconds for 8192 tokens of the 0.6B model), so only a worker
// that has stopped answering trips it.
const DefaultHangTimeout = 5 * time.Minute

// hangProbe is the sequence sent to find out whether a worker that was left with an
// abandoned call still answers: one token, id 0, which every vocabulary has.
var hangProbe = [][]int32{{0}}

// HangWatch finds a warm worker that is alive but no longer answers (a native
// decode stuck in a loop or deadlock, a stopped process) and kills it, so that the
// [Warm] supervisor replaces it as it replaces a worker that dies. Warm alone only
// notices exits: a wedged worker would hold every request until its deadline, for
// ever.
//
// The test is progress, not the age of a call: calls queue inside the worker behind
// each other, so under load one call may wait many batches, yet the worker answers
// some call every batch. The worker counts as hung when calls are outstanding and
// none has been answered for Timeout. A call abandoned by its caller (its context
// ended) leaves the worker possibly still busy with it; HangWatch then sends a
// one-token probe in its place, which is answered once the worker is free and
// stays outstanding if it never is.
//
// Calls in flight on a worker that is killed fail with an *UnavailableError (503),
// as with any worker death, and are not retried.
//
// Set the fields, then call Run in its own goroutine and use Embed in place of
// Warm.Embed. Embed and Kills are safe for concurrent use.
type HangWatch struct {
	// Warm is the supervised worker to watch; required.
	Warm *Warm
	// Timeout is how long a worker with calls outstanding may go without answering
	// any before it is killed. 0 means DefaultHangTimeout.
	Timeout time.Duration
	// Logger receives the kills. nil means slog.Default().
	Logger *slog.Logger

	mu          sync.Mutex // guards the fields below
	pid         int        // the worker the state below is about
	outstanding int        // calls sent to it and not yet returned
	since       time.Time  // the last answer, or when it became busy after an idle spell
	probing     bool       // a probe is outstanding
	kills       int
}

// Embed is Warm.Embed, watched.
func (h *HangWatch) Embed(ctx context.Context, seqs [][]int32) ([][]float32, error) {
	pid := h.begin()
	vecs, err := h.Warm.Embed(ctx, seqs)
	h.end(ctx, pid, err)
	return vecs, err
}

// begin records a call to the current worker and returns its pid (0 while none is
// ready; Warm.Embed then fails at once).
func (h *HangWatch) begin() int {
	pid := h.Warm.PID()
	h.mu.Lock()
	defer h.mu.Unlock()
	if pid != h.pid {
		// A new worker: nothing is owed by it yet. Calls still out on the old one
		// fail with it and are not counted against the new one.
		h.pid, h.outstanding, h.probing = pid, 0, false
	}
	if h.outstanding == 0 {
		h.since = time.Now()
	}
	h.outstanding++
	return pid
}

// end records a call's return. An answer of any kind from the worker (vectors, or a
// refusal) is progress; an abandoned call leaves a probe in its place.
func (h *HangWatch) end(ctx context.Context, pid int, err error) {
	h.mu.Lock()
	if pid != h.pid {
		h.mu.Unlock()
		return
	}
	h.outstanding--
	abandoned := err != nil && ctx.Err() != nil
	switch {
	case err == nil || !abandoned && !errors.Is(err, ErrUnavailable):
		h.since = time.Now()
	case abandoned && pid != 0 && !h.probing:
		h.probing = true
		h.mu.Unlock()
		go h.probe(pid)
		return
	}
	h.mu.Unlock()
}

// probe sends hangProbe as a call of its own. Its context outlives Timeout, so that
// Run, not the probe, decides when the worker is hung.
func (h *HangWatch) probe(pid int) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*h.timeout())
	defer cancel()
	_, _ = h.Embed(ctx, hangProbe) // only whether it is answered matters, which Embed records
	h.mu.Lock()
	if h.pid == pid {
		h.probing = false
	}
	h.mu.Unlock()
}

// Run checks the worker until ctx ends, about ten times per Timeout.
func (h *HangWatch) Run(ctx context.Context) {
	t := time.NewTicker(max(h.timeout()/10, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			h.check()
		}
	}
}

// check kills the watched worker if it is hung.
func (h *HangWatch) check() {
	h.mu.Lock()
	pid, n, stalled := h.pid, h.outstanding, time.Since(h.since)
	if pid == 0 || n == 0 || stalled < h.timeout() {
		h.mu.Unlock()
		return
	}
	// Start afresh: the calls out on it fail as it dies.
	h.pid, h.outstanding, h.probing = 0, 0, false
	h.mu.Unlock()

	w := h.Warm
	w.mu.Lock()
	p := w.cur
	w.mu.Unlock()
	if p == nil || p.pid != pid {
		return // it died or was replaced meanwhile
	}
	h.mu.Lock()
	h.kills++
	h.mu.Unlock()
	h.logger().Error("the warm worker answered nothing for the hang timeout; killing it so that it is replaced",
		"pid", pid, "calls_outstanding", n, "stalled", stalled.Round(time.Millisecond), "timeout", h.timeout())
	// SIGKILL, not a graceful stop: a hung worker would not drain. The supervisor
	// reaps it and starts a replacement.
	_ = p.cmd.Process.Kill() // fails only if it has exited already
}

// Kills counts the workers killed as hung.
func (h *HangWatch) Kills() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.kills
}

func (h *HangWatch) timeout() time.Duration { return orDefault(h.Timeout, DefaultHangTimeout) }

func (h *HangWatch) logger() *slog.Logger {
	if h.Logger != nil {
		return h.Logger
	}
	return slog.Default()
}
