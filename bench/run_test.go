package bench

import (
	"bytes"
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func newTestServer(t *testing.T, f *fakeServer) *Server {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return &Server{BaseURL: srv.URL + "/v1", Model: "bench", Client: NewClient()}
}

// byteTokens is what a fake server that tokenizes by bytes reports as usage.
func byteTokens(texts []string) int {
	n := 0
	for _, s := range texts {
		n += len(s) + 1
	}
	return n
}

// TestRunner runs every kind of shape against a fake floor, a correct server
// ("ours"), a correct peer and a peer that forgets the end-of-text token.
func TestRunner(t *testing.T) {
	ours := &fakeServer{vec: rightVec, tokens: byteTokens, limit: 100,
		delay: func(in []string) time.Duration {
			if len(in[0]) > 50 {
				return 150 * time.Millisecond // the long input
			}
			return 0
		}}
	good := &fakeServer{vec: rightVec, tokens: byteTokens}
	bad := &fakeServer{vec: noEOSVec, tokens: byteTokens}
	engine := &fakeEngine{}
	contenders := []*Contender{
		{Name: "floor", Role: RoleFloor, Target: &Floor{Engine: engine}},
		{Name: "ours", Role: RoleOurs, Target: newTestServer(t, ours)},
		{Name: "good", Role: RolePeer, Target: newTestServer(t, good)},
		{Name: "bad", Role: RolePeer, Target: newTestServer(t, bad)},
	}
	pool := byteInputs("q one", "q two", "q three", "q four")
	shapes := []Shape{
		{ID: "req", Kind: KindRequest, Warmup: 1, Reps: 2, Requests: [][]Input{
			byteInputs("warm up a", "warm up b"), byteInputs("rep one a", "rep one b"), byteInputs("rep two a", "rep two b"),
		}},
		{ID: ShapeOverLimit, Kind: KindRequest, Reps: 2, Expect: 400, Contract: true, ServersOnly: true, Requests: [][]Input{
			byteInputs(strings.Repeat("x", 101)), byteInputs(strings.Repeat("y", 101)),
		}},
		{ID: ClientsShape(3), Kind: KindClients, Clients: 3, Duration: 60 * time.Millisecond, Reps: 1, Pool: pool},
		{ID: ShapeInFlight, Kind: KindInFlight, ServersOnly: true, Pool: pool, Idle: 4, Window: 2 * time.Second,
			Long: byteInputs(strings.Repeat("long ", 12))[0]},
	}
	var log bytes.Buffer
	r := &Runner{Contenders: contenders, Shapes: shapes, Checks: byteInputs("check one", "check two"), Log: &log}
	rep, err := r.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}

	// The vector check: the bad peer is refused and never sent anything else.
	for _, c := range rep.Contenders[1:] {
		wantPass := c.Name != "bad"
		if c.Check == nil || c.Check.Pass != wantPass {
			t.Errorf("%s: check %+v, want pass %v", c.Name, c.Check, wantPass)
		}
	}
	if bad.calls != 1 {
		t.Errorf("the bad peer got %d requests, want 1 (the check only)", bad.calls)
	}
	if c := rep.CheckControl; c == nil || !c.Caught || c.MaxCosine >= DefaultMinCosine {
		t.Errorf("negative control %+v, want it caught", c)
	}

	tests := []struct {
		shape, contender string
		skipped          string // substring; "" = ran
		requests, errors int
		statuses         map[string]int
		tokens           int
	}{
		{"req", "floor", "", 2, 0, map[string]int{"200": 2}, 20},
		{"req", "ours", "", 2, 0, map[string]int{"200": 2}, 20},
		{"req", "good", "", 2, 0, map[string]int{"200": 2}, 20},
		{"req", "bad", "vector check failed", 0, 0, nil, 0},
		{ShapeOverLimit, "ours", "", 2, 0, map[string]int{"400": 2}, 102},
		{ShapeOverLimit, "good", "API contract", 0, 0, nil, 0},
		{ShapeOverLimit, "floor", "in-process engine", 0, 0, nil, 0},
		{ShapeInFlight, "floor", "in-process engine", 0, 0, nil, 0},
	}
	for _, tt := range tests {
		res := rep.Result(tt.shape, tt.contender)
		if res == nil {
			t.Errorf("%s on %s: no result", tt.shape, tt.contender)
			continue
		}
		if tt.skipped != "" {
			if !strings.Contains(res.Skipped, tt.skipped) {
				t.Errorf("%s on %s: skipped %q, want %q", tt.shape, tt.contender, res.Skipped, tt.skipped)
			}
			continue
		}
		if res.Skipped != "" || res.Requests != tt.requests || res.Errors != tt.errors || res.Tokens != tt.tokens || res.TokenMismatches != 0 {
			t.Errorf("%s on %s: %+v; want %d requests, %d errors, %d tokens", tt.shape, tt.contender, res, tt.requests, tt.errors, tt.tokens)
		}
		for k, v := range tt.statuses {
			if res.Statuses[k] != v {
				t.Errorf("%s on %s: statuses %v, want %v", tt.shape, tt.contender, res.Statuses, tt.statuses)
			}
		}
		if tt.statuses["200"] > 0 && (res.TokensPerSec.N != tt.requests || res.TokensPerSec.Median <= 0) {
			t.Errorf("%s on %s: tokens/s %+v over %d repetitions", tt.shape, tt.contender, res.TokensPerSec, tt.requests)
		}
	}

	// CPU time: the fake servers have no pid, so theirs is not measured (the
	// in-process floor's is, but the fake engine uses too little to show).
	if o := rep.Result("req", "ours"); o.CPUSeconds != 0 || o.TokensPerCPUSec != 0 {
		t.Errorf("CPU of a server without a pid: %v s (%v tok/CPU-s); want none", o.CPUSeconds, o.TokensPerCPUSec)
	}

	// Clients: servers get single-query requests; the floor embeds 3 at a time.
	for _, name := range []string{"floor", "ours", "good"} {
		res := rep.Result(ClientsShape(3), name)
		if res == nil || res.Requests == 0 || res.Errors != 0 || res.RequestsPerSec.N != 1 {
			t.Errorf("clients on %s: %+v", name, res)
		}
	}
	engine.mu.Lock()
	threes := 0
	for _, n := range engine.batch {
		if n == 3 {
			threes++
		}
	}
	engine.mu.Unlock()
	if floor := rep.Result(ClientsShape(3), "floor"); threes == 0 || floor.Requests != 3*threes {
		t.Errorf("the floor made %d calls of 3 queries for %d requests; want 3 requests per call", threes, floor.Requests)
	}

	// In flight: idle queries first, then queries beside the 150ms long input,
	// which finishes inside the window.
	res := rep.Result(ShapeInFlight, "ours")
	if res.IdleMS == nil || res.IdleMS.N != 4 || res.InFlightMS == nil || res.InFlightMS.N == 0 || res.LongCancelled || res.LongMS < 150 || res.Errors != 0 {
		t.Errorf("in-flight: idle %+v, in flight %+v, long %.0f ms cancelled %v, errors %d (%s)", res.IdleMS, res.InFlightMS, res.LongMS, res.LongCancelled, res.Errors, res.FirstError)
	}
	if !strings.Contains(log.String(), "bad is not timed: vector check failed") {
		t.Errorf("log does not say the bad peer was refused:\n%s", log.String())
	}
}

// TestInFlightCancel: a long input still running when the window closes is
// cancelled, and the server is idle again before the shape ends.
func TestInFlightCancel(t *testing.T) {
	srv := &fakeServer{vec: rightVec, delay: func(in []string) time.Duration {
		if len(in[0]) > 50 {
			return time.Hour
		}
		return time.Millisecond
	}}
	r := &Runner{Contenders: []*Contender{{Name: "ours", Role: RoleOurs, Target: newTestServer(t, srv)}}, RequestTimeout: time.Minute}
	s := &Shape{ID: ShapeInFlight, Kind: KindInFlight, Pool: byteInputs("a", "b"), Idle: 2, Window: 100 * time.Millisecond,
		Long: byteInputs(strings.Repeat("long ", 12))[0]}
	start := time.Now()
	res := r.inFlight(context.Background(), s, r.Contenders[0].Target)
	if !res.LongCancelled || res.Errors != 0 || res.InFlightMS.N == 0 {
		t.Errorf("cancelled %v, errors %d (%s), in flight %+v", res.LongCancelled, res.Errors, res.FirstError, res.InFlightMS)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the shape took %s; the long input was not cancelled", d)
	}
}

// TestRunnerReferenceFails: without the reference's vectors nothing can be checked,
// so the run stops.
func TestRunnerReferenceFails(t *testing.T) {
	r := &Runner{
		Contenders: []*Contender{{Name: "ours", Role: RoleOurs, Target: newTestServer(t, &fakeServer{vec: rightVec, status: 503})}},
		Checks:     byteInputs("a"),
	}
	if _, err := r.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "the reference ours failed the check inputs") {
		t.Errorf("err %v", err)
	}
}

func TestPlanShapes(t *testing.T) {
	// Numbers in a row: a text no stretch of which repeats.
	var text strings.Builder
	for i := range 10000 {
		fmt.Fprintf(&text, "%d ", i)
	}
	c, err := NewCorpus(byteTok{}, text.String(), "task")
	if err != nil {
		t.Fatal(err)
	}
	p := Plan{
		ShortTokens: 40, MediumTokens: 64, LongTokens: 300, OverLimitTokens: 400,
		Batches: []int{1, 4}, Lengths: []int{16, 128}, MaxGridTokens: 256,
		Clients: []int{1, 2}, ClientDuration: time.Second, Reps: 2, HeavyTokens: 300,
		Skip: []string{ShapeTwo1k}, InFlightTokens: []int{300},
	}
	shapes, err := p.Shapes(c)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range shapes {
		ids = append(ids, s.ID)
	}
	want := []string{ShapeShort, ShapeLong, ShapeShortLong, ShapeOverLimit, "grid/1x16", "grid/1x128", "grid/4x16", "clients/1", "clients/2", ShapeInFlight, "in-flight/300"}
	if !slices.Equal(ids, want) {
		t.Fatalf("shapes %v, want %v (grid/4x128 is over MaxGridTokens, seed/2x1k skipped)", ids, want)
	}
	byID := map[string]Shape{}
	for _, s := range shapes {
		byID[s.ID] = s
	}
	tests := []struct {
		id                        string
		warmup, reps, requests    int
		tokens, expect            int
		contract, serversOnly     bool
		wantFirstInputTokenCounts []int
	}{
		{ShapeShort, 1, 2, 3, 40, 0, false, false, []int{40}},
		{ShapeLong, 0, 1, 1, 300, 0, false, false, []int{300}}, // heavy: no warm-up, HeavyReps
		{ShapeShortLong, 0, 1, 1, 340, 0, false, false, []int{40, 300}},
		{ShapeOverLimit, 0, 2, 2, 400, 400, true, true, []int{400}},
		{"grid/4x16", 1, 2, 3, 64, 0, false, false, []int{16, 16, 16, 16}},
	}
	for _, tt := range tests {
		s := byID[tt.id]
		if s.Warmup != tt.warmup || s.Reps != tt.reps || len(s.Requests) != tt.requests || s.Tokens() != tt.tokens ||
			s.Expect != tt.expect || s.Contract != tt.contract || s.ServersOnly != tt.serversOnly {
			t.Errorf("%s: warmup %d reps %d requests %d tokens %d expect %d contract %v serversOnly %v", tt.id,
				s.Warmup, s.Reps, len(s.Requests), s.Tokens(), s.Expect, s.Contract, s.ServersOnly)
		}
		var counts []int
		for _, in := range s.Requests[0] {
			counts = append(counts, len(in.Tokens))
		}
		if !slices.Equal(counts, tt.wantFirstInputTokenCounts) {
			t.Errorf("%s: input lengths %v, want %v", tt.id, counts, tt.wantFirstInputTokenCounts)
		}
		// Requests of one shape carry different texts.
		if len(s.Requests) > 1 && s.Requests[0][0].Text == s.Requests[1][0].Text {
			t.Errorf("%s: requests repeat the same text", tt.id)
		}
	}
	if q := byID[ShapeShort].Requests[0][0].Text; !strings.HasPrefix(q, "Instruct: task\nQuery:") {
		t.Errorf("the short input is not a wrapped query: %.40q", q)
	}
	only, err := Plan{Only: []string{"grid/1x16", ShapeInFlight}, Lengths: []int{16}, Batches: []int{1}}.Shapes(c)
	if err != nil || len(only) != 2 || only[0].ID != "grid/1x16" || only[1].ID != ShapeInFlight {
		t.Errorf("Only: %d shapes, err %v", len(only), err)
	}
}

// TestWarmupMismatch: a token count other than the one sent is reported even when it
// comes back from an untimed warm-up request.
func TestWarmupMismatch(t *testing.T) {
	srv := &fakeServer{vec: rightVec, tokens: func(in []string) int {
		n := byteTokens(in)
		if strings.HasPrefix(in[0], "warm") {
			n++ // as a server whose tokenizer splits one word differently
		}
		return n
	}}
	r := &Runner{Contenders: []*Contender{{Name: "peer", Role: RolePeer, Target: newTestServer(t, srv)}}, RequestTimeout: time.Minute}
	s := &Shape{ID: "req", Kind: KindRequest, Warmup: 1, Reps: 1, Requests: [][]Input{byteInputs("warm up"), byteInputs("timed a")}}
	res := r.runRequests(context.Background(), s, []int{0})[0]
	if res.Requests != 1 || res.Errors != 0 || res.TokenMismatches != 1 || res.FirstMismatch != "reported 9 tokens, 8 were sent" {
		t.Errorf("%d requests, %d errors, %d mismatches (%q); want 1, 0, 1", res.Requests, res.Errors, res.TokenMismatches, res.FirstMismatch)
	}
}

// TestParseCPUInfo: the first processor's name, family, model and SIMD flags; the
// label says "no AVX-512" only when avx512f is missing.
func TestParseCPUInfo(t *testing.T) {
	const zen3 = `processor	: 0
vendor_id	: AuthenticAMD
cpu family	: 25
model		: 1
model name	: AMD EPYC
flags		: fpu sse2 fma avx f16c avx2 sha_ni
processor	: 1
model name	: Other
flags		: avx512f
`
	name, id, simd := parseCPUInfo(zen3)
	if name != "AMD EPYC" || id != "family 25 model 1" || !reflect.DeepEqual(simd, []string{"avx2", "fma", "f16c"}) {
		t.Fatalf("parseCPUInfo = %q, %q, %q; want AMD EPYC, family 25 model 1, [avx2 fma f16c]", name, id, simd)
	}
	h := Host{CPU: name, CPUID: id, SIMD: simd}
	if got, want := h.cpuLabel(), "AMD EPYC, family 25 model 1, AVX2 FMA F16C, no AVX-512"; got != want {
		t.Errorf("cpuLabel = %q, want %q", got, want)
	}
	zen5 := "cpu family\t: 26\nmodel\t\t: 2\nmodel name\t: AMD EPYC 9B45\nflags\t\t: avx2 fma f16c avx512f avx512_vnni avx512_bf16\n"
	name, id, simd = parseCPUInfo(zen5)
	h = Host{CPU: name, CPUID: id, SIMD: simd}
	if got, want := h.cpuLabel(), "AMD EPYC 9B45, family 26 model 2, AVX2 FMA F16C AVX512F AVX512_VNNI AVX512_BF16"; got != want {
		t.Errorf("cpuLabel = %q, want %q", got, want)
	}
	h.CPUKernels = "zen4"
	if got, want := h.cpuLabel(), "AMD EPYC 9B45, family 26 model 2, AVX2 FMA F16C AVX512F AVX512_VNNI AVX512_BF16, CPU kernels zen4"; got != want {
		t.Errorf("cpuLabel = %q, want %q", got, want)
	}
	h.Weights, h.WeightsConvertedFrom = "BF16", "F16"
	if got, want := h.cpuLabel(), "AMD EPYC 9B45, family 26 model 2, AVX2 FMA F16C AVX512F AVX512_VNNI AVX512_BF16, CPU kernels zen4, weights BF16 (converted from F16)"; got != want {
		t.Errorf("cpuLabel = %q, want %q", got, want)
	}
	if got := (Host{}).cpuLabel(); got != "–" {
		t.Errorf("empty host label = %q, want –", got)
	}
}

// TestRunnerIdleSettle: the idle memory is read only after the contenders have been
// left alone for IdleSettle (serve hands its idle heap back after a few seconds),
// and at once without it.
func TestRunnerIdleSettle(t *testing.T) {
	for _, settle := range []time.Duration{0, 400 * time.Millisecond} {
		var log bytes.Buffer
		r := &Runner{Contenders: []*Contender{{Name: "ours", Role: RoleOurs, PID: os.Getpid(),
			Target: newTestServer(t, &fakeServer{vec: rightVec})}},
			Checks: byteInputs("check one"), IdleSettle: settle, Log: &log, RequestTimeout: time.Minute}
		start := time.Now()
		rep, err := r.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		if c := rep.Contenders[0]; c.Idle == nil || len(c.Idle.Procs) == 0 {
			t.Errorf("settle %s: no idle snapshot (%s)", settle, c.MemoryError)
		}
		said := strings.Contains(log.String(), "leaving the servers idle for "+settle.String())
		if settle > 0 && (took < settle || !said) {
			t.Errorf("settle %s: the run took %s, logged the wait: %v; want at least the settle", settle, took, said)
		}
		if settle == 0 && (said || took >= 400*time.Millisecond) {
			t.Errorf("no settle: the run took %s, logged a wait: %v", took, said)
		}
	}
}
