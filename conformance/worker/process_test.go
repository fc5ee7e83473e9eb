package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/embed-stack/embed-stack/internal/tail"
)

// health is the ready body of GET /health; the loading one holds only status and pid.
type health struct {
	Status         string `json:"status"`
	NEmbd          int    `json:"n_embd"`
	MaxTokens      int    `json:"max_tokens"`
	MaxBatchTokens int    `json:"max_batch_tokens"`
	Model          string `json:"model"`
	PID            int    `json:"pid"`
}

// worker is one worker process started by the suite, the way serve starts one.
type worker struct {
	name   string
	argv   []string // as started, --socket included
	socket string
	cmd    *exec.Cmd
	stdin  io.WriteCloser // our end of the stdin pipe; closing it is the EOF signal
	out    *tail.Buffer   // stderr and stdout
	http   *http.Client

	// done is closed by the reaper goroutine once cmd.Wait returns; waitErr is set
	// before.
	done    chan struct{}
	waitErr error

	// ready is the first 200 body of /health; set by startWorker.
	ready health
	// readyRaw is that body as received, for exact key checks.
	readyRaw []byte
	// loading lists what /health and /embed answered before ready, in order; each
	// entry is a protocol violation description, or "" for a conforming answer.
	loading []loadingAnswer
	// startErr is why a shared worker failed to start.
	startErr error
}

// loadingAnswer is one exchange seen while the worker was loading.
type loadingAnswer struct {
	what    string // "GET /health" or "POST /embed"
	status  int
	body    string
	problem string // "" when the answer conforms
}

var sockSeq atomic.Int64

// startWorker starts argv with "--socket PATH" appended and stdin a pipe, then waits
// for /health to say ready. It returns the worker with an error when it does not
// become ready (the worker is then stopped), and nil with an error when it could not
// be started at all.
func startWorker(name string, argv []string) (*worker, error) {
	if len(argv) == 0 {
		return nil, errors.New("empty command")
	}
	sock := filepath.Join(suite.sockDir, fmt.Sprintf("%s%d.sock", strings.ToLower(name), sockSeq.Add(1)))
	exe := argv[0]
	if strings.ContainsRune(exe, '/') {
		// A relative program path is relative to the repository root, where the
		// command runs, whatever directory go test was started from.
		exe = fromRoot(exe)
	}
	args := append(append([]string(nil), argv[1:]...), "--socket", sock)
	cmd := exec.Command(exe, args...)
	cmd.Dir = suite.repoRoot
	w := &worker{
		name:   name,
		argv:   append([]string{exe}, args...),
		socket: sock,
		cmd:    cmd,
		out:    tail.New(outputTail, nil),
		done:   make(chan struct{}),
	}
	cmd.Stdout, cmd.Stderr = w.out, w.out
	// A grandchild holding the output pipes must not make Wait hang.
	cmd.WaitDelay = exitBound
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("stdin pipe: %w", err)
	}
	w.stdin = stdin
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %q: %w", w.argv, err)
	}
	go func() {
		w.waitErr = cmd.Wait()
		close(w.done)
	}()
	w.http = &http.Client{
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", sock)
			},
			MaxIdleConnsPerHost: 16,
		},
	}
	if err := w.waitReady(suite.readyTimeout); err != nil {
		w.kill()
		return w, fmt.Errorf("%q: %w\noutput:\n%s", w.argv, err, w.out)
	}
	return w, nil
}

// waitReady polls GET /health until it answers 200, recording every answer before
// that. While the worker says loading it also sends one POST /embed, which must be
// refused with 503 (or succeed if the worker became ready in between).
func (w *worker) waitReady(timeout time.Duration) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	// Fast polling, so that the loading state of a quickly loading worker is seen.
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	probedEmbed := false
	last := "the socket does not exist yet"
	for {
		select {
		case <-w.done:
			return fmt.Errorf("exited before ready: %v", w.waitErr)
		case <-deadline.C:
			return fmt.Errorf("/health not ready after %s (last: %s); raise WORKER_READY_TIMEOUT for a slow model", timeout, last)
		case <-tick.C:
		}
		if _, err := os.Lstat(w.socket); err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		r, err := w.do(ctx, http.MethodGet, "/health", nil, nil)
		cancel()
		if err != nil {
			last = err.Error()
			continue
		}
		last = fmt.Sprintf("%d %s", r.status, r.body)
		if r.status == http.StatusOK {
			var h health
			if err := json.Unmarshal(r.body, &h); err != nil {
				return fmt.Errorf("/health 200 body %s: %w", r.body, err)
			}
			w.ready, w.readyRaw = h, r.body
			return nil
		}
		w.loading = append(w.loading, loadingAnswer{what: "GET /health", status: r.status, body: string(r.body), problem: w.checkLoadingHealth(r)})
		if !probedEmbed && r.status == http.StatusServiceUnavailable {
			probedEmbed = true
			ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
			e, err := w.do(ctx, http.MethodPost, "/embed", []byte(`{"tokens":[[1,2,3]]}`), nil)
			cancel()
			if err != nil {
				return fmt.Errorf("POST /embed while loading: %w", err)
			}
			w.loading = append(w.loading, loadingAnswer{what: "POST /embed", status: e.status, body: string(e.body), problem: checkLoadingEmbed(e)})
		}
	}
}

// checkLoadingHealth describes how a non-200 /health answer departs from
// 503 {"status":"loading","pid":PID} with Retry-After: 1; "" when it does not.
func (w *worker) checkLoadingHealth(r result) string {
	want := fmt.Sprintf(`{"pid":%d,"status":"loading"}`, w.cmd.Process.Pid)
	switch {
	case r.status != http.StatusServiceUnavailable:
		return fmt.Sprintf("status %d, want 503 or 200", r.status)
	case r.header.Get("Retry-After") != "1":
		return fmt.Sprintf("Retry-After %q, want \"1\"", r.header.Get("Retry-After"))
	case !strings.HasPrefix(r.header.Get("Content-Type"), "application/json"):
		return fmt.Sprintf("Content-Type %q, want application/json", r.header.Get("Content-Type"))
	case canonicalJSON(r.body) != want:
		return fmt.Sprintf("body %s, want %s", r.body, want)
	}
	return ""
}

// checkLoadingEmbed: /embed while loading is 503 with Retry-After: 1 and an error
// message, or 200 when loading finished between the two requests (a ready worker's
// answer is checked by the other tests).
func checkLoadingEmbed(r result) string {
	if r.status == http.StatusOK {
		return ""
	}
	var body map[string]any
	if r.status != http.StatusServiceUnavailable {
		return fmt.Sprintf("status %d, want 503", r.status)
	}
	if r.header.Get("Retry-After") != "1" {
		return fmt.Sprintf("Retry-After %q, want \"1\"", r.header.Get("Retry-After"))
	}
	if err := json.Unmarshal(r.body, &body); err != nil || len(body) != 1 || body["error"] == nil || body["error"] == "" {
		return fmt.Sprintf(`body %s, want {"error":"..."}`, r.body)
	}
	return ""
}

// canonicalJSON re-encodes a JSON value with sorted keys, or returns the input
// unchanged when it is not JSON, so that bodies compare independently of key order
// and spacing.
func canonicalJSON(b []byte) string {
	var v any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return string(b)
	}
	out, err := json.Marshal(v)
	if err != nil {
		return string(b)
	}
	return string(out)
}

// result is one HTTP exchange with a worker.
type result struct {
	status int
	header http.Header
	body   []byte
}

// do sends one request over the worker's socket.
func (w *worker) do(ctx context.Context, method, path string, body []byte, header map[string]string) (result, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://worker"+path, rd)
	if err != nil {
		return result{}, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := w.http.Do(req)
	if err != nil {
		return result{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return result{}, fmt.Errorf("%s %s: reading the body: %w", method, path, err)
	}
	return result{status: resp.StatusCode, header: resp.Header, body: raw}, nil
}

// call is do for tests: a transport error fails the test.
func (w *worker) call(t *testing.T, method, path string, body []byte, header map[string]string) result {
	t.Helper()
	r, err := w.do(ctxFor(t), method, path, body, header)
	if err != nil {
		t.Fatalf("worker %s: %s %s: %v\noutput:\n%s", w.name, method, path, err, w.out)
	}
	return r
}

// embed posts the sequences and requires 200 with one vector of n_embd finite floats
// per sequence, failing the test otherwise.
func (w *worker) embed(t *testing.T, seqs [][]int32, header map[string]string) [][]float32 {
	t.Helper()
	v, err := w.tryEmbed(ctxFor(t), seqs, header)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// tryEmbed is embed without a test, for goroutines.
func (w *worker) tryEmbed(ctx context.Context, seqs [][]int32, header map[string]string) ([][]float32, error) {
	body, err := json.Marshal(map[string]any{"tokens": seqs})
	if err != nil {
		return nil, err
	}
	r, err := w.do(ctx, http.MethodPost, "/embed", body, header)
	if err != nil {
		return nil, fmt.Errorf("worker %s: POST /embed (%s): %w\noutput:\n%s", w.name, lengths(seqs), err, w.out)
	}
	if r.status != http.StatusOK {
		return nil, fmt.Errorf("worker %s: POST /embed (%s): %d %s", w.name, lengths(seqs), r.status, abbreviate(r.body))
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		return nil, fmt.Errorf("worker %s: POST /embed: Content-Type %q, want application/json", w.name, ct)
	}
	var out struct {
		Embeddings [][]float32 `json:"embeddings"`
	}
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil {
		return nil, fmt.Errorf("worker %s: POST /embed body %s: %w", w.name, abbreviate(r.body), err)
	}
	if len(out.Embeddings) != len(seqs) {
		return nil, fmt.Errorf("worker %s: %d vectors for %d sequences (%s)", w.name, len(out.Embeddings), len(seqs), lengths(seqs))
	}
	for i, v := range out.Embeddings {
		if len(v) != w.ready.NEmbd {
			return nil, fmt.Errorf("worker %s: vector %d has %d floats; n_embd is %d", w.name, i, len(v), w.ready.NEmbd)
		}
		// JSON has no NaN or infinity, so every float decoded is finite; a zero
		// vector is no embedding either.
		if n := norm(v); !(n > 0) {
			return nil, fmt.Errorf("worker %s: vector %d has norm %v", w.name, i, n)
		}
	}
	return out.Embeddings, nil
}

// stopByStdin closes stdin, as a dying parent does, and requires the worker to exit
// with status 0 within bound and to remove its socket.
func (w *worker) stopByStdin(bound time.Duration) error {
	w.http.CloseIdleConnections()
	if err := w.stdin.Close(); err != nil {
		return fmt.Errorf("closing stdin: %w", err)
	}
	return w.awaitExit(bound, "stdin EOF")
}

// stopBySignal sends SIGTERM and requires the same clean exit.
func (w *worker) stopBySignal(bound time.Duration) error {
	w.http.CloseIdleConnections()
	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return fmt.Errorf("SIGTERM: %w", err)
	}
	return w.awaitExit(bound, "SIGTERM")
}

func (w *worker) awaitExit(bound time.Duration, cause string) error {
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case <-w.done:
	case <-t.C:
		w.kill()
		return fmt.Errorf("still running %s after %s; killed", bound, cause)
	}
	var errs []error
	if w.waitErr != nil {
		errs = append(errs, fmt.Errorf("exit after %s: %w, want status 0", cause, w.waitErr))
	}
	if _, err := os.Lstat(w.socket); !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, fmt.Errorf("socket %s still exists after exit (lstat: %v)", w.socket, err))
		_ = os.Remove(w.socket)
	}
	return errors.Join(errs...)
}

// kill ends the worker for good, after a failure, and removes what it left.
func (w *worker) kill() {
	_ = w.cmd.Process.Kill()
	<-w.done
	_ = os.Remove(w.socket)
}

// lengths describes a request by its sequence lengths, for failure messages.
func lengths(seqs [][]int32) string {
	parts := make([]string, len(seqs))
	for i, s := range seqs {
		parts[i] = fmt.Sprint(len(s))
	}
	return "lengths [" + strings.Join(parts, " ") + "]"
}

func abbreviate(b []byte) string {
	if len(b) > 400 {
		return string(b[:400]) + fmt.Sprintf("...(%d bytes)", len(b))
	}
	return string(b)
}
