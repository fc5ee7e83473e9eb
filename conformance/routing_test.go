package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/embed-stack/embed-stack/internal/e2e"
	"github.com/embed-stack/embed-stack/internal/testenv"
)

// Routing of long inputs (docs/routing.md): the warm/ephemeral split at its exact
// boundaries, ephemeral workers sized to their input and gone afterwards, mixed
// requests, admission with 429, and vectors that do not depend on the path or the
// company an input had.

// routingFlags restate defaults, so that these tests get a server of their own.
var routingFlags = []string{"--ephemeral-queue", "8"}

// smallWarmFlags send inputs over 256 tokens to ephemeral workers, two at a time,
// so that long inputs are cheap on the tiny model.
var smallWarmFlags = []string{"--warm-max-tokens", "256", "--max-ephemeral", "2"}

// workerWatch records every worker child of a server other than its warm worker
// while it runs: an ephemeral worker lives for a model load at least, hundreds of
// polls.
type workerWatch struct {
	stop chan struct{}
	done chan struct{}
	mu   sync.Mutex // guards seen and threads
	seen []procInfo
	// threads holds the last reading of each ephemeral worker's threads, by pid.
	threads map[int]map[int]threadStat
}

// threadStat is one thread's nice value and CPU time (clock ticks) in /proc.
type threadStat struct{ nice, ticks int }

// readThreads reads every thread of process pid; nil once it is gone.
func readThreads(pid int) map[int]threadStat {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return nil
	}
	out := map[int]threadStat{}
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		tid, err2 := strconv.Atoi(task.Name())
		if err != nil || err2 != nil {
			continue
		}
		// After the command name: state is field 3, utime 14, stime 15, nice 19.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) < 17 {
			continue
		}
		ut, _ := strconv.Atoi(f[14-3])
		st, _ := strconv.Atoi(f[15-3])
		nice, _ := strconv.Atoi(f[19-3])
		out[tid] = threadStat{nice: nice, ticks: ut + st}
	}
	return out
}

func watchWorkers(t *testing.T, s *server, warm int) *workerWatch {
	t.Helper()
	w := &workerWatch{stop: make(chan struct{}), done: make(chan struct{}), threads: map[int]map[int]threadStat{}}
	go func() {
		defer close(w.done)
		for {
			ws, err := childWorkers(s.Cmd.Process.Pid)
			if err == nil {
				w.mu.Lock()
				for _, p := range ws {
					if p.pid != warm && !slices.Contains(w.seen, p) {
						w.seen = append(w.seen, p)
					}
				}
				w.mu.Unlock()
				for _, p := range ws {
					if p.pid == warm {
						continue
					}
					if th := readThreads(p.pid); th != nil {
						w.mu.Lock()
						if w.threads[p.pid] == nil {
							w.threads[p.pid] = map[int]threadStat{}
						}
						maps.Copy(w.threads[p.pid], th)
						w.mu.Unlock()
					}
				}
			}
			select {
			case <-w.stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	return w
}

// end stops the watch and returns the ephemeral workers seen.
func (w *workerWatch) end() []procInfo {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.seen)
}

// ctxArg returns the --ctx value on a worker's command line.
func ctxArg(t *testing.T, p procInfo) int { return intArg(t, p, "--ctx") }

// intArg returns the value of an integer flag on a worker's command line, or -1
// where the flag is absent.
func intArg(t *testing.T, p procInfo, flag string) int {
	t.Helper()
	f := strings.Fields(p.cmdline)
	i := slices.Index(f, flag)
	if i < 0 || i+1 >= len(f) {
		return -1
	}
	n, err := strconv.Atoi(f[i+1])
	if err != nil {
		t.Fatalf("worker %d: %s %q", p.pid, flag, f[i+1])
	}
	return n
}

// TestRoutingBoundaries: inputs of 8192 tokens (wrapping and <|endoftext|>
// included) stay on the warm worker, 8193 get an ephemeral worker with a context of
// 8256 (rounded up to 64), 32768 one of 32768, and 32769 are refused before any
// work starts. The 32768-token request is abandoned once its worker is seen: the
// worker must then be killed at once.
func TestRoutingBoundaries(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: embeds 16k tokens")
	}
	requireLinux(t)
	s := serverWith(t, routingFlags...)
	warm := s.warmPID(t)

	for _, tt := range []struct {
		tokens  int // with EOS
		wantCtx int // 0: no ephemeral worker
	}{{8192, 0}, {8193, 8256}} {
		t.Run(strconv.Itoa(tt.tokens), func(t *testing.T) {
			text := repeatedText(t, tt.tokens-1)
			w := watchWorkers(t, s, warm)
			got := s.rawEmbed(t, map[string]any{"input": text}, nil)
			seen := w.end()
			if got.Usage.PromptTokens != tt.tokens {
				t.Errorf("prompt_tokens %d, want %d", got.Usage.PromptTokens, tt.tokens)
			}
			switch {
			case tt.wantCtx == 0 && len(seen) != 0:
				t.Errorf("%d tokens: ephemeral workers %v started; want the warm worker only", tt.tokens, seen)
			case tt.wantCtx > 0 && len(seen) != 1:
				t.Errorf("%d tokens: ephemeral workers %v; want exactly one", tt.tokens, seen)
			case tt.wantCtx > 0:
				if c := ctxArg(t, seen[0]); c != tt.wantCtx {
					t.Errorf("%d tokens: the ephemeral worker got --ctx %d, want %d", tt.tokens, c, tt.wantCtx)
				}
				// Below the warm worker's priority by default (--ephemeral-nice):
				// every thread that computed, not only the one that calls
				// llama_decode (the pools' threads, and the model's load, were at
				// 0 until 2026-12-05).
				if n := intArg(t, seen[0], "--nice"); n != 10 {
					t.Errorf("%d tokens: the ephemeral worker got --nice %d, want 10: %s", tt.tokens, n, seen[0].cmdline)
				}
				w.mu.Lock()
				threads := w.threads[seen[0].pid]
				w.mu.Unlock()
				total := 0
				for _, th := range threads {
					total += th.ticks
				}
				for tid, th := range threads {
					if th.ticks*10 >= total && th.nice != 10 {
						t.Errorf("%d tokens: thread %d of the ephemeral worker ran %d of its %d CPU ticks at nice %d, want 10 (threads: %v)", tt.tokens, tid, th.ticks, total, th.nice, threads)
					}
				}
				if total == 0 {
					t.Errorf("%d tokens: no CPU time read from the ephemeral worker's threads", tt.tokens)
				}
				if err := waitGone(seen[0], orphanTimeout); err != nil {
					t.Error(err)
				}
			}
		})
	}

	t.Run("32769", func(t *testing.T) {
		w := watchWorkers(t, s, warm)
		r := s.do(t, http.MethodPost, "/v1/embeddings", map[string]any{"input": repeatedText(t, 32768)}, nil)
		seen := w.end()
		env := requireErrorEnvelope(t, r, http.StatusBadRequest)
		const msg = "This model's maximum context length is 32768 tokens, however you requested 32769 tokens (32769 in your prompt; 0 for the completion) in input 0. Please reduce your prompt; or completion length."
		if env.Error.Message != msg || strPtr(env.Error.Code) != `"context_length_exceeded"` {
			t.Errorf("400 %q code %s\nwant %q code context_length_exceeded", env.Error.Message, strPtr(env.Error.Code), msg)
		}
		if len(seen) != 0 {
			t.Errorf("a refused input started workers %v", seen)
		}
	})

	t.Run("32768, abandoned", func(t *testing.T) {
		text := repeatedText(t, 32767)
		c, cancel := context.WithCancel(ctx(t))
		defer cancel()
		errc := make(chan error, 1)
		go func() {
			_, err := s.post(c, "/v1/embeddings", map[string]any{"input": text}, nil)
			errc <- err
		}()
		eph := otherWorker(t, s, warm, 60*time.Second)
		if got := ctxArg(t, eph); got != 32768 {
			t.Errorf("the ephemeral worker got --ctx %d, want 32768", got)
		}
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("the abandoned request returned %v", err)
		}
		start := time.Now()
		if err := waitGone(eph, 5*time.Second); err != nil {
			t.Fatalf("after the client left: %v", err)
		}
		t.Logf("the 32768-token worker was gone %s after the client left", time.Since(start).Round(time.Millisecond))
		waitWorkers(t, s, 1, orphanTimeout)
	})
}

// TestCrossPathAgreement: a text embedded alone on the warm worker, packed into a
// request of 64 inputs of mixed lengths, among concurrent requests that the batch
// window packs together, and alone on an ephemeral worker (a server whose warm
// limit is below its length) gives the same vector bit for bit. Issue 3 asks for
// cosine ≥ 0.99999; the engine keeps a sequence's vector independent of its
// company (docs/routing.md), so anything but bit-identity is a regression. Two
// texts, one for each of the engine's attention kernels: 100 tokens (flash
// attention, packed) and 700 (plain attention, decoded alone).
func TestCrossPathAgreement(t *testing.T) {
	requireLinux(t)
	warmSrv := serverWith(t, routingFlags...)
	longSrv := serverWith(t, "--warm-max-tokens", "64", "--max-ephemeral", "2") // > 64 tokens: ephemeral
	worst := 1.0
	for _, n := range []int{100, 700} {
		t.Run(fmt.Sprintf("%d tokens", n), func(t *testing.T) {
			text := variedText(t, n)
			alone := warmSrv.rawEmbed(t, map[string]any{"input": text}, nil).Data[0].Embedding
			requireReference(t, "alone, warm", alone, expectDocument(t, text))

			mixed := make([]string, 64)
			for i := range mixed {
				mixed[i] = variedText(t, 1+(i*37)%300)
			}
			mixed[41] = text
			packed := warmSrv.rawEmbed(t, map[string]any{"input": mixed}, nil).Data[41].Embedding

			// Concurrent single-input requests: the batch window packs them into
			// shared warm calls, the text among them.
			var wg sync.WaitGroup
			batched := make([][]float64, 8)
			errs := make([]error, 8)
			for i := range 8 {
				wg.Go(func() {
					in := mixed[i*5]
					if i == 3 {
						in = text
					}
					r, err := warmSrv.post(ctx(t), "/v1/embeddings", map[string]any{"input": in}, nil)
					if err == nil && r.status != http.StatusOK {
						err = fmt.Errorf("status %d: %s", r.status, truncate(r.body))
					}
					if err != nil {
						errs[i] = err
						return
					}
					var out rawEmbeddings
					if err := json.Unmarshal(r.body, &out); err != nil {
						errs[i] = err
						return
					}
					batched[i] = out.Data[0].Embedding
				})
			}
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}

			warm := longSrv.warmPID(t)
			w := watchWorkers(t, longSrv, warm)
			ephemeral := longSrv.rawEmbed(t, map[string]any{"input": text}, nil).Data[0].Embedding
			if seen := w.end(); len(seen) != 1 {
				t.Fatalf("ephemeral workers %v; want one for the %d-token text", seen, len(encode(t, text))+1)
			}

			for _, c := range []struct {
				name string
				v    []float64
			}{
				{"packed among 64 inputs", packed},
				{"batched with concurrent requests", batched[3]},
				{"alone on an ephemeral worker", ephemeral},
			} {
				cos, d := cosine(alone, c.v), maxAbsDiff(alone, c.v)
				worst = min(worst, cos)
				t.Logf("%s: cosine to alone on the warm worker %.12f, max abs diff %.3g", c.name, cos, d)
				if !(cos >= 0.99999) {
					t.Errorf("%s: cosine %.12f, want ≥ 0.99999", c.name, cos)
				}
				if d > batchTol {
					t.Errorf("%s: max abs diff %.3g; want ≤ %g (the same vector whatever the company)", c.name, d, batchTol)
				}
			}
		})
	}
	t.Logf("cross-path worst cosine: %.12f", worst)
}

// TestMixedRequestOrder: a request whose inputs go to the warm worker and to two
// ephemeral workers at once comes back in input order, each vector its own input's,
// and leaves no ephemeral worker behind.
func TestMixedRequestOrder(t *testing.T) {
	requireLinux(t)
	s := serverWith(t, smallWarmFlags...)
	warm := s.warmPID(t)
	inputs := []string{"first short", variedText(t, 300), "middle short", variedText(t, 420), "last short"}
	w := watchWorkers(t, s, warm)
	got := s.rawEmbed(t, map[string]any{"input": inputs}, nil)
	if seen := w.end(); len(seen) != 2 {
		t.Errorf("ephemeral workers %v; want two, one per long input", seen)
	}
	if len(got.Data) != len(inputs) {
		t.Fatalf("%d vectors for %d inputs", len(got.Data), len(inputs))
	}
	for i, in := range inputs {
		if got.Data[i].Index != i {
			t.Errorf("data[%d].index = %d", i, got.Data[i].Index)
		}
		requireReference(t, fmt.Sprintf("input %d", i), got.Data[i].Embedding, expectDocument(t, in))
	}
	waitWorkers(t, s, 1, orphanTimeout)
}

// TestFailedPathKillsTheOthers: when one of a request's ephemeral workers dies, the
// request fails and its other ephemeral worker is killed too: no orphan survives.
func TestFailedPathKillsTheOthers(t *testing.T) {
	requireLinux(t)
	s := serverWith(t, smallWarmFlags...)
	warm := s.warmPID(t)
	inputs := []string{"short", variedText(t, 3000), variedText(t, 3100)}
	done := make(chan httpResult, 1)
	go func() {
		r, err := s.post(ctx(t), "/v1/embeddings", map[string]any{"input": inputs}, nil)
		if err != nil {
			r = httpResult{status: -1, body: []byte(err.Error())}
		}
		done <- r
	}()
	var eph []procInfo
	deadline := time.Now().Add(60 * time.Second)
	for len(eph) < 2 {
		ws, err := childWorkers(s.Cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		eph = slices.DeleteFunc(ws, func(p procInfo) bool { return p.pid == warm })
		if time.Now().After(deadline) {
			t.Fatalf("ephemeral workers %v after 60s; want two", eph)
		}
		time.Sleep(2 * time.Millisecond)
	}
	if err := syscall.Kill(eph[0].pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	r := <-done
	requireExactError(t, r, http.StatusInternalServerError, bodyInternal)
	for _, p := range eph {
		if err := waitGone(p, orphanTimeout); err != nil {
			t.Error(err)
		}
	}
	waitWorkers(t, s, 1, orphanTimeout)
	if now := s.warmPID(t); now != warm {
		t.Errorf("the warm worker changed from %d to %d", warm, now)
	}
}

// TestEphemeralAdmission: with one ephemeral worker allowed and no queue, a second
// long input while the first runs gets 429 with Retry-After in OpenAI's envelope,
// a short request meanwhile is served without waiting for the long one, and the
// refused input succeeds once the worker is free.
func TestEphemeralAdmission(t *testing.T) {
	requireLinux(t)
	s := serverWith(t, "--warm-max-tokens", "256", "--max-ephemeral", "1", "--ephemeral-queue", "0")
	warm := s.warmPID(t)
	first, second := variedText(t, 2000), variedText(t, 300)

	done := make(chan httpResult, 1)
	go func() {
		r, err := s.post(ctx(t), "/v1/embeddings", map[string]any{"input": first}, nil)
		if err != nil {
			r = httpResult{status: -1, body: []byte(err.Error())}
		}
		done <- r
	}()
	eph := otherWorker(t, s, warm, 60*time.Second)

	r := s.do(t, http.MethodPost, "/v1/embeddings", map[string]any{"input": second}, nil)
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("second long input while the first runs: status %d %s, want 429", r.status, truncate(r.body))
	}
	var env errorEnvelope
	r.decode(t, &env)
	if env.Error.Type != "rate_limit_error" || strPtr(env.Error.Code) != `"rate_limit_exceeded"` ||
		!strings.HasPrefix(env.Error.Message, "Too many long inputs are in progress (1 being embedded by their own worker, 0 waiting); retry after ") {
		t.Errorf("429 envelope %+v", env.Error)
	}
	if ra, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || ra < 1 {
		t.Errorf("Retry-After %q, want a positive number of seconds", r.header.Get("Retry-After"))
	}

	short := s.rawEmbed(t, map[string]any{"input": "not behind the long one"}, nil)
	select {
	case <-done:
		t.Log("the long request finished before the short one was answered; the ordering check is void on a machine this fast")
	default:
		if _, err := procState(eph.pid); err != nil {
			t.Log("the ephemeral worker exited before the short answer; the ordering check is void")
		}
	}
	requireReference(t, "short while long", short.Data[0].Embedding, expectDocument(t, "not behind the long one"))

	if r := <-done; r.status != http.StatusOK {
		t.Fatalf("the first long input: %d %s", r.status, truncate(r.body))
	}
	requireReference(t, "the refused input, retried", s.rawEmbed(t, map[string]any{"input": second}, nil).Data[0].Embedding, expectDocument(t, second))
	waitWorkers(t, s, 1, orphanTimeout)
}

// TestWarmLimitBeyondTheWorker: a warm worker that holds fewer tokens than
// --warm-max-tokens (here a worker program capped at 1024, standing in for any that
// caps its context) makes serve refuse to start, naming the flag and the value to
// give it.
func TestWarmLimitBeyondTheWorker(t *testing.T) {
	requireLinux(t)
	if skipReason != "" {
		t.Skip(skipReason)
	}
	dir := t.TempDir()
	snapshot := filepath.Join(dir, "snapshot")
	if err := os.Mkdir(snapshot, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(snapshot, "config.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The last --model and --ctx win: the llama.cpp worker on the GGUF, capped.
	script := filepath.Join(dir, "capped-worker")
	body := fmt.Sprintf("#!/bin/sh\nexec %q worker \"$@\" --model %q --ctx 1024\n", binPath, modelPath)
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := e2e.LaunchServe(e2e.ServeSpec{Bin: binPath, Model: modelPath,
		Flags: []string{"--warm-backend", "mlx", "--mlx-server", script, "--mlx-model", snapshot}})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Done():
		if code := e2e.ExitCode(s.Err()); code != 1 {
			t.Errorf("serve exited with %v, want status 1", s.Err())
		}
	case <-time.After(readyTimeout):
		s.Kill()
		t.Fatalf("serve still running %s after its warm worker reported 1024 tokens\n%s", readyTimeout, s.Out)
	}
	out := s.Out
	const want = "--warm-max-tokens is 8192 but the warm worker holds inputs of at most 1024 tokens; lower --warm-max-tokens to 1024"
	if !strings.Contains(out.String(), want) {
		t.Errorf("serve's output lacks %q:\n%s", want, out)
	}
}

// TestMeasureShortLatency prints the p50 and p90 latency of one short query on a
// server of EMBED_STACK_MEASURE_SHORT_MODEL (the 0.6B shape, say) alone, and while a
// server of the test model embeds an input of EMBED_STACK_MEASURE_LONG tokens on an
// ephemeral worker on the same CPUs (with the serve flags in
// EMBED_STACK_MEASURE_LONG_FLAGS, space-separated, such as --ephemeral-nice 0). It
// runs only when the first two variables are set.
func TestMeasureShortLatency(t *testing.T) {
	shortModel, longTokens := testenv.Get("EMBED_STACK_MEASURE_SHORT_MODEL"), testenv.Get("EMBED_STACK_MEASURE_LONG")
	if shortModel == "" || longTokens == "" {
		t.Skip("set EMBED_STACK_MEASURE_SHORT_MODEL and EMBED_STACK_MEASURE_LONG to measure")
	}
	requireLinux(t)
	n, err := strconv.Atoi(longTokens)
	if err != nil {
		t.Fatal(err)
	}
	if !filepath.IsAbs(shortModel) {
		shortModel = filepath.Join(repoRoot, shortModel)
	}
	shortSrv := ownServer(t, "--model", shortModel, "--batch-window", "0")
	longSrv := ownServer(t, append([]string{"--warm-max-tokens", "256"}, strings.Fields(testenv.Get("EMBED_STACK_MEASURE_LONG_FLAGS"))...)...)
	long := variedText(t, n)
	query := map[string]any{"input": "how do I embed a short query?", "input_type": "query"}
	measure := func(stop <-chan struct{}, max int) []time.Duration {
		var ds []time.Duration
		for len(ds) < max {
			select {
			case <-stop:
				return ds
			default:
			}
			start := time.Now()
			if r := shortSrv.do(t, http.MethodPost, "/v1/embeddings", query, nil); r.status != http.StatusOK {
				t.Fatalf("short query: %d %s", r.status, truncate(r.body))
			}
			ds = append(ds, time.Since(start))
		}
		return ds
	}
	measure(nil, 3) // warm-up
	idle := measure(nil, 20)
	stop := make(chan struct{})
	done := make(chan time.Duration, 1)
	go func() {
		start := time.Now()
		if r, err := longSrv.post(ctx(t), "/v1/embeddings", map[string]any{"input": long}, nil); err != nil || r.status != http.StatusOK {
			t.Errorf("long input: %v %d", err, r.status)
		}
		done <- time.Since(start)
		close(stop)
	}()
	otherWorker(t, longSrv, longSrv.warmPID(t), 60*time.Second)
	busy := measure(stop, math.MaxInt)
	took := <-done
	t.Logf("short query on %s: p50 %s p90 %s alone (%d queries); p50 %s p90 %s while a %d-token input was embedded on an ephemeral worker (%d queries in its %s)",
		filepath.Base(shortModel), percentile(idle, 50).Round(time.Millisecond), percentile(idle, 90).Round(time.Millisecond), len(idle),
		percentile(busy, 50).Round(time.Millisecond), percentile(busy, 90).Round(time.Millisecond), n+1, len(busy), took.Round(time.Millisecond))
}

// TestQueriesBesideDocuments: queries sent while the warm worker embeds a request of
// long documents (four of 5000 tokens, under --warm-max-tokens, so on the warm
// worker) are answered before the documents are, each with the vector it gets on
// an idle server, bit for bit. The batcher sends them beside the documents' batch
// and the worker runs them between (or by interrupting) the documents' decode calls
// (docs/routing.md); without that they would wait for all the documents.
//
// The queries go as soon as /metrics shows the documents' call on the warm worker,
// not after a fixed sleep: on a fast host the tiny model embeds two such documents
// in under 300 ms, and a sleep that long once let them finish before the first
// query was sent, failing the test on its own timing rather than on the server.
func TestQueriesBesideDocuments(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: embeds 10k tokens")
	}
	s := serverWith(t, routingFlags...)
	queries := make([]string, 6)
	idle := make([][]float64, len(queries))
	for i := range queries {
		queries[i] = fmt.Sprintf("which shop sells item %d near the station", i)
		idle[i] = s.rawEmbed(t, map[string]any{"input": queries[i], "input_type": "query"}, nil).Data[0].Embedding
	}
	doc := repeatedText(t, 4999)
	type answer struct {
		r   httpResult
		err error
		at  time.Time
	}
	docDone := make(chan answer, 1)
	docStart := time.Now()
	go func() {
		docs := []string{doc, doc + " b", doc + " c", doc + " d"}
		r, err := s.post(ctx(t), "/v1/embeddings", map[string]any{"input": docs}, nil)
		docDone <- answer{r, err, time.Now()}
	}()
	warmCalls := regexp.MustCompile(`(?m)^embed_stack_backend_inflight\{[^}]*route="warm"[^}]*\} (\S+)$`)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		if m := warmCalls.FindStringSubmatch(string(s.do(t, http.MethodGet, "/metrics", nil, nil).body)); m != nil && m[1] != "0" {
			break
		}
		select {
		case d := <-docDone:
			t.Fatalf("the documents were answered (status %d) before /metrics showed them on the warm worker", d.r.status)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("/metrics showed no warm call in 30 s after the documents were sent")
		}
	}
	var slowest time.Duration
	for i, q := range queries {
		start := time.Now()
		got := s.rawEmbed(t, map[string]any{"input": q, "input_type": "query"}, nil).Data[0].Embedding
		slowest = max(slowest, time.Since(start))
		if !slices.Equal(got, idle[i]) {
			t.Errorf("query %d beside the documents: its vector differs from the idle one", i)
		}
	}
	queriesDone := time.Now()
	d := <-docDone
	if d.err != nil || d.r.status != http.StatusOK {
		t.Fatalf("the documents: %v, status %d: %s", d.err, d.r.status, d.r.body)
	}
	docTime := d.at.Sub(docStart)
	t.Logf("documents: %s; slowest of %d queries beside them: %s", docTime.Round(time.Millisecond), len(queries), slowest.Round(time.Millisecond))
	if d.at.Before(queriesDone) {
		t.Errorf("the documents (%s) were answered before the queries sent beside them; the queries waited for them", docTime.Round(time.Millisecond))
	}
}

// TestIdleRequestSkipsBatchWindow: a request that finds the server idle goes to the
// warm worker at once, without waiting for the cross-request batch window: with an
// hour's window it is still answered (within the client's two minutes), and its
// vector is the default server's.
func TestIdleRequestSkipsBatchWindow(t *testing.T) {
	s := ownServer(t, "--batch-window", "1h")
	for i, text := range []string{"the first request on a fresh server", "a second one, after it"} {
		got := s.rawEmbed(t, map[string]any{"input": text}, nil)
		want := defaultServer(t).rawEmbed(t, map[string]any{"input": text}, nil)
		if len(got.Data) != 1 || len(want.Data) != 1 || !reflect.DeepEqual(got.Data[0].Embedding, want.Data[0].Embedding) {
			t.Fatalf("request %d: vector differs from the default server's", i)
		}
	}
}
