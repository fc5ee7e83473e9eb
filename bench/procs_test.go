package bench

import (
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSnapshotTree starts two generations of children and finds them all under
// this process, each with its parent, command line and memory.
func TestSnapshotTree(t *testing.T) {
	if runtime.GOOS != "linux" {
		if _, err := Snapshot(os.Getpid()); err != ErrNoProc {
			t.Fatalf("Snapshot on %s: err %v, want ErrNoProc", runtime.GOOS, err)
		}
		t.Skip("process trees are read from /proc")
	}
	// sh starts a sleep of its own and waits for it: child and grandchild.
	// Its own process group, so that cleanup ends both.
	cmd := exec.Command("sh", "-c", "sleep 30 & wait")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
	})
	var snap TreeSnapshot
	deadline := time.Now().Add(10 * time.Second)
	for {
		var err error
		snap, err = Snapshot(cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		// The child shows sh's command line until it has exec'd sleep.
		if len(snap.Procs) == 2 && snap.Procs[1].Cmd == "sleep 30" || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(snap.Procs) != 2 {
		t.Fatalf("tree of sh: %+v, want sh and its sleep", snap.Procs)
	}
	sh, sleep := snap.Procs[0], snap.Procs[1]
	if sh.PID != cmd.Process.Pid || sh.PPID != os.Getpid() || !strings.HasPrefix(sh.Cmd, "sh -c") {
		t.Errorf("root %+v, want pid %d, ppid %d, cmd sh -c ...", sh, cmd.Process.Pid, os.Getpid())
	}
	if sleep.PPID != sh.PID || sleep.Cmd != "sleep 30" {
		t.Errorf("child %+v, want ppid %d, cmd 'sleep 30'", sleep, sh.PID)
	}
	var sum int64
	for _, p := range snap.Procs {
		if p.RSS <= 0 || p.HWM < p.RSS || p.Anon <= 0 || p.Anon > p.RSS {
			t.Errorf("%+v: want 0 < RSS <= HWM and 0 < Anon <= RSS", p)
		}
		sum += p.RSS
	}
	if snap.RSS != sum {
		t.Errorf("tree RSS %d, want the sum %d", snap.RSS, sum)
	}
	// PSS divides shared pages (sh and sleep share libc) among the processes that
	// map them, so it is positive and at most RSS for each.
	snap.ReadPSS()
	var pss int64
	for _, p := range snap.Procs {
		if p.PSS <= 0 || p.PSS > p.RSS {
			t.Errorf("%+v: want 0 < PSS <= RSS", p)
		}
		pss += p.PSS
	}
	if snap.PSS != pss {
		t.Errorf("tree PSS %d, want the sum %d", snap.PSS, pss)
	}

	// The sampler sees the same tree, and its peak is at least one sample's sum.
	tr := WatchTree(cmd.Process.Pid, 5*time.Millisecond)
	time.Sleep(50 * time.Millisecond)
	st, err := tr.Stop()
	if err != nil {
		t.Fatal(err)
	}
	if st.Samples < 2 || len(st.Procs) != 2 || st.Peak.RSS <= 0 || len(st.Peak.Procs) != 2 {
		t.Errorf("sampler: %d samples, %d processes, peak %d bytes over %d processes", st.Samples, len(st.Procs), st.Peak.RSS, len(st.Peak.Procs))
	}
}

func TestSnapshotMissing(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("process trees are read from /proc")
	}
	// Pid 0 is never a process's.
	if _, err := Snapshot(0); err == nil {
		t.Error("Snapshot(0): no error")
	}
	if _, err := WatchTree(0, time.Millisecond).Stop(); err == nil {
		t.Error("a sampler of no process: no error")
	}
}

// TestCPU burns CPU in a child and sees it in the tree's CPU time, and in the
// parent's once the child has been waited for.
func TestCPU(t *testing.T) {
	if runtime.GOOS != "linux" {
		if _, err := TreeCPU(os.Getpid()); err != ErrNoProc {
			t.Fatalf("TreeCPU on %s: err %v, want ErrNoProc", runtime.GOOS, err)
		}
		t.Skip("CPU times are read from /proc")
	}
	// sh runs a busy loop of about 0.3 CPU-seconds in a child, waits for it, then
	// sleeps: afterwards the time is in sh's cutime.
	cmd := exec.Command("sh", "-c", `sh -c 'i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done' ; sleep 30`)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		snap, err := Snapshot(cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		if len(snap.Procs) == 2 && strings.HasPrefix(snap.Procs[1].Cmd, "sleep") {
			break // the busy child is done and waited for
		}
		if time.Now().After(deadline) {
			t.Fatalf("the busy loop did not finish: %+v", snap.Procs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	tree, err := TreeCPU(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	own, err := ProcCPU(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	// The busy loop's time moved into sh's cutime, which both count.
	if tree < 50*time.Millisecond || own < 50*time.Millisecond || own > tree {
		t.Errorf("tree CPU %s, sh's own (with waited-for children) %s; want both >= 50ms, own <= tree", tree, own)
	}
	if _, err := ProcCPU(0); err == nil {
		t.Error("ProcCPU(0): no error")
	}
}
