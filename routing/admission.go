package routing

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
)

// Defaults of the ephemeral admission (Config.MaxEphemeral and friends).
const (
	// DefaultMaxEphemeral is one long input at a time: an ephemeral worker decodes
	// with every CPU, so a second one running alongside mostly takes turns with it.
	DefaultMaxEphemeral = 1
	// DefaultEphemeralQueue is how many long inputs may wait for a worker: with
	// minutes per 32k-token input on a CPU, a longer queue only turns 429s into
	// timeouts.
	DefaultEphemeralQueue = 8

	// firstRunGuess is the Retry-After estimate before any ephemeral run has
	// finished.
	firstRunGuess = 5 * time.Second
	// maxRetryAfter caps the estimate: a client should look again within minutes.
	maxRetryAfter = 5 * time.Minute
)

// BusyError is a long input refused at admission: as many ephemeral workers as
// allowed are running and the queue behind them is full. Package server answers it
// with 429 and a Retry-After header. errors.Is(err, ErrBusy) is true for it.
type BusyError struct {
	// RetryAfter estimates when a slot may be free: the queue ahead times the
	// recent run time of an ephemeral worker.
	RetryAfter time.Duration
	Running    int // ephemeral workers running
	Queued     int // long inputs waiting
}

// ErrBusy is what every *BusyError matches with errors.Is.
var ErrBusy = errors.New("the server is busy with long inputs")

func (e *BusyError) Error() string {
	return fmt.Sprintf("Too many long inputs are in progress (%d being embedded by their own worker, %d waiting); retry after %ds, or send inputs of at most the warm limit.",
		e.Running, e.Queued, retrySeconds(e.RetryAfter))
}

// Is makes errors.Is(err, ErrBusy) true.
func (e *BusyError) Is(target error) bool { return target == ErrBusy }

// retrySeconds rounds a Retry-After estimate up to whole seconds, at least 1.
func retrySeconds(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}

// admission bounds the ephemeral workers running at once, by count and by the
// tokens their contexts hold, and queues a bounded number of inputs beyond that in
// arrival order. It never touches the warm path: short inputs do not pass through
// it. Safe for concurrent use.
type admission struct {
	maxRunning int // ephemeral workers at once, ≥ 1
	maxTokens  int // tokens of the inputs running at once; 0 = unbounded
	maxQueue   int // inputs waiting, ≥ 0

	mu      sync.Mutex // guards the fields below
	running int
	tokens  int
	queue   []*waiter     // FIFO; the head is granted first
	avgRun  time.Duration // moving average of a run's duration; 0 before the first
}

type waiter struct {
	tokens  int
	ready   chan struct{} // closed when granted
	granted bool          // set with ready closed, under admission.mu
}

func newAdmission(maxRunning, maxTokens, maxQueue int) *admission {
	return &admission{maxRunning: max(1, maxRunning), maxTokens: max(0, maxTokens), maxQueue: max(0, maxQueue)}
}

// acquire waits until an input of tokens tokens may run and returns the function
// that gives its slot back, which must be called once the worker is gone. It
// returns a *BusyError at once when the input cannot start now and the queue is
// full, and ctx's error when ctx ends while it waits.
//
// Grants go in arrival order, so a large input at the head of the queue is not
// starved by smaller ones slipping past it. An input larger than the token bound
// runs when nothing else does, rather than never.
func (a *admission) acquire(ctx context.Context, tokens int) (release func(), err error) {
	a.mu.Lock()
	if len(a.queue) == 0 && a.fitsLocked(tokens) {
		a.startLocked(tokens)
		a.mu.Unlock()
		return a.releaser(tokens), nil
	}
	if len(a.queue) >= a.maxQueue {
		e := &BusyError{RetryAfter: a.retryAfterLocked(), Running: a.running, Queued: len(a.queue)}
		a.mu.Unlock()
		return nil, e
	}
	w := &waiter{tokens: tokens, ready: make(chan struct{})}
	a.queue = append(a.queue, w)
	a.mu.Unlock()

	select {
	case <-w.ready:
		return a.releaser(tokens), nil
	case <-ctx.Done():
	}
	a.mu.Lock()
	if w.granted {
		// Granted while ctx ended: hand the slot on.
		a.mu.Unlock()
		a.releaser(tokens)()
		return nil, ctx.Err()
	}
	for i, q := range a.queue {
		if q == w {
			a.queue = append(a.queue[:i], a.queue[i+1:]...)
			break
		}
	}
	// The head may have changed, and it may fit.
	a.grantLocked()
	a.mu.Unlock()
	return nil, ctx.Err()
}

func (a *admission) fitsLocked(tokens int) bool {
	if a.running >= a.maxRunning {
		return false
	}
	return a.running == 0 || a.maxTokens == 0 || a.tokens+tokens <= a.maxTokens
}

func (a *admission) startLocked(tokens int) {
	a.running++
	a.tokens += tokens
}

// grantLocked starts queued inputs from the head while they fit.
func (a *admission) grantLocked() {
	for len(a.queue) > 0 && a.fitsLocked(a.queue[0].tokens) {
		w := a.queue[0]
		a.queue = a.queue[1:]
		a.startLocked(w.tokens)
		w.granted = true
		close(w.ready)
	}
}

// releaser returns the once-only function that ends a run started now.
func (a *admission) releaser(tokens int) func() {
	start := time.Now()
	var once sync.Once
	return func() {
		once.Do(func() {
			took := time.Since(start)
			a.mu.Lock()
			defer a.mu.Unlock()
			a.running--
			a.tokens -= tokens
			if a.avgRun == 0 {
				a.avgRun = took
			} else {
				a.avgRun = (3*a.avgRun + took) / 4
			}
			a.grantLocked()
		})
	}
}

// retryAfterLocked estimates when a new input could start: every queued input and
// the new one take their turn on maxRunning workers, each about the recent run
// time.
func (a *admission) retryAfterLocked() time.Duration {
	run := a.avgRun
	if run == 0 {
		run = firstRunGuess
	}
	turns := (len(a.queue) + a.maxRunning) / a.maxRunning
	return min(maxRetryAfter, time.Duration(turns)*run)
}

// capacity is how many long inputs the admission can hold at once, running and
// waiting: one request with more can never have them all admitted.
func (a *admission) capacity() (running, queued int) { return a.maxRunning, a.maxQueue }

// admissible refuses, with a 400, a request with more inputs over the warm limit
// than the ephemeral admission holds at once (workers running plus places in the
// queue). Each long input is admitted on its own, so such a request would be
// answered 429 at every retry however idle the server, and a client that retries
// 429s would loop forever (issue 28). 429 stays for what a retry can get.
func (r *Router) admissible(seqs [][]int32, field string, item func(int) string) error {
	if r.Long == nil {
		return nil // long inputs were refused by prepare
	}
	r.init()
	warm := r.Config.warmMaxTokens()
	long, first := 0, -1
	for i, s := range seqs {
		if len(s) > warm {
			if first < 0 {
				first = i
			}
			long++
		}
	}
	running, queued := r.admit.capacity()
	if long <= running+queued {
		return nil
	}
	return inputErr(field, -1, CodeTooManyLongInputs,
		"The request holds %d inputs over %d tokens (the first is %s); each takes an ephemeral worker of its own, and this server holds at most %d such inputs at once (%d running, --max-ephemeral, and %d waiting, --ephemeral-queue). Split the request into parts of at most %d such inputs.",
		long, warm, item(first), running+queued, running, queued, running+queued)
}

// state reports the workers running and the inputs queued, for tests and metrics.
func (a *admission) state() (running, tokens, queued int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.running, a.tokens, len(a.queue)
}
