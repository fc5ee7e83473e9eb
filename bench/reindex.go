package bench

import (
	"context"
	"fmt"
	"math"
	"net/http"
)

// The re-index shape (issue 26): a corpus re-embedded after a small share of it
// changed. The documents seen before are sent first, untimed, to every contender
// (the run that built the index); then the whole corpus goes through once, timed,
// the new documents interleaved with the seen ones as a changed corpus scatters
// them. A server with an exact cache answers the seen documents without computing
// them; one without recomputes everything. Both must return the same bits: the
// timed pass's vectors of every contender are compared with the reference's
// (embed-stack without a cache), bit for bit and by cosine.

// ReindexResult is one contender's account of the re-index shape.
type ReindexResult struct {
	// Docs is the corpus; Seen how many of its documents the priming pass sent.
	Docs int `json:"docs"`
	Seen int `json:"seen"`
	// PrimeSeconds is the priming pass's time (the sum of its requests' wall
	// times), and PrimeCachedTokens the cached tokens the server reported in it
	// (0 on a fresh cache: the seen documents are distinct).
	PrimeSeconds      float64 `json:"prime_seconds"`
	PrimeCachedTokens int     `json:"prime_cached_tokens"`
	// Seconds is the timed pass's time (the sum of its requests' wall times: the
	// contenders take turns, so the pass's own span would count the others'),
	// Tokens the tokens it sent, and CachedTokens the tokens the server said it
	// answered from its cache: Seen × the document length when every seen
	// document was a hit.
	Seconds      float64 `json:"seconds"`
	Tokens       int     `json:"tokens"`
	CachedTokens int     `json:"cached_tokens"`
	DocsPerSec   float64 `json:"docs_per_sec"`

	// Reference is the contender compared with (embed-stack without a cache);
	// empty on the reference itself or when no comparison was possible.
	Reference string `json:"reference,omitempty"`
	// Speedup is tokens/s over the reference's.
	Speedup float64 `json:"speedup,omitempty"`
	// Compared is the vectors compared; BitIdentical those equal to the
	// reference's in every bit; FirstDiffer describes the first that is not.
	Compared     int    `json:"compared,omitempty"`
	BitIdentical int    `json:"bit_identical"`
	FirstDiffer  string `json:"first_differ,omitempty"`
	// MinCosine is the lowest cosine between a vector and the reference's.
	MinCosine float64 `json:"min_cosine,omitempty"`
}

// reindexNew says whether document i of n is one of the k new ones: k spread
// evenly through the corpus (every fifth for 200 of 1000), so every request of the
// timed pass mixes seen and new documents in the plan's proportion.
func reindexNew(i, n, k int) bool { return (i+1)*k/n > i*k/n }

// reindexShape builds the re-index shape: ReindexDocs distinct documents, the
// seen ones primed, all of them timed.
func (p Plan) reindexShape(c *Corpus) (Shape, error) {
	n, batch, pct := p.ReindexDocs, p.ReindexBatch, p.ReindexSeenPercent
	if n < 1 || batch < 1 || p.ReindexTokens < 2 || pct < 1 || pct > 100 {
		return Shape{}, fmt.Errorf("re-index of %d documents of %d tokens, %d%% seen, in requests of %d: give at least one document of at least 2 tokens, a request of at least one and a share of 1 to 100%%",
			n, p.ReindexTokens, pct, batch)
	}
	docs, err := c.Documents(n, p.ReindexTokens)
	if err != nil {
		return Shape{}, err
	}
	// The corpus wraps around at its end: more text than it holds would repeat
	// documents, and a repeat inside the timed pass is a hit no index would have.
	texts := make(map[string]int, n)
	for i, d := range docs {
		if j, dup := texts[d.Text]; dup {
			return Shape{}, fmt.Errorf("documents %d and %d are the same text: the corpus of %d tokens holds fewer than %d distinct documents of %d tokens; ask for fewer or shorter ones",
				j, i, c.Tokens(), n, p.ReindexTokens)
		}
		texts[d.Text] = i
	}
	newDocs := n - (n*pct+50)/100
	var prime []Input
	for i, d := range docs {
		if !reindexNew(i, n, newDocs) {
			prime = append(prime, d)
		}
	}
	return Shape{
		ID: ShapeReindex, Kind: KindReindex, ServersOnly: true, Reps: 1, Seen: len(prime),
		Requests: chunk(docs, batch), Prime: chunk(prime, batch),
		About: fmt.Sprintf("re-index of %d documents of %d tokens in requests of %d, %d of them (%d%%) embedded before in an untimed priming pass",
			n, p.ReindexTokens, batch, len(prime), pct),
	}, nil
}

// chunk cuts in into requests of at most size inputs.
func chunk(in []Input, size int) [][]Input {
	var out [][]Input
	for len(in) > 0 {
		k := min(size, len(in))
		out = append(out, in[:k:k])
		in = in[k:]
	}
	return out
}

// runReindex primes every contender with the seen documents, then times the whole
// corpus on each, request by request in turn (starting with a different contender
// each time), keeps the vectors and compares them with the reference's.
func (r *Runner) runReindex(ctx context.Context, s *Shape, active []int) map[int]*Result {
	recs := map[int]*record{}
	acc := map[int]*ReindexResult{}
	vecs := map[int][][]float32{}
	complete := map[int]bool{}
	for _, i := range active {
		recs[i] = newRecord(s)
		recs[i].res.Tokens = s.Tokens()
		acc[i] = &ReindexResult{Docs: s.docs(), Seen: s.Seen}
		complete[i] = true
	}
	tokensOf := func(req []Input) int {
		n := 0
		for _, in := range req {
			n += len(in.Tokens)
		}
		return n
	}
	for k, req := range s.Prime {
		for j := range active {
			i := active[(j+k)%len(active)]
			o := r.embed(ctx, r.Contenders[i].Target, req)
			recs[i].warmup(o, tokensOf(req))
			acc[i].PrimeSeconds += o.Elapsed.Seconds()
			acc[i].PrimeCachedTokens += o.CachedTokens
		}
	}
	for k, req := range s.Requests {
		tokens := tokensOf(req)
		for j := range active {
			i := active[(j+k)%len(active)]
			var o Outcome
			cpu := measureCPU(r.Contenders[i].cpuClock(), func() {
				ctx, cancel := context.WithTimeout(ctx, r.RequestTimeout)
				defer cancel()
				o = r.Contenders[i].Target.Embed(ctx, req, true)
			})
			a := acc[i]
			if !recs[i].add(o, tokens) || o.Status != http.StatusOK {
				complete[i] = false
				continue
			}
			a.Seconds += o.Elapsed.Seconds()
			a.Tokens += tokens
			a.CachedTokens += o.CachedTokens
			recs[i].addCPU(cpu, tokens)
			vecs[i] = append(vecs[i], o.Vectors...)
		}
	}
	out := map[int]*Result{}
	for _, i := range active {
		a := acc[i]
		if a.Seconds > 0 {
			recs[i].tokPerSec = []float64{float64(a.Tokens) / a.Seconds}
			recs[i].reqPerSec = []float64{float64(len(s.Requests)) / a.Seconds}
			a.DocsPerSec = float64(len(vecs[i])) / a.Seconds
		}
		out[i] = recs[i].finish()
		out[i].Reindex = a
	}
	ref := r.reindexReference(active, complete)
	if ref < 0 {
		return out
	}
	for _, i := range active {
		if i == ref || !complete[i] {
			continue
		}
		a := out[i].Reindex
		a.Reference = r.Contenders[ref].Name
		if t := out[ref].TokensPerSec; t.N > 0 && t.Median > 0 && out[i].TokensPerSec.N > 0 {
			a.Speedup = out[i].TokensPerSec.Median / t.Median
		}
		a.Compared, a.BitIdentical, a.FirstDiffer, a.MinCosine = compareVectors(vecs[i], vecs[ref], s.Prime, s.Requests)
	}
	return out
}

// reindexReference is the contender the others are compared with: the first of
// ours without a cache that answered every request (else the first that did), or
// -1.
func (r *Runner) reindexReference(active []int, complete map[int]bool) int {
	first := -1
	for _, i := range active {
		if !complete[i] {
			continue
		}
		if c := r.Contenders[i]; c.Role == RoleOurs && c.CacheMiB == 0 {
			return i
		}
		if first < 0 {
			first = i
		}
	}
	return first
}

// compareVectors compares got with want, vector by vector: how many were compared,
// how many are equal in every bit, the first that is not (naming whether its
// document was primed), and the lowest cosine.
func compareVectors(got, want [][]float32, prime, requests [][]Input) (compared, identical int, first string, minCos float64) {
	primed := map[string]bool{}
	for _, req := range prime {
		for _, in := range req {
			primed[in.Text] = true
		}
	}
	var docs []Input
	for _, req := range requests {
		docs = append(docs, req...)
	}
	minCos = 1
	for d := range min(len(got), len(want)) {
		compared++
		minCos = min(minCos, Cosine(got[d], want[d]))
		if diff := bitDiff(got[d], want[d]); diff != "" {
			if first == "" {
				what := "a new document"
				if d < len(docs) && primed[docs[d].Text] {
					what = "a document seen before"
				}
				first = fmt.Sprintf("vector %d (%s): %s", d, what, diff)
			}
			continue
		}
		identical++
	}
	return compared, identical, first, minCos
}

// bitDiff is "" when a and b hold the same float32 bits, else the first difference.
func bitDiff(a, b []float32) string {
	if len(a) != len(b) {
		return fmt.Sprintf("%d dimensions against %d", len(a), len(b))
	}
	for k := range a {
		if x, y := math.Float32bits(a[k]), math.Float32bits(b[k]); x != y {
			return fmt.Sprintf("element %d is %#08x (%g) against %#08x (%g)", k, x, a[k], y, b[k])
		}
	}
	return ""
}

// docs is the number of documents of a re-index shape's timed pass.
func (s *Shape) docs() int {
	n := 0
	for _, req := range s.Requests {
		n += len(req)
	}
	return n
}

// line is the re-index result in the progress log.
func (a *ReindexResult) line() string {
	s := fmt.Sprintf("re-index: %d documents in %.2f s (%.1f docs/s), %d of %d tokens cached (primed in %.2f s)",
		a.Docs, a.Seconds, a.DocsPerSec, a.CachedTokens, a.Tokens, a.PrimeSeconds)
	if a.Reference != "" {
		s += fmt.Sprintf("; %.2f× %s, %d/%d vectors bit-identical to its, lowest cosine %.6f", a.Speedup, a.Reference, a.BitIdentical, a.Compared, a.MinCosine)
	}
	return s
}
