package backends

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// startFake starts one fake worker directly and waits until it is ready.
func startFake(t *testing.T, env ...string) (*proc, Health) {
	t.Helper()
	socket := filepath.Join(shortTempDir(t), "w.sock")
	p, err := startProc(context.Background(), fakeSpec(t, env...), socket, nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.kill)
	h, err := p.waitReady(context.Background(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return p, h
}

func waitExit(t *testing.T, p *proc) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		t.Fatalf("worker %d did not exit within 5s", p.pid)
	}
}

func TestWorkerProcessStops(t *testing.T) {
	tests := []struct {
		name string
		stop func(p *proc) error
	}{
		// The parent's end of the pipe closes when the parent dies, even by SIGKILL.
		{"stdin EOF", func(p *proc) error { return p.stdin.Close() }},
		{"SIGTERM", func(p *proc) error { return syscall.Kill(p.pid, syscall.SIGTERM) }},
		{"SIGINT", func(p *proc) error { return syscall.Kill(p.pid, syscall.SIGINT) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, h := startFake(t)
			if h.PID != p.pid {
				t.Errorf("health pid %d, started pid %d", h.PID, p.pid)
			}
			st, err := os.Stat(p.socket)
			if err != nil || st.Mode().Type() != fs.ModeSocket || st.Mode().Perm() != 0o600 {
				t.Fatalf("socket: %v, %v; want a socket with mode 0600", st.Mode(), err)
			}
			if err := tt.stop(p); err != nil {
				t.Fatal(err)
			}
			waitExit(t, p)
			if p.waitErr != nil {
				t.Errorf("worker exited with %v, want status 0; output:\n%s", p.waitErr, p.tail.String())
			}
			if _, err := os.Lstat(p.socket); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("the worker left its socket behind: %v", err)
			}
			if !processGone(p.pid) {
				t.Errorf("process %d still exists", p.pid)
			}
		})
	}
}

func TestWaitReadyFailures(t *testing.T) {
	tests := []struct {
		name  string
		env   []string
		stall time.Duration
		check func(t *testing.T, err error, took time.Duration)
	}{
		{"exit before ready carries the output", []string{"FAKE_CRASH_AT_START=cannot open /models/x.gguf: permission denied"}, 10 * time.Second,
			func(t *testing.T, err error, _ time.Duration) {
				var exit *ExitError
				if !errors.As(err, &exit) {
					t.Fatalf("err = %v, want *ExitError", err)
				}
				if exit.Output != "cannot open /models/x.gguf: permission denied\n" {
					t.Errorf("output = %q", exit.Output)
				}
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.ExitCode() != 3 {
					t.Errorf("wait error = %v, want exit status 3", exit.Err)
				}
				if !strings.HasSuffix(err.Error(), "exited: exit status 3; its output ends with:\ncannot open /models/x.gguf: permission denied") {
					t.Errorf("message = %q", err)
				}
			}},
		{"load error reaches the output", []string{"FAKE_LOAD_FAIL=unknown model architecture: 'bert2'"}, 10 * time.Second,
			func(t *testing.T, err error, _ time.Duration) {
				var exit *ExitError
				if !errors.As(err, &exit) || !strings.Contains(exit.Output, "worker: loading the model: unknown model architecture: 'bert2'\n") {
					t.Fatalf("err = %v, want the load error in the output", err)
				}
			}},
		{"stall", []string{"FAKE_NEVER_READY=1"}, 300 * time.Millisecond,
			func(t *testing.T, err error, took time.Duration) {
				if !errors.Is(err, ErrReadyTimeout) {
					t.Fatalf("err = %v, want ErrReadyTimeout", err)
				}
				if !strings.Contains(err.Error(), "made no progress for 300ms (raise ReadyTimeout") ||
					!strings.Contains(err.Error(), "worker listening; loading the model") {
					t.Errorf("message lacks the timeout or the output: %v", err)
				}
				if took > 5*time.Second {
					t.Errorf("stall detected after %s", took)
				}
			}},
		// Control for the next test: the same slow load without output stalls.
		{"silent slow load stalls", []string{"FAKE_LOAD_DELAY=1500ms"}, 300 * time.Millisecond,
			func(t *testing.T, err error, _ time.Duration) {
				if !errors.Is(err, ErrReadyTimeout) {
					t.Fatalf("err = %v, want ErrReadyTimeout", err)
				}
			}},
		{"progress resets the stall timer", []string{"FAKE_LOAD_DELAY=1500ms", "FAKE_LOAD_PROGRESS=1"}, 300 * time.Millisecond,
			func(t *testing.T, err error, took time.Duration) {
				if err != nil {
					t.Fatalf("a slow load that logs progress failed: %v", err)
				}
				if took < 1500*time.Millisecond {
					t.Errorf("ready after %s, before the load's 1.5s", took)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			socket := filepath.Join(shortTempDir(t), "w.sock")
			p, err := startProc(context.Background(), fakeSpec(t, tt.env...), socket, nil, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer p.kill()
			start := time.Now()
			_, err = p.waitReady(context.Background(), tt.stall)
			tt.check(t, err, time.Since(start))
		})
	}
}

func TestWaitReadyContext(t *testing.T) {
	socket := filepath.Join(shortTempDir(t), "w.sock")
	p, err := startProc(context.Background(), fakeSpec(t, "FAKE_NEVER_READY=1"), socket, nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer p.kill()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := p.waitReady(ctx, time.Minute); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want DeadlineExceeded", err)
	}
}

func TestStartProcSpec(t *testing.T) {
	t.Run("env is added and output copied", func(t *testing.T) {
		var out syncBuffer
		spec := fakeSpec(t, "FAKE_CRASH_AT_START=marker from the worker's env")
		spec.Output = &out
		p, err := startProc(context.Background(), spec, filepath.Join(shortTempDir(t), "w.sock"), nil, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		waitExit(t, p)
		if got := out.String(); got != "marker from the worker's env\n" {
			t.Errorf("Output got %q", got)
		}
	})
	t.Run("missing executable", func(t *testing.T) {
		_, err := startProc(context.Background(), WorkerSpec{Path: "/nonexistent/embed-stack"}, filepath.Join(shortTempDir(t), "w.sock"), nil, time.Second)
		if err == nil || !strings.HasPrefix(err.Error(), "starting the worker /nonexistent/embed-stack: ") || !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("empty path", func(t *testing.T) {
		_, err := startProc(context.Background(), WorkerSpec{}, "/tmp/x.sock", nil, time.Second)
		if err == nil || !strings.Contains(err.Error(), "WorkerSpec.Path is empty") {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestStopKillsAWedgedWorker(t *testing.T) {
	tests := []struct {
		name        string
		stopTimeout time.Duration
		ctxTimeout  time.Duration
		wantErr     bool
	}{
		// WaitDelay turns SIGTERM into SIGKILL after the stop timeout.
		{"after StopTimeout", 300 * time.Millisecond, time.Minute, false},
		// A ctx that ends first kills at once.
		{"when ctx ends", time.Minute, 300 * time.Millisecond, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			socket := filepath.Join(shortTempDir(t), "w.sock")
			p, err := startProc(context.Background(), fakeSpec(t, "FAKE_WEDGE_ON_EXIT=1"), socket, nil, tt.stopTimeout)
			if err != nil {
				t.Fatal(err)
			}
			defer p.kill()
			if _, err := p.waitReady(context.Background(), 10*time.Second); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), tt.ctxTimeout)
			defer cancel()
			start := time.Now()
			err = p.stop(ctx)
			took := time.Since(start)
			if (err != nil) != tt.wantErr {
				t.Errorf("stop = %v, want error %v", err, tt.wantErr)
			}
			if took < 250*time.Millisecond || took > 5*time.Second {
				t.Errorf("stop took %s, want about 300ms", took)
			}
			ws := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
			if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
				t.Errorf("worker ended with %v, want SIGKILL", p.cmd.ProcessState)
			}
			if !processGone(p.pid) {
				t.Errorf("process %d still exists", p.pid)
			}
		})
	}
}

func TestNextBackoff(t *testing.T) {
	d := 250 * time.Millisecond
	var got []time.Duration
	for range 9 {
		got = append(got, d)
		d = nextBackoff(d, 30*time.Second)
	}
	want := []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second,
		4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("backoff sequence %v, want %v", got, want)
		}
	}
}

func TestEphemeralContextSize(t *testing.T) {
	for n, want := range map[int]int{1: 64, 63: 64, 64: 64, 65: 128, 128: 128, 8192: 8192, 8193: 8256, 32768: 32768} {
		if got := EphemeralContextSize(n); got != want {
			t.Errorf("EphemeralContextSize(%d) = %d, want %d", n, got, want)
		}
	}
}

func TestErrorTypes(t *testing.T) {
	cause := errors.New("worker at /s: EOF")
	ue := error(&UnavailableError{RetryAfter: 2 * time.Second, Cause: cause})
	wrapped := errors.Join(errors.New("routing"), ue)
	if !errors.Is(wrapped, ErrUnavailable) || !errors.Is(wrapped, cause) {
		t.Error("UnavailableError does not match ErrUnavailable and its cause through wrapping")
	}
	if got, want := ue.Error(), "worker unavailable (retry after 2s): worker at /s: EOF"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if got, want := (&WorkerInputError{Index: -1, Message: "x"}).Error(), "worker refused the request: x"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if got, want := (&ExitError{PID: 7}).Error(), "worker (pid 7) exited with status 0"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	idx, reason, ok := asInputError(errors.Join(errors.New("ctx"), &InputError{Index: 4, Reason: "empty"}))
	if !ok || idx != 4 || reason != "empty" {
		t.Errorf("asInputError = %d, %q, %v", idx, reason, ok)
	}
	if _, _, ok := asInputError(errors.New("plain")); ok {
		t.Error("a plain error is not an input error")
	}
}

// syncBuffer is a bytes.Buffer safe for the concurrent writes of exec's copier and
// the test's reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
