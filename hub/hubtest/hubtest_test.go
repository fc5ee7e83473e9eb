package hubtest_test

import (
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/embed-stack/embed-stack/hub"
	"github.com/embed-stack/embed-stack/hub/hubtest"
)

// TestResolveThroughFakeHub: package hub downloads from the fake as from the real Hub,
// choosing the F16 file, into the cache layout, and a second resolve downloads nothing.
func TestResolveThroughFakeHub(t *testing.T) {
	h := hubtest.New(t)
	f16 := []byte(strings.Repeat("f16 bytes ", 1000))
	commit := h.AddRepo("Qwen/Qwen3-Embedding-0.6B-GGUF", map[string][]byte{
		"Qwen3-Embedding-0.6B-Q8_0.gguf": []byte("q8"),
		"Qwen3-Embedding-0.6B-f16.gguf":  f16,
		"README.md":                      []byte("readme"),
	})
	cache := t.TempDir()
	opts := hub.Options{Endpoint: h.URL, CacheDir: cache, Logger: slog.New(slog.DiscardHandler)}
	for i := range 2 {
		p, err := hub.Resolve(t.Context(), "Qwen/Qwen3-Embedding-0.6B-GGUF", opts)
		if err != nil {
			t.Fatal(err)
		}
		want := filepath.Join(cache, "models--Qwen--Qwen3-Embedding-0.6B-GGUF", "snapshots", commit, "Qwen3-Embedding-0.6B-f16.gguf")
		if p != want {
			t.Fatalf("run %d: path %s, want %s", i, p, want)
		}
		if b, _ := os.ReadFile(p); string(b) != string(f16) {
			t.Fatalf("run %d: downloaded %d bytes, want the %d of the F16 file", i, len(b), len(f16))
		}
	}
	var cdn int
	for _, r := range h.Requests() {
		if r.Server == "cdn" {
			cdn++
		}
	}
	if cdn != 1 {
		t.Errorf("%d CDN requests, want 1 (the second resolve uses the cache)", cdn)
	}
}

// TestErrorsAndRanges: unknown repositories and files answer as the Hub does, and the
// CDN honours Range.
func TestErrorsAndRanges(t *testing.T) {
	h := hubtest.New(t)
	data := []byte("0123456789")
	h.AddRepo("o/r", map[string][]byte{"m.gguf": data})
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	tests := []struct {
		url, rng   string
		status     int
		code, body string
	}{
		{h.URL + "/api/models/o/x/revision/main", "", http.StatusUnauthorized, "RepoNotFound", ""},
		{h.URL + "/o/r/resolve/main/n.gguf", "", http.StatusNotFound, "EntryNotFound", ""},
		{h.URL + "/o/r/resolve/v9/m.gguf", "", http.StatusNotFound, "RevisionNotFound", ""},
		{h.URL + "/o/r/resolve/main/m.gguf", "", http.StatusFound, "", ""},
	}
	for _, tt := range tests {
		resp, err := noRedirect.Get(tt.url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.status || resp.Header.Get("X-Error-Code") != tt.code {
			t.Errorf("GET %s: %d %q, want %d %q", tt.url, resp.StatusCode, resp.Header.Get("X-Error-Code"), tt.status, tt.code)
		}
		if tt.status == http.StatusFound {
			if got := resp.Header.Get("X-Linked-Etag"); got != `"`+hubtest.SHA256(data)+`"` {
				t.Errorf("X-Linked-Etag %s", got)
			}
			req, _ := http.NewRequest(http.MethodGet, resp.Header.Get("Location"), nil)
			req.Header.Set("Range", "bytes=4-")
			r2, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(r2.Body)
			r2.Body.Close()
			if r2.StatusCode != http.StatusPartialContent || string(b) != "456789" || r2.Header.Get("Content-Range") != "bytes 4-9/10" {
				t.Errorf("ranged GET: %d %q %q", r2.StatusCode, b, r2.Header.Get("Content-Range"))
			}
		}
	}
}
