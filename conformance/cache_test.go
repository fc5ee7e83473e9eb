package conformance

import (
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"
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

// cachedServer is the shared server with --cache-size mib, once the cache is in
// use (cacheReady).
func cachedServer(t *testing.T, mib string) *server {
	t.Helper()
	return cacheReady(t, serverWith(t, "--cache-size", mib))
}

// cacheReady waits for the model file's digest (hashed in the background), without
// which s skips its cache.
func cacheReady(t *testing.T, s *server) *server {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var tags struct {
			Models []struct {
				Digest string `json:"digest"`
			} `json:"models"`
		}
		loose(t, s.do(t, "GET", "/api/tags", nil, nil), &tags)
		if len(tags.Models) > 0 && tags.Models[0].Digest != "" {
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
	return metricIn(t, string(s.do(t, http.MethodGet, "/metrics", nil, nil).body), name)
}

// metricIn is metricValue read from a /metrics text already fetched.
func metricIn(t *testing.T, metrics, name string) int64 {
	t.Helper()
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

// One GGUF served as two models with two poolings (--pooling b=mean) gives two
// vectors per text; the cache, keyed by the file's digest, keeps them apart: each
// model answers its own vector, fresh or cached, the one a server of that pooling
// alone computes.
func TestCacheTwoPoolingsOfOneFile(t *testing.T) {
	s := cacheReady(t, serverWith(t, "--model", "a="+modelPath, "--model", "b="+modelPath, "--pooling", "b=mean", "--cache-size", "8"))
	want := map[string][][]float32{
		"a": vectors32(t, defaultServer(t).do(t, "POST", "/v1/embeddings", map[string]any{"input": []string{"pooled twice"}}, nil), openAIVectors),
		"b": vectors32(t, serverWith(t, "--pooling", "mean").do(t, "POST", "/v1/embeddings", map[string]any{"input": []string{"pooled twice"}}, nil), openAIVectors),
	}
	if slices.Equal(want["a"][0], want["b"][0]) {
		t.Fatal("last-token and mean pooling gave the same vector: the test cannot tell them apart")
	}
	for _, order := range [][]string{{"b", "a"}, {"a", "b"}} {
		for _, m := range order {
			got := vectors32(t, s.do(t, "POST", "/v1/embeddings", map[string]any{"model": m, "input": []string{"pooled twice"}}, nil), openAIVectors)
			if !slices.Equal(got[0], want[m][0]) {
				t.Errorf("model %s (after %v): not its own pooling's vector", m, order)
			}
		}
	}
}
