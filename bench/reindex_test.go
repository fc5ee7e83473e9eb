package bench

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
)

// numbersCorpus is a corpus no stretch of which repeats, tokenized by bytes.
func numbersCorpus(t *testing.T, n int) *Corpus {
	t.Helper()
	var text strings.Builder
	for i := range n {
		fmt.Fprintf(&text, "%d ", i)
	}
	c, err := NewCorpus(byteTok{}, text.String(), "task")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The plan's split: the seen share exactly, spread so that every request of the
// timed pass mixes seen and new documents in that proportion, every document
// distinct, the priming pass the seen ones only.
func TestReindexShape(t *testing.T) {
	c := numbersCorpus(t, 10000)
	p := Plan{Only: []string{ShapeReindex}, ReindexDocs: 50, ReindexTokens: 10, ReindexBatch: 10}
	shapes, err := p.Shapes(c)
	if err != nil {
		t.Fatal(err)
	}
	if len(shapes) != 1 || shapes[0].ID != ShapeReindex || shapes[0].Kind != KindReindex || !shapes[0].ServersOnly {
		t.Fatalf("shapes %+v, want the re-index shape alone", shapes)
	}
	s := shapes[0]
	if s.Seen != 40 || len(s.Requests) != 5 || len(s.Prime) != 4 || s.docs() != 50 || s.Tokens() != 100 {
		t.Fatalf("seen %d, %d timed requests, %d priming requests, %d documents, %d tokens per request; want 40, 5, 4, 50, 100",
			s.Seen, len(s.Requests), len(s.Prime), s.docs(), s.Tokens())
	}
	primed := map[string]bool{}
	for _, req := range s.Prime {
		if len(req) != 10 {
			t.Errorf("a priming request of %d documents, want 10", len(req))
		}
		for _, in := range req {
			primed[in.Text] = true
		}
	}
	texts := map[string]bool{}
	for k, req := range s.Requests {
		var fresh []int
		for j, in := range req {
			if len(in.Tokens) != 10 || texts[in.Text] {
				t.Errorf("request %d document %d: %d tokens, repeated %v", k, j, len(in.Tokens), texts[in.Text])
			}
			texts[in.Text] = true
			if !primed[in.Text] {
				fresh = append(fresh, j)
			}
		}
		if !slices.Equal(fresh, []int{4, 9}) {
			t.Errorf("request %d: new documents at %v, want [4 9] (every fifth)", k, fresh)
		}
	}
	if !strings.Contains(s.About, "re-index of 50 documents of 10 tokens in requests of 10, 40 of them (80%) embedded before") {
		t.Errorf("about: %s", s.About)
	}

	// Odd sizes: 7 documents, 50% seen (3.5 rounds to 4), requests of 3.
	p = Plan{Reindex: true, Only: []string{ShapeReindex}, ReindexDocs: 7, ReindexTokens: 10, ReindexSeenPercent: 50, ReindexBatch: 3}
	if shapes, err = p.Shapes(c); err != nil {
		t.Fatal(err)
	}
	if s := shapes[0]; s.Seen != 4 || len(s.Requests) != 3 || len(s.Requests[2]) != 1 || len(s.Prime) != 2 {
		t.Errorf("7 documents, 50%%: seen %d, requests %d (last of %d), priming requests %d; want 4, 3 (1), 2", s.Seen, len(s.Requests), len(s.Requests[2]), len(s.Prime))
	}

	// A corpus too short for the documents asked for repeats text: refused.
	small := numbersCorpus(t, 60) // 170 bytes
	p = Plan{Only: []string{ShapeReindex}, ReindexDocs: 40, ReindexTokens: 10}
	if _, err := p.Shapes(small); err == nil || !strings.Contains(err.Error(), "holds fewer than 40 distinct documents of 10 tokens; ask for fewer or shorter ones") {
		t.Errorf("corpus too short: %v", err)
	}
	p = Plan{Only: []string{ShapeReindex}, ReindexSeenPercent: 120}
	if _, err := p.Shapes(c); err == nil || !strings.Contains(err.Error(), "120% seen") {
		t.Errorf("120%% seen: %v", err)
	}
}

func TestPlanHasReindex(t *testing.T) {
	for _, tt := range []struct {
		p    Plan
		want bool
	}{
		{Plan{}, false},
		{Plan{Reindex: true}, true},
		{Plan{Only: []string{ShapeShort}}, false},
		{Plan{Reindex: true, Only: []string{ShapeShort}}, false},
		{Plan{Only: []string{ShapeShort, ShapeReindex}}, true},
		{Plan{Reindex: true, Skip: []string{ShapeReindex}}, false},
	} {
		if got := tt.p.HasReindex(); got != tt.want {
			t.Errorf("%+v: %v, want %v", tt.p, got, tt.want)
		}
	}
}

// seenServer is a fake with an exact cache: it remembers the texts it embedded
// and reports the tokens of those it had seen as cached.
func seenServer(vec func(string) []float32) *fakeServer {
	var mu sync.Mutex
	seen := map[string]bool{}
	return &fakeServer{vec: vec, tokens: byteTokens, cached: func(texts []string) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, s := range texts {
			if seen[s] {
				n += len(s) + 1
			}
			seen[s] = true
		}
		return n
	}}
}

// TestRunReindex runs the shape on a fake floor (skipped), a server without a
// cache (the reference), one with an exact cache, and a peer whose every vector
// differs from the reference's in its lowest bit.
func TestRunReindex(t *testing.T) {
	c := numbersCorpus(t, 10000)
	p := Plan{Only: []string{ShapeReindex}, ReindexDocs: 50, ReindexTokens: 10, ReindexBatch: 10}
	shapes, err := p.Shapes(c)
	if err != nil {
		t.Fatal(err)
	}
	shape := shapes[0]
	plain := &fakeServer{vec: rightVec, tokens: byteTokens}
	cached := seenServer(rightVec)
	flipped := func(text string) []float32 {
		v := rightVec(text)
		v[0] = math.Float32frombits(math.Float32bits(v[0]) ^ 1)
		return v
	}
	drift := &fakeServer{vec: flipped, tokens: byteTokens}
	r := &Runner{Contenders: []*Contender{
		{Name: "floor", Role: RoleFloor, Target: &Floor{Engine: &fakeEngine{}}},
		{Name: "plain", Role: RoleOurs, Target: newTestServer(t, plain)},
		{Name: "cached", Role: RoleOurs, CacheMiB: 16, Target: newTestServer(t, cached)},
		{Name: "drift", Role: RolePeer, Target: newTestServer(t, drift)},
	}, Shapes: shapes}
	rep, err := r.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if f := rep.Result(ShapeReindex, "floor"); f == nil || f.Skipped != "not applicable to the in-process engine" {
		t.Errorf("floor: %+v", f)
	}
	for _, f := range []*fakeServer{plain, cached, drift} {
		if f.calls != 4+5 {
			t.Errorf("%d calls, want 4 priming and 5 timed", f.calls)
		}
	}
	allTokens, seenTokens := 0, 0
	for _, req := range shape.Requests {
		allTokens += len(req) * 10
	}
	for _, req := range shape.Prime {
		seenTokens += len(req) * 10
	}
	ref := rep.Result(ShapeReindex, "plain")
	for _, name := range []string{"plain", "cached", "drift"} {
		res := rep.Result(ShapeReindex, name)
		if res == nil || res.Reindex == nil || res.Errors != 0 || res.WarmupErrors != 0 || res.TokenMismatches != 0 || res.Requests != 5 || res.Statuses["200"] != 5 {
			t.Fatalf("%s: %+v", name, res)
		}
		a := res.Reindex
		if a.Docs != 50 || a.Seen != 40 || a.Tokens != allTokens || a.Seconds <= 0 || a.PrimeSeconds <= 0 || a.PrimeCachedTokens != 0 {
			t.Errorf("%s: %+v, want 50 documents, 40 seen, %d tokens, both passes timed, nothing cached while priming", name, a, allTokens)
		}
		if want := 50 / a.Seconds; math.Abs(a.DocsPerSec-want) > 1e-9*want || res.TokensPerSec.N != 1 || res.TokensPerSec.Median != float64(allTokens)/a.Seconds {
			t.Errorf("%s: %.3f docs/s, tokens/s %+v; want %.3f and %d tokens over %.4f s", name, a.DocsPerSec, res.TokensPerSec, want, allTokens, a.Seconds)
		}
		if name == "plain" {
			if a.Reference != "" || a.Compared != 0 {
				t.Errorf("the reference compared with %q", a.Reference)
			}
			continue
		}
		if a.Reference != "plain" || a.Speedup != res.TokensPerSec.Median/ref.TokensPerSec.Median || a.Compared != 50 {
			t.Errorf("%s: reference %q, speedup %v (tok/s %v against %v), compared %d", name, a.Reference, a.Speedup, res.TokensPerSec.Median, ref.TokensPerSec.Median, a.Compared)
		}
	}
	if a := rep.Result(ShapeReindex, "cached").Reindex; a.CachedTokens != seenTokens || seenTokens != 400 || a.BitIdentical != 50 || a.FirstDiffer != "" || a.MinCosine < 1-1e-6 {
		t.Errorf("cached: %d cached tokens (want %d), %d bit-identical (%s), lowest cosine %v", a.CachedTokens, seenTokens, a.BitIdentical, a.FirstDiffer, a.MinCosine)
	}
	d := rep.Result(ShapeReindex, "drift").Reindex
	want := rightVec(shape.Requests[0][0].Text)[0]
	wantDiff := fmt.Sprintf("vector 0 (a document seen before): element 0 is %#08x (%g) against %#08x (%g)",
		math.Float32bits(want)^1, math.Float32frombits(math.Float32bits(want)^1), math.Float32bits(want), want)
	if d.CachedTokens != 0 || d.BitIdentical != 0 || d.FirstDiffer != wantDiff || d.MinCosine < 0.999999 {
		t.Errorf("drift: %d cached, %d bit-identical, first differing %q (want %q), lowest cosine %v", d.CachedTokens, d.BitIdentical, d.FirstDiffer, wantDiff, d.MinCosine)
	}
}

// A vector that differs in a new document is named as one.
func TestCompareVectorsNames(t *testing.T) {
	docs := byteInputs("a", "b", "c")
	want := [][]float32{{1, 2}, {3, 4}, {5, 6}}
	got := [][]float32{{1, 2}, {3, 4.5}, {5}}
	n, same, first, _ := compareVectors(got, want, [][]Input{docs[:1]}, [][]Input{docs})
	if n != 3 || same != 1 || first != "vector 1 (a new document): element 1 is 0x40900000 (4.5) against 0x40800000 (4)" {
		t.Errorf("compared %d, identical %d, first %q", n, same, first)
	}
	if d := bitDiff([]float32{5}, []float32{5, 6}); d != "1 dimensions against 2" {
		t.Errorf("bitDiff of lengths: %q", d)
	}
	// -0 and +0 compare equal as floats but not as bits.
	if d := bitDiff([]float32{float32(math.Copysign(0, -1))}, []float32{0}); d != "element 0 is 0x80000000 (-0) against 0x00000000 (0)" {
		t.Errorf("bitDiff of -0: %q", d)
	}
}

// The goal: met at ≥ 4× with every vector bit-identical, not otherwise; the ratio
// to each peer reported; said missing without a cached server.
func TestReindexGoals(t *testing.T) {
	report := func(speedup float64, identical int) *Report {
		return &Report{
			Contenders: []*ContenderReport{{Name: "embed-stack", Role: RoleOurs}, {Name: CachedName, Role: RoleOurs, CacheMiB: 256}, {Name: "ollama", Role: RolePeer}},
			Shapes:     []ShapeInfo{{ID: ShapeReindex, Kind: KindReindex, About: "re-index of 1000 documents"}},
			Results: []Result{
				{Shape: ShapeReindex, Contender: "embed-stack", Requests: 10, TokensPerSec: Summary{N: 1, Median: 1000}, LatencyMS: Summary{N: 10},
					Reindex: &ReindexResult{Docs: 1000, Seen: 800, Seconds: 64, Tokens: 64000, DocsPerSec: 15.625}},
				{Shape: ShapeReindex, Contender: CachedName, Requests: 10, TokensPerSec: Summary{N: 1, Median: 1000 * speedup}, LatencyMS: Summary{N: 10},
					Reindex: &ReindexResult{Docs: 1000, Seen: 800, PrimeSeconds: 50, Seconds: 64 / speedup, Tokens: 64000, CachedTokens: 51200, DocsPerSec: 15.625 * speedup,
						Reference: "embed-stack", Speedup: speedup, Compared: 1000, BitIdentical: identical, MinCosine: 1}},
				{Shape: ShapeReindex, Contender: "ollama", Requests: 10, TokensPerSec: Summary{N: 1, Median: 800}, LatencyMS: Summary{N: 10},
					Reindex: &ReindexResult{Docs: 1000, Seen: 800, Seconds: 80, Tokens: 64000, DocsPerSec: 12.5, Reference: "embed-stack", Speedup: 0.8, Compared: 1000, MinCosine: 0.99991}},
			},
		}
	}
	for _, tt := range []struct {
		speedup   float64
		identical int
		met       bool
	}{{4.5, 1000, true}, {4, 1000, true}, {3.9, 1000, false}, {5, 999, false}} {
		gs := reindexGoals(report(tt.speedup, tt.identical), ShapeReindex)
		if len(gs) != 2 || gs[0].Met == nil || *gs[0].Met != tt.met || gs[1].Met != nil {
			t.Fatalf("%.1f×, %d identical: %+v, want the goal met=%v and the ratio to ollama", tt.speedup, tt.identical, gs, tt.met)
		}
	}
	rep := report(4.5, 1000)
	gs := reindexGoals(rep, ShapeReindex)
	if g := gs[0]; g.Name != "re-index with the cache (reindex)" || g.Measured != "4.50 × (4500.0 against 1000.0 tok/s), 1000 of 1000 vectors bit-identical, 51200 of 64000 tokens answered from the cache" {
		t.Errorf("goal %+v", g)
	}
	if g := gs[1]; g.Name != "re-index with the cache against ollama" || g.Measured != "5.62 × (4500.0 against 800.0 tok/s)" {
		t.Errorf("goal %+v", g)
	}
	var b strings.Builder
	if err := rep.Table(&b); err != nil {
		t.Fatal(err)
	}
	for _, row := range []string{
		"| embed-stack | none | 0.00 s | 64.00 s | 15.6 | 0 of 64000 | reference | reference | – |",
		"| embed-stack+cache | 256 MiB | 50.00 s | 14.22 s | 70.3 | 51200 of 64000 | 4.50× embed-stack | 1000 of 1000 | 1.000000 |",
		"| ollama | none | 0.00 s | 80.00 s | 12.5 | 0 of 64000 | 0.80× embed-stack | 0 of 1000 | 0.999910 |",
	} {
		if !strings.Contains(b.String(), row+"\n") {
			t.Errorf("no row %q in the table:\n%s", row, b.String())
		}
	}
	rep.Contenders = rep.Contenders[:1]
	if gs := reindexGoals(rep, ShapeReindex); len(gs) != 1 || gs[0].Met != nil || !strings.HasPrefix(gs[0].Measured, "not measured: no server with --cache-size") {
		t.Errorf("without a cached server: %+v", gs)
	}
}
