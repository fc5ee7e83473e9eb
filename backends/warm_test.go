package backends

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// newWarm returns a Warm over the fake worker with short timings, its socket
// parent directory and the directory where the fakes record their pids.
func newWarm(t *testing.T, env ...string) (w *Warm, socketParent, records string) {
	t.Helper()
	socketParent, records = shortTempDir(t), shortTempDir(t)
	w = &Warm{
		Spec:         fakeSpec(t, append([]string{"FAKE_RECORD_DIR=" + records}, env...)...),
		SocketDir:    socketParent,
		ReadyTimeout: 10 * time.Second,
		MinBackoff:   20 * time.Millisecond,
		MaxBackoff:   200 * time.Millisecond,
		StopTimeout:  5 * time.Second,
		Logger:       quietLogger(),
	}
	t.Cleanup(func() {
		w.Close(context.Background())
		assertNoWorkersLeft(t, records)
	})
	return w, socketParent, records
}

// assertNoWorkersLeft checks that every worker process a test started is gone.
func assertNoWorkersLeft(t *testing.T, records string) {
	t.Helper()
	for pid := range recordedArgs(t, records) {
		if !processGone(pid) {
			t.Errorf("worker process %d survived", pid)
		}
	}
}

// assertEmptyDir checks that nothing, in particular no socket directory, is left in
// dir.
func assertEmptyDir(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Errorf("left behind in the socket directory: %s", e.Name())
	}
}

func TestWarmServesAndCloses(t *testing.T) {
	w, socketParent, records := newWarm(t)
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !w.Ready() || w.Restarts() != 0 {
		t.Fatalf("Ready %v, Restarts %d after Start", w.Ready(), w.Restarts())
	}
	want := EngineInfo{NEmbd: fakeNEmbd, MaxTokens: fakeDefaultCtx, MaxBatchTokens: fakeDefaultCtx, Model: fakeModel}
	if w.Info() != want {
		t.Errorf("Info() = %+v, want %+v", w.Info(), want)
	}
	pid := w.PID()
	args := recordedArgs(t, records)[pid]
	st, err := os.Stat(w.dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o700 || filepath.Dir(w.dir) != socketParent {
		t.Errorf("socket directory %s has mode %v, want 0700 inside %s", w.dir, st.Mode().Perm(), socketParent)
	}
	wantArgs := []string{"worker", "--model", "/models/fake.gguf", "--socket", filepath.Join(w.dir, "warm-1.sock")}
	if strings.Join(args, " ") != strings.Join(wantArgs, " ") {
		t.Errorf("worker args = %q, want %q", args, wantArgs)
	}

	// Concurrent requests, each checked against the fake's function.
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Go(func() {
			seqs := [][]int32{{int32(i)}, {int32(i), 1, 2}, {5, int32(i)}}
			got, err := w.Embed(context.Background(), seqs)
			if err != nil {
				errs <- err
				return
			}
			for k, s := range seqs {
				if !equalVec(got[k], fakeVector(s)) {
					errs <- fmt.Errorf("request %d vector %d = %v, want %v", i, k, got[k], fakeVector(s))
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	_, err = w.Embed(context.Background(), [][]int32{{1}, {fakeVocab + 5}})
	var ie *WorkerInputError
	if !errors.As(err, &ie) || ie.Index != 1 || ie.Message != "token id 1005 is outside the vocabulary [0, 1000)" {
		t.Errorf("input error = %v, want WorkerInputError for sequence 1", err)
	}
	_, err = w.Embed(context.Background(), [][]int32{{tokFail}})
	if err == nil || errors.Is(err, ErrUnavailable) || errors.As(err, &ie) || !strings.HasSuffix(err.Error(), "answered 500: engine: fake decode failed") {
		t.Errorf("engine failure = %v, want a plain 500 error", err)
	}

	if err := w.Close(context.Background()); err != nil {
		t.Fatalf("Close = %v", err)
	}
	if !processGone(pid) {
		t.Errorf("worker %d survived Close", pid)
	}
	assertEmptyDir(t, socketParent)
	if w.Ready() || w.PID() != 0 {
		t.Error("Ready or PID after Close")
	}
	_, err = w.Embed(context.Background(), [][]int32{{1}})
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, ErrClosed) {
		t.Errorf("Embed after Close = %v, want ErrUnavailable wrapping ErrClosed", err)
	}
	if err := w.Close(context.Background()); err != nil {
		t.Errorf("second Close = %v", err)
	}
	if err := w.Start(context.Background()); err == nil {
		t.Error("Start after Close succeeded")
	}
}

func TestWarmStartFailures(t *testing.T) {
	tests := []struct {
		name    string
		env     []string
		spec    func(*WorkerSpec)
		ready   time.Duration
		ctx     time.Duration
		check   func(t *testing.T, err error)
		maxTook time.Duration
	}{
		{name: "crash at start", env: []string{"FAKE_CRASH_AT_START=error loading model: tensor 'blk.0.attn_q.weight' has wrong shape"},
			check: func(t *testing.T, err error) {
				var exit *ExitError
				if !errors.As(err, &exit) || !strings.Contains(err.Error(), "tensor 'blk.0.attn_q.weight' has wrong shape") {
					t.Errorf("err = %v, want an ExitError quoting stderr", err)
				}
			}},
		{name: "load failure", env: []string{"FAKE_LOAD_FAIL=out of memory"},
			check: func(t *testing.T, err error) {
				if !strings.Contains(err.Error(), "worker: loading the model: out of memory") {
					t.Errorf("err = %v, want the load error", err)
				}
			}},
		{name: "never ready", env: []string{"FAKE_NEVER_READY=1"}, ready: 300 * time.Millisecond, maxTook: 5 * time.Second,
			check: func(t *testing.T, err error) {
				if !errors.Is(err, ErrReadyTimeout) {
					t.Errorf("err = %v, want ErrReadyTimeout", err)
				}
			}},
		{name: "start ctx ends", env: []string{"FAKE_NEVER_READY=1"}, ctx: 300 * time.Millisecond, maxTook: 5 * time.Second,
			check: func(t *testing.T, err error) {
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("err = %v, want DeadlineExceeded", err)
				}
			}},
		{name: "missing executable", spec: func(s *WorkerSpec) { s.Path = "/nonexistent/embed-stack" },
			check: func(t *testing.T, err error) {
				if !strings.Contains(err.Error(), "starting the worker /nonexistent/embed-stack") {
					t.Errorf("err = %v", err)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, socketParent, records := newWarm(t, tt.env...)
			if tt.spec != nil {
				tt.spec(&w.Spec)
			}
			if tt.ready > 0 {
				w.ReadyTimeout = tt.ready
			}
			ctx := context.Background()
			if tt.ctx > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.ctx)
				defer cancel()
			}
			start := time.Now()
			err := w.Start(ctx)
			if err == nil {
				t.Fatal("Start succeeded")
			}
			if !strings.HasPrefix(err.Error(), "starting the warm worker: ") {
				t.Errorf("err = %q", err)
			}
			tt.check(t, err)
			if tt.maxTook > 0 && time.Since(start) > tt.maxTook {
				t.Errorf("Start took %s", time.Since(start))
			}
			if w.Ready() {
				t.Error("Ready after a failed Start")
			}
			// Nothing is left running or on disk.
			assertNoWorkersLeft(t, records)
			assertEmptyDir(t, socketParent)
		})
	}
}

func TestWarmRestartsAfterCrashMidRequest(t *testing.T) {
	crashOnce := filepath.Join(shortTempDir(t), "crashed")
	w, socketParent, records := newWarm(t, "FAKE_CRASH_ONCE_FILE="+crashOnce, "FAKE_SLOW_RESTART=1500ms")
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	firstPID := w.PID()

	// The request that kills the worker gets ErrUnavailable with a hint; it is not
	// retried (if it were, the restarted worker would serve it, as the fake crashes
	// only once).
	_, err := w.Embed(context.Background(), [][]int32{{1}, {tokCrash}})
	var ue *UnavailableError
	if !errors.As(err, &ue) || !errors.Is(err, ErrUnavailable) || ue.RetryAfter < time.Second {
		t.Fatalf("in-flight request on a dying worker: %v, want UnavailableError with RetryAfter >= 1s", err)
	}
	if !strings.Contains(err.Error(), fmt.Sprintf("the warm worker (pid %d) failed during the request, which is not retried", firstPID)) {
		t.Errorf("message = %v", err)
	}

	// While the replacement loads (1.5s), a request that finds no worker waits for
	// it and is served there: it never reached the dead worker (issue 15).
	eventually(t, 5*time.Second, "the supervisor to notice the death", func() bool { return !w.Ready() })
	start := time.Now()
	got, err := w.Embed(context.Background(), [][]int32{{1}})
	if err != nil {
		t.Fatalf("Embed while restarting = %v, want it to wait for the replacement", err)
	}
	if !equalVec(got[0], fakeVector([]int32{1})) {
		t.Errorf("vector = %v, want %v", got[0], fakeVector([]int32{1}))
	}
	t.Logf("a call made while the worker restarted waited %s", time.Since(start).Round(time.Millisecond))

	eventually(t, 10*time.Second, "the restarted worker", w.Ready)
	if w.Restarts() != 1 {
		t.Errorf("Restarts() = %d, want 1", w.Restarts())
	}
	if w.PID() == firstPID || !processGone(firstPID) {
		t.Errorf("pid %d after restart, first pid %d gone: %v", w.PID(), firstPID, processGone(firstPID))
	}
	got, err = w.Embed(context.Background(), [][]int32{{1}, {tokCrash}})
	if err != nil {
		t.Fatalf("after restart: %v", err)
	}
	if !equalVec(got[1], fakeVector([]int32{tokCrash})) {
		t.Errorf("vector = %v, want %v", got[1], fakeVector([]int32{tokCrash}))
	}
	// The dead worker's socket went with it; only the live one remains.
	entries, _ := os.ReadDir(w.dir)
	if len(entries) != 1 || entries[0].Name() != "warm-2.sock" {
		t.Errorf("socket directory holds %v, want only warm-2.sock", entries)
	}
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	assertNoWorkersLeft(t, records)
	assertEmptyDir(t, socketParent)
}

func TestWarmRetriesFailedRestartsWithBackoff(t *testing.T) {
	crashing := filepath.Join(shortTempDir(t), "crash")
	w, _, records := newWarm(t, "FAKE_CRASH_AT_START=model file vanished", "FAKE_CRASH_AT_START_IF="+crashing)
	w.MinBackoff, w.MaxBackoff = 40*time.Millisecond, 160*time.Millisecond
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	// From now on every start fails; then the worker is killed from outside.
	if err := os.WriteFile(crashing, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(w.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "two failed restarts", func() bool { return w.Restarts() >= 2 })
	_, err := w.Embed(context.Background(), [][]int32{{1}})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "restarting the warm worker failed (worker (pid ") ||
		!strings.Contains(err.Error(), "exited: exit status 3) and is retried") {
		t.Errorf("Embed during a crash loop = %v", err)
	}

	// The delays are 40, 80, 160, 160, ... ms plus a start each: over 1s at most
	// about 8 attempts, and without backoff there would be dozens.
	before, start := w.Restarts(), time.Now()
	time.Sleep(time.Second)
	attempts, took := w.Restarts()-before, time.Since(start)
	if limit := int(took/(160*time.Millisecond)) + 1; attempts > limit || attempts < 2 {
		t.Errorf("%d restart attempts in %s; the backoff allows 2..%d", attempts, took, limit)
	}

	if err := os.Remove(crashing); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "recovery once starts succeed", w.Ready)
	if _, err := w.Embed(context.Background(), [][]int32{{3}}); err != nil {
		t.Fatalf("after recovery: %v", err)
	}
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	assertNoWorkersLeft(t, records)
}

func TestWarmHungRequest(t *testing.T) {
	w, _, _ := newWarm(t)
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := w.Embed(ctx, [][]int32{{tokHang}})
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("hung request = %v, want DeadlineExceeded (the caller's deadline), not unavailable", err)
	}
	// The worker is alive and serves other requests.
	if got, err := w.Embed(context.Background(), [][]int32{{2}}); err != nil || !equalVec(got[0], fakeVector([]int32{2})) {
		t.Fatalf("next request: %v, %v", got, err)
	}
	// Close still ends a worker with a wedged request: its drain gives up.
	pid := w.PID()
	start := time.Now()
	if err := w.Close(context.Background()); err != nil {
		t.Fatalf("Close = %v", err)
	}
	if took := time.Since(start); took > w.StopTimeout {
		t.Errorf("Close took %s", took)
	}
	if !processGone(pid) {
		t.Errorf("worker %d survived", pid)
	}
}

func TestWarmCloseKillsAWedgedWorker(t *testing.T) {
	tests := []struct {
		name        string
		stopTimeout time.Duration
		ctxTimeout  time.Duration
		wantErr     bool
	}{
		{"after StopTimeout", 300 * time.Millisecond, time.Minute, false},
		{"when Close's ctx ends", time.Minute, 300 * time.Millisecond, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, socketParent, _ := newWarm(t, "FAKE_WEDGE_ON_EXIT=1")
			w.StopTimeout = tt.stopTimeout
			if err := w.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			w.mu.Lock()
			p := w.cur
			w.mu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), tt.ctxTimeout)
			defer cancel()
			start := time.Now()
			err := w.Close(ctx)
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("Close took %s", took)
			}
			if (err != nil) != tt.wantErr {
				t.Errorf("Close = %v, want error %v", err, tt.wantErr)
			}
			ws := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
			if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
				t.Errorf("worker ended with %v, want SIGKILL", p.cmd.ProcessState)
			}
			assertEmptyDir(t, socketParent)
		})
	}
}

func TestWarmMisuse(t *testing.T) {
	var w Warm
	if _, err := w.Embed(context.Background(), [][]int32{{1}}); err == nil || err.Error() != "backends: Warm.Embed called before Start" {
		t.Errorf("Embed before Start = %v", err)
	}
	if err := w.Close(context.Background()); err != nil {
		t.Errorf("Close before Start = %v", err)
	}
	w2, _, _ := newWarm(t)
	if err := w2.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := w2.Start(context.Background()); err == nil || err.Error() != "backends: Warm.Start called twice" {
		t.Errorf("second Start = %v", err)
	}
}

func TestWarmSocketDirTooLong(t *testing.T) {
	parent := filepath.Join(shortTempDir(t), strings.Repeat("d", 100))
	if err := os.Mkdir(parent, 0o700); err != nil {
		t.Fatal(err)
	}
	w, _, _ := newWarm(t)
	w.SocketDir = parent
	err := w.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "Unix sockets allow at most") || !strings.HasSuffix(err.Error(), "use a shorter socket directory") {
		t.Fatalf("Start = %v", err)
	}
	assertEmptyDir(t, parent)
}

// TestWarmRefusesAnotherModel: a worker whose n_embd is not NEmbd fails Start with a
// *DimensionError and leaves no process or socket behind; the right width starts.
func TestWarmRefusesAnotherModel(t *testing.T) {
	for _, want := range []int{fakeNEmbd + 1, fakeNEmbd} {
		t.Run(fmt.Sprintf("NEmbd %d", want), func(t *testing.T) {
			w, socketParent, records := newWarm(t)
			w.NEmbd = want
			err := w.Start(context.Background())
			if want == fakeNEmbd {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var de *DimensionError
			if !errors.As(err, &de) || de.NEmbd != fakeNEmbd || de.Want != want {
				t.Fatalf("Start: err = %v; want a *DimensionError for n_embd %d, not %d", err, fakeNEmbd, want)
			}
			if !strings.HasSuffix(err.Error(), fmt.Sprintf("computes %d-dimensional vectors, but the model has %d: is it running another model?", fakeNEmbd, want)) {
				t.Errorf("message %q", err)
			}
			assertNoWorkersLeft(t, records)
			assertEmptyDir(t, socketParent)
		})
	}
}

// TestWarmRefusesASmallWorker: a worker whose max_tokens is below MinTokens fails
// Start with a *CapacityError and leaves no process or socket behind.
func TestWarmRefusesASmallWorker(t *testing.T) {
	tests := []struct {
		ctx, min int
		wantErr  bool
	}{{ctx: 100, min: 100}, {ctx: 100, min: 101, wantErr: true}, {ctx: 100, min: 0}}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("ctx %d, MinTokens %d", tt.ctx, tt.min), func(t *testing.T) {
			w, socketParent, records := newWarm(t)
			w.Spec.Args = append(w.Spec.Args, "--ctx", fmt.Sprint(tt.ctx))
			w.MinTokens = tt.min
			err := w.Start(context.Background())
			if !tt.wantErr {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var ce *CapacityError
			if !errors.As(err, &ce) || ce.MaxTokens != tt.ctx || ce.Want != tt.min {
				t.Fatalf("Start: err = %v; want a *CapacityError for max_tokens %d < %d", err, tt.ctx, tt.min)
			}
			want := fmt.Sprintf("holds sequences of at most %d tokens (its max_tokens), fewer than the %d it must take", tt.ctx, tt.min)
			if !strings.Contains(err.Error(), want) {
				t.Errorf("message %q lacks %q", err, want)
			}
			assertNoWorkersLeft(t, records)
			assertEmptyDir(t, socketParent)
		})
	}
}
