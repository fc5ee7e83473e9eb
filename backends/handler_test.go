package backends

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
)

var testInfo = EngineInfo{NEmbd: fakeNEmbd, MaxTokens: 16, MaxBatchTokens: 32, Model: "tiny"}

func TestWorkerHandlerHealth(t *testing.T) {
	pid := os.Getpid()
	tests := []struct {
		name       string
		method     string
		ready      func() bool
		wantStatus int
		wantBody   string
		wantHeader map[string]string
	}{
		{
			name: "ready", method: http.MethodGet, ready: func() bool { return true },
			wantStatus: 200,
			wantBody:   fmt.Sprintf(`{"status":"ready","n_embd":8,"max_tokens":16,"max_batch_tokens":32,"model":"tiny","pid":%d}`, pid),
		},
		{
			name: "nil ready means ready", method: http.MethodGet, ready: nil,
			wantStatus: 200,
			wantBody:   fmt.Sprintf(`{"status":"ready","n_embd":8,"max_tokens":16,"max_batch_tokens":32,"model":"tiny","pid":%d}`, pid),
		},
		{
			name: "loading", method: http.MethodGet, ready: func() bool { return false },
			wantStatus: 503,
			wantBody:   fmt.Sprintf(`{"status":"loading","pid":%d}`, pid),
			wantHeader: map[string]string{"Retry-After": "1"},
		},
		{
			name: "wrong method", method: http.MethodPost, ready: func() bool { return true },
			wantStatus: 405,
			wantBody:   `{"error":"POST /health is not allowed; use GET"}`,
			wantHeader: map[string]string{"Allow": "GET, HEAD"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := NewWorkerHandler(&fakeEngine{}, testInfo, tt.ready)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tt.method, "/health", nil))
			if rec.Code != tt.wantStatus {
				t.Errorf("status = %d, want %d", rec.Code, tt.wantStatus)
			}
			if got := rec.Body.String(); got != tt.wantBody {
				t.Errorf("body = %s\nwant   %s", got, tt.wantBody)
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type = %q", ct)
			}
			for k, v := range tt.wantHeader {
				if got := rec.Header().Get(k); got != v {
					t.Errorf("header %s = %q, want %q", k, got, v)
				}
			}
		})
	}
}

func TestWorkerHandlerEmbed(t *testing.T) {
	okBody := func(seqs ...[]int32) string {
		b, err := json.Marshal(embedResponse{Embeddings: func() [][]float32 {
			out := make([][]float32, len(seqs))
			for i, s := range seqs {
				out[i] = fakeVector(s)
			}
			return out
		}()})
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	long := `[` + strings.Repeat(`1,`, 16) + `1]` // 17 tokens, max_tokens is 16
	tests := []struct {
		name       string
		method     string
		path       string
		body       string
		loading    bool
		engine     Engine
		wantStatus int
		wantBody   string
	}{
		{name: "one sequence", body: `{"tokens":[[1,2,3]]}`, wantStatus: 200, wantBody: okBody([]int32{1, 2, 3})},
		{name: "order is kept", body: `{"tokens":[[5],[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16],[0]]}`, wantStatus: 200,
			wantBody: okBody([]int32{5}, []int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, []int32{0})},
		{name: "loading", body: `{"tokens":[[1]]}`, loading: true, wantStatus: 503,
			wantBody: `{"error":"the worker is still loading its model"}`},
		{name: "not JSON", body: `tokens=1`, wantStatus: 400,
			wantBody: `{"error":"the body is not a JSON object {\"tokens\":[[id,...],...]}: invalid character 'o' in literal true (expecting 'r')"}`},
		{name: "trailing data", body: `{"tokens":[[1]]} {}`, wantStatus: 400,
			wantBody: `{"error":"the body holds data after the JSON object"}`},
		{name: "tokens missing", body: `{"input":[[1]]}`, wantStatus: 400,
			wantBody: `{"error":"\"tokens\" is missing; send {\"tokens\":[[id,...],...]}"}`},
		{name: "no sequences", body: `{"tokens":[]}`, wantStatus: 400,
			wantBody: `{"error":"\"tokens\" is empty; send at least one sequence"}`},
		{name: "empty sequence", body: `{"tokens":[[1],[]]}`, wantStatus: 400,
			wantBody: `{"error":"the sequence is empty","index":1}`},
		{name: "null sequence", body: `{"tokens":[null]}`, wantStatus: 400,
			wantBody: `{"error":"the sequence is empty","index":0}`},
		{name: "too long", body: `{"tokens":[[1],[2],` + long + `]}`, wantStatus: 400,
			wantBody: `{"error":"the sequence has 17 tokens; this worker accepts at most 16 (max_tokens)","index":2}`},
		{name: "negative id", body: `{"tokens":[[1,-4]]}`, wantStatus: 400,
			wantBody: `{"error":"token 1 is id -4; ids are not negative","index":0}`},
		{name: "id beyond int32", body: `{"tokens":[[3000000000]]}`, wantStatus: 400,
			wantBody: `{"error":"the body is not a JSON object {\"tokens\":[[id,...],...]}: json: cannot unmarshal number 3000000000 into Go struct field embedRequest.tokens of type int32"}`},
		{name: "engine input error", body: `{"tokens":[[1],[2,1000]]}`, wantStatus: 400,
			wantBody: `{"error":"token id 1000 is outside the vocabulary [0, 1000)","index":1}`},
		{name: "foreign input error type", body: `{"tokens":[[1]]}`,
			engine: engineFunc(func(context.Context, [][]int32) ([][]float32, error) {
				return nil, fmt.Errorf("llama: %w", &foreignInputError{i: 0})
			}),
			wantStatus: 400, wantBody: `{"error":"input 0: bad token","index":0}`},
		{name: "engine failure", body: `{"tokens":[[999]]}`, wantStatus: 500,
			wantBody: `{"error":"engine: fake decode failed"}`},
		{name: "engine returns too few vectors", body: `{"tokens":[[1],[2]]}`,
			engine: engineFunc(func(context.Context, [][]int32) ([][]float32, error) {
				return [][]float32{make([]float32, fakeNEmbd)}, nil
			}),
			wantStatus: 500, wantBody: `{"error":"engine: returned 1 vectors for 2 sequences"}`},
		{name: "engine returns a short vector", body: `{"tokens":[[1]]}`,
			engine: engineFunc(func(context.Context, [][]int32) ([][]float32, error) {
				return [][]float32{make([]float32, 3)}, nil
			}),
			wantStatus: 500, wantBody: `{"error":"engine: vector 0 has 3 floats; n_embd is 8"}`},
		{name: "engine returns NaN", body: `{"tokens":[[1]]}`,
			engine: engineFunc(func(context.Context, [][]int32) ([][]float32, error) {
				v := make([]float32, fakeNEmbd)
				v[5] = float32(math.NaN())
				return [][]float32{v}, nil
			}),
			wantStatus: 500, wantBody: `{"error":"engine: vector 0 holds NaN at 5"}`},
		{name: "GET embed", method: http.MethodGet, wantStatus: 405,
			wantBody: `{"error":"GET /embed is not allowed; use POST"}`},
		{name: "unknown path", path: "/v1/embeddings", body: `{}`, wantStatus: 404,
			wantBody: `{"error":"no such endpoint /v1/embeddings; the worker serves GET /health and POST /embed"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			method, path := tt.method, tt.path
			if method == "" {
				method = http.MethodPost
			}
			if path == "" {
				path = "/embed"
			}
			engine := tt.engine
			if engine == nil {
				engine = &fakeEngine{}
			}
			h := NewWorkerHandler(engine, testInfo, func() bool { return !tt.loading })
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(method, path, strings.NewReader(tt.body)))
			if rec.Code != tt.wantStatus {
				t.Errorf("status = %d, want %d", rec.Code, tt.wantStatus)
			}
			if got := rec.Body.String(); got != tt.wantBody {
				t.Errorf("body = %s\nwant   %s", got, tt.wantBody)
			}
		})
	}
}

func TestWorkerHandlerBodyLimit(t *testing.T) {
	h := NewWorkerHandler(&fakeEngine{}, testInfo, nil).(*workerHandler)
	if h.maxBody != MaxRequestBytes {
		t.Fatalf("limit = %d, want MaxRequestBytes", h.maxBody)
	}
	// A full-size body takes seconds to parse under -race.
	h.maxBody = 64
	// padded is a valid request of exactly n bytes.
	padded := func(n int) string {
		return `{"tokens":[[1]]` + strings.Repeat(" ", n-len(`{"tokens":[[1]]}`)) + `}`
	}
	tests := []struct {
		body       string
		wantStatus int
	}{
		{padded(64), 200},
		{padded(65), 400},
	}
	for _, tt := range tests {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/embed", strings.NewReader(tt.body)))
		if rec.Code != tt.wantStatus {
			t.Errorf("%d-byte body: status %d, want %d", len(tt.body), rec.Code, tt.wantStatus)
		}
		if want := `{"error":"the request body exceeds 64 bytes; send fewer tokens per request"}`; tt.wantStatus == 400 && rec.Body.String() != want {
			t.Errorf("body %s, want %s", rec.Body.String(), want)
		}
	}
}

func TestWorkerHandlerTraceparent(t *testing.T) {
	const valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tests := []struct {
		header string
		want   string
	}{
		{valid, valid},
		{"", ""},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7", ""},    // too few fields
		{"00-00000000000000000000000000000000-00f067aa0ba902b7-01", ""}, // zero trace id
		{"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", ""}, // upper case
		{"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", ""}, // invalid version
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-xyz", "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-xyz"},
	}
	for _, tt := range tests {
		t.Run(tt.header, func(t *testing.T) {
			var got string
			e := engineFunc(func(ctx context.Context, seqs [][]int32) ([][]float32, error) {
				got = TraceparentFromContext(ctx)
				return [][]float32{fakeVector(seqs[0])}, nil
			})
			req := httptest.NewRequest(http.MethodPost, "/embed", strings.NewReader(`{"tokens":[[1]]}`))
			if tt.header != "" {
				req.Header.Set("traceparent", tt.header)
			}
			rec := httptest.NewRecorder()
			NewWorkerHandler(e, testInfo, nil).ServeHTTP(rec, req)
			if rec.Code != 200 {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
			if got != tt.want {
				t.Errorf("engine saw traceparent %q, want %q", got, tt.want)
			}
		})
	}
}

type engineFunc func(ctx context.Context, seqs [][]int32) ([][]float32, error)

func (f engineFunc) Embed(ctx context.Context, seqs [][]int32) ([][]float32, error) {
	return f(ctx, seqs)
}

// foreignInputError stands for backends/llama's own input error type: it has
// InputIndex but not InputReason.
type foreignInputError struct{ i int }

func (e *foreignInputError) Error() string   { return fmt.Sprintf("input %d: bad token", e.i) }
func (e *foreignInputError) InputIndex() int { return e.i }
