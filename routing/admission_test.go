package routing

import (
	"context"
	"errors"
	"testing"
	"time"
)

// tryAcquire starts acquire in a goroutine and returns the channel its outcome
// arrives on.
type outcome struct {
	release func()
	err     error
}

func tryAcquire(ctx context.Context, a *admission, tokens int) <-chan outcome {
	ch := make(chan outcome, 1)
	go func() {
		r, err := a.acquire(ctx, tokens)
		ch <- outcome{r, err}
	}()
	return ch
}

// waitQueued waits until n inputs are queued.
func waitQueued(t *testing.T, a *admission, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, _, q := a.state(); q == n {
			return
		}
		if time.Now().After(deadline) {
			_, _, q := a.state()
			t.Fatalf("%d queued, want %d", q, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func mustGrant(t *testing.T, ch <-chan outcome) func() {
	t.Helper()
	select {
	case o := <-ch:
		if o.err != nil {
			t.Fatalf("acquire: %v", o.err)
		}
		return o.release
	case <-time.After(5 * time.Second):
		t.Fatal("acquire still waiting")
		return nil
	}
}

func mustWait(t *testing.T, ch <-chan outcome) {
	t.Helper()
	select {
	case o := <-ch:
		t.Fatalf("acquire returned (err %v); want it to wait", o.err)
	case <-time.After(20 * time.Millisecond):
	}
}

func TestAdmissionCountAndQueue(t *testing.T) {
	a := newAdmission(2, 0, 1)
	ctx := context.Background()
	r1 := mustGrant(t, tryAcquire(ctx, a, 10))
	mustGrant(t, tryAcquire(ctx, a, 10))
	third := tryAcquire(ctx, a, 10)
	waitQueued(t, a, 1)
	mustWait(t, third)

	_, err := a.acquire(ctx, 10)
	var be *BusyError
	if !errors.As(err, &be) || !errors.Is(err, ErrBusy) {
		t.Fatalf("fourth acquire: err = %v; want a *BusyError", err)
	}
	// Two running, one queued: the new one would take the second turn of two
	// workers, each about firstRunGuess.
	if be.Running != 2 || be.Queued != 1 || be.RetryAfter != firstRunGuess {
		t.Errorf("BusyError = %+v; want 2 running, 1 queued, RetryAfter %s", *be, firstRunGuess)
	}
	const msg = "Too many long inputs are in progress (2 being embedded by their own worker, 1 waiting); retry after 5s, or send inputs of at most the warm limit."
	if be.Error() != msg {
		t.Errorf("message %q\nwant    %q", be.Error(), msg)
	}

	r1()
	r1() // releasing twice gives back one slot only
	mustGrant(t, third)
	if running, tokens, queued := a.state(); running != 2 || tokens != 20 || queued != 0 {
		t.Errorf("state = %d running, %d tokens, %d queued; want 2, 20, 0", running, tokens, queued)
	}
}

func TestAdmissionTokensInOrder(t *testing.T) {
	tests := []struct {
		name     string
		held     int   // tokens of the input already running
		next     []int // inputs arriving in this order
		grantNow []bool
		thenAll  bool // releasing the first grants every waiting one
	}{
		// A small input does not slip past a large one waiting at the head.
		{"fifo under the token bound", 60, []int{50, 10}, []bool{false, false}, true},
		{"fits beside", 60, []int{40}, []bool{true}, true},
		// An input over the bound runs alone rather than never.
		{"oversize waits for an empty house", 10, []int{150}, []bool{false}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newAdmission(4, 100, 4)
			ctx := context.Background()
			first := mustGrant(t, tryAcquire(ctx, a, tt.held))
			var waiting []<-chan outcome
			for i, n := range tt.next {
				ch := tryAcquire(ctx, a, n)
				if tt.grantNow[i] {
					mustGrant(t, ch)
					continue
				}
				waitQueued(t, a, len(waiting)+1)
				mustWait(t, ch)
				waiting = append(waiting, ch)
			}
			first()
			for _, ch := range waiting {
				mustGrant(t, ch)
			}
		})
	}
}

func TestAdmissionCancelWhileQueued(t *testing.T) {
	a := newAdmission(1, 100, 2)
	first := mustGrant(t, tryAcquire(context.Background(), a, 80))
	ctx, cancel := context.WithCancel(context.Background())
	big := tryAcquire(ctx, a, 90)
	waitQueued(t, a, 1)
	small := tryAcquire(context.Background(), a, 10)
	waitQueued(t, a, 2)

	cancel()
	if o := <-big; !errors.Is(o.err, context.Canceled) {
		t.Fatalf("cancelled waiter: err = %v", o.err)
	}
	waitQueued(t, a, 1)
	// The count bound (1) still holds the small one back.
	mustWait(t, small)
	first()
	mustGrant(t, small)
}

func TestAdmissionRetryAfter(t *testing.T) {
	a := newAdmission(2, 0, 8)
	a.avgRun = 40 * time.Second
	for _, tt := range []struct {
		queued int
		want   time.Duration
	}{{0, 40 * time.Second}, {1, 40 * time.Second}, {2, 80 * time.Second}, {7, 160 * time.Second}} {
		a.queue = make([]*waiter, tt.queued)
		if got := a.retryAfterLocked(); got != tt.want {
			t.Errorf("%d queued: RetryAfter %s, want %s", tt.queued, got, tt.want)
		}
	}
	a.avgRun = time.Hour
	if got := a.retryAfterLocked(); got != maxRetryAfter {
		t.Errorf("RetryAfter %s, want the cap %s", got, maxRetryAfter)
	}
}

// TestLongInputsAdmitted runs requests through the router: the long inputs of
// concurrent requests take turns on one ephemeral worker, the short ones do not
// wait for them, and a long input beyond the queue gets a *BusyError at once.
func TestLongInputsAdmitted(t *testing.T) {
	r, warm, long := newRouter(Config{WarmMaxTokens: 4, MaxEphemeral: 1, EphemeralQueue: 1})
	if _, _, q := newAdmissionFor(Config{}); q != DefaultEphemeralQueue {
		t.Errorf("zero EphemeralQueue: %d may wait, want %d", q, DefaultEphemeralQueue)
	}
	if _, _, q := newAdmissionFor(Config{EphemeralQueue: -1}); q != 0 {
		t.Errorf("negative EphemeralQueue: %d may wait, want 0", q)
	}
	long.block = make(chan struct{})
	r.init()
	ctx := context.Background()
	errc := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := r.Embed(ctx, &Request{Texts: []string{"long input"}})
			errc <- err
		}()
	}
	waitQueued(t, r.admit, 1)

	// A short request meanwhile is served by the warm backend at once.
	if _, err := r.Embed(ctx, &Request{Texts: []string{"ab"}}); err != nil {
		t.Fatalf("short request while long ones wait: %v", err)
	}
	if len(warm.calls) != 1 {
		t.Fatalf("warm calls = %d", len(warm.calls))
	}
	_, err := r.Embed(ctx, &Request{Texts: []string{"a", "third long input"}})
	if !errors.Is(err, ErrBusy) {
		t.Fatalf("third long request: err = %v, want ErrBusy", err)
	}
	close(long.block)
	for range 2 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	if running, _, queued := r.EphemeralState(); running != 0 || queued != 0 {
		t.Fatalf("after the requests: %d running, %d queued", running, queued)
	}
}

// newAdmissionFor returns the bounds a router with cfg admits long inputs under.
func newAdmissionFor(cfg Config) (workers, tokens, queue int) {
	r := &Router{Config: cfg}
	r.init()
	return r.admit.maxRunning, r.admit.maxTokens, r.admit.maxQueue
}

// TestNeverAdmittable: a request with more long inputs than workers plus queue is an
// InputError (400) naming the limit, not a BusyError (429) that no retry could get
// past; one at the limit runs.
func TestNeverAdmittable(t *testing.T) {
	r, _, long := newRouter(Config{WarmMaxTokens: 4, MaxEphemeral: 1, EphemeralQueue: 1})
	_, err := r.Embed(context.Background(), &Request{Texts: []string{"ab", "long input", "long input", "long input"}})
	var ie *InputError
	if !errors.As(err, &ie) || ie.Code != CodeTooManyLongInputs || ie.Param != "input" ||
		ie.Message != "The request holds 3 inputs over 4 tokens (the first is input 1); each takes an ephemeral worker of its own, and this server holds at most 2 such inputs at once (1 running, --max-ephemeral, and 1 waiting, --ephemeral-queue). Split the request into parts of at most 2 such inputs." {
		t.Fatalf("err = %#v", err)
	}
	if len(long.calls) != 0 {
		t.Fatalf("%d ephemeral calls for a refused request", len(long.calls))
	}
	if _, err := r.Embed(context.Background(), &Request{Texts: []string{"long input", "ab", "long input"}}); err != nil {
		t.Fatalf("two long inputs: %v", err)
	}
}
