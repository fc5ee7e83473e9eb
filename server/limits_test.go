package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/embed-stack/embed-stack/routing"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// gateEmbedder holds every Embed and Prepare until release is closed (or the
// request's context ends, whose error it then returns), announcing each arrival.
type gateEmbedder struct {
	entered chan struct{}
	release chan struct{}
	mu      sync.Mutex
	ctxErrs []error
}

func newGateEmbedder() *gateEmbedder {
	return &gateEmbedder{entered: make(chan struct{}, 100), release: make(chan struct{})}
}

func (g *gateEmbedder) wait(ctx context.Context) error {
	g.entered <- struct{}{}
	select {
	case <-g.release:
		return nil
	case <-ctx.Done():
		g.mu.Lock()
		g.ctxErrs = append(g.ctxErrs, ctx.Err())
		g.mu.Unlock()
		return fmt.Errorf("waiting for the worker: %w", ctx.Err())
	}
}

func (g *gateEmbedder) Embed(ctx context.Context, req *routing.Request) (*routing.Result, error) {
	if err := g.wait(ctx); err != nil {
		return nil, err
	}
	return &routing.Result{Vectors: [][]float32{{1, 0}}, Tokens: 2}, nil
}

func (g *gateEmbedder) Prepare(req *routing.Request) ([][]int32, error) {
	if err := g.wait(context.Background()); err != nil {
		return nil, err
	}
	return [][]int32{{1, 151643}}, nil
}

// post sends a JSON body; a transport failure is status 0 with the error as body,
// so that goroutines other than the test's can call it.
func post(url, path, body string) (int, http.Header, string) {
	resp, err := http.Post(url+path, "application/json", strings.NewReader(body))
	if err != nil {
		return 0, nil, err.Error()
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, err.Error()
	}
	return resp.StatusCode, resp.Header, string(b)
}

func debugVars(t *testing.T, h http.Handler) map[string]float64 {
	t.Helper()
	w := do(h, "GET", "/debug/vars", "", nil)
	if w.Code != 200 {
		t.Fatalf("/debug/vars: %d %s", w.Code, w.Body)
	}
	var vars map[string]float64
	if err := json.Unmarshal(w.Body.Bytes(), &vars); err != nil {
		t.Fatalf("/debug/vars %s: %v", w.Body, err)
	}
	return vars
}

const body429 = `{"error":{"message":"The server is already handling its limit of 2 concurrent requests (--max-concurrent-requests); retry after 1s.","type":"rate_limit_error","param":null,"code":"rate_limit_exceeded"}}`

// Past MaxConcurrentRequests work requests are refused at once with 429 and
// Retry-After; other routes are not limited, and slots free as requests end.
func TestConcurrencyLimit(t *testing.T) {
	g := newGateEmbedder()
	s := &Server{Config: Config{ModelName: "m", MaxConcurrentRequests: 2, DebugVars: true, Logger: quiet()},
		Embedder: g, Ready: func() bool { return true },
		Vars: func() map[string]any { return map[string]any{"worker_restarts": 3} }}
	h := s.Handler()
	srv := httptest.NewServer(h)
	defer srv.Close()

	type answer struct {
		status int
		body   string
	}
	held := make(chan answer, 2)
	for _, path := range []string{"/v1/embeddings", "/tokenize"} {
		go func() {
			st, _, b := post(srv.URL, path, `{"input":"a","text":"a"}`)
			held <- answer{st, b}
		}()
	}
	for range 2 {
		select {
		case <-g.entered:
		case <-time.After(10 * time.Second):
			t.Fatal("the first two requests never reached the embedder")
		}
	}
	for _, path := range []string{"/v1/embeddings", "/embed", "/tokenize"} {
		st, hdr, b := post(srv.URL, path, `{"input":"b","texts":["b"]}`)
		if st != http.StatusTooManyRequests || b != body429 || hdr.Get("Retry-After") != "1" {
			t.Errorf("%s over the limit: %d Retry-After %q %s\nwant 429 Retry-After 1 %s", path, st, hdr.Get("Retry-After"), b, body429)
		}
	}
	if w := do(h, "GET", "/v1/models", "", nil); w.Code != 200 {
		t.Errorf("/v1/models while full: %d", w.Code)
	}
	if w := do(h, "GET", "/health", "", nil); w.Code != 200 {
		t.Errorf("/health while full: %d", w.Code)
	}
	v := debugVars(t, h)
	if v["requests_in_flight"] != 2 || v["requests_rejected_total"] != 3 || v["max_concurrent_requests"] != 2 || v["worker_restarts"] != 3 || v["goroutines"] < 1 {
		t.Errorf("/debug/vars while full: %v", v)
	}

	close(g.release)
	for range 2 {
		if a := <-held; a.status != 200 {
			t.Errorf("held request: %d %s", a.status, a.body)
		}
	}
	if st, _, b := post(srv.URL, "/v1/embeddings", `{"input":"c"}`); st != 200 {
		t.Errorf("after the slots freed: %d %s", st, b)
	}
	if v := debugVars(t, h); v["requests_in_flight"] != 0 || v["requests_rejected_total"] != 3 {
		t.Errorf("/debug/vars after: %v", v)
	}
}

// The request deadline reaches the embedder's context and maps to 504.
func TestRequestTimeout(t *testing.T) {
	g := newGateEmbedder()
	s := &Server{Config: Config{ModelName: "m", RequestTimeout: 50 * time.Millisecond, DebugVars: true, Logger: quiet()},
		Embedder: g, Ready: func() bool { return true }}
	h := s.Handler()
	start := time.Now()
	w := do(h, "POST", "/v1/embeddings", `{"input":"a"}`, nil)
	took := time.Since(start)
	const want = `{"error":{"message":"The request took longer than the server's deadline.","type":"server_error","param":null,"code":"timeout"}}`
	if w.Code != http.StatusGatewayTimeout || w.Body.String() != want {
		t.Fatalf("got %d %s\nwant 504 %s", w.Code, w.Body, want)
	}
	if took < 50*time.Millisecond || took > 5*time.Second {
		t.Errorf("answered after %s, want about 50ms", took)
	}
	if len(g.ctxErrs) != 1 || !errors.Is(g.ctxErrs[0], context.DeadlineExceeded) {
		t.Errorf("the embedder saw %v, want one DeadlineExceeded", g.ctxErrs)
	}
	if v := debugVars(t, h); v["requests_timed_out_total"] != 1 || v["requests_in_flight"] != 0 {
		t.Errorf("/debug/vars: %v", v)
	}
}

func TestDebugVarsCollectsOnRequest(t *testing.T) {
	s := &Server{Config: Config{ModelName: "m", DebugVars: true, Logger: quiet()}, Embedder: &fakeEmbedder{}}
	h := s.Handler()
	w := do(h, "GET", "/debug/vars", "", nil)
	var before map[string]float64
	if err := json.Unmarshal(w.Body.Bytes(), &before); err != nil {
		t.Fatal(err)
	}
	w = do(h, "GET", "/debug/vars?gc=1", "", nil)
	var after map[string]float64
	if err := json.Unmarshal(w.Body.Bytes(), &after); err != nil {
		t.Fatal(err)
	}
	if after["gc_cycles"] <= before["gc_cycles"] {
		t.Errorf("gc_cycles %v → %v: ?gc=1 did not collect", before["gc_cycles"], after["gc_cycles"])
	}
}

func TestDebugVarsOffByDefault(t *testing.T) {
	h := newTestServer(Config{}, &fakeEmbedder{}, true)
	if w := do(h, "GET", "/debug/vars", "", nil); w.Code != 404 {
		t.Fatalf("/debug/vars without DebugVars: %d %s", w.Code, w.Body)
	}
}

func TestRetrySeconds(t *testing.T) {
	for _, tt := range []struct {
		d    time.Duration
		want int
	}{{0, 1}, {time.Millisecond, 1}, {time.Second, 1}, {1001 * time.Millisecond, 2}, {3 * time.Second, 3}} {
		if got := retrySeconds(tt.d); got != tt.want {
			t.Errorf("retrySeconds(%s) = %d, want %d", tt.d, got, tt.want)
		}
	}
}
