package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/embed-stack/embed-stack/internal/e2e"
)

// TestBodyStatusesDocumented: every route that reads a body (OpenAI's, the rerank
// routes, TEI's and the native ones, Ollama's) answers 415 to an
// unsupported Content-Encoding and 408 to a body slower than --body-timeout, and
// GET /openapi.json documents both on each of them (issue 28: documented on no POST
// route).
func TestBodyStatusesDocumented(t *testing.T) {
	_, model := e2e.Paths(t)
	s := serveWith(t, "--model", model, "--body-timeout", "1s")
	code, raw := call(t, s.URL+"/openapi.json", "")
	if code != 200 {
		t.Fatalf("GET /openapi.json: %d", code)
	}
	var doc struct {
		Paths map[string]map[string]struct {
			Responses map[string]json.RawMessage
		}
	}
	if err := json.Unmarshal([]byte(raw), &doc); err != nil {
		t.Fatal(err)
	}
	host := strings.TrimPrefix(s.URL, "http://")
	for _, path := range []string{"/v1/embeddings", "/v1/rerank", "/v2/rerank", "/rerank", "/embed", "/", "/tokenize", "/api/embed", "/api/embeddings", "/api/show"} {
		op, ok := doc.Paths[path]["post"]
		if !ok {
			t.Errorf("POST %s is not documented", path)
			continue
		}
		for _, status := range []string{"408", "415"} {
			if _, ok := op.Responses[status]; !ok {
				t.Errorf("POST %s: %s is not documented", path, status)
			}
		}

		req, _ := http.NewRequest(http.MethodPost, s.URL+path, strings.NewReader(`{"input":"a"}`))
		req.Header.Set("Content-Encoding", "br")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnsupportedMediaType {
			t.Errorf("POST %s with Content-Encoding br: %d, want 415", path, resp.StatusCode)
		}

		// A body that never completes: 408 after --body-timeout.
		c, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(30 * time.Second))
		io.WriteString(c, "POST "+path+" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
		line, _ := io.ReadAll(io.LimitReader(c, 12))
		c.Close()
		if string(line) != "HTTP/1.1 408" {
			t.Errorf("POST %s with a stalled body: %q, want HTTP/1.1 408", path, line)
		}
	}
}

// TestServeHelpNamesLimitedRoutes: --max-concurrent-requests' help names every route
// it limits, the rerank and Ollama routes included (issue 28: it named
// /v1/embeddings, /embed and /tokenize only).
func TestServeHelpNamesLimitedRoutes(t *testing.T) {
	bin, _ := e2e.Paths(t)
	var out bytes.Buffer
	cmd := exec.Command(bin, "serve", "--help")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("serve --help: %v\n%s", err, out.String())
	}
	help := out.String()
	i := strings.Index(help, "\n  --max-concurrent-requests N")
	if i < 0 {
		t.Fatal("no --max-concurrent-requests in serve --help")
	}
	entry, _, _ := strings.Cut(help[i+1:], "\n  --")
	entry = strings.Join(strings.Fields(entry), " ")
	for _, route := range []string{"/v1/embeddings", "/v1/rerank", "/v2/rerank", "/rerank,", "/embed,", " / ", "/tokenize", "/api/embed ", "/api/embeddings"} {
		if !strings.Contains(entry, route) {
			t.Errorf("--max-concurrent-requests' help %q does not name %s", entry, route)
		}
	}
}
