package conformance

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/embed-stack/embed-stack/internal/testenv"
)

// Load: a flood of concurrent clients against a small admission limit, and a soak of
// mixed short and long traffic. Both check every answer against the same text
// embedded alone, and that goroutines, file descriptors, worker processes and memory
// come back to where they were.

// Tolerances of the "back to baseline" checks, after the clients have closed their
// connections.
const (
	// goroutineSlack allows for the runtime's own (timers, the GC) and a
	// connection still being torn down.
	goroutineSlack = 10
	// fdSlack allows for a connection still being torn down.
	fdSlack = 4
	// rssSlackFlood bounds RSS growth over a flood: the Go heap keeps what a peak
	// needed for a while before returning it to the OS, but must not keep growing
	// with the number of requests.
	rssSlackFlood = 64 << 10 // kB
	// liveHeapSlack bounds the growth of the live heap (after a collection): caches
	// that fill up to their bound (the tokenizer's word cache) and nothing else.
	liveHeapSlack = 16 << 20
)

// loadClient is an HTTP client with its own connections, so that the test can close
// them all and count what the server keeps afterwards.
func loadClient(conns int) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = conns
	tr.MaxConnsPerHost = conns
	return &http.Client{Transport: tr, Timeout: 2 * time.Minute}
}

// embedTexts posts texts with c and returns the status, the vectors of a 200 and
// the body of anything else.
func (s *server) embedTexts(c *http.Client, texts []string) (int, http.Header, [][]float64, []byte, error) {
	raw, _ := json.Marshal(map[string]any{"input": texts, "model": "m"})
	resp, err := c.Post(s.URL+"/v1/embeddings", "application/json", strings.NewReader(string(raw)))
	if err != nil {
		return 0, nil, nil, nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return resp.StatusCode, resp.Header, nil, body, err
	}
	var out rawEmbeddings
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return 0, nil, nil, nil, fmt.Errorf("decode: %w", err)
	}
	vecs := make([][]float64, len(out.Data))
	for i, d := range out.Data {
		vecs[i] = d.Embedding
	}
	return resp.StatusCode, resp.Header, vecs, nil, nil
}

// baseline is what a server looks like at rest.
type baseline struct {
	goroutines, liveHeap float64
	rssKB                int64
	fds                  int
	warm                 int
}

func (s *server) rest(t *testing.T) baseline {
	t.Helper()
	v := s.liveVars(t)
	pid := s.Cmd.Process.Pid
	return baseline{goroutines: v["goroutines"], liveHeap: v["heap_alloc_bytes"],
		rssKB: statusField(t, pid, "VmRSS"), fds: openFDs(t, pid), warm: s.warmPID(t)}
}

// requireBackToRest waits (up to 15 s) for goroutines and descriptors to return to
// the baseline within their slack, then checks the growth of the live heap against
// liveHeapSlack and of RSS against rssSlack (kB), and that the same warm worker is
// running.
func (s *server) requireBackToRest(t *testing.T, b baseline, rssSlack int64) baseline {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	var now baseline
	for {
		now = s.rest(t)
		if now.goroutines <= b.goroutines+goroutineSlack && now.fds <= b.fds+fdSlack {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("not back to rest after 15s: goroutines %v → %v (slack %d), fds %d → %d (slack %d)",
				b.goroutines, now.goroutines, goroutineSlack, b.fds, now.fds, fdSlack)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if grow := now.liveHeap - b.liveHeap; grow > liveHeapSlack {
		t.Errorf("live heap grew by %.1f MiB (%.1f → %.1f MiB), want < %d MiB", grow/(1<<20), b.liveHeap/(1<<20), now.liveHeap/(1<<20), liveHeapSlack>>20)
	}
	if grow := now.rssKB - b.rssKB; grow > rssSlack {
		t.Errorf("RSS grew by %d MiB (%d → %d MiB), want < %d MiB", grow>>10, b.rssKB>>10, now.rssKB>>10, rssSlack>>10)
	}
	if now.warm != b.warm {
		t.Errorf("the warm worker changed from %d to %d under load", b.warm, now.warm)
	}
	return now
}

// vectorCheck compares answers with each text's vector embedded alone and keeps the
// first few mismatches.
type vectorCheck struct {
	want       map[string][]float64
	mismatches atomic.Int64
	mu         sync.Mutex
	examples   []string
}

func (v *vectorCheck) check(texts []string, got [][]float64) {
	if len(got) != len(texts) {
		v.fail(fmt.Sprintf("%d vectors for %d texts", len(got), len(texts)))
		return
	}
	for i, text := range texts {
		if d := maxAbsDiff(got[i], v.want[text]); d > batchTol {
			v.fail(fmt.Sprintf("input %d (%q): max |Δ| %.3g from the text embedded alone", i, abbreviate(text), d))
		}
	}
}

func (v *vectorCheck) fail(msg string) {
	v.mismatches.Add(1)
	v.mu.Lock()
	if len(v.examples) < 5 {
		v.examples = append(v.examples, msg)
	}
	v.mu.Unlock()
}

// alone embeds each text in a request of its own (four at a time) and returns the
// vectors.
func (s *server) alone(t *testing.T, texts []string) map[string][]float64 {
	t.Helper()
	want := make(map[string][]float64, len(texts))
	var mu sync.Mutex
	var failed []string
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	for _, text := range texts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			r, err := s.post(ctx(t), "/v1/embeddings", map[string]any{"input": text, "model": "m"}, nil)
			var out rawEmbeddings
			if err == nil && r.status == http.StatusOK {
				err = json.Unmarshal(r.body, &out)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil || r.status != http.StatusOK || len(out.Data) != 1 {
				failed = append(failed, fmt.Sprintf("%q: %d %v %s", abbreviate(text), r.status, err, truncate(r.body)))
				return
			}
			want[text] = out.Data[0].Embedding
		}()
	}
	wg.Wait()
	if len(failed) > 0 {
		t.Fatalf("embedding the texts alone: %v", failed)
	}
	return want
}

// TestFlood: 32 clients send as fast as they can (after a 429, 100 ms later) for 8 s
// (at most 4000 requests) to a server admitting 8 at once. Every answer is a correct 200 or a 429 with
// Retry-After in OpenAI's envelope; nothing else. Afterwards goroutines and
// descriptors are back to the baseline and the warm worker is the same process.
func TestFlood(t *testing.T) {
	requireLinux(t)
	const (
		clients     = 32
		duration    = 8 * time.Second
		maxRequests = 4000
		limit       = 8
	)
	s := ownServer(t, "--debug-vars", "--max-concurrent-requests", strconv.Itoa(limit))
	pool := make([]string, 24)
	for i := range pool {
		pool[i] = fmt.Sprintf("flood text %d: %s", i, strings.Repeat("word ", 1+i*3))
	}
	vc := &vectorCheck{want: s.alone(t, pool)}
	// The server keeps up to one idle connection to the warm worker per request it
	// ran at once (reused for 90 s): fill that pool before the baseline, so that it
	// is not mistaken for a leak.
	client := loadClient(clients)
	var warm sync.WaitGroup
	for i := range limit {
		warm.Add(1)
		go func() {
			defer warm.Done()
			_, _, _, _, _ = s.embedTexts(client, []string{pool[i], pool[i+limit]})
		}()
	}
	warm.Wait()
	client.CloseIdleConnections()
	rest := s.rest(t)

	const want429 = `{"error":{"message":"The server is already handling its limit of 8 concurrent requests (--max-concurrent-requests); retry after 1s.","type":"rate_limit_error","param":null,"code":"rate_limit_exceeded"}}`
	var (
		sent, ok, refused, other atomic.Int64
		mu                       sync.Mutex
		latencies                []time.Duration
		otherExamples            []string
	)
	stop := time.Now().Add(duration)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 6))
			for time.Now().Before(stop) && sent.Add(1) <= maxRequests {
				texts := make([]string, 1+rng.IntN(4))
				for i := range texts {
					texts[i] = pool[rng.IntN(len(pool))]
				}
				start := time.Now()
				status, hdr, vecs, body, err := s.embedTexts(client, texts)
				took := time.Since(start)
				switch {
				case err == nil && status == http.StatusOK:
					ok.Add(1)
					vc.check(texts, vecs)
					mu.Lock()
					latencies = append(latencies, took)
					mu.Unlock()
				case err == nil && status == http.StatusTooManyRequests && string(body) == want429 && hdr.Get("Retry-After") == "1":
					refused.Add(1)
					// Keep the pressure on: a tenth of the Retry-After.
					time.Sleep(100 * time.Millisecond)
				default:
					other.Add(1)
					mu.Lock()
					if len(otherExamples) < 5 {
						otherExamples = append(otherExamples, fmt.Sprintf("status %d err %v body %s", status, err, body))
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	client.CloseIdleConnections()

	p50, p99 := percentile(latencies, 50), percentile(latencies, 99)
	t.Logf("flood: %d clients, %d requests: %d answered 200, %d refused 429, %d other; 200 latency p50 %s p99 %s max %s",
		clients, ok.Load()+refused.Load()+other.Load(), ok.Load(), refused.Load(), other.Load(),
		p50.Round(time.Millisecond), p99.Round(time.Millisecond), percentile(latencies, 100).Round(time.Millisecond))
	if other.Load() > 0 {
		t.Errorf("%d answers were neither a correct 200 nor the 429: %v", other.Load(), otherExamples)
	}
	if vc.mismatches.Load() > 0 {
		t.Errorf("%d vectors differ from their text embedded alone: %v", vc.mismatches.Load(), vc.examples)
	}
	if ok.Load() == 0 || refused.Load() == 0 {
		t.Errorf("want both accepted and refused requests with %d clients over a limit of %d", clients, limit)
	}
	v := s.vars(t, nil)
	if v["requests_rejected_total"] != float64(refused.Load()) {
		t.Errorf("requests_rejected_total %v, the clients saw %d", v["requests_rejected_total"], refused.Load())
	}
	after := s.requireBackToRest(t, rest, rssSlackFlood)
	t.Logf("flood: goroutines %v → %v, fds %d → %d, RSS %d → %d MiB, live heap %.1f → %.1f MiB",
		rest.goroutines, after.goroutines, rest.fds, after.fds, rest.rssKB>>10, after.rssKB>>10, rest.liveHeap/(1<<20), after.liveHeap/(1<<20))
}

// soakDuration is 60 s, or EMBED_STACK_SOAK (a Go duration such as 30m) for the
// longer soak.
func soakDuration(t *testing.T) time.Duration {
	t.Helper()
	v := testenv.Get("EMBED_STACK_SOAK")
	if v == "" {
		return 60 * time.Second
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("EMBED_STACK_SOAK=%q: want a duration such as 30m", v)
	}
	return d
}

// TestSoak: three clients send mixed traffic for soakDuration: batches of short
// texts, single inputs of ~800 tokens (warm worker) and of ~1400 tokens (an
// ephemeral worker each, past --warm-max-tokens 1024). Zero errors are allowed,
// every vector must equal its text embedded alone, and at the end goroutines,
// descriptors and worker processes are back to the baseline taken after a warm-up,
// with RSS growth under 5% of the baseline plus 32 MiB.
func TestSoak(t *testing.T) {
	requireLinux(t)
	if testing.Short() {
		t.Skip("-short: the soak runs for a minute")
	}
	duration := soakDuration(t)
	s := ownServer(t, "--debug-vars", "--warm-max-tokens", "1024")
	short := make([]string, 16)
	for i := range short {
		short[i] = fmt.Sprintf("soak %d: %s", i, strings.Repeat("term ", i%9+1))
	}
	medium := []string{variedText(t, 700), "A second medium text. " + variedText(t, 760)}
	long := []string{variedText(t, 1400), "Another long text. " + variedText(t, 1500)}
	vc := &vectorCheck{want: s.alone(t, append(append(append([]string{}, short...), medium...), long...))}

	const clients = 3
	client := loadClient(clients)
	// Warm-up: the first requests grow pools and caches that then stay.
	for i := range 6 {
		if st, _, _, body, err := s.embedTexts(client, []string{short[i%len(short)], medium[i%2]}); err != nil || st != 200 {
			t.Fatalf("warm-up: %d %v %s", st, err, body)
		}
	}
	client.CloseIdleConnections()
	rest := s.rest(t)

	var (
		counts              [3]atomic.Int64 // short, medium, long requests answered correctly
		errs                atomic.Int64
		mu                  sync.Mutex
		latencies           []time.Duration
		errExamples         []string
		rssSamples          []int64
		sampleStop, sampled = make(chan struct{}), make(chan struct{})
	)
	go func() {
		defer close(sampled)
		tick := time.NewTicker(duration / 12)
		defer tick.Stop()
		for {
			select {
			case <-sampleStop:
				return
			case <-tick.C:
				b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.Cmd.Process.Pid))
				if err != nil {
					return
				}
				for _, line := range strings.Split(string(b), "\n") {
					if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
						n, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
						mu.Lock()
						rssSamples = append(rssSamples, n)
						mu.Unlock()
					}
				}
			}
		}
	}()
	stop := time.Now().Add(duration)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 7))
			for time.Now().Before(stop) {
				var texts []string
				kind := 0
				switch p := rng.IntN(100); {
				case p < 8:
					kind, texts = 2, []string{long[rng.IntN(len(long))]}
				case p < 35:
					kind, texts = 1, []string{medium[rng.IntN(len(medium))]}
				default:
					texts = make([]string, 1+rng.IntN(8))
					for i := range texts {
						texts[i] = short[rng.IntN(len(short))]
					}
				}
				start := time.Now()
				status, _, vecs, body, err := s.embedTexts(client, texts)
				took := time.Since(start)
				if err != nil || status != http.StatusOK {
					errs.Add(1)
					mu.Lock()
					if len(errExamples) < 5 {
						errExamples = append(errExamples, fmt.Sprintf("status %d err %v body %s", status, err, body))
					}
					mu.Unlock()
					continue
				}
				vc.check(texts, vecs)
				counts[kind].Add(1)
				mu.Lock()
				latencies = append(latencies, took)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(sampleStop)
	<-sampled
	client.CloseIdleConnections()

	total := counts[0].Load() + counts[1].Load() + counts[2].Load()
	t.Logf("soak %s: %d requests (%d short batches, %d ~800-token, %d ephemeral ~1400-token), %d errors; latency p50 %s p99 %s max %s",
		duration, total+errs.Load(), counts[0].Load(), counts[1].Load(), counts[2].Load(), errs.Load(),
		percentile(latencies, 50).Round(time.Millisecond), percentile(latencies, 99).Round(time.Millisecond), percentile(latencies, 100).Round(time.Millisecond))
	t.Logf("soak RSS samples (MiB): %v", mib(rssSamples))
	if errs.Load() > 0 {
		t.Errorf("%d requests failed: %v", errs.Load(), errExamples)
	}
	if vc.mismatches.Load() > 0 {
		t.Errorf("%d vectors differ from their text embedded alone: %v", vc.mismatches.Load(), vc.examples)
	}
	if counts[2].Load() == 0 {
		t.Errorf("no long (ephemeral) request completed in %s", duration)
	}
	slack := rest.rssKB/20 + 32<<10
	after := s.requireBackToRest(t, rest, slack)
	t.Logf("soak: goroutines %v → %v, fds %d → %d, RSS %d → %d MiB (bound +%d MiB), live heap %.1f → %.1f MiB",
		rest.goroutines, after.goroutines, rest.fds, after.fds, rest.rssKB>>10, after.rssKB>>10, slack>>10, rest.liveHeap/(1<<20), after.liveHeap/(1<<20))
	// Every ephemeral worker has exited: the warm one is the only child.
	waitWorkers(t, s, 1, orphanTimeout)
	if v := s.vars(t, nil); v["worker_restarts"] != 0 || v["worker_hang_kills"] != 0 {
		// The server's log holds why its worker ended (one restart in a CI run,
		// 2026-12-04, whose cause the test did not show).
		out := s.Out.String()
		out = out[max(0, len(out)-8<<10):]
		t.Errorf("workers restarted during the soak: %v\nthe server's last output:\n%s", v, out)
	}
}

func mib(kb []int64) []int64 {
	out := make([]int64, len(kb))
	for i, v := range kb {
		out[i] = v >> 10
	}
	return out
}
