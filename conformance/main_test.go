package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/embed-stack/embed-stack/internal/tail"
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
	// pipeDelay is how long Wait lets a child of the server hold its output pipes.
	pipeDelay = 5 * time.Second
	// stderrTail is how much of a server's stderr a failure message carries.
	stderrTail = 16 << 10
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

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	root, err := testrepo.Root()
	if err != nil {
		fmt.Fprintln(os.Stderr, "conformance:", err)
		return 1
	}
	repoRoot = root
	binPath = envOr("EMBED_STACK_BIN", filepath.Join(root, "bin", "embed-stack"))
	modelPath = envOr("EMBED_STACK_MODEL", filepath.Join(root, "models", "tiny.gguf"))

	var missing []string
	for _, p := range []string{binPath, modelPath} {
		if _, err := os.Stat(p); err != nil {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		skipReason = fmt.Sprintf("missing %s: run `make build models` first", strings.Join(missing, ", "))
		if os.Getenv("EMBED_STACK_REQUIRE_E2E") == "1" {
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

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// server is one running `embed-stack serve` process.
type server struct {
	flags   []string
	baseURL string // http://127.0.0.1:PORT, no trailing slash
	cmd     *exec.Cmd
	stderr  *tail.Buffer
	// done is closed by the reaper goroutine once cmd.Wait returns; waitErr is set before.
	done    chan struct{}
	waitErr error
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
		select {
		case <-s.done:
			t.Fatalf("server %v exited earlier: %v\nstderr:\n%s", flags, s.waitErr, s.stderr)
		default:
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

// startServer starts a server on a free loopback port and waits for /ready. A port taken
// between our probe and the server's bind shows up as an early exit, so it retries.
func startServer(flags []string) (*server, error) {
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		s, err := startOnce(flags)
		if err == nil {
			return s, nil
		}
		lastErr = err
		if s == nil || !strings.Contains(s.stderr.String(), "address already in use") {
			break
		}
	}
	return nil, lastErr
}

func startOnce(flags []string) (*server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	s, err := launch(flags, port)
	if err != nil {
		return nil, err
	}
	if err := s.waitReady(readyTimeout); err != nil {
		_ = s.cmd.Process.Kill()
		<-s.done
		return s, fmt.Errorf("%w\nstderr:\n%s", err, s.stderr)
	}
	return s, nil
}

// serveArgs is serve's command line: the test model, unless flags name their own
// (--model repeated serves several models, issue 17, where the last used to win),
// then flags.
func serveArgs(addr string, flags []string) []string {
	args := []string{"serve", "--addr", addr}
	if !slices.ContainsFunc(flags, func(f string) bool { return f == "--model" || strings.HasPrefix(f, "--model=") }) {
		args = append(args, "--model", modelPath)
	}
	return append(args, flags...)
}

// launch starts `embed-stack serve` on port and a reaper goroutine; it does not wait.
func launch(flags []string, port int) (*server, error) {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	cmd := exec.Command(binPath, serveArgs(addr, flags)...)
	cmd.Dir = repoRoot
	s := &server{
		flags:   flags,
		baseURL: "http://" + addr,
		cmd:     cmd,
		stderr:  tail.New(stderrTail, nil),
		done:    make(chan struct{}),
	}
	cmd.Stdout = s.stderr
	cmd.Stderr = s.stderr
	// A worker that inherited the server's stderr keeps the pipe open after the server
	// exits; without a WaitDelay, Wait would block on it forever.
	cmd.WaitDelay = pipeDelay
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("exec %s: %w", binPath, err)
	}
	go func() {
		s.waitErr = cmd.Wait()
		close(s.done)
	}()
	return s, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("probe free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitReady polls GET /ready until it answers 200, the process exits, or timeout passes.
func (s *server) waitReady(timeout time.Duration) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	client := &http.Client{Timeout: 2 * time.Second}
	lastStatus := "no answer"
	for {
		select {
		case <-s.done:
			return fmt.Errorf("server exited before ready: %v", s.waitErr)
		case <-deadline.C:
			return fmt.Errorf("GET /ready not 200 after %s (last: %s)", timeout, lastStatus)
		case <-tick.C:
			resp, err := client.Get(s.baseURL + "/ready")
			if err != nil {
				lastStatus = err.Error()
				continue
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			lastStatus = resp.Status
		}
	}
}

// stopAll stops every server the tests started and reports every shutdown defect.
func stopAll() error {
	registry.Lock()
	defer registry.Unlock()
	var errs []error
	for _, s := range registry.order {
		if err := s.stop(); err != nil {
			errs = append(errs, fmt.Errorf("server %v: %w\nstderr:\n%s", s.flags, err, s.stderr))
		}
	}
	return errors.Join(errs...)
}

// stop sends SIGTERM, requires a clean exit within stopTimeout, and requires every
// worker child seen just before to be gone soon after: once the server has exited its
// children are re-parented, so they are recorded (pid and start time) while it still runs.
func (s *server) stop() error {
	select {
	case <-s.done:
		return fmt.Errorf("exited before the end of the suite: %v", s.waitErr)
	default:
	}
	var workers []procInfo
	var scanErr error
	if runtime.GOOS == "linux" {
		workers, scanErr = childWorkers(s.cmd.Process.Pid)
	}
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return fmt.Errorf("SIGTERM: %w", err)
	}
	select {
	case <-s.done:
	case <-time.After(stopTimeout):
		_ = s.cmd.Process.Kill()
		<-s.done
		return fmt.Errorf("still running %s after SIGTERM; killed", stopTimeout)
	}
	var errs []error
	switch {
	case errors.Is(s.waitErr, exec.ErrWaitDelay):
		errs = append(errs, fmt.Errorf("stdout/stderr still held open %s after the server exited: a child outlived it", pipeDelay))
	case s.waitErr != nil:
		errs = append(errs, fmt.Errorf("unclean exit after SIGTERM: %w", s.waitErr))
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
