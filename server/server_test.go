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
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/embed-stack/embed-stack/openai"
	"github.com/embed-stack/embed-stack/routing"
)

func init() { gin.SetMode(gin.TestMode) }

// fakeEmbedder records the routing request and answers a fixed vector per input, or
// the configured error.
type fakeEmbedder struct {
	last *routing.Request
	err  error
	// cached, when set, answers as a router with a cache whose hits were 3 tokens.
	cached bool
}

func (f *fakeEmbedder) Embed(_ context.Context, req *routing.Request) (*routing.Result, error) {
	f.last = req
	if f.err != nil {
		return nil, f.err
	}
	n := len(req.Texts) + len(req.TokenIDs)
	res := &routing.Result{Tokens: 7 * n}
	if f.cached {
		res.Cached, res.CachedTokens = true, 3
	}
	for i := range n {
		res.Vectors = append(res.Vectors, []float32{float32(i), 0.5, -0.25})
	}
	return res, nil
}

func (f *fakeEmbedder) Prepare(req *routing.Request) ([][]int32, error) {
	f.last = req
	if f.err != nil {
		return nil, f.err
	}
	var out [][]int32
	for i := range req.Texts {
		out = append(out, []int32{int32(i), 151643})
	}
	return out, nil
}

func newTestServer(cfg Config, e *fakeEmbedder, ready bool) http.Handler {
	if cfg.ModelName == "" {
		cfg.ModelName = "qwen3-embedding-0.6b"
	}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.Created = time.Unix(1700000000, 0)
	s := &Server{Config: cfg, Embedder: e, Ready: func() bool { return ready }}
	return s.Handler()
}

func do(h http.Handler, method, path, body string, header map[string]string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

// With the embedding cache on, usage says how many tokens it answered, where
// OpenAI reports a prompt cache's.
func TestEmbeddingsCachedTokens(t *testing.T) {
	w := do(newTestServer(Config{}, &fakeEmbedder{cached: true}, true), "POST", "/v1/embeddings", `{"input":["a","b"]}`, nil)
	if want := `"usage":{"prompt_tokens":14,"total_tokens":14,"prompt_tokens_details":{"cached_tokens":3}}}`; !strings.HasSuffix(w.Body.String(), want) {
		t.Fatalf("body %s, want it to end %s", w.Body, want)
	}
}

func TestEmbeddingsFloatAndBase64(t *testing.T) {
	h := newTestServer(Config{}, &fakeEmbedder{}, true)
	w := do(h, "POST", "/v1/embeddings", `{"model":"text-embedding-ada-002","input":["a","b"]}`, nil)
	want := `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0,0.5,-0.25]},{"object":"embedding","index":1,"embedding":[1,0.5,-0.25]}],"model":"text-embedding-ada-002","usage":{"prompt_tokens":14,"total_tokens":14}}`
	if w.Code != 200 || w.Body.String() != want {
		t.Fatalf("got %d %s\nwant %s", w.Code, w.Body, want)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("content type %q", ct)
	}
	w = do(h, "POST", "/v1/embeddings", `{"input":"a","encoding_format":"base64"}`, nil)
	var resp struct {
		Model string `json:"model"`
		Data  []struct {
			Embedding string `json:"embedding"`
		} `json:"data"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil {
		t.Fatal(err)
	}
	v, err := openai.DecodeBase64(resp.Data[0].Embedding)
	if err != nil || fmt.Sprint(v) != "[0 0.5 -0.25]" || resp.Model != "qwen3-embedding-0.6b" {
		t.Fatalf("base64 decoded %v %v, model %q", v, err, resp.Model)
	}
}

func TestInputTypePrecedence(t *testing.T) {
	tests := []struct {
		name   string
		body   string
		header map[string]string
		want   string
		instr  string
	}{
		{"default", `{"input":"a"}`, nil, "", ""},
		{"model suffix", `{"model":"m:query","input":"a"}`, nil, "query", ""},
		{"header beats suffix", `{"model":"m:query","input":"a"}`, map[string]string{headerInputType: "document"}, "document", ""},
		{"body beats header", `{"model":"m:document","input":"a","input_type":"query"}`, map[string]string{headerInputType: "document"}, "query", ""},
		{"header instruction", `{"input":"a"}`, map[string]string{headerInstruction: "Find code"}, "", "Find code"},
		{"body instruction beats header", `{"input":"a","instruction":"Body"}`, map[string]string{headerInstruction: "Header"}, "", "Body"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := &fakeEmbedder{}
			w := do(newTestServer(Config{}, e, true), "POST", "/v1/embeddings", tt.body, tt.header)
			if w.Code != 200 {
				t.Fatalf("status %d: %s", w.Code, w.Body)
			}
			got := ""
			if e.last.Instruction != nil {
				got = *e.last.Instruction
			}
			if e.last.InputType != tt.want || got != tt.instr {
				t.Fatalf("input type %q instruction %q, want %q %q", e.last.InputType, got, tt.want, tt.instr)
			}
		})
	}
}

func TestErrorMapping(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		err     error
		body    string
		status  int
		want    string
		headers map[string]string
	}{
		{"decode error", Config{}, nil, `{"input":[]}`, 400,
			`{"error":{"message":"'input' must not be an empty array.","type":"invalid_request_error","param":"input","code":null}}`, nil},
		{"input error", Config{}, &routing.InputError{Param: "input", Index: 3, Code: routing.CodeContextLength, Message: "too long"}, `{"input":"a"}`, 400,
			`{"error":{"message":"too long","type":"invalid_request_error","param":"input","code":"context_length_exceeded"}}`, nil},
		{"strict model", Config{StrictModel: true, Aliases: []string{"alias"}}, nil, `{"model":"gpt-x","input":"a"}`, 404,
			"{\"error\":{\"message\":\"The model `gpt-x` does not exist or you do not have access to it.\",\"type\":\"invalid_request_error\",\"param\":\"model\",\"code\":\"model_not_found\"}}", nil},
		{"unavailable", Config{}, fmt.Errorf("warm worker: %w", &routing.UnavailableError{RetryAfter: 2500 * time.Millisecond}), `{"input":"a"}`, 503,
			`{"error":{"message":"The embedding worker is not ready (starting or restarting); retry after 3s.","type":"server_error","param":null,"code":"worker_unavailable"}}`,
			map[string]string{"Retry-After": "3"}},
		{"deadline", Config{}, fmt.Errorf("x: %w", context.DeadlineExceeded), `{"input":"a"}`, 504,
			`{"error":{"message":"The request took longer than the server's deadline.","type":"server_error","param":null,"code":"timeout"}}`, nil},
		{"internal", Config{}, errors.New("boom"), `{"input":"a"}`, 500,
			`{"error":{"message":"The server had an error while processing your request; the server log has the cause.","type":"server_error","param":null,"code":"internal_error"}}`, nil},
		{"body too large", Config{MaxBodyBytes: 10}, nil, `{"input":"abcdefghijkl"}`, 413,
			`{"error":{"message":"The request body is larger than the server's limit of 10 bytes (--max-body-bytes).","type":"invalid_request_error","param":null,"code":"request_too_large"}}`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := do(newTestServer(tt.cfg, &fakeEmbedder{err: tt.err}, true), "POST", "/v1/embeddings", tt.body, nil)
			if w.Code != tt.status || w.Body.String() != tt.want {
				t.Fatalf("got %d %s\nwant %d %s", w.Code, w.Body, tt.status, tt.want)
			}
			for k, v := range tt.headers {
				if got := w.Header().Get(k); got != v {
					t.Fatalf("header %s = %q, want %q", k, got, v)
				}
			}
		})
	}
}

func TestStrictModelAcceptsNameAliasAndSuffix(t *testing.T) {
	h := newTestServer(Config{StrictModel: true, Aliases: []string{"alias"}}, &fakeEmbedder{}, true)
	for _, m := range []string{"qwen3-embedding-0.6b", "alias", "alias:query", "qwen3-embedding-0.6b:document"} {
		if w := do(h, "POST", "/v1/embeddings", `{"model":"`+m+`","input":"a"}`, nil); w.Code != 200 {
			t.Fatalf("model %q: %d %s", m, w.Code, w.Body)
		}
	}
}

func TestModelsHealthReady(t *testing.T) {
	h := newTestServer(Config{Aliases: []string{"alias"}}, &fakeEmbedder{}, false)
	checks := []struct {
		method, path, want string
		status             int
	}{
		{"GET", "/v1/models", `{"object":"list","data":[{"id":"qwen3-embedding-0.6b","object":"model","created":1700000000,"owned_by":"embed-stack","root":"qwen3-embedding-0.6b","task":"embedding"},{"id":"alias","object":"model","created":1700000000,"owned_by":"embed-stack","root":"qwen3-embedding-0.6b","task":"embedding"}]}`, 200},
		{"GET", "/v1/models/alias", `{"id":"alias","object":"model","created":1700000000,"owned_by":"embed-stack","root":"qwen3-embedding-0.6b","task":"embedding"}`, 200},
		// A single model without --strict-model takes any name on /v1/embeddings,
		// so GET /v1/models/{id} does too (the OpenAI SDKs' models.retrieve).
		{"GET", "/v1/models/nope", `{"id":"nope","object":"model","created":1700000000,"owned_by":"embed-stack","root":"qwen3-embedding-0.6b","task":"embedding"}`, 200},
		{"GET", "/v1/models/alias:query", `{"id":"alias:query","object":"model","created":1700000000,"owned_by":"embed-stack","root":"qwen3-embedding-0.6b","task":"embedding"}`, 200},
		{"GET", "/health", `{"status":"ok"}`, 200},
		{"GET", "/ready", `{"status":"loading"}`, 503},
		{"GET", "/nope", `{"error":{"message":"Unknown request URL: GET /nope.","type":"invalid_request_error","param":null,"code":"not_found"}}`, 404},
	}
	for _, c := range checks {
		w := do(h, c.method, c.path, "", nil)
		if w.Code != c.status || w.Body.String() != c.want {
			t.Fatalf("%s %s: got %d %s\nwant %d %s", c.method, c.path, w.Code, w.Body, c.status, c.want)
		}
	}
}

func TestNativeEmbedAndTokenize(t *testing.T) {
	e := &fakeEmbedder{}
	h := newTestServer(Config{}, e, true)
	w := do(h, "POST", "/embed", `{"texts":["a","b"],"input_type":"query","instruction":"T"}`, nil)
	if w.Code != 200 || w.Body.String() != `{"vectors":[[0,0.5,-0.25],[1,0.5,-0.25]]}` {
		t.Fatalf("/embed: %d %s", w.Code, w.Body)
	}
	if e.last.InputType != "query" || *e.last.Instruction != "T" {
		t.Fatalf("/embed request %+v", e.last)
	}
	w = do(h, "POST", "/tokenize", `{"text":"a"}`, nil)
	if w.Code != 200 || w.Body.String() != `{"count":2,"ids":[0,151643],"results":[{"ids":[0,151643],"count":2}],"total":2}` {
		t.Fatalf("/tokenize: %d %s", w.Code, w.Body)
	}
	w = do(h, "POST", "/embed", `{"texts":"notalist"}`, nil)
	if w.Code != 400 || !strings.Contains(w.Body.String(), `"type":"invalid_request_error"`) {
		t.Fatalf("/embed bad body: %d %s", w.Code, w.Body)
	}
}

func TestPanicBecomesEnvelope(t *testing.T) {
	h := newTestServer(Config{}, &fakeEmbedder{}, true)
	s := h.(*gin.Engine)
	s.GET("/panic", func(*gin.Context) { panic("kaboom") })
	w := do(h, "GET", "/panic", "", nil)
	if w.Code != 500 || w.Body.String() != `{"error":{"message":"The server had an error while processing your request.","type":"server_error","param":null,"code":null}}` {
		t.Fatalf("got %d %s", w.Code, w.Body)
	}
}

// TestDrain: after Drain, /ready says 503 draining (before the worker's own state),
// work is still served, and every response asks for the connection to be closed.
func TestDrain(t *testing.T) {
	cfg := Config{ModelName: "qwen3-embedding-0.6b", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	s := &Server{Config: cfg, Embedder: &fakeEmbedder{}, Ready: func() bool { return true }}
	h := s.Handler()
	if w := do(h, "GET", "/ready", "", nil); w.Code != 200 || w.Header().Get("Connection") != "" {
		t.Fatalf("/ready before Drain: %d %q Connection=%q", w.Code, w.Body, w.Header().Get("Connection"))
	}
	s.Drain()
	checks := []struct {
		method, path, body string
		status             int
		want               string
	}{
		{"GET", "/ready", "", 503, `{"status":"draining"}`},
		{"GET", "/health", "", 200, `{"status":"ok"}`},
		{"POST", "/v1/embeddings", `{"input":"a"}`, 200, ""},
	}
	for _, c := range checks {
		w := do(h, c.method, c.path, c.body, nil)
		if w.Code != c.status || (c.want != "" && w.Body.String() != c.want) {
			t.Errorf("%s %s while draining: %d %s, want %d %s", c.method, c.path, w.Code, w.Body, c.status, c.want)
		}
		if got := w.Header().Get("Connection"); got != "close" {
			t.Errorf("%s %s while draining: Connection %q, want close", c.method, c.path, got)
		}
	}
}

// X-Embedding-Instruction reaches routing from every route that takes an
// instruction (the body's field first), and a header that is not UTF-8 is refused
// as the same bytes in the body are.
func TestInstructionHeader(t *testing.T) {
	for _, path := range []string{"/v1/embeddings", "/embed", "/tokenize"} {
		body := `{"input":"a"}`
		if path != "/v1/embeddings" {
			body = `{"texts":["a"]}`
		}
		e := &fakeEmbedder{}
		h := newTestServer(Config{}, e, true)
		w := do(h, "POST", path, body, map[string]string{headerInstruction: "Find the recipe"})
		if w.Code != 200 || e.last == nil || e.last.Instruction == nil || *e.last.Instruction != "Find the recipe" {
			t.Errorf("%s: %d %s; instruction %v, want the header's", path, w.Code, w.Body, e.last)
		}
		w = do(h, "POST", path, strings.Replace(body, "{", `{"instruction":"From the body",`, 1), map[string]string{headerInstruction: "Find the recipe"})
		if w.Code != 200 || e.last.Instruction == nil || *e.last.Instruction != "From the body" {
			t.Errorf("%s with both: %d %s, want the body's instruction", path, w.Code, w.Body)
		}
		w = do(h, "POST", path, body, map[string]string{headerInstruction: "caf\xe9"})
		want := `{"error":{"message":"The X-Embedding-Instruction header is not valid UTF-8; send the instruction in UTF-8 (in the header, or as the body's 'instruction').","type":"invalid_request_error","param":"instruction","code":"invalid_value"}}`
		if w.Code != 400 || w.Body.String() != want {
			t.Errorf("%s with a Latin-1 header: %d %s\nwant 400 %s", path, w.Code, w.Body, want)
		}
	}
}

// TEI's /tokenize body ("inputs") is refused naming the native fields, rather
// than blamed for an empty 'texts' it never sent.
func TestTokenizeTEIBody(t *testing.T) {
	w := do(newTestServer(Config{}, &fakeEmbedder{}, true), "POST", "/tokenize", `{"inputs":"hello world"}`, nil)
	want := `{"error":{"message":"POST /tokenize takes 'text' (one string) or 'texts' (an array of strings); 'inputs' is text-embeddings-inference's field, whose /tokenize answer (each token's text and character offsets) this server does not give.","type":"invalid_request_error","param":"inputs","code":null}}`
	if w.Code != 400 || w.Body.String() != want {
		t.Errorf("%d %s\nwant 400 %s", w.Code, w.Body, want)
	}
}
