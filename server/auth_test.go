package server

import (
	"net/http"
	"strings"
	"testing"
)

const (
	bodyMissingKey = `{"error":{"message":"You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).","type":"invalid_request_error","param":null,"code":null}}`
	bodyInvalidKey = `{"error":{"message":"Incorrect API key provided. The server accepts only the keys it was started with (--api-key, --api-key-file).","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`
)

func TestAPIKeys(t *testing.T) {
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("up 1\n")) })
	keys := []string{"sk-first-0123456789", "second key with spaces?"}
	tests := []struct {
		name        string
		cfg         Config
		method      string
		path        string
		auth        string
		status      int
		body        string // exact, when not ""
		challenge   bool   // WWW-Authenticate expected
		metricsOpen bool
	}{
		{name: "no keys configured: open", cfg: Config{}, method: "POST", path: "/v1/embeddings", status: 200},
		{name: "no header", cfg: Config{APIKeys: keys}, method: "POST", path: "/v1/embeddings", status: 401, body: bodyMissingKey, challenge: true},
		{name: "first key", cfg: Config{APIKeys: keys}, method: "POST", path: "/v1/embeddings", auth: "Bearer sk-first-0123456789", status: 200},
		{name: "second key, lower-case scheme", cfg: Config{APIKeys: keys}, method: "POST", path: "/v1/embeddings", auth: "bearer second key with spaces?", status: 200},
		{name: "wrong key", cfg: Config{APIKeys: keys}, method: "POST", path: "/v1/embeddings", auth: "Bearer sk-first-012345678", status: 401, body: bodyInvalidKey, challenge: true},
		{name: "key with a suffix", cfg: Config{APIKeys: keys}, method: "POST", path: "/v1/embeddings", auth: "Bearer sk-first-0123456789x", status: 401, body: bodyInvalidKey, challenge: true},
		{name: "empty bearer", cfg: Config{APIKeys: keys}, method: "POST", path: "/v1/embeddings", auth: "Bearer ", status: 401, body: bodyMissingKey, challenge: true},
		{name: "basic auth is not a key", cfg: Config{APIKeys: keys}, method: "POST", path: "/v1/embeddings", auth: "Basic c2stZmlyc3Q=", status: 401, body: bodyMissingKey, challenge: true},
		{name: "bare key without scheme", cfg: Config{APIKeys: keys}, method: "POST", path: "/v1/embeddings", auth: "sk-first-0123456789", status: 401, body: bodyMissingKey, challenge: true},
		{name: "native embed", cfg: Config{APIKeys: keys}, method: "POST", path: "/embed", status: 401, body: bodyMissingKey, challenge: true},
		{name: "tokenize", cfg: Config{APIKeys: keys}, method: "POST", path: "/tokenize", status: 401, body: bodyMissingKey, challenge: true},
		{name: "models", cfg: Config{APIKeys: keys}, method: "GET", path: "/v1/models", status: 401, body: bodyMissingKey, challenge: true},
		{name: "unknown path is 401, not 404", cfg: Config{APIKeys: keys}, method: "GET", path: "/v1/secret", status: 401, body: bodyMissingKey, challenge: true},
		{name: "debug vars", cfg: Config{APIKeys: keys, DebugVars: true}, method: "GET", path: "/debug/vars", status: 401, body: bodyMissingKey, challenge: true},
		{name: "health open", cfg: Config{APIKeys: keys}, method: "GET", path: "/health", status: 200, body: `{"status":"ok"}`},
		{name: "ready open", cfg: Config{APIKeys: keys}, method: "GET", path: "/ready", status: 200, body: `{"status":"ready"}`},
		// gin redirects before any middleware runs; the redirect target is checked.
		{name: "health with a trailing slash redirects", cfg: Config{APIKeys: keys}, method: "GET", path: "/health/", status: 301},
		{name: "embeddings with a trailing slash redirects", cfg: Config{APIKeys: keys}, method: "GET", path: "/v1/models/", status: 301},
		{name: "metrics open by default", cfg: Config{APIKeys: keys}, method: "GET", path: "/metrics", status: 200, body: "up 1\n", metricsOpen: true},
		{name: "metrics behind keys", cfg: Config{APIKeys: keys, MetricsAuth: true}, method: "GET", path: "/metrics", status: 401, body: bodyMissingKey, challenge: true},
		{name: "metrics with a key", cfg: Config{APIKeys: keys, MetricsAuth: true}, method: "GET", path: "/metrics", auth: "Bearer second key with spaces?", status: 200, body: "up 1\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			if cfg.ModelName == "" {
				cfg.ModelName = "qwen3-embedding-0.6b"
			}
			s := &Server{Config: cfg, Embedder: &fakeEmbedder{}, Ready: func() bool { return true }, Metrics: metrics}
			s.Config.Logger = quiet()
			h := s.Handler()
			body := ""
			if tt.method == "POST" {
				body = `{"input":"a"}`
			}
			var hdr map[string]string
			if tt.auth != "" {
				hdr = map[string]string{"Authorization": tt.auth}
			}
			w := do(h, tt.method, tt.path, body, hdr)
			if w.Code != tt.status {
				t.Fatalf("status %d, want %d; body %s", w.Code, tt.status, w.Body)
			}
			if tt.body != "" && w.Body.String() != tt.body {
				t.Fatalf("body %s\nwant %s", w.Body, tt.body)
			}
			if got := w.Header().Get("WWW-Authenticate"); (got != "") != tt.challenge {
				t.Errorf("WWW-Authenticate %q, want one: %v", got, tt.challenge)
			}
			if sent, _ := bearerToken(tt.auth); sent != "" && w.Code == 401 && strings.Contains(w.Body.String(), sent) {
				t.Errorf("the 401 quotes the key that was sent: %s", w.Body)
			}
		})
	}
}

func TestBearerToken(t *testing.T) {
	tests := []struct {
		header, token string
		ok            bool
	}{
		{"Bearer abc", "abc", true},
		{"BEARER  abc ", "abc", true},
		{"  Bearer abc", "abc", true},
		{"Bearer a b", "a b", true},
		{"Bearer", "", false},
		{"Bearer    ", "", false},
		{"Token abc", "", false},
		{"", "", false},
	}
	for _, tt := range tests {
		token, ok := bearerToken(tt.header)
		if token != tt.token || ok != tt.ok {
			t.Errorf("bearerToken(%q) = %q, %v; want %q, %v", tt.header, token, ok, tt.token, tt.ok)
		}
	}
}

func TestKeyMatchesEveryKey(t *testing.T) {
	keys := []keyDigest{{}, {}, {}}
	for i, k := range []string{"a", "bb", "ccc"} {
		keys[i] = digest(k)
	}
	for _, tt := range []struct {
		token string
		want  bool
	}{{"a", true}, {"bb", true}, {"ccc", true}, {"", false}, {"cc", false}, {"cccc", false}, {"A", false}} {
		if got := keyMatches(keys, tt.token); got != tt.want {
			t.Errorf("keyMatches(%q) = %v, want %v", tt.token, got, tt.want)
		}
	}
}
