package backends

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// runningWorker is RunWorker running in the background: its socket, the write end
// of its stdin and its result.
type runningWorker struct {
	socket string
	stdin  *io.PipeWriter
	cancel context.CancelFunc
	result chan error
}

func startRunWorker(t *testing.T, cfg WorkerConfig, load func() (Engine, EngineInfo, error)) *runningWorker {
	t.Helper()
	if cfg.SocketPath == "" {
		cfg.SocketPath = filepath.Join(shortTempDir(t), "w.sock")
	}
	pr, pw := io.Pipe()
	if cfg.Stdin == nil {
		cfg.Stdin = pr
	}
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	ctx, cancel := context.WithCancel(context.Background())
	rw := &runningWorker{socket: cfg.SocketPath, stdin: pw, cancel: cancel, result: make(chan error, 1)}
	go func() { rw.result <- RunWorker(ctx, cfg, load) }()
	t.Cleanup(func() {
		cancel()
		pw.Close()
	})
	return rw
}

// wait returns RunWorker's result, failing the test if it takes over 5s.
func (rw *runningWorker) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-rw.result:
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("RunWorker did not return within 5s")
		return nil
	}
}

// returned reports whether RunWorker has returned within d.
func (rw *runningWorker) returned(d time.Duration) bool {
	select {
	case err := <-rw.result:
		rw.result <- err
		return true
	case <-time.After(d):
		return false
	}
}

func waitHealth(t *testing.T, c *Client, status string) Health {
	t.Helper()
	var h Health
	eventually(t, 5*time.Second, "health "+status, func() bool {
		var err error
		h, err = c.Health(context.Background())
		return err == nil && h.Status == status
	})
	return h
}

func TestRunWorkerLifecycle(t *testing.T) {
	release := make(chan struct{})
	engine := &fakeEngine{closed: make(chan struct{})}
	info := EngineInfo{NEmbd: fakeNEmbd, MaxTokens: 64, MaxBatchTokens: 128, Model: "tiny"}
	rw := startRunWorker(t, WorkerConfig{}, func() (Engine, EngineInfo, error) {
		<-release
		return engine, info, nil
	})
	c := NewClient(rw.socket)
	defer c.Close()

	// While loading, the socket already answers.
	h := waitHealth(t, c, StatusLoading)
	if h.PID != os.Getpid() {
		t.Errorf("loading health pid %d, want %d", h.PID, os.Getpid())
	}
	st, err := os.Stat(rw.socket)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Type() != fs.ModeSocket || st.Mode().Perm() != 0o600 {
		t.Errorf("socket mode = %v, want a socket with 0600", st.Mode())
	}
	_, err = c.Embed(context.Background(), [][]int32{{1}})
	var ue *UnavailableError
	if !errors.As(err, &ue) || ue.RetryAfter != time.Second {
		t.Errorf("embed while loading: %v, want UnavailableError with RetryAfter 1s", err)
	}

	close(release)
	h = waitHealth(t, c, StatusReady)
	if h.Info() != info {
		t.Errorf("ready info = %+v, want %+v", h.Info(), info)
	}
	got, err := c.Embed(context.Background(), [][]int32{{4, 5, 6}})
	if err != nil {
		t.Fatal(err)
	}
	if want := fakeVector([]int32{4, 5, 6}); !equalVec(got[0], want) {
		t.Errorf("vector = %v, want %v", got[0], want)
	}

	// EOF on stdin is the parent saying goodbye.
	rw.stdin.Close()
	if err := rw.wait(t); err != nil {
		t.Fatalf("RunWorker = %v, want nil after stdin EOF", err)
	}
	if _, err := os.Lstat(rw.socket); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("socket still there after exit: %v", err)
	}
	select {
	case <-engine.closed:
	default:
		t.Error("the engine was not closed")
	}
}

func TestRunWorkerStopReasons(t *testing.T) {
	ready := func() (Engine, EngineInfo, error) { return &fakeEngine{}, testInfo, nil }
	t.Run("ctx", func(t *testing.T) {
		rw := startRunWorker(t, WorkerConfig{}, ready)
		waitHealth(t, NewClient(rw.socket), StatusReady)
		rw.cancel()
		if err := rw.wait(t); err != nil {
			t.Fatalf("RunWorker = %v", err)
		}
	})
	t.Run("IgnoreStdin keeps serving after EOF", func(t *testing.T) {
		rw := startRunWorker(t, WorkerConfig{IgnoreStdin: true}, ready)
		c := NewClient(rw.socket)
		waitHealth(t, c, StatusReady)
		rw.stdin.Close()
		if rw.returned(200 * time.Millisecond) {
			t.Fatal("RunWorker returned on stdin EOF with IgnoreStdin")
		}
		if _, err := c.Embed(context.Background(), [][]int32{{1}}); err != nil {
			t.Fatal(err)
		}
		rw.cancel()
		if err := rw.wait(t); err != nil {
			t.Fatalf("RunWorker = %v", err)
		}
	})
	t.Run("stop while loading closes the late engine", func(t *testing.T) {
		release := make(chan struct{})
		engine := &fakeEngine{closed: make(chan struct{})}
		rw := startRunWorker(t, WorkerConfig{}, func() (Engine, EngineInfo, error) {
			<-release
			return engine, testInfo, nil
		})
		waitHealth(t, NewClient(rw.socket), StatusLoading)
		rw.cancel()
		if err := rw.wait(t); err != nil {
			t.Fatalf("RunWorker = %v", err)
		}
		close(release)
		select {
		case <-engine.closed:
		case <-time.After(5 * time.Second):
			t.Fatal("an engine loaded after RunWorker returned was not closed")
		}
	})
}

func TestRunWorkerErrors(t *testing.T) {
	dir := shortTempDir(t)
	existing := filepath.Join(dir, "taken.sock")
	if err := os.WriteFile(existing, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	longPath := filepath.Join(dir, strings.Repeat("x", 120)+".sock")
	tests := []struct {
		name   string
		socket string
		load   func() (Engine, EngineInfo, error)
		want   string
	}{
		{"load fails", "", func() (Engine, EngineInfo, error) {
			return nil, EngineInfo{}, errors.New("model file is truncated")
		}, "loading the model: model file is truncated"},
		{"unusable info", "", func() (Engine, EngineInfo, error) {
			return &fakeEngine{}, EngineInfo{NEmbd: 8, MaxTokens: 0, MaxBatchTokens: 8}, nil
		}, "loading the model: engine reports max_tokens 0; it must be positive"},
		{"socket exists", existing, nil,
			"socket " + existing + " already exists: is another worker serving it? Remove it or give another --socket"},
		{"socket path too long", longPath, nil,
			"socket path " + longPath + " is " + strconv.Itoa(len(longPath)) + " bytes; Unix sockets allow at most " + strconv.Itoa(maxSocketPath) + ": use a shorter socket directory"},
		{"no socket", "", nil, "backends: WorkerConfig.SocketPath is empty; give the worker --socket PATH"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			load := tt.load
			if load == nil {
				load = func() (Engine, EngineInfo, error) { return &fakeEngine{}, testInfo, nil }
			}
			cfg := WorkerConfig{SocketPath: tt.socket, Logger: quietLogger(), IgnoreStdin: true}
			if tt.socket == "" && tt.name != "no socket" {
				cfg.SocketPath = filepath.Join(shortTempDir(t), "w.sock")
			}
			err := RunWorker(context.Background(), cfg, load)
			if err == nil || err.Error() != tt.want {
				t.Fatalf("RunWorker = %v\nwant        %s", err, tt.want)
			}
			if tt.socket == "" && cfg.SocketPath != "" {
				if _, err := os.Lstat(cfg.SocketPath); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("socket left behind: %v", err)
				}
			}
		})
	}
}

func TestRunWorkerDrainsInFlightRequests(t *testing.T) {
	entered := make(chan struct{})
	release := make(chan struct{})
	engine := &fakeEngine{
		closed: make(chan struct{}),
		embedHook: func(ctx context.Context, _ [][]int32) {
			close(entered)
			<-release
		},
	}
	rw := startRunWorker(t, WorkerConfig{ShutdownTimeout: 5 * time.Second}, func() (Engine, EngineInfo, error) {
		return engine, testInfo, nil
	})
	c := NewClient(rw.socket)
	waitHealth(t, c, StatusReady)

	type result struct {
		vecs [][]float32
		err  error
	}
	res := make(chan result, 1)
	go func() {
		v, err := c.Embed(context.Background(), [][]int32{{9, 8}})
		res <- result{v, err}
	}()
	<-entered
	rw.cancel()
	if rw.returned(200 * time.Millisecond) {
		t.Fatal("RunWorker returned with a request in flight")
	}
	close(release)
	r := <-res
	if r.err != nil {
		t.Fatalf("in-flight request failed during a graceful stop: %v", r.err)
	}
	if want := fakeVector([]int32{9, 8}); !equalVec(r.vecs[0], want) {
		t.Errorf("vector = %v, want %v", r.vecs[0], want)
	}
	if err := rw.wait(t); err != nil {
		t.Fatalf("RunWorker = %v", err)
	}
	select {
	case <-engine.closed:
	default:
		t.Error("the engine was not closed after the drain")
	}
}

func TestRunWorkerCancelsRequestsAfterShutdownTimeout(t *testing.T) {
	tests := []struct {
		name            string
		honoursCtx      bool
		wantEngineClose bool
	}{
		// The request sees its context cancelled and leaves; the engine is closed.
		{"engine honours ctx", true, true},
		// The request ignores cancellation; closing the engine under it would be a
		// use-after-free in llama.cpp, so RunWorker leaves it open.
		{"engine ignores ctx", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			entered := make(chan struct{})
			release := make(chan struct{})
			defer close(release)
			engine := &fakeEngine{
				closed: make(chan struct{}),
				embedHook: func(ctx context.Context, _ [][]int32) {
					close(entered)
					if tt.honoursCtx {
						<-ctx.Done()
					} else {
						<-release
					}
				},
			}
			rw := startRunWorker(t, WorkerConfig{ShutdownTimeout: 100 * time.Millisecond}, func() (Engine, EngineInfo, error) {
				return engine, testInfo, nil
			})
			c := NewClient(rw.socket)
			waitHealth(t, c, StatusReady)
			res := make(chan error, 1)
			go func() {
				_, err := c.Embed(context.Background(), [][]int32{{1}})
				res <- err
			}()
			<-entered
			rw.cancel()
			if err := rw.wait(t); err != nil {
				t.Fatalf("RunWorker = %v", err)
			}
			if err := <-res; !errors.Is(err, ErrUnavailable) {
				t.Errorf("cut-off request: %v, want ErrUnavailable", err)
			}
			closed := false
			select {
			case <-engine.closed:
				closed = true
			default:
			}
			if closed != tt.wantEngineClose {
				t.Errorf("engine closed = %v, want %v", closed, tt.wantEngineClose)
			}
		})
	}
}

func TestGate(t *testing.T) {
	var g gate
	if !g.enter() {
		t.Fatal("a new gate refuses entry")
	}
	if g.close(20 * time.Millisecond) {
		t.Fatal("close reported drained with a request inside")
	}
	g.leave()
	// The pending close completes once the request leaves; then entry is refused.
	eventually(t, time.Second, "the gate to close", func() bool {
		if g.enter() {
			g.leave()
			return false
		}
		return true
	})
	var g2 gate
	if !g2.close(time.Second) {
		t.Fatal("an empty gate did not drain")
	}
}

// equalVec compares exactly: the fake's values survive float32 and JSON unchanged.
func equalVec(a, b []float32) bool { return slices.Equal(a, b) }
