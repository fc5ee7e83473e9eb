package conformance

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"
	tiktoken "github.com/tiktoken-go/tokenizer"

	"github.com/embed-stack/embed-stack/internal/reference"
	"github.com/embed-stack/embed-stack/tokenizer"
)

const (
	// eosID is Qwen3's <|endoftext|>, appended to every embedded sequence.
	eosID = 151643
	// defaultTask is the instruction a query gets when the request names none.
	defaultTask = "Given a web search query, retrieve relevant passages that answer the query"
	// refCosine is the least cosine between a server vector (llama.cpp, float32) and the
	// float64 reference for the same tokens.
	refCosine = 0.9999
	// normTol is how far from 1 the L2 norm of a returned vector may be.
	normTol = 1e-5
	// sameTol bounds the per-component difference between two server vectors that must
	// be the same computation (e.g. text vs its cl100k ids).
	sameTol = 1e-6
)

// batchTol bounds the per-component difference between a text embedded alone and the
// same text packed with other requests' inputs: 0, because the engine picks its
// attention kernel so that a sequence's vector does not depend on what it was packed
// with (docs/routing.md, "The engine: precision and memory"). That holds where ggml
// multiplies every row count with one kernel, as on x86; ARM switches kernels at 8
// rows, which moves the last bits.
var batchTol = func() float64 {
	if runtime.GOARCH == "amd64" {
		return 0
	}
	return 1e-5
}()

// ---------------------------------------------------------------------------
// Clients.

// client returns a go-openai client for s whose requests carry the given extra headers.
func (s *server) client(headers map[string]string) *openai.Client {
	cfg := openai.DefaultConfig("x")
	cfg.BaseURL = s.URL + "/v1"
	cfg.HTTPClient = &http.Client{
		Timeout:   2 * time.Minute,
		Transport: headerTransport{headers: headers, base: http.DefaultTransport},
	}
	return openai.NewClientWithConfig(cfg)
}

// headerTransport adds fixed headers to every request: go-openai has no per-request
// header option, and the server's X-Embedding-* headers are part of the contract.
type headerTransport struct {
	headers map[string]string
	base    http.RoundTripper
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.headers {
		r.Header.Set(k, v)
	}
	return h.base.RoundTrip(r)
}

// embed calls CreateEmbeddings and fails the test on any error.
func embed(t *testing.T, c *openai.Client, req openai.EmbeddingRequestConverter) openai.EmbeddingResponse {
	t.Helper()
	resp, err := c.CreateEmbeddings(ctx(t), req)
	if err != nil {
		t.Fatalf("CreateEmbeddings(%s): %v", describe(req), err)
	}
	return resp
}

// embedErr calls CreateEmbeddings, requires it to fail with an *openai.APIError and
// returns it.
func embedErr(t *testing.T, c *openai.Client, req openai.EmbeddingRequestConverter) *openai.APIError {
	t.Helper()
	resp, err := c.CreateEmbeddings(ctx(t), req)
	if err == nil {
		t.Fatalf("CreateEmbeddings(%s) succeeded with %d vectors; want an error", describe(req), len(resp.Data))
	}
	var apiErr *openai.APIError
	if !errors.As(err, &apiErr) {
		t.Fatalf("CreateEmbeddings(%s) error %T %v; want *openai.APIError", describe(req), err, err)
	}
	return apiErr
}

// describe shortens a request for failure messages (long inputs are cut).
func describe(req openai.EmbeddingRequestConverter) string {
	b, _ := json.Marshal(req.Convert())
	if len(b) > 300 {
		return string(b[:300]) + fmt.Sprintf("...(%d bytes)", len(b))
	}
	return string(b)
}

// httpResult is one raw HTTP exchange.
type httpResult struct {
	status int
	header http.Header
	body   []byte
	// close says the answer carried Connection: close (net/http removes that header).
	close bool
}

// do sends one request with a JSON body (nil for none; a []byte or string is sent as is).
func (s *server) do(t *testing.T, method, path string, body any, headers map[string]string) httpResult {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	case string:
		rd = strings.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatalf("marshal request: %v", err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx(t), method, s.URL+path, rd)
	if err != nil {
		t.Fatalf("new request: %v", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return httpResult{status: resp.StatusCode, header: resp.Header, body: raw}
}

// decode unmarshals the body strictly into v, failing the test with the body on error.
func (r httpResult) decode(t *testing.T, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("decode %T from %d %s: %v", v, r.status, truncate(r.body), err)
	}
}

// abbreviate shortens a text for failure messages.
func abbreviate(s string) string {
	if len(s) > 80 {
		return s[:60] + fmt.Sprintf("...(%d bytes)", len(s))
	}
	return s
}

func truncate(b []byte) string {
	if len(b) > 500 {
		return string(b[:500]) + "..."
	}
	return string(b)
}

// errorEnvelope is OpenAI's error shape; every field is required by the contract, and
// param and code may be null.
type errorEnvelope struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

// requireErrorEnvelope checks the status, the exact key set of the envelope, and returns it.
func requireErrorEnvelope(t *testing.T, r httpResult, status int) errorEnvelope {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body %s", r.status, status, truncate(r.body))
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	var keys struct {
		Error map[string]json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(r.body, &keys); err != nil || keys.Error == nil {
		t.Fatalf("body is not an error envelope: %s", truncate(r.body))
	}
	for _, k := range []string{"message", "type", "param", "code"} {
		if _, ok := keys.Error[k]; !ok {
			t.Errorf("error envelope lacks %q: %s", k, truncate(r.body))
		}
	}
	var env errorEnvelope
	r.decode(t, &env)
	wantType := "invalid_request_error"
	if status >= 500 {
		wantType = "server_error"
	}
	if env.Error.Type != wantType {
		t.Errorf("error.type %q, want %q", env.Error.Type, wantType)
	}
	if env.Error.Message == "" {
		t.Errorf("error.message is empty")
	}
	return env
}

// rawEmbeddings is the float response of /v1/embeddings decoded without a client, so
// that the shape itself is checked (DisallowUnknownFields).
type rawEmbeddings struct {
	Object string `json:"object"`
	Data   []struct {
		Object    string    `json:"object"`
		Index     int       `json:"index"`
		Embedding []float64 `json:"embedding"`
	} `json:"data"`
	Model string `json:"model"`
	Usage struct {
		PromptTokens int `json:"prompt_tokens"`
		TotalTokens  int `json:"total_tokens"`
	} `json:"usage"`
}

// rawEmbed posts body to /v1/embeddings, requires 200 and returns the decoded response.
func (s *server) rawEmbed(t *testing.T, body any, headers map[string]string) rawEmbeddings {
	t.Helper()
	r := s.do(t, http.MethodPost, "/v1/embeddings", body, headers)
	if r.status != http.StatusOK {
		t.Fatalf("POST /v1/embeddings: status %d, body %s", r.status, truncate(r.body))
	}
	var out rawEmbeddings
	r.decode(t, &out)
	return out
}

// modelID is the id the server lists first under /v1/models: the configured name.
func (s *server) modelID(t *testing.T) string {
	t.Helper()
	r := s.do(t, http.MethodGet, "/v1/models", nil, nil)
	if r.status != http.StatusOK {
		t.Fatalf("GET /v1/models: %d %s", r.status, truncate(r.body))
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(r.body, &list); err != nil || len(list.Data) == 0 || list.Data[0].ID == "" {
		t.Fatalf("GET /v1/models: no model id in %s (%v)", truncate(r.body), err)
	}
	return list.Data[0].ID
}

// ---------------------------------------------------------------------------
// Vectors.

func f64(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

func norm(v []float64) float64 {
	var s float64
	for _, x := range v {
		s += x * x
	}
	return math.Sqrt(s)
}

func normalized(v []float64) []float64 {
	n := norm(v)
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = x / n
	}
	return out
}

func cosine(a, b []float64) float64 {
	var dot float64
	for i := range a {
		dot += a[i] * b[i]
	}
	return dot / (norm(a) * norm(b))
}

// maxAbsDiff returns the largest per-component difference; different lengths are +Inf.
func maxAbsDiff(a, b []float64) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var m float64
	for i := range a {
		m = math.Max(m, math.Abs(a[i]-b[i]))
	}
	return m
}

func requireUnitNorm(t *testing.T, what string, v []float64) {
	t.Helper()
	if n := norm(v); math.Abs(n-1) > normTol {
		t.Errorf("%s: L2 norm %.9f, want 1 ± %g", what, n, normTol)
	}
}

// requireSame requires two server vectors to be the same computation.
func requireSame(t *testing.T, what string, got, want []float64) {
	t.Helper()
	if d := maxAbsDiff(got, want); d > sameTol {
		t.Errorf("%s: max |Δ| %.3g (len %d vs %d), want ≤ %g", what, d, len(got), len(want), sameTol)
	}
}

// requireReference requires a server vector to be unit-norm and to match the reference.
func requireReference(t *testing.T, what string, got []float64, want expectation) {
	t.Helper()
	if len(got) != len(want.vec) {
		t.Errorf("%s: %d dimensions, want %d", what, len(got), len(want.vec))
		return
	}
	requireUnitNorm(t, what, got)
	if c := cosine(got, want.vec); !(c >= refCosine) {
		t.Errorf("%s: cosine with the reference for %q (%d tokens) = %.7f, want ≥ %g",
			what, abbreviate(want.wrapped), len(want.tokens), c, refCosine)
	}
}

// ---------------------------------------------------------------------------
// Ground truth: the pure-Go tokenizer and the float64 reference forward pass.

var refState struct {
	once  sync.Once
	tok   *tokenizer.Tokenizer
	model *reference.Model
	err   error

	mu    sync.Mutex // guards cache
	cache map[string]expectation
}

// expectation is the reference result for one wrapped text.
type expectation struct {
	wrapped string
	tokens  []int32   // wrapped text's tokens plus EOS
	vec     []float64 // L2-normalised last-token hidden state
}

func loadReference(t *testing.T) {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
	refState.once.Do(func() {
		refState.cache = map[string]expectation{}
		refState.tok, refState.err = tokenizer.FromGGUF(modelPath)
		if refState.err != nil {
			refState.err = fmt.Errorf("tokenizer.FromGGUF: %w", refState.err)
			return
		}
		refState.model, refState.err = reference.Load(modelPath)
		if refState.err != nil {
			refState.err = fmt.Errorf("reference.Load: %w", refState.err)
		}
	})
	if refState.err != nil {
		t.Fatal(refState.err)
	}
}

// encode tokenizes text (no wrapping, no EOS) with the reference tokenizer.
func encode(t *testing.T, text string) []int32 {
	t.Helper()
	loadReference(t)
	return refState.tok.Encode(text)
}

// queryText is Qwen3-Embedding's query wrapping; no space follows "Query:".
func queryText(task, text string) string {
	return "Instruct: " + task + "\nQuery:" + text
}

// expectDocument is the reference for text embedded as a document (raw text).
func expectDocument(t *testing.T, text string) expectation {
	t.Helper()
	return expectWrapped(t, text)
}

// expectQuery is the reference for text embedded as a query with the given task.
func expectQuery(t *testing.T, task, text string) expectation {
	t.Helper()
	return expectWrapped(t, queryText(task, text))
}

func expectWrapped(t *testing.T, wrapped string) expectation {
	t.Helper()
	loadReference(t)
	refState.mu.Lock()
	defer refState.mu.Unlock()
	if e, ok := refState.cache[wrapped]; ok {
		return e
	}
	toks := append(slices.Clone(refState.tok.Encode(wrapped)), eosID)
	h, err := refState.model.LastToken(toks)
	if err != nil {
		t.Fatalf("reference LastToken(%q): %v", wrapped, err)
	}
	e := expectation{wrapped: wrapped, tokens: toks, vec: normalized(h)}
	refState.cache[wrapped] = e
	return e
}

// cl100k returns text's token ids under tiktoken's cl100k_base, the ids LangChain Python
// sends by default.
func cl100k(t *testing.T, text string) []int {
	t.Helper()
	codec, err := tiktoken.Get(tiktoken.Cl100kBase)
	if err != nil {
		t.Fatalf("tiktoken cl100k_base: %v", err)
	}
	ids, _, err := codec.Encode(text)
	if err != nil {
		t.Fatalf("cl100k encode %q: %v", text, err)
	}
	out := make([]int, len(ids))
	for i, id := range ids {
		out[i] = int(id)
	}
	return out
}

// cl100kDecode is cl100k's text for ids.
func cl100kDecode(t *testing.T, ids []int) string {
	t.Helper()
	codec, err := tiktoken.Get(tiktoken.Cl100kBase)
	if err != nil {
		t.Fatalf("tiktoken cl100k_base: %v", err)
	}
	u := make([]uint, len(ids))
	for i, id := range ids {
		u[i] = uint(id)
	}
	text, err := codec.Decode(u)
	if err != nil {
		t.Fatalf("cl100k decode %v: %v", ids, err)
	}
	return text
}

// repeatedText returns "a a a ..." of exactly n tokens under the reference tokenizer
// (without EOS): " a" is one pre-token and one BPE token, so the count is linear. It fails
// the test rather than guess if that ever stops being true.
func repeatedText(t *testing.T, n int) string {
	t.Helper()
	var b strings.Builder
	b.Grow(2 * n)
	b.WriteString("a")
	for i := 1; i < n; i++ {
		b.WriteString(" a")
	}
	s := b.String()
	if got := len(encode(t, s)); got != n {
		t.Fatalf("repeatedText(%d) tokenizes to %d tokens", n, got)
	}
	return s
}
