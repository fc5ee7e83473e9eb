package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Worker faults against the real binary: a warm worker killed mid-request, an
// ephemeral worker killed mid-request, a hung worker, a request past its deadline, a
// client that leaves, and model files that cannot be served.

// faultFlags: inputs over 1024 tokens go to ephemeral workers (cheap ones: the
// tests' long inputs have 1500 tokens), and a warm worker that answers nothing for
// 5 s is replaced.
var faultFlags = []string{"--debug-vars", "--warm-max-tokens", "1024", "--worker-hang-timeout", "5s"}

const (
	bodyInternal = `{"error":{"message":"The server had an error while processing your request; the server log has the cause.","type":"server_error","param":null,"code":"internal_error"}}`
	bodyTimeout  = `{"error":{"message":"The request took longer than the server's deadline.","type":"server_error","param":null,"code":"timeout"}}`
)

// require503 checks a worker_unavailable answer: its Retry-After and the body that
// names the same delay.
func require503(t *testing.T, r httpResult) {
	t.Helper()
	ra, err := strconv.Atoi(r.header.Get("Retry-After"))
	if err != nil || ra < 1 || ra > 30 {
		t.Errorf("Retry-After %q, want 1..30 seconds", r.header.Get("Retry-After"))
	}
	requireExactError(t, r, http.StatusServiceUnavailable, fmt.Sprintf(
		`{"error":{"message":"The embedding worker is not ready (starting or restarting); retry after %ds.","type":"server_error","param":null,"code":"worker_unavailable"}}`, ra))
}

// TestWarmWorkerKilledMidRequest: SIGKILL of the warm worker while it computes a
// request answers that request 503 with Retry-After (not retried: the request may be
// what killed it), the worker is restarted, and the same input then succeeds.
func TestWarmWorkerKilledMidRequest(t *testing.T) {
	requireLinux(t)
	s := serverWith(t, faultFlags...)
	// Twenty-four distinct inputs of 800 tokens (one warm chunk each): twelve batches,
	// still in flight when the worker is killed however fast the engine (six copies of
	// one input finished first in a fresh-clone CI once the tiny model's BF16 products
	// ran in embed-stack's kernels).
	text := variedText(t, 800)
	inputs := make([]string, 24)
	for i := range inputs {
		inputs[i] = fmt.Sprintf("%s (%d)", text, i)
	}
	before := s.vars(t, nil)["worker_restarts"]
	old := s.warmPID(t)

	type answer struct {
		r   httpResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		r, err := s.post(ctx(t), "/v1/embeddings", map[string]any{"input": inputs}, nil)
		done <- answer{r, err}
	}()
	waitBusy(t, old, 10, 30*time.Second)
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	a := <-done
	if a.err != nil {
		t.Fatalf("the request in flight: %v", a.err)
	}
	require503(t, a.r)

	s.waitReplaced(t, old)
	if err := s.Ready(readyTimeout); err != nil {
		t.Fatal(err)
	}
	if now := s.warmPID(t); now == old {
		t.Fatalf("worker %d was not replaced", old)
	}
	if got := s.vars(t, nil)["worker_restarts"]; got != before+1 {
		t.Errorf("worker_restarts %v, want %v", got, before+1)
	}
	requireReference(t, "after the restart", s.rawEmbed(t, map[string]any{"input": text}, nil).Data[0].Embedding, expectDocument(t, text))
}

// TestEphemeralWorkerCrash: killing an ephemeral worker fails its own request (500)
// and nothing else: requests on the warm worker meanwhile succeed, the warm worker is
// untouched, and the same long input then succeeds.
func TestEphemeralWorkerCrash(t *testing.T) {
	requireLinux(t)
	s := serverWith(t, faultFlags...)
	long := variedText(t, 1400) // past --warm-max-tokens: an ephemeral worker
	warm := s.warmPID(t)
	restarts := s.vars(t, nil)["worker_restarts"]

	done := make(chan httpResult, 1)
	errc := make(chan error, 1)
	go func() {
		r, err := s.post(ctx(t), "/v1/embeddings", map[string]any{"input": long}, nil)
		if err != nil {
			errc <- err
			return
		}
		done <- r
	}()
	eph := otherWorker(t, s, warm, 30*time.Second)
	if err := syscall.Kill(eph.pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The warm worker serves on while the long request fails.
	requireReference(t, "short input meanwhile", s.rawEmbed(t, map[string]any{"input": "bystander"}, nil).Data[0].Embedding, expectDocument(t, "bystander"))
	select {
	case r := <-done:
		requireExactError(t, r, http.StatusInternalServerError, bodyInternal)
	case err := <-errc:
		t.Fatalf("the long request: %v", err)
	}
	if err := waitGone(eph, orphanTimeout); err != nil {
		t.Error(err)
	}
	if now := s.warmPID(t); now != warm {
		t.Errorf("the warm worker changed from %d to %d", warm, now)
	}
	if got := s.vars(t, nil)["worker_restarts"]; got != restarts {
		t.Errorf("worker_restarts %v → %v: the warm worker was restarted", restarts, got)
	}
	if !strings.Contains(s.Out.String(), "ephemeral worker") {
		t.Errorf("the server log does not name the ephemeral worker's failure")
	}
	got := s.rawEmbed(t, map[string]any{"input": long}, nil)
	requireReference(t, "the long input again", got.Data[0].Embedding, expectDocument(t, long))
}

// TestClientGoneKillsEphemeral: when the client disconnects, the ephemeral worker
// embedding its long input is killed at once; the request is logged as 499.
func TestClientGoneKillsEphemeral(t *testing.T) {
	requireLinux(t)
	s := serverWith(t, faultFlags...)
	long := variedText(t, 1400)
	warm := s.warmPID(t)

	c, cancel := context.WithCancel(ctx(t))
	errc := make(chan error, 1)
	go func() {
		_, err := s.post(c, "/v1/embeddings", map[string]any{"input": long, "user": "departing"}, nil)
		errc <- err
	}()
	eph := otherWorker(t, s, warm, 30*time.Second)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled request returned %v", err)
	}
	start := time.Now()
	if err := waitGone(eph, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("the ephemeral worker was gone %s after the client left", time.Since(start).Round(time.Millisecond))
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(s.Out.String(), "status=499") {
		if time.Now().After(deadline) {
			t.Fatalf("no status=499 request line in the log")
		}
		time.Sleep(20 * time.Millisecond)
	}
	requireReference(t, "afterwards", s.rawEmbed(t, map[string]any{"input": "after the client left"}, nil).Data[0].Embedding, expectDocument(t, "after the client left"))
}

// TestHungWarmWorkerReplaced: a warm worker that stops answering (SIGSTOP: alive, its
// socket open) is killed after --worker-hang-timeout; the request waiting on it gets
// 503 and the next ones are served by its replacement.
func TestHungWarmWorkerReplaced(t *testing.T) {
	requireLinux(t)
	s := serverWith(t, faultFlags...)
	old := s.warmPID(t)
	kills := s.vars(t, nil)["worker_hang_kills"]
	killsKey := seriesKey("embed_stack_warm_hang_kills_total", "model", s.modelID(t))
	promKills := scrape(t, s)[killsKey]
	stopProcess(t, old)

	start := time.Now()
	r, err := s.post(ctx(t), "/v1/embeddings", map[string]any{"input": "waiting on a hung worker"}, nil)
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	require503(t, r)
	if took < 5*time.Second || took > 20*time.Second {
		t.Errorf("answered after %s, want about the 5s hang timeout", took)
	}
	if err := s.Ready(readyTimeout); err != nil {
		t.Fatal(err)
	}
	if err := waitGone(procInfo{pid: old, startTime: mustStart(t, old)}, orphanTimeout); err != nil {
		t.Error(err)
	}
	if now := s.warmPID(t); now == old {
		t.Fatalf("the hung worker %d is still the warm worker", old)
	}
	if got := s.vars(t, nil)["worker_hang_kills"]; got != kills+1 {
		t.Errorf("worker_hang_kills %v, want %v", got, kills+1)
	}
	if got := scrape(t, s)[killsKey]; got != promKills+1 {
		t.Errorf("%s %v, want %v", killsKey, got, promKills+1)
	}
	requireReference(t, "after the replacement", s.rawEmbed(t, map[string]any{"input": "waiting on a hung worker"}, nil).Data[0].Embedding, expectDocument(t, "waiting on a hung worker"))
}

// mustStart returns pid's start time, or "" if it is already gone.
func mustStart(t *testing.T, pid int) string {
	t.Helper()
	_, start, err := readStat(pid)
	if err != nil {
		return ""
	}
	return start
}

// TestRequestDeadline: past --request-timeout a request gets 504, whether it waits
// on a hung warm worker or an ephemeral worker is computing for it (that worker is
// then killed); the hung worker is found by its abandoned request's probe and
// replaced even though no request waits on it any more. requests_timed_out_total
// counts exactly the 504s the test's own requests got: each provoked one moves it
// by one, read before and after, and at the end it equals their number.
//
// With a deadline of 1 s, the replacement worker's first request can itself pass
// it on a loaded host (at load 20 on 2 cores the counter read 3 where the test
// expected its 2): that request is a 504 the test caused too, so it is sent
// again, up to deadlineRetries times, and counted.
func TestRequestDeadline(t *testing.T) {
	requireLinux(t)
	s := ownServer(t, "--debug-vars", "--request-timeout", "1s", "--worker-hang-timeout", "3s")
	warm := s.warmPID(t)
	timedOut := func(t *testing.T) float64 {
		t.Helper()
		return s.vars(t, nil)["requests_timed_out_total"]
	}
	caused := 0 // 504 timeouts the test's requests got, all counted by the server
	// provoke sends a request that must pass the deadline, and requires its 504 and
	// one more on the counter. Read at once: the server counts the timeout as the
	// handler returns, before net/http sends the buffered answer.
	provoke := func(t *testing.T, input string) {
		t.Helper()
		before := timedOut(t)
		r, err := s.post(ctx(t), "/v1/embeddings", map[string]any{"input": input}, nil)
		if err != nil {
			t.Fatal(err)
		}
		requireExactError(t, r, http.StatusGatewayTimeout, bodyTimeout)
		if r.status == http.StatusGatewayTimeout {
			caused++
		}
		if got := timedOut(t); got != before+1 {
			t.Errorf("requests_timed_out_total %v after the request, %v before; want one more", got, before)
		}
	}

	t.Run("ephemeral worker", func(t *testing.T) {
		// 30000 tokens: several seconds of work for the tiny model, well past 1 s.
		// 9000 were once seconds too, but on the AVX-512 Zen 5 host (zen4 kernels,
		// BF16 weights) they took 1.2 s alone and, in one CI run, finished in 0.98 s,
		// before the deadline: the attention over 30000 tokens is 11 times theirs.
		long := repeatedText(t, 29999)
		start := time.Now()
		provoke(t, long)
		if took := time.Since(start); took < time.Second || took > 10*time.Second {
			t.Errorf("504 after %s, want about 1s", took)
		}
		// The worker is killed as the deadline passes; none but the warm one stays.
		waitWorkers(t, s, 1, orphanTimeout)
	})
	t.Run("hung warm worker", func(t *testing.T) {
		stopProcess(t, warm)
		provoke(t, "deadline")
		deadline := time.Now().Add(30 * time.Second)
		for s.vars(t, nil)["worker_hang_kills"] != 1 {
			if time.Now().After(deadline) {
				t.Fatalf("the hung worker was not killed: %v", s.vars(t, nil))
			}
			time.Sleep(50 * time.Millisecond)
		}
		s.waitReplaced(t, warm)
		if err := s.Ready(readyTimeout); err != nil {
			t.Fatal(err)
		}
		if now := s.warmPID(t); now == warm {
			t.Fatalf("the hung worker %d is still the warm worker", warm)
		}
		body := map[string]any{"input": "deadline"}
		r := s.do(t, http.MethodPost, "/v1/embeddings", body, nil)
		for try := 1; r.status == http.StatusGatewayTimeout && try < deadlineRetries; try++ {
			requireExactError(t, r, http.StatusGatewayTimeout, bodyTimeout)
			caused++
			t.Logf("the replacement's request %d passed the 1s deadline; sending it again", try)
			r = s.do(t, http.MethodPost, "/v1/embeddings", body, nil)
		}
		if r.status != http.StatusOK {
			t.Fatalf("POST /v1/embeddings to the replacement: status %d, body %s", r.status, truncate(r.body))
		}
		var got rawEmbeddings
		r.decode(t, &got)
		requireReference(t, "after the replacement", got.Data[0].Embedding, expectDocument(t, "deadline"))
	})
	if got := timedOut(t); got != float64(caused) {
		t.Errorf("requests_timed_out_total %v, want %d: the 504s of the test's own requests", got, caused)
	}
}

// deadlineRetries bounds the sends of TestRequestDeadline's request to the
// replacement worker, whose 1 s deadline a loaded host can pass.
const deadlineRetries = 5

// TestUnservableModel: a missing, empty, truncated, foreign or inconsistent model
// file stops `serve` at start with exit status 1 and a message that names the file
// and the fault; no worker is restarted in a loop and none is left behind.
func TestUnservableModel(t *testing.T) {
	requireLinux(t)
	if skipReason != "" {
		t.Skip(skipReason)
	}
	model, err := os.ReadFile(modelPath)
	if err != nil {
		t.Fatal(err)
	}
	// block_count raised past the tensors present: valid GGUF, so serve reads it
	// and starts the worker, and llama.cpp refuses it there.
	key := []byte("qwen3.block_count")
	i := bytes.Index(model, key)
	if i < 0 {
		t.Fatal("the test model has no qwen3.block_count")
	}
	badBlocks := bytes.Clone(model)
	copy(badBlocks[i+len(key)+4:], []byte{99, 0, 0, 0}) // after the uint32 type tag
	dir := t.TempDir()
	tests := []struct {
		name    string
		content []byte // nil: the file does not exist
		want    string
	}{
		{"missing", nil, "does not exist"},
		{"empty", []byte{}, "invalid GGUF file: magic needs 4 bytes but only 0 are left in the file (truncated or corrupt)"},
		{"truncated in the header", model[:1000], `invalid GGUF file: key "tokenizer.ggml.tokens"`},
		{"truncated in the tensor data", model[:len(model)/2], "(file truncated?)"},
		{"not a GGUF", bytes.Repeat([]byte("not a model "), 1000), "(not a GGUF file)"},
		{"tensors missing", badBlocks, "warm worker: starting the warm worker: worker (pid"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".gguf")
			if tc.content != nil {
				if err := os.WriteFile(path, tc.content, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(c, binPath, "serve", "--model", path, "--addr", "127.0.0.1:0")
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			cmd.WaitDelay = 5 * time.Second // a worker left holding the pipes must not hang Wait
			err := cmd.Run()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("exit %v, want status 1\n%s", err, out.String())
			}
			log := out.String()
			// The failure is one plain line on stderr (text logs): "embed-stack serve: ...".
			failed := strings.HasPrefix(log, "embed-stack serve: ") || strings.Contains(log, "\nembed-stack serve: ")
			if !failed || !strings.Contains(log, path) || !strings.Contains(log, tc.want) {
				t.Errorf("output lacks the failure, the path or %q:\n%s", tc.want, log)
			}
			if n := strings.Count(log, "worker listening"); n > 1 {
				t.Errorf("the worker was started %d times: a crash loop", n)
			}
		})
	}
}
