package conformance

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/embed-stack/embed-stack/internal/testenv"
)

// The cache soak's defaults, as make test runs it: a 1 MiB cache, which holds
// about 2000 of its short inputs on the tiny model (about 530 bytes each, as
// routing's Cache counts them), filled, then replaced soakTurnover times over by
// more distinct inputs (about 6000 inputs in all).
const (
	soakMiB      = 1
	soakTurnover = 2
	soakPerReq   = 100
	// soakHeapSlack bounds the growth of the server's live heap (after a
	// collection) from the moment the cache first evicts to the end: a full cache
	// replaces entries and holds no more, so what grows is a leak (an evicted
	// entry still referenced, a map that keeps its keys). Filling the 1 MiB cache
	// grows the live heap by 1.3 MiB, so a leak of every evicted entry over two
	// turnovers would show as 2.6 MiB; without one the growth measured 0.0 MiB.
	soakHeapSlack = 1 << 20
	// soakRSSSlack bounds the growth of the server's resident memory over the same
	// span, beside 5% of its size at the fill: the collector's headroom moves it
	// by a few MiB either way without any leak.
	soakRSSSlack = 32 << 20
)

// soakSample is the server's state at one moment of the soak.
type soakSample struct {
	at             time.Duration
	inputs         int
	bytes, entries int64 // embed_stack_cache_bytes and _entries
	evicted        int64 // embed_stack_cache_evictions_total
	rss            int64 // process_resident_memory_bytes
	liveHeap       float64
	label          string
}

func (p soakSample) String() string {
	return fmt.Sprintf("%-5s %7.1fs %9d inputs: cache %9d B in %7d entries, %9d evicted; RSS %6.1f MiB, live heap %6.1f MiB",
		p.label, p.at.Seconds(), p.inputs, p.bytes, p.entries, p.evicted, float64(p.rss)/(1<<20), p.liveHeap/(1<<20))
}

// TestCacheBoundedDistinct is the embedding cache's soak: distinct inputs, none
// sent twice, through serve --cache-size, with the server's memory read
// throughout. The cache's bytes (embed_stack_cache_bytes) are read after every
// request and must never exceed the bound; every input is either held or evicted,
// the last one held and the first long gone. From the first eviction to the end
// the server's live heap (after a collection, /debug/vars?gc=1) must grow by less
// than soakHeapSlack and its RSS by less than soakRSSSlack plus 5%: a full cache
// holds no more memory however long it runs.
//
// make test runs it through a 1 MiB cache until it is filled and replaced
// soakTurnover times over. EMBED_STACK_CACHE_SOAK (a duration the run lasts at
// least, besides that turnover) and EMBED_STACK_CACHE_SOAK_MIB make a long one:
// `make soak-cache` runs 10 minutes (docs/performance.md has its figures).
func TestCacheBoundedDistinct(t *testing.T) {
	mib := testenv.Int(t, "EMBED_STACK_CACHE_SOAK_MIB", soakMiB)
	total := testenv.Duration(t, "EMBED_STACK_CACHE_SOAK", 0)
	s := cacheReady(t, ownServer(t, "--cache-size", strconv.Itoa(mib), "--debug-vars"))
	bound := int64(mib) << 20
	every := 2 * time.Second
	if total > 0 {
		every = max(every, total/40)
	}
	// Each input is a number: a few tokens, so that the tiny model computes it in
	// microseconds and the run is about the cache and the server, not the model.
	text := func(i int) string { return strconv.Itoa(i) }

	start := time.Now()
	sample := func(sent int, label string, gc bool) soakSample {
		m := string(s.do(t, http.MethodGet, "/metrics", nil, nil).body)
		p := soakSample{at: time.Since(start), inputs: sent, label: label,
			bytes: metricIn(t, m, "embed_stack_cache_bytes"), entries: metricIn(t, m, "embed_stack_cache_entries"),
			evicted: metricIn(t, m, "embed_stack_cache_evictions_total"), rss: metricIn(t, m, "process_resident_memory_bytes")}
		if gc {
			p.liveHeap = s.liveVars(t)["heap_alloc_bytes"]
		}
		return p
	}
	samples := []soakSample{sample(0, "start", true)}
	var fill *soakSample
	var peak int64
	sent, next := 0, time.Now().Add(every)
	for {
		batch := make([]string, soakPerReq)
		for j := range batch {
			batch[j] = text(sent + j)
		}
		r := s.do(t, http.MethodPost, "/v1/embeddings", map[string]any{"input": batch}, nil)
		if r.status != http.StatusOK {
			t.Fatalf("request %d: %d %s", sent/soakPerReq, r.status, truncate(r.body))
		}
		sent += len(batch)
		now := sample(sent, "", false)
		if now.bytes > bound {
			t.Fatalf("after %d inputs the cache holds %d bytes, over --cache-size %d MiB", sent, now.bytes, mib)
		}
		peak = max(peak, now.bytes)
		switch {
		case fill == nil && now.evicted > 0:
			p := sample(sent, "fill", true)
			fill = &p
			samples = append(samples, p)
			t.Log(p)
		case time.Now().After(next):
			p := sample(sent, "", true)
			samples = append(samples, p)
			t.Log(p)
			next = time.Now().Add(every)
		}
		elapsed := time.Since(start)
		if fill != nil && int64(sent-fill.inputs) >= soakTurnover*fill.entries && elapsed >= total {
			break
		}
		if fill == nil && elapsed >= max(total, 10*time.Minute) {
			t.Fatalf("the %d MiB cache did not fill in %s (%d inputs, %d bytes): a smaller EMBED_STACK_CACHE_SOAK_MIB", mib, elapsed.Round(time.Second), sent, now.bytes)
		}
	}
	end := sample(sent, "end", true)
	samples = append(samples, end)
	var table strings.Builder
	for _, p := range samples {
		fmt.Fprintln(&table, p)
	}
	t.Logf("%d distinct inputs through --cache-size %d MiB in %s, %.0f inputs/s; peak %d bytes:\n%s",
		sent, mib, end.at.Round(time.Millisecond), float64(sent)/end.at.Seconds(), peak, table.String())

	if peak < bound*9/10 || end.entries+end.evicted != int64(sent) {
		t.Errorf("peak %d bytes, %d entries and %d evicted for %d distinct inputs: want the cache filled to the bound and every input either held or evicted", peak, end.entries, end.evicted, sent)
	}
	if grow := end.liveHeap - fill.liveHeap; grow > soakHeapSlack {
		t.Errorf("the live heap grew by %.1f MiB from the fill (%.1f MiB) to the end (%.1f MiB), want < %d MiB: something outside the cache's bound keeps memory",
			grow/(1<<20), fill.liveHeap/(1<<20), end.liveHeap/(1<<20), soakHeapSlack>>20)
	}
	if grow, slack := end.rss-fill.rss, fill.rss/20+soakRSSSlack; grow > slack {
		t.Errorf("RSS grew by %.1f MiB from the fill (%.1f MiB) to the end (%.1f MiB), want < %.1f MiB",
			float64(grow)/(1<<20), float64(fill.rss)/(1<<20), float64(end.rss)/(1<<20), float64(slack)/(1<<20))
	}
	// The last input is held (a hit), the first long gone (a miss).
	hits := metricValue(t, s, "embed_stack_cache_hits_total")
	s.do(t, http.MethodPost, "/v1/embeddings", map[string]any{"input": []string{text(sent - 1)}}, nil)
	if got := metricValue(t, s, "embed_stack_cache_hits_total"); got != hits+1 {
		t.Errorf("the last input was not a hit (hits %d → %d)", hits, got)
	}
	misses := metricValue(t, s, "embed_stack_cache_misses_total")
	s.do(t, http.MethodPost, "/v1/embeddings", map[string]any{"input": []string{text(0)}}, nil)
	if got := metricValue(t, s, "embed_stack_cache_misses_total"); got != misses+1 {
		t.Errorf("the first input was not evicted (misses %d → %d)", misses, got)
	}
}
