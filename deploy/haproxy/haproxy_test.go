package haproxy

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/embed-stack/embed-stack/internal/e2e"
	"github.com/embed-stack/embed-stack/internal/testenv"
)

const (
	// drainDelay is the replicas' --drain-delay: haproxy.cfg's checks (inter 1s, fall
	// 2, timeout check 1s) take a replica out at most about 3 s after /ready turns
	// 503; the rest is margin for a loaded machine.
	drainDelay = "5s"
	// maxRequests bounds the load by count as well as by time.
	maxRequests = 100000
	// distinctTexts is the pool requests draw from (1 to 4 distinct texts each).
	distinctTexts = 200
	// upTimeout bounds the wait for HAProxy to see a replica up: rise 2 checks 1 s
	// apart once the replica is ready, with ample margin for a loaded machine.
	upTimeout = 60 * time.Second
)

// tolerance bounds the per-component difference between an answer through the
// balancer and the same text embedded alone on one replica: 0 on x86, where the
// engine's vectors do not depend on what a text was batched with; ARM's kernels move
// the last bits (as in conformance's batchTol).
var tolerance = func() float64 {
	if runtime.GOARCH == "amd64" {
		return 0
	}
	return 1e-5
}()

// TestReplicasBehindHAProxy runs deploy/haproxy/haproxy.cfg as shipped (addresses
// from its environment variables) over three replicas and, under load, restarts
// replica2 gracefully (SIGTERM, exit, start again: a rolling restart) and kills
// replica3 (SIGKILL of the replica's process group, then start again). It fails on a
// request the balancer does not answer, on any vector that differs from the solo
// run's, on any non-200 answer overlapping the graceful restart or outside both
// faults, and when the drain is not what took replica2 out (HAProxy must mark it down
// for /ready's 503, before its listener closes). The 5xx around the SIGKILL are
// measured and reported, not asserted: HAProxy replays a request whose replica died
// under it (retry-on empty-response), so 0 is expected, but a replica killed between
// writing a response's headers and its body leaves nothing to replay.
func TestReplicasBehindHAProxy(t *testing.T) {
	haproxy, err := exec.LookPath("haproxy")
	if err != nil {
		// Debian installs it in /usr/sbin, which a non-root PATH may lack.
		if haproxy, err = exec.LookPath("/usr/sbin/haproxy"); err != nil {
			e2e.Require(t, "no haproxy on PATH or in /usr/sbin (Debian: apt-get install haproxy)")
		}
	}
	bin, model := e2e.Paths(t)
	duration := testenv.Duration(t, "EMBED_STACK_SCALE_DURATION", 60*time.Second)
	clients := testenv.Int(t, "EMBED_STACK_SCALE_CLIENTS", 6)

	replicas := make([]*replica, 3)
	for i := range replicas {
		replicas[i] = &replica{name: fmt.Sprintf("replica%d", i+1), addr: e2e.FreeAddr(t), bin: bin, model: model}
		replicas[i].start(t)
	}
	replicas[0].p.WaitReady(t, replicas[0].url(), e2e.ReadyTimeout)

	// The reference: every text embedded alone, on one replica, with no balancer.
	texts := makeTexts(distinctTexts)
	want := make(map[string][]float64, len(texts))
	refStart := time.Now()
	for _, text := range texts {
		want[text] = e2e.Embeddings(t, replicas[0].url(), map[string]any{"input": []string{text}})[0]
	}
	t.Logf("reference: %d texts embedded alone on %s in %s", len(texts), replicas[0].name, time.Since(refStart).Round(time.Millisecond))
	for _, r := range replicas[1:] {
		r.p.WaitReady(t, r.url(), e2e.ReadyTimeout)
	}

	lbAddr, statsAddr := e2e.FreeAddr(t), e2e.FreeAddr(t)
	lb := exec.Command(haproxy, "-db", "-f", filepath.Join(e2e.RepoRoot(t), "deploy", "haproxy", "haproxy.cfg"))
	lb.Env = append(os.Environ(),
		"EMBED_STACK_LB_ADDR="+lbAddr, "EMBED_STACK_LB_STATS="+statsAddr,
		"EMBED_STACK_REPLICA_1="+replicas[0].addr, "EMBED_STACK_REPLICA_2="+replicas[1].addr,
		"EMBED_STACK_REPLICA_3="+replicas[2].addr,
		// Health-check and state-change lines only, not one line per request.
		"EMBED_STACK_LB_LOG_LEVEL=notice")
	lbProc := e2e.Start(t, lb)
	st := &stats{url: "http://" + statsAddr + "/stats;csv"}
	for _, r := range replicas {
		st.waitStatus(t, lbProc, r.name, "UP", upTimeout)
	}
	lbURL := "http://" + lbAddr
	if resp, err := http.Get(lbURL + "/ready"); err != nil {
		t.Fatalf("balancer not reachable at %s: %v\nhaproxy output:\n%s", lbURL, err, lbProc.Out)
	} else {
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s/ready through the balancer: %s", lbURL, resp.Status)
		}
	}

	loadAvgStart := loadAvg()
	// The load: clients until the deadline (which the faults may push back), at most
	// maxRequests in all.
	start := time.Now()
	var stopAt atomic.Int64
	stopAt.Store(start.Add(duration).UnixNano())
	var sent atomic.Int64
	results := make([][]result, clients)
	var wg sync.WaitGroup
	t.Cleanup(func() { stopAt.Store(0); wg.Wait() })
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[c] = runClient(lbURL, texts, want, uint64(c), &stopAt, &sent)
		}()
	}

	// Rolling restart of replica2 at a quarter of the run.
	r2 := replicas[1]
	sleepUntil(start.Add(duration / 4))
	graceful := window{from: time.Now()}
	if err := r2.p.Cmd.Process.Signal(syscall.SIGTERM); err != nil { // the server only, as Kubernetes signals PID 1
		t.Fatal(err)
	}
	drained := r2.watchDrain(t)
	r2.start(t)
	r2.p.WaitReady(t, r2.url(), e2e.ReadyTimeout)
	st.waitStatus(t, lbProc, r2.name, "UP", upTimeout)
	graceful.to = time.Now()

	// Crash of replica3 at 7/12 of the run (35 s of 60), or 3 s after replica2 is
	// back, whichever is later.
	r3 := replicas[2]
	sleepUntil(later(start.Add(duration*7/12), graceful.to.Add(3*time.Second)))
	crash := window{from: time.Now()}
	if err := r3.p.Signal(syscall.SIGKILL); err != nil { // the whole replica: server and worker
		t.Fatal(err)
	}
	<-r3.p.Done()
	r3.start(t)
	r3.p.WaitReady(t, r3.url(), e2e.ReadyTimeout)
	st.waitStatus(t, lbProc, r3.name, "UP", upTimeout)
	crash.to = time.Now()

	// At least duration of load, and 3 s of it after the last replica is back.
	if end := crash.to.Add(3 * time.Second); end.UnixNano() > stopAt.Load() {
		stopAt.Store(end.UnixNano())
	}
	wg.Wait()
	elapsed := time.Since(start)

	var all []result
	for _, rs := range results {
		all = append(all, rs...)
	}
	sum := summarize(all, graceful, crash)
	backend := st.read(t)
	t.Logf("load: %d clients for %s through HAProxy (%s), %d distinct texts, 1-4 per request; load average %s at the start, %s at the end",
		clients, elapsed.Round(time.Millisecond), haproxyVersion(haproxy), len(texts), loadAvgStart, loadAvg())
	t.Logf("requests sent %d; statuses %s; no answer %d; vectors checked %d, wrong %d (tolerance %g)", len(all), sum.statuses, sum.noAnswer, sum.checked, sum.wrong, tolerance)
	t.Logf("graceful restart of %s (SIGTERM at %s, back in rotation at %s): %d requests overlapping, %d 5xx; /ready 503 draining %s after SIGTERM, last answered at %s, exit %d at %s",
		r2.name, offset(start, graceful.from), offset(start, graceful.to), sum.gracefulN, sum.graceful5xx,
		drained.draining.Round(time.Millisecond), drained.lastAnswer.Round(time.Millisecond), drained.exit, drained.exited.Round(time.Millisecond))
	t.Logf("SIGKILL of %s (at %s, back in rotation at %s): %d requests overlapping, %d 5xx",
		r3.name, offset(start, crash.from), offset(start, crash.to), sum.crashN, sum.crash5xx)
	t.Logf("HAProxy backend: retries %s, redispatches %s, 5xx it answered %s; requests per replica %s %s %s (retry-on conn-failure empty-response, retries 3, option redispatch 1)",
		backend["BACKEND"]["wretr"], backend["BACKEND"]["wredis"], backend["BACKEND"]["hrsp_5xx"],
		backend["replica1"]["stot"], backend["replica2"]["stot"], backend["replica3"]["stot"])

	if sum.noAnswer > 0 {
		t.Errorf("%d requests got no HTTP answer from the balancer (first: %s)", sum.noAnswer, sum.firstNoAnswer)
	}
	if sum.wrong > 0 {
		t.Errorf("%d vectors differ from the solo run (first: %s)", sum.wrong, sum.firstWrong)
	}
	if sum.graceful5xx > 0 {
		t.Errorf("%d 5xx around the graceful restart of %s; the drain must keep them at 0 (first: %s)", sum.graceful5xx, r2.name, sum.firstGraceful5xx)
	}
	if sum.unexpected > 0 {
		t.Errorf("%d non-200 answers outside the SIGKILL window (first: %s)", sum.unexpected, sum.firstUnexpected)
	}
	if ok := sum.statuses[http.StatusOK]; ok < 100 {
		t.Errorf("only %d requests answered 200: the load did not run", ok)
	}
	for _, r := range replicas {
		if n, _ := strconv.Atoi(backend[r.name]["stot"]); n == 0 {
			t.Errorf("HAProxy sent no request to %s", r.name)
		}
	}
	if drained.draining <= 0 {
		t.Errorf("%s's /ready never answered 503 draining between SIGTERM and its listener closing", r2.name)
	}
	if drained.exit != 0 {
		t.Errorf("%s exited %d after SIGTERM, want 0\noutput:\n%s", r2.name, drained.exit, drained.output)
	}
	// The drain, not a refused connection, must be what took replica2 out: the first
	// failed check that left it DOWN must have seen /ready's 503.
	line := firstDown(lbProc.Out.String(), r2.name)
	t.Logf("HAProxy took %s out on: %s", r2.name, line)
	if !strings.Contains(line, "Layer7 wrong status, code: 503") {
		t.Errorf("HAProxy took %s out on %q, want a failed check on /ready's 503 (Layer7 wrong status, code: 503)", r2.name, line)
	}
	if t.Failed() {
		t.Logf("haproxy output:\n%s", lbProc.Out)
	}
}

// firstDown returns HAProxy's log line of the first failed health check of server
// that left it down ("" if none).
func firstDown(log, server string) string {
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "Health check for server replicas/"+server+" failed") && strings.Contains(line, "status: 0/") {
			return strings.TrimSpace(line)
		}
	}
	return ""
}

// replica is one `embed-stack serve` on a fixed address, restarted on the same one.
type replica struct {
	name, addr, bin, model string
	p                      *e2e.Process
}

func (r *replica) url() string { return "http://" + r.addr }

func (r *replica) start(t *testing.T) {
	t.Helper()
	cmd := exec.Command(r.bin, "serve", "--model", r.model, "--addr", r.addr, "--threads", "1",
		"--drain-delay", drainDelay, "--shutdown-grace", "30s")
	cmd.Dir = e2e.RepoRoot(t)
	r.p = e2e.Start(t, cmd)
}

// drainSeen is what a replica did between SIGTERM and its exit.
type drainSeen struct {
	// Since SIGTERM: the first /ready answer "draining" (0 = none), the last
	// answer of any kind, and the exit.
	draining, lastAnswer, exited time.Duration
	exit                         int
	output                       string
}

// watchDrain polls the replica's /ready directly from SIGTERM until it exits.
func (r *replica) watchDrain(t *testing.T) drainSeen {
	t.Helper()
	sigterm := time.Now()
	client := &http.Client{Timeout: time.Second}
	var d drainSeen
	deadline := time.After(time.Minute)
	for {
		select {
		case <-r.p.Done():
			d.exited = time.Since(sigterm)
			d.exit = e2e.ExitCode(r.p.Err())
			d.output = r.p.Out.String()
			return d
		case <-deadline:
			t.Fatalf("%s still running a minute after SIGTERM\noutput:\n%s", r.name, r.p.Out)
		case <-time.After(100 * time.Millisecond):
		}
		resp, err := client.Get(r.url() + "/ready")
		if err != nil {
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		d.lastAnswer = time.Since(sigterm)
		if resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(string(body), `"draining"`) && d.draining == 0 {
			d.draining = time.Since(sigterm)
		}
	}
}

// result is one request through the balancer.
type result struct {
	start, end     time.Time
	status         int // 0: no HTTP answer
	err            string
	checked, wrong int
	firstWrong     string
}

// runClient sends requests of 1-4 distinct texts until stopAt or until sent reaches
// maxRequests, checking every vector of every 200 against want.
func runClient(lbURL string, texts []string, want map[string][]float64, seed uint64, stopAt, sent *atomic.Int64) []result {
	rng := rand.New(rand.NewPCG(seed, 18))
	tr := http.DefaultTransport.(*http.Transport).Clone()
	client := &http.Client{Transport: tr, Timeout: time.Minute}
	defer tr.CloseIdleConnections()
	var out []result
	for time.Now().UnixNano() < stopAt.Load() && sent.Add(1) <= maxRequests {
		n := 1 + rng.IntN(4)
		batch := make([]string, 0, n)
		for _, i := range rng.Perm(len(texts))[:n] {
			batch = append(batch, texts[i])
		}
		out = append(out, post(client, lbURL, batch, want))
	}
	return out
}

func post(client *http.Client, lbURL string, batch []string, want map[string][]float64) result {
	raw, _ := json.Marshal(map[string]any{"input": batch, "model": "qwen3-embedding-0.6b", "encoding_format": "float"})
	r := result{start: time.Now()}
	resp, err := client.Post(lbURL+"/v1/embeddings", "application/json", bytes.NewReader(raw))
	if err != nil {
		r.err = err.Error()
		r.end = time.Now()
		return r
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	r.end = time.Now()
	if err != nil {
		r.err = "reading the body: " + err.Error()
		return r
	}
	r.status = resp.StatusCode
	if r.status != http.StatusOK {
		r.err = abbreviate(string(body))
		return r
	}
	var got struct {
		Data []struct {
			Index     int       `json:"index"`
			Embedding []float64 `json:"embedding"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &got); err != nil || len(got.Data) != len(batch) {
		r.wrong, r.firstWrong = len(batch), fmt.Sprintf("undecodable or short answer (%v): %s", err, abbreviate(string(body)))
		return r
	}
	for _, d := range got.Data {
		r.checked++
		if d.Index < 0 || d.Index >= len(batch) {
			r.wrong++
			r.firstWrong = fmt.Sprintf("index %d of %d", d.Index, len(batch))
			continue
		}
		if diff := maxAbsDiff(d.Embedding, want[batch[d.Index]]); !(diff <= tolerance) {
			r.wrong++
			if r.firstWrong == "" {
				r.firstWrong = fmt.Sprintf("input %d (%q): max |Δ| %.3g", d.Index, abbreviate(batch[d.Index]), diff)
			}
		}
	}
	return r
}

// window is the time from a fault until the replica is back in HAProxy's rotation.
type window struct{ from, to time.Time }

func (w window) overlaps(r result) bool { return r.start.Before(w.to) && r.end.After(w.from) }

type summary struct {
	statuses                          statusCounts
	noAnswer, checked, wrong          int
	gracefulN, graceful5xx            int
	crashN, crash5xx                  int
	unexpected                        int
	firstNoAnswer, firstWrong         string
	firstGraceful5xx, firstUnexpected string
}

func summarize(all []result, graceful, crash window) summary {
	s := summary{statuses: statusCounts{}}
	first := func(dst *string, r result) {
		if *dst == "" {
			*dst = fmt.Sprintf("%d %s", r.status, r.err)
		}
	}
	for _, r := range all {
		s.statuses[r.status]++
		s.checked += r.checked
		s.wrong += r.wrong
		if r.wrong > 0 && s.firstWrong == "" {
			s.firstWrong = r.firstWrong
		}
		if r.status == 0 {
			s.noAnswer++
			first(&s.firstNoAnswer, r)
		}
		inGraceful, inCrash := graceful.overlaps(r), crash.overlaps(r)
		if inGraceful {
			s.gracefulN++
			if r.status >= 500 {
				s.graceful5xx++
				first(&s.firstGraceful5xx, r)
			}
		}
		if inCrash {
			s.crashN++
			if r.status >= 500 {
				s.crash5xx++
			}
		}
		if r.status != http.StatusOK && r.status != 0 && !inCrash && !(inGraceful && r.status >= 500) {
			s.unexpected++
			first(&s.firstUnexpected, r)
		}
	}
	return s
}

// statusCounts counts answers by HTTP status (0: none).
type statusCounts map[int]int

func (c statusCounts) String() string {
	codes := make([]int, 0, len(c))
	for code := range c {
		codes = append(codes, code)
	}
	slices.Sort(codes)
	parts := make([]string, len(codes))
	for i, code := range codes {
		parts[i] = fmt.Sprintf("%d: %d", code, c[code])
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// stats reads HAProxy's CSV statistics of the replicas backend.
type stats struct{ url string }

// read returns the replicas backend's rows by server name (BACKEND for the total),
// each by column name.
func (s *stats) read(t *testing.T) map[string]map[string]string {
	t.Helper()
	rows, err := s.fetch()
	if err != nil {
		t.Fatalf("HAProxy stats: %v", err)
	}
	return rows
}

func (s *stats) fetch() (map[string]map[string]string, error) {
	client := &http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get(s.url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	recs, err := csv.NewReader(bytes.NewReader(bytes.TrimPrefix(body, []byte("# ")))).ReadAll()
	if err != nil || len(recs) < 2 {
		return nil, fmt.Errorf("unreadable CSV (%v): %.200s", err, body)
	}
	rows := map[string]map[string]string{}
	for _, rec := range recs[1:] {
		if len(rec) < 2 || rec[0] != "replicas" {
			continue
		}
		row := map[string]string{}
		for i, col := range recs[0] {
			if i < len(rec) {
				row[col] = rec[i]
			}
		}
		rows[rec[1]] = row
	}
	return rows, nil
}

// waitStatus polls until HAProxy reports server's check status as want ("UP").
func (s *stats) waitStatus(t *testing.T, lb *e2e.Process, server, want string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := "no answer"
	for time.Now().Before(deadline) {
		select {
		case <-lb.Done():
			t.Fatalf("haproxy exited: %v\noutput:\n%s", lb.Err(), lb.Out)
		default:
		}
		rows, err := s.fetch()
		if err == nil {
			if last = rows[server]["status"]; last == want {
				return
			}
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("HAProxy: %s not %s after %s (last: %s)\nhaproxy output:\n%s", server, want, timeout, last, lb.Out)
}

// makeTexts returns n distinct texts of 4 to 40 words.
func makeTexts(n int) []string {
	words := strings.Fields("replica balancer drain health check retry vector embedding shard corpus " +
		"token query document passage restart signal graceful crash load latency " +
		"river mountain library lantern orchard harbour winter garden copper violin")
	rng := rand.New(rand.NewPCG(18, 2))
	texts := make([]string, n)
	for i := range texts {
		w := make([]string, 4+rng.IntN(37))
		for j := range w {
			w[j] = words[rng.IntN(len(words))]
		}
		texts[i] = fmt.Sprintf("Text %d: %s.", i, strings.Join(w, " "))
	}
	return texts
}

func maxAbsDiff(a, b []float64) float64 {
	if len(a) != len(b) || len(a) == 0 {
		return math.Inf(1)
	}
	var m float64
	for i := range a {
		m = max(m, math.Abs(a[i]-b[i]))
	}
	return m
}

func abbreviate(s string) string {
	if len(s) > 160 {
		return s[:160] + "…"
	}
	return s
}

func sleepUntil(at time.Time) { time.Sleep(time.Until(at)) }

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func offset(start, at time.Time) string { return at.Sub(start).Round(100 * time.Millisecond).String() }

// loadAvg is the machine's 1-minute load average, for the log: the latencies and
// counts above depend on what else runs.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Fields(string(b))[0]
}

func haproxyVersion(path string) string {
	out, err := exec.Command(path, "-v").Output()
	if err != nil {
		return "version unknown"
	}
	line, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(line)
}
