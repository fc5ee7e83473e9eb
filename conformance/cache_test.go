package conformance

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/embed-stack/embed-stack/internal/testenv"
)

// With --cache-size, a repeated input is answered from the cache: the same vector
// bit for bit as a server without the cache, its tokens reported as cached, and
// the hits counted on /metrics.
func TestCacheRealBinary(t *testing.T) {
	plain := defaultServer(t)
	s := cachedServer(t, "16")
	texts := []string{"The capital of China is Beijing.", "Gravity is a force that attracts two bodies towards each other."}
	want := vectors32(t, plain.do(t, "POST", "/v1/embeddings", map[string]any{"input": texts}, nil), openAIVectors)
	usage := func(r httpResult) (prompt, cached int) {
		var out struct {
			Usage struct {
				PromptTokens int `json:"prompt_tokens"`
				Details      *struct {
					CachedTokens int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		loose(t, r, &out)
		if out.Usage.Details == nil {
			t.Fatalf("no prompt_tokens_details with --cache-size: %s", truncate(r.body))
		}
		return out.Usage.PromptTokens, out.Usage.Details.CachedTokens
	}
	first := s.do(t, "POST", "/v1/embeddings", map[string]any{"input": texts}, nil)
	requireSameBits(t, "first request, cache on", vectors32(t, first, openAIVectors), want)
	prompt, cached := usage(first)
	if cached != 0 {
		t.Fatalf("first request: %d cached tokens", cached)
	}
	again := s.do(t, "POST", "/v1/embeddings", map[string]any{"input": texts}, nil)
	requireSameBits(t, "repeated request, from the cache", vectors32(t, again, openAIVectors), want)
	if p, c := usage(again); p != prompt || c != prompt {
		t.Fatalf("repeated request: prompt %d cached %d; want all %d cached", p, c, prompt)
	}
	// Other APIs and derived outputs come from the same entries.
	requireSameBits(t, "Ollama's route from the cache", vectors32(t, s.do(t, "POST", "/api/embed", map[string]any{"model": "m", "input": texts}, nil), ollamaVectors), want)
	small := vectors32(t, plain.do(t, "POST", "/v1/embeddings", map[string]any{"input": texts, "dimensions": 32}, nil), openAIVectors)
	requireSameBits(t, "dimensions 32 from the cache", vectors32(t, s.do(t, "POST", "/v1/embeddings", map[string]any{"input": texts, "dimensions": 32}, nil), openAIVectors), small)
	// The plain server says nothing of a cache.
	var plainOut struct {
		Usage map[string]json.RawMessage `json:"usage"`
	}
	loose(t, plain.do(t, "POST", "/v1/embeddings", map[string]any{"input": texts}, nil), &plainOut)
	if _, ok := plainOut.Usage["prompt_tokens_details"]; ok {
		t.Error("prompt_tokens_details without --cache-size")
	}
	if n := metricValue(t, s, "embed_stack_cache_hits_total"); n != 6 {
		t.Errorf("cache hits %d, want 6 (2 inputs × 3 repeated requests)", n)
	}
}

// cachedServer is the server with --cache-size mib, once the cache is in use: it
// waits for the model file's digest (hashed in the background).
func cachedServer(t *testing.T, mib string) *server {
	t.Helper()
	s := serverWith(t, "--cache-size", mib)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var tags struct {
			Models []struct {
				Digest string `json:"digest"`
			} `json:"models"`
		}
		loose(t, s.do(t, "GET", "/api/tags", nil, nil), &tags)
		if len(tags.Models) == 1 && tags.Models[0].Digest != "" {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatal("no digest after 60 s")
		}
	}
}

// metricValue is the value of a series on /metrics (the first, whatever its
// labels); 0 while it is not there (a counter appears at its first count).
func metricValue(t *testing.T, s *server, name string) int64 {
	t.Helper()
	metrics := string(s.do(t, http.MethodGet, "/metrics", nil, nil).body)
	// Large values come as floats (1.048e+06).
	m := regexp.MustCompile(`(?m)^` + name + `(?:\{[^}]*\})? (\S+)$`).FindStringSubmatch(metrics)
	if m == nil {
		return 0
	}
	f, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return int64(f)
}

// TestCacheBoundedDistinct: thousands of distinct inputs through a 1 MiB cache.
// The cache's bytes never exceed the bound (read after every request), it fills
// to near the bound and then evicts, least recently used first: the first inputs
// are gone and the last are held. EMBED_STACK_CACHE_SOAK_N sets the inputs for a
// long run by hand (docs/api.md).
func TestCacheBoundedDistinct(t *testing.T) {
	s := cachedServer(t, "1")
	const bound = 1 << 20
	// Each input is a number: a few tokens, so that the 2100 or so entries 1 MiB
	// holds cost seconds of compute on the tiny model.
	n := 2600
	if v := testenv.Get("EMBED_STACK_CACHE_SOAK_N"); v != "" {
		n, _ = strconv.Atoi(v)
	}
	text := func(i int) string { return strconv.Itoa(i) }
	const per = 100
	var peak int64
	start, rss0 := time.Now(), metricValue(t, s, "process_resident_memory_bytes")
	for i := 0; i < n; i += per {
		batch := make([]string, 0, per)
		for j := i; j < min(i+per, n); j++ {
			batch = append(batch, text(j))
		}
		r := s.do(t, "POST", "/v1/embeddings", map[string]any{"input": batch}, nil)
		if r.status != http.StatusOK {
			t.Fatalf("request %d: %d %s", i/per, r.status, truncate(r.body))
		}
		b := metricValue(t, s, "embed_stack_cache_bytes")
		if b > bound {
			t.Fatalf("after %d inputs the cache holds %d bytes, over --cache-size 1 MiB", i+len(batch), b)
		}
		peak = max(peak, b)
	}
	entries, evicted := metricValue(t, s, "embed_stack_cache_entries"), metricValue(t, s, "embed_stack_cache_evictions_total")
	t.Logf("%d distinct inputs in %s: peak %d bytes, %d entries held, %d evicted; the server's RSS %d → %d KiB", n, time.Since(start).Round(time.Millisecond),
		peak, entries, evicted, rss0>>10, metricValue(t, s, "process_resident_memory_bytes")>>10)
	if peak < bound*9/10 || evicted == 0 || entries+evicted != int64(n) {
		t.Fatalf("peak %d bytes, %d entries and %d evicted for %d distinct inputs: want the cache filled to the bound and every input either held or evicted", peak, entries, evicted, n)
	}
	// The last input is held (a hit), the first long gone (a miss).
	hits := metricValue(t, s, "embed_stack_cache_hits_total")
	s.do(t, "POST", "/v1/embeddings", map[string]any{"input": []string{text(n - 1)}}, nil)
	if got := metricValue(t, s, "embed_stack_cache_hits_total"); got != hits+1 {
		t.Fatalf("the last input was not a hit (hits %d → %d)", hits, got)
	}
	misses := metricValue(t, s, "embed_stack_cache_misses_total")
	s.do(t, "POST", "/v1/embeddings", map[string]any{"input": []string{text(0)}}, nil)
	if got := metricValue(t, s, "embed_stack_cache_misses_total"); got != misses+1 {
		t.Fatalf("the first input was not evicted (misses %d → %d)", misses, got)
	}
}
