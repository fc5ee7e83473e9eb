package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"
)

// Security at the binary: API keys, open probes, private worker sockets, logs without
// input text, the default bind address and redacted secrets.

const (
	bodyMissingKey = `{"error":{"message":"You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).","type":"invalid_request_error","param":null,"code":null}}`
	bodyInvalidKey = `{"error":{"message":"Incorrect API key provided. The server accepts only the keys it was started with (--api-key, --api-key-file).","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`
)

// keyFile writes an API key file in a directory of its own and returns its path; the
// caller removes the directory once the server has read the file at start.
func keyFile(t *testing.T, content string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "embed-stack-keys-")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "keys")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestAPIKeys: with --api-key and --api-key-file every key works through go-openai,
// a wrong or missing key gets OpenAI's 401, /health and /ready stay open, and
// --metrics-auth puts /metrics behind the keys.
func TestAPIKeys(t *testing.T) {
	const flagKey, fileKey = "sk-from-the-flag-4f1c", "sk-from-the-file-9a2e"
	keys := keyFile(t, "# the ingestion pipeline\n\n"+fileKey+"\n")
	s := serverWith(t, "--api-key", flagKey, "--api-key-file", keys, "--metrics-auth", "--debug-vars")
	// The server read the file at start; nothing reads it again.
	if err := os.RemoveAll(filepath.Dir(keys)); err != nil {
		t.Error(err)
	}
	const text = "authenticated"
	for _, key := range []string{flagKey, fileKey} {
		c := s.client(map[string]string{"Authorization": "Bearer " + key})
		resp := embed(t, c, openai.EmbeddingRequestStrings{Input: []string{text}, Model: "m"})
		requireReference(t, "with "+key, f64(resp.Data[0].Embedding), expectDocument(t, text))
	}

	e := embedErr(t, s.client(map[string]string{"Authorization": "Bearer sk-wrong"}), openai.EmbeddingRequestStrings{Input: []string{text}, Model: "m"})
	if e.HTTPStatusCode != http.StatusUnauthorized || e.Type != "invalid_request_error" || e.Code != "invalid_api_key" || e.Param != nil {
		t.Errorf("wrong key through go-openai: %d %q %v %v", e.HTTPStatusCode, e.Type, e.Code, strPtr(e.Param))
	}

	tests := []struct {
		name, method, path, auth string
		status                   int
		body                     string
	}{
		{"no key", "POST", "/v1/embeddings", "", 401, bodyMissingKey},
		{"wrong key", "POST", "/v1/embeddings", "Bearer " + flagKey + "x", 401, bodyInvalidKey},
		{"key as Basic", "POST", "/v1/embeddings", "Basic " + flagKey, 401, bodyMissingKey},
		{"models need a key", "GET", "/v1/models", "", 401, bodyMissingKey},
		{"tokenize needs a key", "POST", "/tokenize", "", 401, bodyMissingKey},
		{"unknown route needs a key", "GET", "/admin", "", 401, bodyMissingKey},
		{"debug vars need a key", "GET", "/debug/vars", "", 401, bodyMissingKey},
		{"metrics need a key (--metrics-auth)", "GET", "/metrics", "", 401, bodyMissingKey},
		{"health is open", "GET", "/health", "", 200, ""}, // its body (status and device): TestHealthAndReady
		{"ready is open", "GET", "/ready", "", 200, `{"status":"ready"}`},
		{"metrics with a key", "GET", "/metrics", "Bearer " + fileKey, 200, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var body any
			if tc.method == "POST" {
				body = map[string]any{"input": text}
			}
			var h map[string]string
			if tc.auth != "" {
				h = map[string]string{"Authorization": tc.auth}
			}
			r := s.do(t, tc.method, tc.path, body, h)
			switch {
			case tc.status == 401:
				requireExactError(t, r, 401, tc.body)
				if r.header.Get("WWW-Authenticate") == "" {
					t.Errorf("401 without WWW-Authenticate")
				}
			case r.status != tc.status || tc.body != "" && string(r.body) != tc.body:
				t.Errorf("got %d %s, want %d %s", r.status, truncate(r.body), tc.status, tc.body)
			}
		})
	}
	if log := s.Out.String(); strings.Contains(log, flagKey) || strings.Contains(log, fileKey) {
		t.Errorf("an API key appears in the server log")
	}
}

// TestAPIKeyFileWithoutKeys: a key file that holds no key is a start-up error, not a
// server left open.
func TestAPIKeyFileWithoutKeys(t *testing.T) {
	if skipReason != "" {
		t.Skip(skipReason)
	}
	path := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(path, []byte("# nothing yet\n\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(c, binPath, "serve", "--model", modelPath, "--addr", "127.0.0.1:0", "--api-key-file", path).CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("exit %v, want status 1\n%s", err, out)
	}
	if want := "holds no key"; !bytes.Contains(out, []byte(want)) {
		t.Errorf("output lacks %q:\n%s", want, out)
	}
}

// TestWorkerSocketPrivate: the warm worker's socket is 0600 inside a 0700 directory
// owned by the server's user.
func TestWorkerSocketPrivate(t *testing.T) {
	requireLinux(t)
	s := defaultServer(t)
	w := waitWorkers(t, s, 1, 10*time.Second)[0]
	dir := socketDir(t, w)
	_, after, _ := strings.Cut(w.cmdline, "--socket ")
	sock := strings.Fields(after)[0]
	for _, c := range []struct {
		path string
		mode os.FileMode
	}{{dir, os.ModeDir | 0o700}, {sock, os.ModeSocket | 0o600}} {
		st, err := os.Stat(c.path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode() != c.mode {
			t.Errorf("%s: mode %v, want %v", c.path, st.Mode(), c.mode)
		}
		if uid := st.Sys().(*syscall.Stat_t).Uid; int(uid) != os.Getuid() {
			t.Errorf("%s: owner %d, want %d", c.path, uid, os.Getuid())
		}
	}
}

// TestNoInputTextInLogs: neither the default log level nor debug writes the text of
// an input, an instruction or a token-id input, in successes or in errors.
func TestNoInputTextInLogs(t *testing.T) {
	for _, flags := range [][]string{nil, {"--log-level", "debug"}} {
		t.Run(fmt.Sprint("flags ", flags), func(t *testing.T) {
			s := serverWith(t, flags...)
			marker := fmt.Sprintf("zebra-marker-%d", time.Now().UnixNano())
			text := "secret text " + marker
			requests := []struct {
				path string
				body any
			}{
				{"/v1/embeddings", map[string]any{"input": text}},
				{"/v1/embeddings", map[string]any{"input": []string{text, ""}}},                                 // 400: input 1 empty
				{"/v1/embeddings", map[string]any{"input": text, "dimensions": 7}},                              // 400: dimensions
				{"/v1/embeddings", map[string]any{"input": text, "input_type": "query", "instruction": marker}}, // instruction
				{"/v1/embeddings", map[string]any{"input": [][]int{cl100k(t, text)}}},                           // ids decoding to it
				{"/v1/embeddings", map[string]any{"input": []string{text, strings.Repeat("x ", 40000)}}},        // 400: too long
				{"/embed", map[string]any{"texts": []string{text}}},
				{"/tokenize", map[string]any{"text": text}},
			}
			for _, r := range requests {
				s.do(t, http.MethodPost, r.path, r.body, nil)
			}
			// A last request whose path is logged: once its line is in the log, so
			// are the lines of the requests before it (each is logged before its
			// handler returns; a short pause covers an answer flushed before that).
			sentinel := fmt.Sprintf("sentinel-%d", time.Now().UnixNano())
			s.do(t, http.MethodGet, "/v1/models/"+sentinel, nil, nil)
			deadline := time.Now().Add(10 * time.Second)
			for !strings.Contains(s.Out.String(), sentinel) {
				if time.Now().After(deadline) {
					t.Fatalf("the sentinel request never reached the log:\n%s", s.Out)
				}
				time.Sleep(10 * time.Millisecond)
			}
			time.Sleep(100 * time.Millisecond)
			if got := strings.Count(s.Out.String(), "msg=request"); got < len(requests)+1 {
				t.Fatalf("%d request lines in the log tail, want at least %d", got, len(requests)+1)
			}
			if log := s.Out.String(); strings.Contains(log, marker) {
				i := strings.Index(log, marker)
				t.Fatalf("the log holds input text: ...%s...", log[max(0, i-300):min(len(log), i+100)])
			}
		})
	}
}

// TestDefaultsAreSafe: serve binds loopback unless told otherwise, and prints API
// keys redacted.
func TestDefaultsAreSafe(t *testing.T) {
	if skipReason != "" {
		t.Skip(skipReason)
	}
	out, err := exec.Command(binPath, "serve", "--print-config", "--api-key", "sk-print-me-not").CombinedOutput()
	if err != nil {
		t.Fatalf("--print-config: %v\n%s", err, out)
	}
	for _, want := range []string{`addr                   = "127.0.0.1:8080"`, `api_key                = "<redacted>"`} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("--print-config lacks %s:\n%s", want, out)
		}
	}
	if bytes.Contains(out, []byte("sk-print-me-not")) {
		t.Errorf("--print-config shows the API key:\n%s", out)
	}
}

// TestBrowserOrigins: serve's CORS defaults. A page served from this machine gets
// its preflight answered (204, no key needed) and its request the
// Access-Control-Allow-Origin header; a page of another origin gets 403
// origin_not_allowed, and --cors-origin lets one in. Every answer names itself in
// X-Request-Id.
func TestBrowserOrigins(t *testing.T) {
	s := serverWith(t, "--model", modelPath, "--api-key", "k", "--cors-origin", "https://app.example.com")
	key := map[string]string{"Authorization": "Bearer k"}
	pre := s.do(t, http.MethodOptions, "/v1/embeddings", nil, map[string]string{
		"Origin": "http://localhost:5173", "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization,content-type"})
	if pre.status != http.StatusNoContent || pre.header.Get("Access-Control-Allow-Origin") != "http://localhost:5173" ||
		pre.header.Get("Access-Control-Allow-Headers") != "authorization,content-type" || !strings.Contains(pre.header.Get("Access-Control-Allow-Methods"), "POST") {
		t.Errorf("preflight from a local page: %d %v", pre.status, pre.header)
	}
	for _, origin := range []string{"http://localhost:5173", "https://app.example.com"} {
		r := s.do(t, http.MethodPost, "/v1/embeddings", `{"input":"a"}`, map[string]string{"Authorization": "Bearer k", "Origin": origin})
		if r.status != http.StatusOK || r.header.Get("Access-Control-Allow-Origin") != origin {
			t.Errorf("POST from %s: %d %v", origin, r.status, r.header)
		}
	}
	r := s.do(t, http.MethodPost, "/v1/embeddings", `{"input":"a"}`, map[string]string{"Authorization": "Bearer k", "Origin": "https://attacker.example"})
	env := requireErrorEnvelope(t, r, http.StatusForbidden)
	if env.Error.Code == nil || *env.Error.Code != "origin_not_allowed" || r.header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("POST from another page: %+v, headers %v", env.Error, r.header)
	}
	if r := s.do(t, http.MethodPost, "/v1/embeddings", `{"input":"a"}`, key); r.status != http.StatusOK || !strings.HasPrefix(r.header.Get("X-Request-Id"), "req_") {
		t.Errorf("no Origin: %d, X-Request-Id %q", r.status, r.header.Get("X-Request-Id"))
	}
}
