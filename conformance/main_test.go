package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/embed-stack/embed-stack/internal/e2e"
	"github.com/embed-stack/embed-stack/internal/testenv"
	"github.com/embed-stack/embed-stack/internal/testrepo"
)

const (
	// readyTimeout bounds the wait for GET /ready after `serve` starts: the tiny model
	// loads in well under a second, so a minute only ever expires on a real hang.
	readyTimeout = 60 * time.Second
	// stopTimeout bounds the graceful shutdown after SIGTERM.
	stopTimeout = 15 * time.Second
	// orphanTimeout is how long a worker may outlive its server: it exits on stdin EOF,
	// which it sees as soon as the server's end of the pipe closes.
	orphanTimeout = 10 * time.Second
)

var (
	// repoRoot, binPath and modelPath are resolved once by TestMain.
	repoRoot  string
	binPath   string
	modelPath string
	// skipReason is non-empty when the binary or model is missing and the suite skips.
	skipReason string

	// registry holds every server started by the tests, keyed by their extra flags,
	// so that groups needing the same configuration share one process.
	registry = struct {
		sync.Mutex
		byKey map[string]*server
		order []*server
	}{byKey: map[string]*server{}}
)

// TestMain runs the suite with the weights the binary converts at load kept out of
// the user's cache (e2e.Run).
func TestMain(m *testing.M) {
	os.Exit(e2e.Run(func() int { return runMain(m) }))
}

func runMain(m *testing.M) int {
	root, err := testrepo.Root()
	if err != nil {
		fmt.Fprintln(os.Stderr, "conformance:", err)
		return 1
	}
	repoRoot = root
	binPath, modelPath, err = e2e.Binary()
	if err != nil {
		skipReason = err.Error()
		if testenv.RequireE2E() {
			fmt.Fprintln(os.Stderr, "conformance: EMBED_STACK_REQUIRE_E2E=1 and "+skipReason)
			return 1
		}
	}

	code := m.Run()
	if err := stopAll(); err != nil {
		fmt.Fprintln(os.Stderr, "conformance: FAIL:", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// server is one running `embed-stack serve` process (internal/e2e), with the extra
// flags it was started with. It is not in a process group of its own: the suite
// signals the server alone and checks that the server ends its workers.
type server struct {
	*e2e.Server
	flags []string
}

// serverWith returns the shared server started with the given extra flags (nil for the
// default configuration), starting it on first use. It skips the test when the binary or
// model is missing and fails it when the server does not become ready.
func serverWith(t *testing.T, flags ...string) *server {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
	key := strings.Join(flags, "\x00")
	registry.Lock()
	defer registry.Unlock()
	if s, ok := registry.byKey[key]; ok {
		if s.Exited() {
			t.Fatalf("server %v exited earlier: %v\nstderr:\n%s", flags, s.Err(), s.Out)
		}
		return s
	}
	s, err := startServer(flags)
	if err != nil {
		t.Fatalf("start embed-stack serve %v: %v", flags, err)
	}
	registry.byKey[key] = s
	registry.order = append(registry.order, s)
	return s
}

// defaultServer is the server with no extra flags.
func defaultServer(t *testing.T) *server {
	t.Helper()
	return serverWith(t)
}

// startServer starts `embed-stack serve` with the test model and flags (the test
// model unless flags name their own --model) and waits for /ready.
func startServer(flags []string) (*server, error) {
	return startServerSpec(e2e.ServeSpec{Bin: binPath, Model: modelPath, Flags: flags})
}

func startServerSpec(spec e2e.ServeSpec) (*server, error) {
	s, err := e2e.StartServe(spec, readyTimeout)
	if err != nil {
		return nil, err
	}
	return &server{Server: s, flags: spec.Flags}, nil
}

// stopAll stops every server the tests started and reports every shutdown defect.
func stopAll() error {
	registry.Lock()
	defer registry.Unlock()
	var errs []error
	for _, s := range registry.order {
		if err := s.stop(); err != nil {
			errs = append(errs, fmt.Errorf("server %v: %w\nstderr:\n%s", s.flags, err, s.Out))
		}
	}
	return errors.Join(errs...)
}

// stop sends SIGTERM, requires a clean exit within stopTimeout, and requires every
// worker child seen just before to be gone soon after: once the server has exited its
// children are re-parented, so they are recorded (pid and start time) while it still runs.
func (s *server) stop() error {
	if s.Exited() {
		return fmt.Errorf("exited before the end of the suite: %v", s.Err())
	}
	var workers []procInfo
	var scanErr error
	if runtime.GOOS == "linux" {
		workers, scanErr = childWorkers(s.Cmd.Process.Pid)
	}
	if err := s.Signal(syscall.SIGTERM); err != nil {
		return fmt.Errorf("SIGTERM: %w", err)
	}
	select {
	case <-s.Done():
	case <-time.After(stopTimeout):
		s.Kill()
		return fmt.Errorf("still running %s after SIGTERM; killed", stopTimeout)
	}
	var errs []error
	switch err := s.Err(); {
	case errors.Is(err, exec.ErrWaitDelay):
		errs = append(errs, fmt.Errorf("stdout/stderr still held open after the server exited: a child outlived it"))
	case err != nil:
		errs = append(errs, fmt.Errorf("unclean exit after SIGTERM: %w", err))
	}
	if runtime.GOOS != "linux" {
		return errors.Join(errs...)
	}
	if scanErr != nil {
		return errors.Join(append(errs, scanErr)...)
	}
	if len(workers) == 0 {
		errs = append(errs, errors.New("no `embed-stack worker` child while ready: the warm worker is missing"))
	}
	for _, w := range workers {
		if err := waitGone(w, orphanTimeout); err != nil {
			_ = syscall.Kill(w.pid, syscall.SIGKILL) // do not leak it past the suite
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// procInfo identifies a process across pid reuse: a pid with another start time is
// another process.
type procInfo struct {
	pid       int
	startTime string
	cmdline   string
}

// readStat returns the parent pid and start time from /proc/PID/stat. The command name
// (field 2) may hold spaces and parentheses, so fields are counted after the last ')'.
func readStat(pid int) (ppid int, startTime string, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, "", err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, "", fmt.Errorf("/proc/%d/stat: no ')'", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// After ')': state(3) ppid(4) ... starttime(22) → indexes 0, 1, ..., 19.
	if len(f) < 20 {
		return 0, "", fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	ppid, err = strconv.Atoi(f[1])
	if err != nil {
		return 0, "", fmt.Errorf("/proc/%d/stat ppid: %w", pid, err)
	}
	return ppid, f[19], nil
}

// childWorkers lists the processes whose parent is pid and whose command line is an
// `embed-stack worker`.
func childWorkers(pid int) ([]procInfo, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("scan /proc: %w", err)
	}
	var out []procInfo
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		ppid, start, err := readStat(child)
		if err != nil || ppid != pid {
			continue // gone meanwhile, or not ours
		}
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", child))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
		if len(args) >= 2 && args[1] == "worker" {
			out = append(out, procInfo{pid: child, startTime: start, cmdline: strings.Join(args, " ")})
		}
	}
	return out, nil
}

// waitGone waits until the process p no longer exists (or its pid was reused).
func waitGone(p procInfo, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		_, start, err := readStat(p.pid)
		if err != nil || start != p.startTime {
			return nil
		}
		if state, _ := procState(p.pid); state == "Z" {
			return nil // exited; only its new parent has yet to reap it
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("worker pid %d (%s) still running %s after its server exited", p.pid, p.cmdline, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func procState(pid int) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", err
	}
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) == 0 {
		return "", errors.New("empty stat")
	}
	return f[0], nil
}

// ctx returns a context bounded well below the go test timeout, so a hung request fails
// the one test rather than the whole binary.
func ctx(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}
