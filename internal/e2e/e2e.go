// Package e2e runs the real embed-stack binary for end-to-end tests: it finds the
// repository root, the binary and the test model, starts a process with its output
// kept, waits for GET /ready, and stops it. Every test that starts the binary uses it:
// the conformance suite (its shared servers and the ones a test owns),
// cmd/embed-stack's *_e2e_test.go files (the embed command, several models), `make
// run`, the documentation's client snippets and the deployment checks.
//
// It refuses to know anything of the server's internals; tests talk to what it starts
// through public surfaces only.
//
// Environment (internal/testenv, docs/testing.md): EMBED_STACK_BIN and
// EMBED_STACK_MODEL name the binary and the model (default bin/embed-stack and
// models/tiny.gguf, from `make build models`); EMBED_STACK_REQUIRE_E2E=1 turns a
// missing one into a failure instead of a skip. It sets one variable, for the
// commands the tests start: EMBED_STACK_WEIGHTS_CACHE (Main).
package e2e

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/embed-stack/embed-stack/internal/tail"
	"github.com/embed-stack/embed-stack/internal/testenv"
	"github.com/embed-stack/embed-stack/internal/testrepo"
)

const (
	// ReadyTimeout bounds the wait for GET /ready: the tiny model loads in well under a
	// second; a download from a local fake hub takes a few more.
	ReadyTimeout = 90 * time.Second
	// stopTimeout bounds a graceful stop after SIGTERM before SIGKILL.
	stopTimeout = 15 * time.Second
	// pipeDelay is how long Wait lets a child of the process (a worker of a server,
	// make's children) hold the output pipes after the process exits.
	pipeDelay = 5 * time.Second
	tailBytes = 64 << 10
)

// weightsCacheVar is serve's and embed's --weights-cache in the environment.
const weightsCacheVar = "EMBED_STACK_WEIGHTS_CACHE"

// weightsCache is the folder Run made; "" outside Run. Written once, before any
// test runs.
var weightsCache string

// Main is the TestMain of every package whose tests start the binary:
//
//	func TestMain(m *testing.M) { e2e.Main(m) }
//
// It runs the tests under Run and exits with their status.
func Main(m *testing.M) { os.Exit(Run(m.Run)) }

// Run runs tests (a TestMain's m.Run, and what else that TestMain does) with
// EMBED_STACK_WEIGHTS_CACHE set to a new temporary folder, which it removes after.
// serve and embed convert a model's F16 matrices to BF16 at load into their
// --weights-cache (under --weights auto on a CPU with AVX-512 BF16, under --weights
// bf16 anywhere), by default the user's ~/.cache/huggingface/embed-stack/weights,
// where a test must write nothing: every command the tests start inherits this
// process's environment unless given one of its own, so each of them converts into
// the folder instead. A value set beforehand is replaced, since it may name the
// user's cache; a test of the default gives its command an environment without the
// variable, and a temporary HOME. Paths and LaunchServe refuse to start the binary
// outside Run.
func Run(tests func() int) int {
	dir, err := os.MkdirTemp("", "embed-stack-test-weights-")
	if err == nil {
		err = os.Setenv(weightsCacheVar, dir)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: a temporary weights cache for the tests:", err)
		return 1
	}
	weightsCache = dir
	defer os.RemoveAll(dir)
	return tests()
}

// WeightsCache is the folder of converted weights of the commands the tests start
// (Run); "" outside Run.
func WeightsCache() string { return weightsCache }

// errNoMain is the refusal to start the binary outside Run.
var errNoMain = errors.New("this package's tests start embed-stack without a TestMain calling e2e.Main (or e2e.Run), " +
	"so the weights it converts at load would go into the user's cache: add func TestMain(m *testing.M) { e2e.Main(m) }")

// RepoRoot is the directory holding go.mod (testrepo.RootOf).
func RepoRoot(t testing.TB) string {
	t.Helper()
	return testrepo.RootOf(t)
}

// Binary returns the binary and the test model, and an error naming what is missing
// and the make target that provides it. It is Paths for a suite's TestMain, which has
// no test to skip.
func Binary() (bin, model string, err error) {
	root, err := testrepo.Root()
	if err != nil {
		return "", "", err
	}
	bin = cmp.Or(testenv.Get("EMBED_STACK_BIN"), filepath.Join(root, "bin", "embed-stack"))
	model = cmp.Or(testenv.Get("EMBED_STACK_MODEL"), filepath.Join(root, "models", "tiny.gguf"))
	var missing []string
	for _, p := range []string{bin, model} {
		if _, err := os.Stat(p); err != nil {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		return bin, model, fmt.Errorf("missing %s: run `make build models` first", strings.Join(missing, ", "))
	}
	return bin, model, nil
}

// Paths returns the binary and the test model, skipping the test when either is
// missing (failing it when EMBED_STACK_REQUIRE_E2E=1), and under -short (`make unit`,
// the inner loop, which leaves every real-binary test to `make test`). It fails the
// test outside Run (errNoMain).
func Paths(t testing.TB) (bin, model string) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: this test runs the real binary")
	}
	if weightsCache == "" {
		t.Fatal(errNoMain)
	}
	bin, model, err := Binary()
	if err != nil {
		Require(t, err.Error())
	}
	return bin, model
}

// Required reports whether EMBED_STACK_REQUIRE_E2E=1 says that every end-to-end test
// must run: a missing binary, model or tool is then a failure, not a skip.
func Required() bool { return testenv.RequireE2E() }

// Require skips the test for reason, or fails it when EMBED_STACK_REQUIRE_E2E=1 says
// every end-to-end test must run.
func Require(t testing.TB, reason string) {
	t.Helper()
	if testenv.RequireE2E() {
		t.Fatalf("EMBED_STACK_REQUIRE_E2E=1 and %s", reason)
	}
	t.Skip(reason)
}

// FreeAddr returns a loopback host:port that was free a moment ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	addr, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("probe a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// Process is a started command with its output kept. Safe for concurrent use.
type Process struct {
	Cmd *exec.Cmd
	// Out holds the last 64 KiB of stdout and stderr together.
	Out   *tail.Buffer
	group bool // in its own process group: Signal and Stop reach the whole group
	done  chan struct{}
	err   error // set before done is closed
}

// Launch starts cmd with stdout and stderr kept in p.Out and a reaper goroutine, and
// returns at once; the caller stops it. It is Start for a process that outlives one
// test, such as a server a whole suite shares. A cmd whose SysProcAttr sets Setpgid
// runs in its own process group, which Signal and Stop then reach as a whole.
func Launch(cmd *exec.Cmd) (*Process, error) {
	p := &Process{Cmd: cmd, Out: tail.New(tailBytes, nil), done: make(chan struct{})}
	p.group = cmd.SysProcAttr != nil && cmd.SysProcAttr.Setpgid
	cmd.Stdout, cmd.Stderr = p.Out, p.Out
	// A child holding the pipes (a server's worker, make's children) must not block
	// Wait forever; a conformance test reads exec.ErrWaitDelay as such an orphan.
	cmd.WaitDelay = pipeDelay
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Start starts cmd in its own process group (so that stopping it also stops what it
// started, e.g. make's children) with stdout and stderr kept in p.Out. The test's
// cleanup stops the group: SIGTERM, then SIGKILL after a bound.
func Start(t testing.TB, cmd *exec.Cmd) *Process {
	t.Helper()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p, err := Launch(cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Stop(); err != nil {
			t.Errorf("stop %s: %v\noutput:\n%s", cmd.Path, err, p.Out)
		}
	})
	return p
}

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is the process's exit error; it waits until the process has exited.
func (p *Process) Err() error { <-p.done; return p.err }

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Signal sends sig to the process, or to its whole process group when it has one.
func (p *Process) Signal(sig syscall.Signal) error {
	if p.group {
		return syscall.Kill(-p.Cmd.Process.Pid, sig)
	}
	return p.Cmd.Process.Signal(sig)
}

// Kill sends SIGKILL (to the group, when there is one) and waits for the exit.
func (p *Process) Kill() {
	_ = p.Signal(syscall.SIGKILL)
	<-p.done
}

// Stop sends SIGTERM (to the group, when there is one) and waits; after stopTimeout it
// sends SIGKILL and reports that it had to. A process that already exited is left as
// it is.
func (p *Process) Stop() error {
	if p.Exited() {
		return nil
	}
	_ = p.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(stopTimeout):
		p.Kill()
		return fmt.Errorf("still running %s after SIGTERM; killed", stopTimeout)
	}
}

// Ready polls baseURL/ready until it answers 200, the process exits, or timeout.
func (p *Process) Ready(baseURL string, timeout time.Duration) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	client := &http.Client{Timeout: 2 * time.Second}
	last := "no answer"
	for {
		select {
		case <-p.done:
			return fmt.Errorf("%s exited before ready: %v", p.Cmd.Path, p.err)
		case <-deadline.C:
			return fmt.Errorf("GET %s/ready not 200 after %s (last: %s)\n%s\nprocesses:\n%s", baseURL, timeout, last,
				healthOf(client, baseURL), ProcessTree(p.Cmd.Process.Pid))
		case <-tick.C:
			resp, err := client.Get(baseURL + "/ready")
			if err != nil {
				last = err.Error()
				continue
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		}
	}
}

// healthOf is GET baseURL/health's status and body (its first 2 KiB), for a message
// about a server that did not become ready: what it says of its workers.
func healthOf(client *http.Client, baseURL string) string {
	resp, err := client.Get(baseURL + "/health")
	if err != nil {
		return "GET /health: " + err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 2<<10))
	return fmt.Sprintf("GET /health: %s %s", resp.Status, bytes.TrimSpace(body))
}

// ProcessTree describes pid and its descendants from /proc, for a test that timed
// out waiting on them: each process's command line and state, and how many of its
// threads are in each state and kernel wait channel, so that a silent worker shows
// whether it computes (R), sleeps on a lock or a read (S, with the wchan), or was
// stopped (T). Where /proc is missing (macOS) it says so.
func ProcessTree(pid int) string {
	var b strings.Builder
	var walk func(pid, depth int)
	walk = func(pid, depth int) {
		indent := strings.Repeat("  ", depth)
		dir := fmt.Sprintf("/proc/%d", pid)
		stat, err := os.ReadFile(dir + "/stat")
		if err != nil {
			fmt.Fprintf(&b, "%spid %d: %v\n", indent, pid, err)
			return
		}
		cmdline, _ := os.ReadFile(dir + "/cmdline")
		fmt.Fprintf(&b, "%spid %d, state %s: %s\n", indent, pid, procState(stat),
			strings.ReplaceAll(strings.TrimRight(string(cmdline), "\x00"), "\x00", " "))
		tasks, _ := os.ReadDir(dir + "/task")
		states := map[string]int{}
		var children []string
		for _, t := range tasks {
			td := dir + "/task/" + t.Name()
			ts, err := os.ReadFile(td + "/stat")
			if err != nil {
				continue
			}
			wchan, _ := os.ReadFile(td + "/wchan")
			states[procState(ts)+" in "+cmp.Or(strings.TrimSpace(string(wchan)), "-")]++
			c, _ := os.ReadFile(td + "/children")
			children = append(children, strings.Fields(string(c))...)
		}
		keys := make([]string, 0, len(states))
		for k := range states {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "%s  threads %s: %d\n", indent, k, states[k])
		}
		for _, c := range children {
			var child int
			if _, err := fmt.Sscan(c, &child); err == nil && depth < 4 {
				walk(child, depth+1)
			}
		}
	}
	walk(pid, 0)
	return b.String()
}

// procState is the state letter of a /proc stat line (the field after the command
// name, which may itself hold spaces and parentheses).
func procState(stat []byte) string {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) {
		return "?"
	}
	return string(stat[i+2])
}

// WaitReady is Ready for a test, which it fails with the process's output.
func (p *Process) WaitReady(t testing.TB, baseURL string, timeout time.Duration) {
	t.Helper()
	if err := p.Ready(baseURL, timeout); err != nil {
		t.Fatalf("%v\noutput:\n%s", err, p.Out)
	}
}

// Server is a running `embed-stack serve`.
type Server struct {
	*Process
	// URL is http://127.0.0.1:PORT, without a trailing slash.
	URL string
}

// ServeSpec is an `embed-stack serve` to start.
type ServeSpec struct {
	// Bin and Model default to Binary's.
	Bin, Model string
	// Flags follow `serve --addr ADDR`, after `--model MODEL` unless they name a
	// --model of their own (a repeated --model serves several models).
	Flags []string
	// Env is the server's whole environment; nil inherits the test's.
	Env []string
	// Group starts the server in its own process group, so that Signal and Stop reach
	// its workers too. Tests that check how the server ends its workers leave it off.
	Group bool
}

// LaunchServe starts spec on a free loopback port and returns at once, without
// waiting for it to be ready. It refuses outside Run (errNoMain).
func LaunchServe(spec ServeSpec) (*Server, error) {
	if weightsCache == "" {
		return nil, errNoMain
	}
	if spec.Bin == "" || spec.Model == "" {
		bin, model, err := Binary()
		if err != nil {
			return nil, err
		}
		spec.Bin, spec.Model = cmp.Or(spec.Bin, bin), cmp.Or(spec.Model, model)
	}
	root, err := testrepo.Root()
	if err != nil {
		return nil, err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	args := []string{"serve", "--addr", addr}
	if !slices.ContainsFunc(spec.Flags, func(f string) bool { return f == "--model" || strings.HasPrefix(f, "--model=") }) {
		args = append(args, "--model", spec.Model)
	}
	cmd := exec.Command(spec.Bin, append(args, spec.Flags...)...)
	cmd.Dir = root
	cmd.Env = spec.Env
	if spec.Group {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	p, err := Launch(cmd)
	if err != nil {
		return nil, err
	}
	return &Server{Process: p, URL: "http://" + addr}, nil
}

// StartServe starts spec and waits up to timeout for GET /ready. A port taken between
// the probe and the server's bind shows as an early exit, so it tries three ports. On
// failure the server is killed and the error carries its output.
func StartServe(spec ServeSpec, timeout time.Duration) (*Server, error) {
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		s, err := LaunchServe(spec)
		if err != nil {
			return nil, err
		}
		err = s.Ready(timeout)
		if err == nil {
			return s, nil
		}
		s.Kill()
		lastErr = fmt.Errorf("%w\noutput:\n%s", err, s.Out)
		if !strings.Contains(s.Out.String(), "address already in use") {
			break
		}
	}
	return nil, lastErr
}

// Ready waits up to timeout for GET /ready to answer 200.
func (s *Server) Ready(timeout time.Duration) error { return s.Process.Ready(s.URL, timeout) }

// Serve starts `embed-stack serve --addr ADDR --model MODEL --threads 1 extra...` with
// the test model, in its own process group, and waits until it is ready; the test's
// cleanup stops it. One llama.cpp thread, because test machines are shared: threads
// that meet at a barrier after every graph node wait for each other's time slices on
// an oversubscribed machine, which made a tiny model ten times slower than one thread.
// extra may override it.
func Serve(t testing.TB, extra ...string) *Server {
	t.Helper()
	bin, model := Paths(t)
	s, err := StartServe(ServeSpec{Bin: bin, Model: model, Flags: append([]string{"--threads", "1"}, extra...), Group: true}, ReadyTimeout)
	if err != nil {
		t.Fatalf("start embed-stack serve %v: %v", extra, err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("stop %s: %v\noutput:\n%s", s.Cmd.Path, err, s.Out)
		}
	})
	return s
}

// Embeddings posts body to /v1/embeddings (encoding_format float unless body sets
// it), requires 200, and returns the vectors in index order.
func Embeddings(t testing.TB, baseURL string, body map[string]any) [][]float64 {
	t.Helper()
	if _, ok := body["encoding_format"]; !ok {
		body["encoding_format"] = "float"
	}
	raw, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, baseURL+"/v1/embeddings", bytes.NewReader(raw))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST /v1/embeddings: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /v1/embeddings: %d %s", resp.StatusCode, b)
	}
	var out struct {
		Data []struct {
			Index     int       `json:"index"`
			Embedding []float64 `json:"embedding"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("decode /v1/embeddings response: %v", err)
	}
	vecs := make([][]float64, len(out.Data))
	for _, d := range out.Data {
		if d.Index < 0 || d.Index >= len(vecs) || vecs[d.Index] != nil {
			t.Fatalf("bad or repeated index %d", d.Index)
		}
		vecs[d.Index] = d.Embedding
	}
	return vecs
}

// Cosine is the cosine similarity of a and b (0 when their lengths differ).
func Cosine(a, b []float64) float64 {
	if len(a) != len(b) || len(a) == 0 {
		return 0
	}
	var dot, na, nb float64
	for i := range a {
		dot += a[i] * b[i]
		na += a[i] * a[i]
		nb += b[i] * b[i]
	}
	return dot / math.Sqrt(na*nb)
}

// ExitCode is the exit status carried by a Wait error (0 for nil, -1 for a signal or
// another error).
func ExitCode(err error) int {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	return -1
}
