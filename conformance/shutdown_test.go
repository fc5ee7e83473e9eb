package conformance

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Shutdown: SIGTERM drains, a second signal does not wait, and SIGKILL of the server
// leaves no worker behind.

// launchOwn starts a server that the test stops itself; the cleanup only makes sure
// nothing outlives the test.
func launchOwn(t *testing.T, flags ...string) (*server, []procInfo) {
	t.Helper()
	requireLinux(t)
	if skipReason != "" {
		t.Skip(skipReason)
	}
	s, err := startServer(flags)
	if err != nil {
		t.Fatal(err)
	}
	workers := waitWorkers(t, s, 1, 10*time.Second)
	t.Cleanup(func() {
		s.Kill()
		for _, w := range workers {
			_ = syscall.Kill(w.pid, syscall.SIGKILL) // only if it outlived its server
		}
	})
	return s, workers
}

// socketDir returns the private directory of a worker's socket, from its command line.
func socketDir(t *testing.T, w procInfo) string {
	t.Helper()
	_, after, ok := strings.Cut(w.cmdline, "--socket ")
	if !ok {
		t.Fatalf("worker %d has no --socket: %s", w.pid, w.cmdline)
	}
	return filepath.Dir(strings.Fields(after)[0])
}

// waitExit waits for the server process to end and returns its exit error.
func (s *server) waitExit(t *testing.T, timeout time.Duration) error {
	t.Helper()
	select {
	case <-s.Done():
		return s.Err()
	case <-time.After(timeout):
		t.Fatalf("server still running %s after the signal\nstderr:\n%s", timeout, s.Out)
		return nil
	}
}

// refusesConnections polls until a new TCP connection to the server fails.
func (s *server) refusesConnections(t *testing.T, timeout time.Duration) {
	t.Helper()
	u, err := url.Parse(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout("tcp", u.Host, time.Second)
		if err != nil {
			return
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatalf("still accepting connections %s after SIGTERM", timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestGracefulShutdown: on SIGTERM the server stops accepting connections at once,
// finishes the request in flight (correctly), stops its worker, removes the socket
// directory and exits 0.
func TestGracefulShutdown(t *testing.T) {
	drainsOnSignal(t, syscall.SIGTERM, `msg="shutting down" grace=1m0s signal=SIGTERM`)
}

// TestSIGHUPDrains: SIGHUP stops the server as SIGTERM does, and says so (issue 28:
// SIGHUP killed serve at once, exit 129, the request reset, nothing logged, the
// socket directory left behind).
func TestSIGHUPDrains(t *testing.T) {
	drainsOnSignal(t, syscall.SIGHUP, `msg="shutting down" grace=1m0s signal=SIGHUP`)
}

// drainsOnSignal sends sig to a server with a request in flight: new connections
// must be refused at once, the request answered with the reference vectors, the
// worker stopped, its socket directory removed, exit 0, and the log must hold
// logLine.
func drainsOnSignal(t *testing.T, sig syscall.Signal, logLine string) {
	s, workers := launchOwn(t, "--shutdown-grace", "60s")
	// 4000 tokens: still in flight when the worker has used 5 ticks, however fast
	// the engine. 800 took the tiny model 40 to 140 ms of wall time on two threads,
	// and once embed-stack's kernels computed its forward as one pool (2026-12-04) the
	// whole request used 2 to 4 ticks.
	text := variedText(t, 4000)
	type answer struct {
		r   httpResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		r, err := s.post(ctx(t), "/v1/embeddings", map[string]any{"input": []string{text, text, text}}, nil)
		done <- answer{r, err}
	}()
	waitBusy(t, workers[0].pid, 5, 30*time.Second)
	if err := s.Cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	s.refusesConnections(t, 5*time.Second)

	a := <-done
	if a.err != nil || a.r.status != http.StatusOK {
		t.Fatalf("the request in flight at %v: %v %d %s", sig, a.err, a.r.status, truncate(a.r.body))
	}
	var got rawEmbeddings
	a.r.decode(t, &got)
	want := expectDocument(t, text)
	for i, d := range got.Data {
		requireReference(t, fmt.Sprintf("vector %d", i), d.Embedding, want)
	}
	if err := s.waitExit(t, stopTimeout); err != nil {
		t.Fatalf("exit after %v: %v, want status 0\nstderr:\n%s", sig, err, s.Out)
	}
	for _, w := range workers {
		if err := waitGone(w, orphanTimeout); err != nil {
			t.Error(err)
		}
		if _, err := os.Stat(socketDir(t, w)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("socket directory %s left behind (%v)", socketDir(t, w), err)
		}
	}
	if !strings.Contains(s.Out.String(), logLine) {
		t.Errorf("no %s in the log:\n%s", logLine, s.Out)
	}
}

// TestSecondSignalStopsAtOnce: a second SIGTERM during the grace period ends the
// server within seconds, with status 1, abandoning the request in flight and killing
// the worker.
func TestSecondSignalStopsAtOnce(t *testing.T) {
	s, workers := launchOwn(t, "--shutdown-grace", "5m")
	// Sixteen distinct inputs of 4000 tokens: still in flight at the second signal
	// however fast the engine (two finished within the first signal's 300 ms once the
	// tiny model's BF16 products ran in embed-stack's kernels).
	text := variedText(t, 4000)
	inputs := make([]string, 16)
	for i := range inputs {
		inputs[i] = fmt.Sprintf("%s (%d)", text, i)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := s.post(ctx(t), "/v1/embeddings", map[string]any{"input": inputs}, nil)
		errc <- err
	}()
	waitBusy(t, workers[0].pid, 5, 30*time.Second)
	if err := s.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	s.refusesConnections(t, 5*time.Second)
	select {
	case <-s.Done():
		t.Fatalf("exited on the first SIGTERM with a request in flight and 5m of grace: %v", s.Err())
	case <-time.After(300 * time.Millisecond):
	}
	start := time.Now()
	if err := s.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err := s.waitExit(t, 10*time.Second)
	t.Logf("exited %s after the second signal: %v", time.Since(start).Round(time.Millisecond), err)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Errorf("exit %v, want status 1", err)
	}
	if err := <-errc; err == nil {
		t.Errorf("the abandoned request got an answer")
	}
	for _, w := range workers {
		if err := waitGone(w, orphanTimeout); err != nil {
			t.Error(err)
		}
		// An exit path the process survives leaves no socket directory (issue 28).
		if _, err := os.Stat(socketDir(t, w)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("socket directory %s left behind (%v)", socketDir(t, w), err)
		}
	}
	if !strings.Contains(s.Out.String(), "second signal: stopping now") {
		t.Errorf("no second-signal line in the log:\n%s", s.Out)
	}
}

// TestSecondSignalWithEphemeral: a second signal while an ephemeral worker runs
// ends the server with status 1 and leaves no socket directory, the ephemeral
// worker's included: every exit path the process survives removes them (issue 28).
func TestSecondSignalWithEphemeral(t *testing.T) {
	s, workers := launchOwn(t, "--shutdown-grace", "5m", "--warm-max-tokens", "1024")
	long := variedText(t, 1400)
	errc := make(chan error, 1)
	go func() {
		_, err := s.post(ctx(t), "/v1/embeddings", map[string]any{"input": long}, nil)
		errc <- err
	}()
	eph := otherWorker(t, s, workers[0].pid, 30*time.Second)
	t.Cleanup(func() { _ = syscall.Kill(eph.pid, syscall.SIGKILL) })
	all := append(workers, eph)
	for range 2 {
		if err := s.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	err := s.waitExit(t, 10*time.Second)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Errorf("exit %v, want status 1", err)
	}
	<-errc
	for _, w := range all {
		if err := waitGone(w, orphanTimeout); err != nil {
			t.Error(err)
		}
		if _, err := os.Stat(socketDir(t, w)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("socket directory %s left behind (%v)", socketDir(t, w), err)
			_ = os.RemoveAll(socketDir(t, w))
		}
	}
}

// TestNoOrphansAfterServerKilled: when the server dies by SIGKILL (no cleanup runs),
// its warm worker and an ephemeral worker in the middle of a request exit on their
// own, because their stdin (the server's pipe) reaches EOF.
func TestNoOrphansAfterServerKilled(t *testing.T) {
	s, workers := launchOwn(t, "--warm-max-tokens", "1024")
	long := variedText(t, 1400)
	go func() {
		_, _ = s.post(ctx(t), "/v1/embeddings", map[string]any{"input": long}, nil)
	}()
	eph := otherWorker(t, s, workers[0].pid, 30*time.Second)
	all := append(workers, eph)
	t.Cleanup(func() { _ = syscall.Kill(eph.pid, syscall.SIGKILL) })
	if err := s.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for _, w := range all {
		if err := waitGone(w, orphanTimeout); err != nil {
			t.Error(err)
		}
	}
	t.Logf("all workers gone %s after the server's SIGKILL", time.Since(start).Round(time.Millisecond))
	// SIGKILL leaves the private socket directories behind (nothing can remove them);
	// they hold no live socket. Tidy up after the test.
	for _, w := range all {
		_ = os.RemoveAll(socketDir(t, w))
	}
}

// TestDrainBeforeClose: with --drain-delay, SIGTERM turns GET /ready to 503
// {"status":"draining"} at once while the listener stays open and requests are still
// answered (correctly, with Connection: close) until the delay ends; then the server
// refuses connections and exits 0. This is what lets a balancer's health check take a
// replica out before it stops listening (deploy/haproxy).
func TestDrainBeforeClose(t *testing.T) {
	const delay = 4 * time.Second
	s, _ := launchOwn(t, "--drain-delay", delay.String())
	text := "a document embedded while the server drains"
	want := expectDocument(t, text)
	sigterm := time.Now()
	if err := s.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var ready httpResult
	for {
		ready = s.do(t, http.MethodGet, "/ready", nil, nil)
		if ready.status != http.StatusOK || time.Since(sigterm) > delay/2 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if ready.status != http.StatusServiceUnavailable || string(ready.body) != `{"status":"draining"}` {
		t.Fatalf("GET /ready after SIGTERM: %d %s, want 503 {\"status\":\"draining\"}", ready.status, ready.body)
	}
	r, err := s.post(ctx(t), "/v1/embeddings", map[string]any{"input": []string{text}}, nil)
	if err != nil || r.status != http.StatusOK {
		t.Fatalf("POST /v1/embeddings while draining: %d %v %s", r.status, err, truncate(r.body))
	}
	if !r.close {
		t.Error("the answer while draining did not carry Connection: close")
	}
	var got rawEmbeddings
	r.decode(t, &got)
	requireReference(t, "vector while draining", got.Data[0].Embedding, want)
	if open := time.Since(sigterm); open >= delay {
		t.Fatalf("the checks above took %s, longer than the drain delay: the test proves nothing", open)
	}
	s.refusesConnections(t, delay+5*time.Second)
	if closed := time.Since(sigterm); closed < delay-200*time.Millisecond {
		t.Errorf("listener closed %s after SIGTERM, before the %s drain delay", closed, delay)
	}
	if err := s.waitExit(t, stopTimeout); err != nil {
		t.Fatalf("exit after SIGTERM: %v, want status 0\nstderr:\n%s", err, s.Out)
	}
	if !strings.Contains(s.Out.String(), `msg="draining: /ready answers 503 until the listener closes" delay=4s`) {
		t.Errorf("no drain line in the log:\n%s", s.Out)
	}
}
