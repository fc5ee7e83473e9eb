package backends

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Issue 15: what an unlucky host does to the workers' sockets and processes.

// TestWarmSurvivesItsSocketDirVanishing: a tmp cleaner removes the private socket
// directory. A worker that then dies is restarted in a new directory, and one
// that lives on, unreachable, is killed and replaced; either way the next call is
// served.
func TestWarmSurvivesItsSocketDirVanishing(t *testing.T) {
	for _, kill := range []bool{true, false} {
		t.Run(fmt.Sprintf("worker killed %v", kill), func(t *testing.T) {
			w, socketParent, _ := newWarm(t)
			if err := w.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			first, dir := w.PID(), w.dir
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
			// Idle connections to the old socket outlive its file; new ones fail.
			w.cur.client.Close()
			if kill {
				if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
				eventually(t, 5*time.Second, "the death to be noticed", func() bool { return w.PID() != first })
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			got, err := w.Embed(ctx, [][]int32{{5, 6}})
			if err != nil {
				t.Fatalf("Embed after the socket directory vanished: %v", err)
			}
			if !equalVec(got[0], fakeVector([]int32{5, 6})) {
				t.Errorf("vector %v", got[0])
			}
			if w.PID() == first || !processGone(first) {
				t.Errorf("worker %d was not replaced", first)
			}
			if w.dir == dir || filepath.Dir(w.dir) != socketParent {
				t.Errorf("socket directory %s, want a new one under %s", w.dir, socketParent)
			}
			if !w.Healthy() {
				t.Error("not healthy after recovering")
			}
		})
	}
}

// TestWarmUnhealthyAfterRestartsFail: once UnhealthyAfter restarts in a row fail,
// Healthy reports false (GET /health then fails, so that an orchestrator replaces
// the process); a call waiting for a restart that fails gets ErrUnavailable, not a
// hang; a restart that succeeds makes it healthy again.
func TestWarmUnhealthyAfterRestartsFail(t *testing.T) {
	broken := filepath.Join(shortTempDir(t), "broken")
	w, _, _ := newWarm(t, "FAKE_CRASH_AT_START=cannot load", "FAKE_CRASH_AT_START_IF="+broken)
	w.UnhealthyAfter = 3
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(broken, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	first := w.PID()
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the death to be noticed", func() bool { return w.PID() != first })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := w.Embed(ctx, [][]int32{{1}})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "restarting the warm worker failed") {
		t.Fatalf("Embed while restarts fail = %v, want ErrUnavailable naming the failed restart", err)
	}
	eventually(t, 10*time.Second, "Healthy to turn false", func() bool { return !w.Healthy() })
	if err := os.Remove(broken); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "a restart to succeed", w.Ready)
	if !w.Healthy() {
		t.Error("still unhealthy after a successful restart")
	}
}

// TestStaleSocketDirsRemoved: Start removes the socket directories of processes
// that no longer run (a SIGKILLed server or embed), and leaves those of live
// processes and directories it cannot attribute.
func TestStaleSocketDirsRemoved(t *testing.T) {
	w, socketParent, _ := newWarm(t)
	dead := deadPID(t)
	keep := []string{
		fmt.Sprintf("embed-stack-%d-123", os.Getppid()), // alive
		"embed-stack-4567890",                           // older naming: no pid
		"other-1-2",
	}
	gone := fmt.Sprintf("embed-stack-%d-456", dead)
	dirs := append(keep, gone)
	if z := zombiePID(t); z != 0 { // SIGKILLed, not yet reaped: dead all the same
		zdir := fmt.Sprintf("embed-stack-%d-789", z)
		dirs = append(dirs, zdir)
		t.Cleanup(func() {
			if _, err := os.Stat(filepath.Join(socketParent, zdir)); err == nil {
				t.Errorf("the zombie's directory %s is still there", zdir)
			}
		})
	}
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(socketParent, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(socketParent, gone, "warm-1.sock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(socketParent, gone)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the dead process's directory %s is still there (%v)", gone, err)
	}
	for _, d := range keep {
		if _, err := os.Stat(filepath.Join(socketParent, d)); err != nil {
			t.Errorf("%s was removed: %v", d, err)
		}
	}
	if want := fmt.Sprintf("embed-stack-%d-", os.Getpid()); !strings.HasPrefix(filepath.Base(w.dir), want) {
		t.Errorf("socket directory %s does not start with %s", w.dir, want)
	}
}

// zombiePID returns the pid of a child killed and not yet waited for (0 where
// zombies cannot be told), and reaps it when the test ends.
func zombiePID(t *testing.T) int {
	t.Helper()
	if !fileExists("/proc/self/stat") {
		return 0
	}
	p, err := os.StartProcess("/bin/sleep", []string{"sleep", "100"}, &os.ProcAttr{})
	if err != nil {
		return 0
	}
	t.Cleanup(func() { p.Wait() })
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the child to be a zombie", func() bool { return zombie(p.Pid) })
	return p.Pid
}

// deadPID returns the pid of a process that has exited.
func deadPID(t *testing.T) int {
	t.Helper()
	p, err := os.StartProcess("/bin/true", []string{"true"}, &os.ProcAttr{})
	if err != nil {
		t.Skip("no /bin/true:", err)
	}
	if _, err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	return p.Pid
}

// TestEphemeralOutOfInodes: a socket directory that cannot be created for lack of
// inodes or space is ErrUnavailable (503, retry later), not an internal error.
func TestEphemeralOutOfInodes(t *testing.T) {
	e, _, _ := newEphemeral(t)
	mkdirTemp = func(string, string) (string, error) {
		return "", &fs.PathError{Op: "mkdirtemp", Path: "/tmp/embed-stack-1-x", Err: syscall.ENOSPC}
	}
	t.Cleanup(func() { mkdirTemp = os.MkdirTemp })
	_, err := e.Embed(context.Background(), seqOf(10))
	var ue *UnavailableError
	if !errors.As(err, &ue) || ue.RetryAfter <= 0 || !strings.Contains(err.Error(), "no space left on device") {
		t.Fatalf("Embed = %v, want an UnavailableError with a retry hint", err)
	}
}

// TestEphemeralHangWatch: an ephemeral worker that stops answering (SIGSTOP) is
// killed after HangTimeout and its call fails with ErrUnavailable; one whose engine
// computes for long (a wedged decode that ignores its context, while the process
// answers) is left alone.
func TestEphemeralHangWatch(t *testing.T) {
	e, _, records := newEphemeral(t)
	e.HangTimeout = time.Second
	type result struct {
		err  error
		took time.Duration
	}
	done := make(chan result, 1)
	go func() {
		start := time.Now()
		_, err := e.Embed(context.Background(), []int32{1, tokHang})
		done <- result{err, time.Since(start)}
	}()
	var pid int
	eventually(t, 10*time.Second, "the worker to start", func() bool {
		for p := range recordedArgs(t, records) {
			pid = p
		}
		return pid != 0
	})
	// Busy but answering: not killed.
	select {
	case r := <-done:
		t.Fatalf("the call on a busy, answering worker returned after %s: %v", r.took, r.err)
	case <-time.After(2500 * time.Millisecond):
	}
	stopProcess(t, pid)
	select {
	case r := <-done:
		if !errors.Is(r.err, ErrUnavailable) || !strings.Contains(r.err.Error(), "answered no health probe for 1s") {
			t.Fatalf("Embed = %v, want ErrUnavailable naming the hang", r.err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the call on a stopped worker did not return")
	}
	eventually(t, 5*time.Second, "the hung worker to be gone", func() bool { return processGone(pid) })
}

// TestRemoveOwnSocketDirs: a process about to exit removes the socket directories
// it made, with their contents, and no other process's.
func TestRemoveOwnSocketDirs(t *testing.T) {
	parent := t.TempDir()
	own := []string{fmt.Sprintf("embed-stack-%d-1", os.Getpid()), fmt.Sprintf("embed-stack-%d-2", os.Getpid())}
	keep := []string{fmt.Sprintf("embed-stack-%d-1", os.Getppid()), fmt.Sprintf("embed-stack-%d1-1", os.Getpid()), "other"}
	for _, d := range append(own, keep...) {
		if err := os.MkdirAll(filepath.Join(parent, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(parent, own[0], "warm-1.sock"), nil, 0o600)
	RemoveOwnSocketDirs(parent)
	for _, d := range own {
		if _, err := os.Stat(filepath.Join(parent, d)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s is still there (%v)", d, err)
		}
	}
	for _, d := range keep {
		if _, err := os.Stat(filepath.Join(parent, d)); err != nil {
			t.Errorf("%s was removed: %v", d, err)
		}
	}
}
