package server

import (
	"net/http"
	"regexp"
	"testing"
)

// TestCORS: pages of an allowed origin (and the server's own) get the headers a
// browser needs, their preflight 204 before the key check; other pages get 403;
// requests without Origin are untouched.
func TestCORS(t *testing.T) {
	local := newTestServer(Config{CORSOrigins: LocalOrigins, APIKeys: []string{"k"}}, &fakeEmbedder{}, true)
	all := newTestServer(Config{CORSOrigins: []string{"*"}}, &fakeEmbedder{}, true)
	off := newTestServer(Config{}, &fakeEmbedder{}, true)
	key := map[string]string{"Authorization": "Bearer k"}
	with := func(h map[string]string, kv ...string) map[string]string {
		out := map[string]string{}
		for k, v := range h {
			out[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	const body = `{"input":"a"}`
	tests := []struct {
		name         string
		h            http.Handler
		method, path string
		header       map[string]string
		status       int
		allowOrigin  string
		allowHeaders string
	}{
		{"no origin", local, "POST", "/v1/embeddings", key, 200, "", ""},
		{"local page", local, "POST", "/v1/embeddings", with(key, "Origin", "http://localhost:3000"), 200, "http://localhost:3000", ""},
		{"extension", local, "POST", "/api/embed", with(key, "Origin", "chrome-extension://abcdef"), 400, "chrome-extension://abcdef", ""},
		{"preflight, no key", local, "OPTIONS", "/v1/embeddings", map[string]string{"Origin": "http://127.0.0.1:5173", "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization, content-type, x-stainless-os"},
			204, "http://127.0.0.1:5173", "authorization, content-type, x-stainless-os"},
		{"own page", local, "POST", "/v1/embeddings", with(key, "Origin", "http://example.com"), 200, "http://example.com", ""},
		{"other page", local, "POST", "/v1/embeddings", with(key, "Origin", "https://attacker.example"), 403, "", ""},
		{"other page's preflight", local, "OPTIONS", "/v1/embeddings", map[string]string{"Origin": "https://attacker.example", "Access-Control-Request-Method": "POST"}, 403, "", ""},
		{"look-alike host", local, "POST", "/v1/embeddings", with(key, "Origin", "http://localhost.attacker.example"), 403, "", ""},
		{"every origin", all, "POST", "/v1/embeddings", map[string]string{"Origin": "https://app.example"}, 200, "https://app.example", ""},
		{"off", off, "POST", "/v1/embeddings", map[string]string{"Origin": "https://app.example"}, 200, "", ""},
		{"off, preflight", off, "OPTIONS", "/v1/embeddings", map[string]string{"Origin": "https://app.example", "Access-Control-Request-Method": "POST"}, 405, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := body
			if tc.path == "/api/embed" {
				b = `{"input":"a"}` // no model: Ollama's 400, with the CORS headers
			}
			w := do(tc.h, tc.method, tc.path, b, tc.header)
			if w.Code != tc.status || w.Header().Get("Access-Control-Allow-Origin") != tc.allowOrigin || w.Header().Get("Access-Control-Allow-Headers") != tc.allowHeaders {
				t.Fatalf("%d, headers %v; want %d, Access-Control-Allow-Origin %q, -Headers %q", w.Code, w.Header(), tc.status, tc.allowOrigin, tc.allowHeaders)
			}
			if tc.allowOrigin != "" && w.Header().Get("Vary") == "" {
				t.Error("no Vary: Origin")
			}
			if tc.status == 204 && w.Header().Get("Access-Control-Allow-Methods") != "GET, POST, HEAD, OPTIONS" {
				t.Errorf("preflight methods %q", w.Header().Get("Access-Control-Allow-Methods"))
			}
			if tc.status == 200 && tc.allowOrigin != "" && w.Header().Get("Access-Control-Expose-Headers") != exposedHeaders {
				t.Errorf("exposed headers %q", w.Header().Get("Access-Control-Expose-Headers"))
			}
			if tc.status == 403 && w.Body.String() != `{"error":{"message":"Requests from the web page at https://attacker.example are not allowed; start the server with --cors-origin https://attacker.example to allow them.","type":"invalid_request_error","param":null,"code":"origin_not_allowed"}}` &&
				tc.name != "look-alike host" {
				t.Errorf("403 body %s", w.Body)
			}
		})
	}
}

func TestGlobMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, s string
		want       bool
	}{
		{"http://localhost:*", "http://localhost:8080", true},
		{"http://localhost:*", "http://localhost", false},
		{"http://localhost", "http://localhost:8080", false},
		{"app://*", "app://", true},
		{"https://*.example.com", "https://a.b.example.com", true},
		{"https://*.example.com", "https://example.com", false},
		{"https://*.example.com", "https://a.example.com.attacker.example", false},
		{"a*b*c", "abc", true},
		{"a*b*c", "acb", false},
	} {
		if got := globMatch(tc.pattern, tc.s); got != tc.want {
			t.Errorf("globMatch(%q, %q) = %t, want %t", tc.pattern, tc.s, got, tc.want)
		}
	}
}

// TestRequestID: every answer carries X-Request-Id, the caller's where it is a
// plausible id, else a new one.
func TestRequestID(t *testing.T) {
	h := newTestServer(Config{}, &fakeEmbedder{}, true)
	fresh := regexp.MustCompile(`^req_[0-9a-f]{24}$`)
	for _, tc := range []struct {
		sent string
		want *regexp.Regexp
	}{
		{"", fresh},
		{"abc-123_x.y:z", regexp.MustCompile(`^abc-123_x\.y:z$`)},
		{"bad id with spaces", fresh},
	} {
		w := do(h, "POST", "/v1/embeddings", `{"input":"a"}`, map[string]string{headerRequestID: tc.sent})
		if got := w.Header().Get(headerRequestID); !tc.want.MatchString(got) {
			t.Errorf("sent %q: X-Request-Id %q, want %s", tc.sent, got, tc.want)
		}
	}
	a := do(h, "GET", "/health", "", nil).Header().Get(headerRequestID)
	b := do(h, "GET", "/nowhere", "", nil).Header().Get(headerRequestID)
	if !fresh.MatchString(a) || !fresh.MatchString(b) || a == b {
		t.Errorf("ids %q and %q: want two fresh ids, on a probe and a 404 too", a, b)
	}
}
