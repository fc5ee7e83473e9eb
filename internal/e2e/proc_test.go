package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestProcessTree reads a shell and its stopped child from /proc as a ready timeout
// reports them: each with its command line and state, the child under its parent,
// and the child's one thread counted as stopped.
func TestProcessTree(t *testing.T) {
	if _, err := os.Stat("/proc/self/task"); err != nil {
		t.Skip("no /proc here")
	}
	cmd := exec.Command("sh", "-c", "sleep 30 & wait")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	sh := cmd.Process.Pid
	var child int
	for deadline := time.Now().Add(10 * time.Second); child == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the shell (pid %d) started no child in 10 s", sh)
		}
		c, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", sh, sh))
		fmt.Sscan(string(c), &child)
	}
	t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL) })
	if err := syscall.Kill(child, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// The stopped child's SIGCHLD wakes the shell for a moment (state R), after
	// which it sleeps in wait again: read the tree until both states are in it.
	want := []string{
		fmt.Sprintf("pid %d, state S: sh -c sleep 30 & wait\n", sh),
		fmt.Sprintf("\n  pid %d, state T: sleep 30\n", child),
		"\n    threads T in ",
	}
	var out string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		out = ProcessTree(sh)
		if strings.Contains(out, want[0]) && strings.Contains(out, want[1]) || time.Now().After(deadline) {
			break
		}
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("ProcessTree(%d) lacks %q:\n%s", sh, w, out)
		}
	}
	if got := ProcessTree(1 << 30); !strings.Contains(got, fmt.Sprintf("pid %d: ", 1<<30)) {
		t.Errorf("ProcessTree of a missing pid = %q; want it named with the error", got)
	}
}
