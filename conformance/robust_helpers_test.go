package conformance

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/embed-stack/embed-stack/internal/e2e"
)

// Helpers of the robustness suites (robustness, faults, shutdown, security, load):
// process figures read from /proc, servers a test owns alone, and exact envelopes.

// requireLinux skips tests that read /proc.
func requireLinux(t *testing.T) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("reads process figures from /proc")
	}
}

// ownServer starts a server no other test shares and stops it (SIGTERM, clean exit,
// no worker left) when the test ends, unless the test already ended it.
func ownServer(t *testing.T, flags ...string) *server {
	t.Helper()
	return ownServerSpec(t, e2e.ServeSpec{Flags: flags})
}

// ownServerSpec is ownServer for a spec of its own (another binary, an environment);
// the binary and model default to the suite's.
func ownServerSpec(t *testing.T, spec e2e.ServeSpec) *server {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
	spec.Bin, spec.Model = cmp.Or(spec.Bin, binPath), cmp.Or(spec.Model, modelPath)
	s, err := startServerSpec(spec)
	if err != nil {
		t.Fatalf("start embed-stack serve %v: %v", spec.Flags, err)
	}
	t.Cleanup(func() {
		if s.Exited() {
			return // the test stopped it and checked the stop
		}
		if err := s.stop(); err != nil {
			t.Errorf("stopping the server: %v\nstderr:\n%s", err, s.Out)
		}
	})
	return s
}

// statusField returns a field of /proc/PID/status in kB ("VmRSS", "VmHWM") or as a
// count ("Threads").
func statusField(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("read /proc/%d/status: %v", pid, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			if err != nil {
				t.Fatalf("/proc/%d/status %s: %v", pid, field, err)
			}
			return n
		}
	}
	t.Fatalf("/proc/%d/status has no %s", pid, field)
	return 0
}

// openFDs counts the open file descriptors of pid.
func openFDs(t *testing.T, pid int) int {
	t.Helper()
	entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatalf("read /proc/%d/fd: %v", pid, err)
	}
	return len(entries)
}

// cpuTicks is the user+system CPU time of pid in clock ticks (1/100 s on Linux).
func cpuTicks(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	// After ')': utime is field 14 of the line, index 11 here; stime index 12.
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %q stime %q", pid, f[11], f[12])
	}
	return u + s, nil
}

// waitBusy waits until pid has used at least ticks more CPU than when called: the
// sign that a request is being computed there, not merely on its way.
func waitBusy(t *testing.T, pid int, ticks int64, timeout time.Duration) {
	t.Helper()
	start, err := cpuTicks(pid)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(timeout)
	for {
		now, err := cpuTicks(pid)
		if err != nil {
			t.Fatalf("worker %d: %v", pid, err)
		}
		if now-start >= ticks {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("worker %d used %d CPU ticks in %s, want %d: the request never reached it", pid, now-start, timeout, ticks)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// stopped waits until pid is in state T after SIGSTOP (delivery is asynchronous).
func stopProcess(t *testing.T, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP %d: %v", pid, err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	deadline := time.Now().Add(5 * time.Second)
	for {
		if st, _ := procState(pid); st == "T" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d did not stop", pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// vars reads GET /debug/vars (servers started with --debug-vars).
func (s *server) vars(t *testing.T, headers map[string]string) map[string]float64 {
	t.Helper()
	return s.varsAt(t, "/debug/vars", headers)
}

// liveVars reads GET /debug/vars?gc=1: after a collection, heap_alloc_bytes is the
// live heap.
func (s *server) liveVars(t *testing.T) map[string]float64 {
	t.Helper()
	return s.varsAt(t, "/debug/vars?gc=1", nil)
}

func (s *server) varsAt(t *testing.T, path string, headers map[string]string) map[string]float64 {
	t.Helper()
	r := s.do(t, http.MethodGet, path, nil, headers)
	if r.status != http.StatusOK {
		t.Fatalf("GET /debug/vars: %d %s", r.status, truncate(r.body))
	}
	var v map[string]float64
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("GET /debug/vars %s: %v", truncate(r.body), err)
	}
	return v
}

// warmPID returns the pid of the server's only worker child, waiting for it.
func (s *server) warmPID(t *testing.T) int {
	t.Helper()
	return waitWorkers(t, s, 1, 10*time.Second)[0].pid
}

// waitReplaced waits until a worker other than old runs, and returns its pid. The
// supervisor starts a replacement only after it has reaped old and stopped
// calling the server ready, so readiness checked after this is the replacement's:
// checked before it, /ready can still answer for old in the moment between old's
// death (which fails the request in flight at once) and its reaping.
func (s *server) waitReplaced(t *testing.T, old int) int {
	t.Helper()
	return otherWorker(t, s, old, 30*time.Second).pid
}

// requireExactError requires the exact status and body (OpenAI's envelope).
func requireExactError(t *testing.T, r httpResult, status int, body string) {
	t.Helper()
	if r.status != status || string(r.body) != body {
		t.Errorf("got %d %s\nwant %d %s", r.status, truncate(r.body), status, body)
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
}

// percentile returns the p-th percentile (0 < p ≤ 100) of ds, nearest rank.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	k := int(float64(len(s))*p/100+0.999999) - 1
	return s[min(max(k, 0), len(s)-1)]
}

// post sends body (marshalled as JSON unless []byte) to path under ctx and reads
// the answer. Unlike do it never fails the test, so other goroutines may call it.
func (s *server) post(c context.Context, path string, body any, headers map[string]string) (httpResult, error) {
	raw, ok := body.([]byte)
	if !ok {
		var err error
		if raw, err = json.Marshal(body); err != nil {
			return httpResult{}, err
		}
	}
	req, err := http.NewRequestWithContext(c, http.MethodPost, s.URL+path, bytes.NewReader(raw))
	if err != nil {
		return httpResult{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return httpResult{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return httpResult{}, err
	}
	return httpResult{status: resp.StatusCode, header: resp.Header, body: b, close: resp.Close}, nil
}

// otherWorker polls until the server has a worker child other than warm (an
// ephemeral one) and returns it.
func otherWorker(t *testing.T, s *server, warm int, timeout time.Duration) procInfo {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ws, err := childWorkers(s.Cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range ws {
			if w.pid != warm {
				return w
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no ephemeral worker appeared within %s", timeout)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// variedText returns numbered sentences of at least n tokens (without EOS) under the
// reference tokenizer: long text that, unlike one repeated token, keeps llama.cpp's
// attention within the reference tolerance.
func variedText(t *testing.T, n int) string {
	t.Helper()
	var b strings.Builder
	for i := 0; ; i++ {
		fmt.Fprintf(&b, "Sentence %d tells of item %d, which weighs %d grams. ", i, i*7%1000, i*13%997)
		if len(encode(t, b.String())) >= n {
			return b.String()
		}
	}
}
