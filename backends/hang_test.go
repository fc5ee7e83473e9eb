package backends

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"syscall"
	"testing"
	"time"
)

// startWatched starts a fake warm worker under a HangWatch with the given timeout.
func startWatched(t *testing.T, timeout time.Duration) (*Warm, *HangWatch) {
	t.Helper()
	w, _, _ := newWarm(t)
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	h := &HangWatch{Warm: w, Timeout: timeout, Logger: quietLogger()}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { h.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return w, h
}

// stopProcess sends SIGSTOP: the process stays alive and its sockets stay open,
// but nothing in it answers, as with a worker wedged in native code.
func stopProcess(t *testing.T, pid int) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("waits for the stop through /proc")
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP %d: %v", pid, err)
	}
	// A stopped process is only killed by SIGKILL; make sure nothing stays stopped.
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	// The signal is delivered asynchronously: wait until the process is stopped.
	eventually(t, 5*time.Second, "the process to stop", func() bool { return processState(pid) == "T" })
}

// processState is the state letter of /proc/PID/stat ("T" for stopped), or "" if
// it cannot be read.
func processState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return ""
	}
	return string(b[i+2])
}

// requireServes requires a call through h to return the fake engine's vector.
func requireServes(t *testing.T, h *HangWatch) {
	t.Helper()
	seq := []int32{5, 6, 7}
	vecs, err := h.Embed(context.Background(), [][]int32{seq})
	if err != nil {
		t.Fatalf("Embed after recovery: %v", err)
	}
	if len(vecs) != 1 || !slices.Equal(vecs[0], fakeVector(seq)) {
		t.Fatalf("Embed after recovery = %v, want %v", vecs, fakeVector(seq))
	}
}

func TestHangWatchKillsAStoppedWorker(t *testing.T) {
	const timeout = 300 * time.Millisecond
	w, h := startWatched(t, timeout)
	requireServes(t, h)
	old := w.PID()
	stopProcess(t, old)

	start := time.Now()
	_, err := h.Embed(context.Background(), [][]int32{{1, 2, 3}})
	took := time.Since(start)
	var ue *UnavailableError
	if !errors.As(err, &ue) {
		t.Fatalf("Embed on a stopped worker: %T %v, want *UnavailableError", err, err)
	}
	// Detection takes Timeout plus at most one check interval (Timeout/10); the
	// upper bound leaves room for a loaded machine.
	if took < timeout || took > timeout+5*time.Second {
		t.Errorf("the call failed after %s, want about %s", took, timeout)
	}
	if h.Kills() != 1 {
		t.Errorf("Kills() = %d, want 1", h.Kills())
	}
	eventually(t, 10*time.Second, "a replacement worker", func() bool { return w.Ready() && w.PID() != old })
	eventually(t, 5*time.Second, "the stopped worker to be reaped", func() bool { return processGone(old) })
	requireServes(t, h)
	if h.Kills() != 1 || w.Restarts() != 1 {
		t.Errorf("after recovery Kills %d Restarts %d, want 1 and 1", h.Kills(), w.Restarts())
	}
}

// An abandoned call (its caller went away) leaves a probe in its place, so a worker
// that hangs after its last caller left is still found.
func TestHangWatchProbesAfterAnAbandonedCall(t *testing.T) {
	const timeout = 300 * time.Millisecond
	w, h := startWatched(t, timeout)
	old := w.PID()
	stopProcess(t, old)

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := h.Embed(ctx, [][]int32{{1}}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Embed with a 50ms deadline on a stopped worker: %v, want DeadlineExceeded", err)
	}
	eventually(t, 10*time.Second, "the hung worker to be killed and replaced", func() bool { return w.Ready() && w.PID() != old })
	if h.Kills() != 1 {
		t.Errorf("Kills() = %d, want 1", h.Kills())
	}
	requireServes(t, h)
}

// A worker that answers, even slowly, is left alone: a stall shorter than Timeout,
// and an abandoned call whose probe is answered.
func TestHangWatchSparesAnAnsweringWorker(t *testing.T) {
	const timeout = 1500 * time.Millisecond
	w, h := startWatched(t, timeout)
	pid := w.PID()

	t.Run("slow answer", func(t *testing.T) {
		stopProcess(t, pid)
		resume := time.AfterFunc(timeout/3, func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
		defer resume.Stop()
		requireServes(t, h)
	})
	t.Run("abandoned call, answered probe", func(t *testing.T) {
		// tokHang wedges this one call inside the fake engine; the worker goes on
		// answering others, the probe among them.
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		if _, err := h.Embed(ctx, [][]int32{{tokHang}}); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Embed(tokHang) with a 50ms deadline: %v, want DeadlineExceeded", err)
		}
		// Three timeouts: a kill would have happened by then.
		time.Sleep(3 * timeout)
	})
	if h.Kills() != 0 || w.PID() != pid {
		t.Fatalf("Kills %d, PID %d → %d: an answering worker was killed", h.Kills(), pid, w.PID())
	}
	requireServes(t, h)
}
