package main

import (
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/embed-stack/embed-stack/internal/e2e"
	"github.com/embed-stack/embed-stack/server"
)

// TestPS: `embed-stack ps` against a running server with an embedding model under a
// 3 s keep-alive and a reranker without one: refused without the API key (exit 1,
// one line), then a table of both with their worker pids; once the keep-alive has
// unloaded the embedding model, only the reranker; a request loads it again.
func TestPS(t *testing.T) {
	bin, model := e2e.Paths(t)
	reranker := filepath.Join(filepath.Dir(model), "tiny-reranker.gguf")
	s := serveWith(t, "--model", "e="+model, "--model", "rr="+reranker, "--keep-alive", "e=3s", "--api-key", "k")
	addr := strings.TrimPrefix(s.URL, "http://")

	code, out, errOut := runCLI(t, bin, nil, "ps", "--addr", addr)
	if want := "embed-stack ps: GET " + s.URL + "/api/ps: 401: the server requires an API key (--api-key or EMBED_STACK_API_KEY)\n"; code != 1 || out != "" || errOut != want {
		t.Errorf("ps without the key: exit %d, stdout %q, stderr %q; want 1 and %q", code, out, errOut, want)
	}

	ps := func() (string, *server.PSResponse) {
		t.Helper()
		code, out, errOut := runCLI(t, bin, []string{"EMBED_STACK_API_KEY=k", "EMBED_STACK_ADDR=" + addr}, "ps")
		if code != 0 || errOut != "" {
			t.Fatalf("ps: exit %d, stderr %q", code, errOut)
		}
		status, body := callWithKey(t, s.URL+"/api/ps", "k", "")
		var list server.PSResponse
		if err := json.Unmarshal([]byte(body), &list); status != 200 || err != nil {
			t.Fatalf("GET /api/ps: %d %s (%v)", status, body, err)
		}
		return out, &list
	}

	// The table while both are loaded: the embedding model expires within 3 s, the
	// reranker never.
	out, list := ps()
	row := `^NAME +TASK +PID +IN FLIGHT +IDLE +UNTIL\n` +
		`e +embedding +[1-9][0-9]* +0 +[0-9.]+(ms|s) +[0-9.]+(ms|s)\n` +
		`rr +rerank +[1-9][0-9]* +0 +[0-9.]+(ms|s|m[0-9.]+s) +never\n$`
	if !regexp.MustCompile(row).MatchString(out) || len(list.Models) != 2 {
		t.Errorf("ps:\n%s\nwant both models, matching\n%s\nGET /api/ps: %+v", out, row, list.Models)
	}
	if len(list.Models) == 2 {
		e, rr := list.Models[0], list.Models[1]
		if time.Until(e.ExpiresAt) > 3*time.Second || time.Until(rr.ExpiresAt) < 290*365*24*time.Hour || e.PID == rr.PID || e.Digest == "" && e.Size == 0 ||
			e.Name != "e:latest" || rr.Name != "rr:latest" {
			t.Errorf("GET /api/ps: %+v, want e:latest expiring within 3 s, rr:latest in 292 years (never), two workers", list.Models)
		}
	}

	// After the keep-alive, only the reranker.
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, list = ps()
		if len(list.Models) == 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if len(list.Models) != 1 || list.Models[0].Name != "rr:latest" || !regexp.MustCompile(`^NAME .*\nrr +rerank .* never\n$`).MatchString(out) {
		t.Fatalf("30 s after a 3 s keep-alive, ps:\n%s\nwant the reranker only", out)
	}

	// A request loads the embedding model again.
	if status, body := callWithKey(t, s.URL+"/v1/embeddings", "k", `{"model":"e","input":"hello"}`); status != 200 {
		t.Fatalf("embeddings after the unload: %d %s", status, body)
	}
	if _, list = ps(); len(list.Models) != 2 || list.Models[0].Name != "e:latest" {
		t.Errorf("after a request, GET /api/ps: %+v, want e loaded again", list.Models)
	}
}
