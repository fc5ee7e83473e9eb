package server

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/embed-stack/embed-stack/routing"
	"github.com/embed-stack/embed-stack/telemetry/telemetrytest"
)

// scrape returns GET /metrics as the reader behind it writes it.
func scrape(t *testing.T) telemetrytest.Samples {
	t.Helper()
	w := httptest.NewRecorder()
	promhttp.HandlerFor(promRegistry, promhttp.HandlerOpts{}).ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	if w.Code != http.StatusOK {
		t.Fatalf("scrape: status %d", w.Code)
	}
	return telemetrytest.ParseSamples(w.Body.String())
}

// TestMetricsByModel: with two embedding models and a reranker (issue 17) every
// per-request series carries the served id of the model the request was resolved
// to (never the alias it named), from the HTTP counters through routing to the
// worker calls; a request refused before its model is known (an unknown model)
// has no model label. The model names are this test's own, so that the lines are
// exact whatever else the test binary recorded.
func TestMetricsByModel(t *testing.T) {
	recorder()
	newRouter := func(model string) *routing.Router {
		c := serveWorker(t, &spanEngine{})
		return &routing.Router{
			Config:    routing.Config{Model: model, Dim: fakeDim, MinDimensions: 2, WarmMaxTokens: 16, MaxInputTokens: 64},
			Tokenizer: byteTokenizer{},
			Warm:      c,
			Long:      clientLong{c},
		}
	}
	// The handler logs before ServeHTTP returns, and slog's handler serialises
	// its writes: a plain buffer will do.
	var logs bytes.Buffer
	s := &Server{
		Config: Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))},
		Models: []Model{
			{ID: "metrics-a", Aliases: []string{"metrics-a-alias"}, Embedder: newRouter("metrics-a")},
			{ID: "metrics-b", Embedder: newRouter("metrics-b")},
			{ID: "metrics-r", Rerank: true, Embedder: &fakeEmbedder{}, Reranker: &fakeReranker{}},
		},
	}
	h := s.Handler()
	before := scrape(t)
	long := strings.Repeat("z", 20) // 21 tokens: ephemeral
	for _, r := range []struct {
		path, body string
		status     int
	}{
		{"/v1/embeddings", `{"model":"metrics-a-alias","input":["abc","defg"]}`, 200}, // 4+5 warm tokens
		{"/v1/embeddings", `{"model":"metrics-a","input":"hi"}`, 200},                 // 3
		{"/embed", `{"texts":["` + long + `"]}`, 200},                                 // the first model: 21 ephemeral
		{"/v1/embeddings", `{"model":"metrics-b","input":["xyz"]}`, 200},              // 4
		{"/v1/embeddings", `{"model":"metrics-b","input":[""]}`, 400},                 // refused in routing
		{"/v1/embeddings", `{"model":"metrics-nope","input":"x"}`, 404},               // no model
		{"/v1/rerank", `{"model":"metrics-r","query":"q","documents":["a","b"]}`, 200},
	} {
		if w := do(h, "POST", r.path, r.body, nil); w.Code != r.status {
			t.Fatalf("POST %s %s: status %d, want %d: %s", r.path, r.body, w.Code, r.status, w.Body)
		}
	}
	after := scrape(t)
	after.Require(t,
		`embed_stack_http_requests_total{code="200",model="metrics-a",route="/v1/embeddings"} 2`,
		`embed_stack_http_requests_total{code="200",model="metrics-a",route="/embed"} 1`,
		`embed_stack_http_requests_total{code="200",model="metrics-b",route="/v1/embeddings"} 1`,
		`embed_stack_http_requests_total{code="400",model="metrics-b",route="/v1/embeddings"} 1`,
		`embed_stack_http_requests_total{code="200",model="metrics-r",route="/v1/rerank"} 1`,
		`embed_stack_http_request_duration_seconds_count{code="200",model="metrics-a",route="/v1/embeddings"} 2`,
		`embed_stack_http_request_duration_seconds_count{code="200",model="metrics-r",route="/v1/rerank"} 1`,
		`embed_stack_http_errors_total{code="400",error_code="empty_input",model="metrics-b",route="/v1/embeddings"} 1`,
		`embed_stack_tokens_total{model="metrics-a",route="warm"} 12`,
		`embed_stack_tokens_total{model="metrics-a",route="ephemeral"} 21`,
		`embed_stack_tokens_total{model="metrics-b",route="warm"} 4`,
		`embed_stack_request_inputs_count{model="metrics-a"} 3`,
		`embed_stack_request_inputs_sum{model="metrics-a"} 4`,
		`embed_stack_request_tokens_sum{model="metrics-a"} 33`,
		`embed_stack_request_inputs_count{model="metrics-b"} 1`,
		`embed_stack_request_tokens_sum{model="metrics-b"} 4`,
		`embed_stack_backend_inflight{model="metrics-a",route="warm"} 0`,
		`embed_stack_backend_inflight{model="metrics-a",route="ephemeral"} 0`,
		`embed_stack_backend_inflight{model="metrics-b",route="warm"} 0`,
		// Every Embed call is a routing.embed stage, the refused one included.
		`embed_stack_stage_duration_seconds_count{model="metrics-a",stage="routing.embed"} 3`,
		`embed_stack_stage_duration_seconds_count{model="metrics-b",stage="routing.embed"} 2`,
		`embed_stack_stage_duration_seconds_count{model="metrics-b",stage="routing.wrap"} 2`,
		// The worker calls, made by package backends, inherit the request's model.
		`embed_stack_stage_duration_seconds_count{model="metrics-a",stage="worker.call"} 3`,
		`embed_stack_stage_duration_seconds_count{model="metrics-b",stage="worker.call"} 1`,
		`embed_stack_batch_sequences_count{model="metrics-a",route="other"} 3`,
		`embed_stack_batch_sequences_sum{model="metrics-a",route="other"} 4`,
		`embed_stack_batch_tokens_sum{model="metrics-a",route="other"} 33`,
		`embed_stack_batch_sequences_count{model="metrics-b",route="other"} 1`,
		`embed_stack_stage_duration_seconds_count{model="metrics-a",stage="server.encode"} 2`,
		`embed_stack_stage_duration_seconds_count{model="metrics-b",stage="server.encode"} 1`,
	)
	for _, bad := range []string{`model="metrics-a-alias"`, `model="metrics-nope"`, `model=""`} {
		for _, line := range after.Matching(bad) {
			t.Errorf("%s: a model label from the request, or an empty one", line)
		}
	}
	// The body is decoded before the model is known.
	for _, line := range after.Matching(`stage="server.decode"`) {
		if strings.Contains(line, "model=") {
			t.Errorf("%s: server.decode has a model label", line)
		}
	}
	// The unknown model's 404 is counted without a model label.
	unlabelled := func(s telemetrytest.Samples) float64 {
		return max(0, s.Value(`embed_stack_http_errors_total{code="404",error_code="model_not_found",route="/v1/embeddings"}`))
	}
	if d := unlabelled(after) - unlabelled(before); d != 1 {
		t.Errorf("model_not_found without a model label moved by %v, want 1", d)
	}
	// The request log names the model as the metrics do.
	var withModel, notFound int
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		fields := strings.Fields(line)
		if slices.Contains(fields, "model=metrics-a") && slices.Contains(fields, "route=/v1/embeddings") {
			withModel++
		}
		if strings.Contains(line, "error_code=model_not_found") {
			notFound++
			if strings.Contains(line, "model=") {
				t.Errorf("the 404's log line has a model: %s", line)
			}
		}
	}
	if withModel != 2 || notFound != 1 {
		t.Errorf("log: %d lines of metrics-a on /v1/embeddings (want 2), %d of model_not_found (want 1):\n%s", withModel, notFound, logs.String())
	}
}
