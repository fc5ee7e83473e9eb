// Package e2e runs the real embed-stack binary for end-to-end tests outside the
// conformance suite (the embed command, `make run`, the documentation's client
// snippets): it finds the repository root, the binary and the test model, starts a
// process in its own process group with its output kept, waits for GET /ready, and
// stops the whole group when the test ends.
//
// It refuses to know anything of the server's internals; tests talk to what it starts
// through public surfaces only.
//
// Environment (as for package conformance):
//
//	EMBED_STACK_BIN          the binary (default <repo>/bin/embed-stack, built by `make build`)
//	EMBED_STACK_MODEL        the GGUF (default <repo>/models/tiny.gguf, written by `make models`)
//	EMBED_STACK_REQUIRE_E2E  "1" turns a missing binary or model into a failure instead of a skip
package e2e

import (
	"bytes"
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
	"syscall"
	"testing"
	"time"

	"github.com/embed-stack/embed-stack/internal/tail"
)

const (
	// ReadyTimeout bounds the wait for GET /ready: the tiny model loads in well under a
	// second; a download from a local fake hub takes a few more.
	ReadyTimeout = 90 * time.Second
	// stopTimeout bounds a graceful stop after SIGTERM before SIGKILL.
	stopTimeout = 15 * time.Second
	tailBytes   = 64 << 10
)

// RepoRoot walks up from the working directory to the directory holding go.mod.
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatalf("working directory: %v", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the working directory")
		}
		dir = parent
	}
}

// Paths returns the binary and the test model, skipping the test when either is
// missing (failing it when EMBED_STACK_REQUIRE_E2E=1), and under -short (`make unit`,
// the inner loop, which leaves every real-binary test to `make test`).
func Paths(t testing.TB) (bin, model string) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: this test runs the real binary")
	}
	root := RepoRoot(t)
	bin = envOr("EMBED_STACK_BIN", filepath.Join(root, "bin", "embed-stack"))
	model = envOr("EMBED_STACK_MODEL", filepath.Join(root, "models", "tiny.gguf"))
	for _, p := range []string{bin, model} {
		if _, err := os.Stat(p); err != nil {
			Require(t, fmt.Sprintf("missing %s: run `make build models` first", p))
		}
	}
	return bin, model
}

// Require skips the test for reason, or fails it when EMBED_STACK_REQUIRE_E2E=1 says
// every end-to-end test must run.
func Require(t testing.TB, reason string) {
	t.Helper()
	if os.Getenv("EMBED_STACK_REQUIRE_E2E") == "1" {
		t.Fatalf("EMBED_STACK_REQUIRE_E2E=1 and %s", reason)
	}
	t.Skip(reason)
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// FreeAddr returns a loopback host:port that was free a moment ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("probe a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().String()
}

// Process is a started command with its output kept.
type Process struct {
	Cmd  *exec.Cmd
	Out  *tail.Buffer
	done chan struct{}
	err  error // set before done is closed
}

// Start starts cmd in its own process group (so that stopping it also stops what it
// started, e.g. make's children) with stdout and stderr kept in p.Out. The test's
// cleanup stops the group: SIGTERM, then SIGKILL after a bound.
func Start(t testing.TB, cmd *exec.Cmd) *Process {
	t.Helper()
	p := &Process{Cmd: cmd, Out: tail.New(tailBytes, nil), done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.Out, p.Out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A grandchild holding the pipes must not block Wait forever.
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", cmd.Path, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		if err := p.Stop(); err != nil {
			t.Errorf("stop %s: %v\noutput:\n%s", cmd.Path, err, p.Out)
		}
	})
	return p
}

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is the process's exit error; valid once Done is closed.
func (p *Process) Err() error { <-p.done; return p.err }

// Signal sends sig to the whole process group.
func (p *Process) Signal(sig syscall.Signal) error {
	return syscall.Kill(-p.Cmd.Process.Pid, sig)
}

// Stop sends SIGTERM to the group and waits; after stopTimeout it sends SIGKILL and
// reports that it had to. A process that already exited is left as it is.
func (p *Process) Stop() error {
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = p.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(stopTimeout):
		_ = p.Signal(syscall.SIGKILL)
		<-p.done
		return fmt.Errorf("still running %s after SIGTERM; killed", stopTimeout)
	}
}

// WaitReady polls baseURL/ready until it answers 200, the process exits, or timeout.
func (p *Process) WaitReady(t testing.TB, baseURL string, timeout time.Duration) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	client := &http.Client{Timeout: 2 * time.Second}
	last := "no answer"
	for {
		select {
		case <-p.done:
			t.Fatalf("%s exited before ready: %v\noutput:\n%s", p.Cmd.Path, p.err, p.Out)
		case <-deadline.C:
			t.Fatalf("GET %s/ready not 200 after %s (last: %s)\noutput:\n%s", baseURL, timeout, last, p.Out)
		case <-tick.C:
			resp, err := client.Get(baseURL + "/ready")
			if err != nil {
				last = err.Error()
				continue
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			last = resp.Status
		}
	}
}

// Server is a running `embed-stack serve`.
type Server struct {
	*Process
	// URL is http://127.0.0.1:PORT, without a trailing slash.
	URL string
}

// Serve starts `embed-stack serve --model MODEL --addr ADDR --threads 1 extra...` with
// the test model and waits until it is ready. One llama.cpp thread, because test
// machines are shared: threads that meet at a barrier after every graph node wait for
// each other's time slices on an oversubscribed machine, which made a tiny model ten
// times slower than one thread. extra may override it.
func Serve(t testing.TB, extra ...string) *Server {
	t.Helper()
	bin, model := Paths(t)
	addr := FreeAddr(t)
	args := append([]string{"serve", "--model", model, "--addr", addr, "--threads", "1"}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Dir = RepoRoot(t)
	s := &Server{Process: Start(t, cmd), URL: "http://" + addr}
	s.WaitReady(t, s.URL, ReadyTimeout)
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
