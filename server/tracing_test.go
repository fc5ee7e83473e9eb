package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/embed-stack/embed-stack/backends"
	"github.com/embed-stack/embed-stack/internal/testenv"
	"github.com/embed-stack/embed-stack/routing"
	"github.com/embed-stack/embed-stack/telemetry"
	"github.com/embed-stack/embed-stack/telemetry/telemetrytest"
)

// The tests below run one request through the real server, router, worker-protocol
// client and worker handler (over a Unix socket, so the trace context crosses a real
// HTTP hop), with a fake engine, and read the spans and metrics that produced.

// promRegistry holds the collector of the reader behind GET /metrics
// (telemetry.NewPrometheusReader), for tests of a scrape's exact lines.
var promRegistry = prometheus.NewRegistry()

// recorder returns the recording providers (telemetrytest.Install, once per test
// binary), with the Prometheus reader on promRegistry beside the manual one.
var recorder = sync.OnceValue(func() *telemetrytest.Recorder {
	prom, err := telemetry.NewPrometheusReader(promRegistry)
	if err != nil {
		panic(err)
	}
	return telemetrytest.Install(prom)
})

// byteTokenizer gives one token per byte of text, so token counts are easy to state.
type byteTokenizer struct{}

func (byteTokenizer) Encode(text string) []int32 {
	out := make([]int32, len(text))
	for i := range len(text) {
		out[i] = int32(text[i])
	}
	return out
}

func (byteTokenizer) VocabSize() int { return 151669 }

// spanEngine is a worker engine that remembers the span its context carries and
// fails on token id failToken.
type spanEngine struct {
	mu    sync.Mutex
	spans []trace.SpanContext
}

const (
	fakeDim   = 8
	failToken = '#' // a text holding '#' makes the engine fail
)

func (e *spanEngine) Embed(ctx context.Context, seqs [][]int32) ([][]float32, error) {
	e.mu.Lock()
	e.spans = append(e.spans, trace.SpanContextFromContext(ctx))
	e.mu.Unlock()
	out := make([][]float32, len(seqs))
	for i, s := range seqs {
		v := make([]float32, fakeDim)
		for j := range v {
			v[j] = float32(len(s) + j + 1)
		}
		for _, t := range s {
			if t == failToken {
				return nil, errors.New("fake engine failure")
			}
		}
		out[i] = v
	}
	return out, nil
}

// clientLong sends each long sequence alone through a worker-protocol client, in
// place of an ephemeral worker process.
type clientLong struct{ c *backends.Client }

func (l clientLong) Embed(ctx context.Context, seq []int32) ([]float32, error) {
	v, err := l.c.Embed(ctx, [][]int32{seq})
	if err != nil {
		return nil, err
	}
	return v[0], nil
}

// serveWorker serves the worker protocol for e on a Unix socket and returns a
// client for it.
func serveWorker(t testing.TB, e backends.Engine) *backends.Client {
	t.Helper()
	dir, err := makeSocketDir(t)
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "w.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: backends.NewWorkerHandler(e, backends.EngineInfo{NEmbd: fakeDim, MaxTokens: 4096, MaxBatchTokens: 4096, Model: "fake"}, nil)}
	go func() { _ = srv.Serve(ln) }()
	c := backends.NewClient(sock)
	t.Cleanup(func() {
		c.Close()
		_ = srv.Close()
	})
	return c
}

// makeSocketDir returns a short private directory: t.TempDir's path can exceed the
// 107 bytes a Unix socket path may have.
func makeSocketDir(t testing.TB) (string, error) {
	t.Helper()
	dir, err := os.MkdirTemp("", "es-trace-")
	if err != nil {
		return "", err
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir, nil
}

// tracedStack is the server over a real router over worker-protocol clients, with
// the recording providers installed.
func tracedStack(t *testing.T, engine *spanEngine) http.Handler {
	t.Helper()
	recorder()
	return newStack(t, engine, true)
}

// newStack is the server over a real router over worker-protocol clients.
func newStack(t testing.TB, engine *spanEngine, tracing bool) http.Handler {
	t.Helper()
	c := serveWorker(t, engine)
	router := &routing.Router{
		Config:    routing.Config{Model: "m", Dim: fakeDim, MinDimensions: 2, WarmMaxTokens: 16, MaxInputTokens: 64},
		Tokenizer: byteTokenizer{},
		Warm:      c,
		Long:      clientLong{c},
	}
	s := &Server{
		Config:   Config{ModelName: "m", Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Tracing: tracing},
		Embedder: router,
	}
	return s.Handler()
}

// incomingTrace returns a traceparent header value for a new trace and its ids.
func incomingTrace(n byte) (string, trace.TraceID, trace.SpanID) {
	var tid trace.TraceID
	var sid trace.SpanID
	for i := range tid {
		tid[i] = n + byte(i)
	}
	for i := range sid {
		sid[i] = 0xa0 + n + byte(i)
	}
	return fmt.Sprintf("00-%s-%s-01", tid, sid), tid, sid
}

// wantSpan states one span of a tree: its parent's name ("" = the caller's remote
// span), kind (unspecified = internal), status and attributes.
type wantSpan struct {
	parent string
	kind   trace.SpanKind
	status codes.Code
	desc   string // status description, when status is Error
	attrs  map[string]any
}

// checkTree compares the spans of one trace with want, exactly: no span missing, no
// span more, each under its parent and inside its parent's interval.
func checkTree(t *testing.T, spans map[string][]sdktrace.ReadOnlySpan, remote trace.SpanID, want map[string]wantSpan) {
	t.Helper()
	for name, got := range spans {
		if _, ok := want[name]; !ok {
			t.Errorf("unexpected span %q", name)
		} else if len(got) != 1 {
			t.Errorf("%d spans %q, want 1", len(got), name)
		}
	}
	for name, w := range want {
		got, ok := spans[name]
		if !ok {
			t.Errorf("no span %q", name)
			continue
		}
		s := got[0]
		if w.parent == "" {
			if s.Parent().SpanID() != remote || !s.Parent().IsRemote() {
				t.Errorf("%s: parent %s (remote %v), want the caller's %s", name, s.Parent().SpanID(), s.Parent().IsRemote(), remote)
			}
		} else if p, ok := spans[w.parent]; !ok || s.Parent().SpanID() != p[0].SpanContext().SpanID() {
			t.Errorf("%s: parent is not %s", name, w.parent)
		} else if s.StartTime().Before(p[0].StartTime()) || s.EndTime().After(p[0].EndTime()) {
			t.Errorf("%s [%s, %s] lies outside its parent %s [%s, %s]", name,
				s.StartTime().Format(time.StampMicro), s.EndTime().Format(time.StampMicro),
				w.parent, p[0].StartTime().Format(time.StampMicro), p[0].EndTime().Format(time.StampMicro))
		}
		if w.kind == trace.SpanKindUnspecified {
			w.kind = trace.SpanKindInternal
		}
		if s.SpanKind() != w.kind {
			t.Errorf("%s: kind %v, want %v", name, s.SpanKind(), w.kind)
		}
		if s.Status().Code != w.status || (w.status == codes.Error && s.Status().Description != w.desc) {
			t.Errorf("%s: status %v %q, want %v %q", name, s.Status().Code, s.Status().Description, w.status, w.desc)
		}
		for k, v := range w.attrs {
			got, ok := telemetrytest.Attr(s, k)
			if !ok {
				t.Errorf("%s: no attribute %s", name, k)
				continue
			}
			if fmt.Sprint(got.AsInterface()) != fmt.Sprint(v) {
				t.Errorf("%s: %s = %v, want %v", name, k, got.AsInterface(), v)
			}
		}
	}
}

func TestTraceShortRequest(t *testing.T) {
	engine := &spanEngine{}
	h := tracedStack(t, engine)
	tp, tid, remote := incomingTrace(1)
	// 5+1 and 3+1 tokens (bytes and EOS): both go to the warm worker.
	w := do(h, "POST", "/v1/embeddings", `{"input":["hello","hi!"],"dimensions":4,"encoding_format":"base64"}`, map[string]string{"traceparent": tp})
	if w.Code != 200 {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	spans := recorder().Trace(tid)
	checkTree(t, spans, remote, map[string]wantSpan{
		"POST /v1/embeddings": {kind: trace.SpanKindServer, attrs: map[string]any{
			"http.route": "/v1/embeddings", "http.response.status_code": 200, "embed_stack.inputs": 2, "embed_stack.tokens": 10}},
		"server.decode": {parent: "POST /v1/embeddings", kind: trace.SpanKindInternal, attrs: map[string]any{
			"embed_stack.inputs": 2, "embed_stack.encoding_format": "base64", "embed_stack.dimensions": 4, "embed_stack.input_kind": "text"}},
		"routing.embed": {parent: "POST /v1/embeddings", kind: trace.SpanKindInternal, attrs: map[string]any{
			"embed_stack.inputs": 2, "embed_stack.tokens": 10, "embed_stack.dimensions": 4}},
		"routing.wrap":     {parent: "routing.embed", kind: trace.SpanKindInternal, attrs: map[string]any{"embed_stack.input_type": "document"}},
		"routing.tokenize": {parent: "routing.embed", kind: trace.SpanKindInternal, attrs: map[string]any{"embed_stack.tokens": 10}},
		"routing.route": {parent: "routing.embed", kind: trace.SpanKindInternal, attrs: map[string]any{
			"embed_stack.route.warm_inputs": 2, "embed_stack.route.warm_tokens": 10, "embed_stack.route.ephemeral_inputs": 0}},
		"routing.warm": {parent: "routing.embed", kind: trace.SpanKindInternal, attrs: map[string]any{
			"embed_stack.batch.sequences": 2, "embed_stack.batch.tokens": 10}},
		"worker.call": {parent: "routing.warm", kind: trace.SpanKindClient, attrs: map[string]any{
			"embed_stack.batch.sequences": 2, "embed_stack.batch.tokens": 10}},
		"worker.embed": {parent: "worker.call", kind: trace.SpanKindServer, attrs: map[string]any{
			"embed_stack.batch.sequences": 2, "embed_stack.batch.tokens": 10, "http.response.status_code": 200}},
		"routing.normalize": {parent: "routing.embed", kind: trace.SpanKindInternal},
		"server.encode": {parent: "POST /v1/embeddings", kind: trace.SpanKindInternal, attrs: map[string]any{
			"embed_stack.encoding_format": "base64", "embed_stack.vectors": 2}},
	})
	// The engine ran inside the worker's span: the trace context crossed the socket.
	if we := spans["worker.embed"]; len(we) == 1 {
		engine.mu.Lock()
		defer engine.mu.Unlock()
		if len(engine.spans) != 1 || engine.spans[0].SpanID() != we[0].SpanContext().SpanID() {
			t.Errorf("engine saw spans %v, want the worker.embed span %s", engine.spans, we[0].SpanContext().SpanID())
		}
	}
}

func TestTraceLongRequest(t *testing.T) {
	h := tracedStack(t, &spanEngine{})
	tp, tid, remote := incomingTrace(2)
	long := strings.Repeat("x", 30) // 31 tokens > WarmMaxTokens 16
	w := do(h, "POST", "/v1/embeddings", `{"input":["short","`+long+`"]}`, map[string]string{"traceparent": tp})
	if w.Code != 200 {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	spans := recorder().Trace(tid)
	calls := spans["worker.call"]
	delete(spans, "worker.call")
	embeds := spans["worker.embed"]
	delete(spans, "worker.embed")
	checkTree(t, spans, remote, map[string]wantSpan{
		"POST /v1/embeddings": {kind: trace.SpanKindServer, attrs: map[string]any{"embed_stack.inputs": 2, "embed_stack.tokens": 37}},
		"server.decode":       {parent: "POST /v1/embeddings", attrs: map[string]any{"embed_stack.encoding_format": "float", "embed_stack.dimensions": 0}},
		"routing.embed":       {parent: "POST /v1/embeddings", attrs: map[string]any{"embed_stack.tokens": 37, "embed_stack.dimensions": fakeDim}},
		"routing.wrap":        {parent: "routing.embed"},
		"routing.tokenize":    {parent: "routing.embed", attrs: map[string]any{"embed_stack.tokens": 37}},
		"routing.route": {parent: "routing.embed", attrs: map[string]any{
			"embed_stack.route.warm_inputs": 1, "embed_stack.route.warm_tokens": 6,
			"embed_stack.route.ephemeral_inputs": 1, "embed_stack.route.ephemeral_tokens": 31}},
		"routing.warm":      {parent: "routing.embed", attrs: map[string]any{"embed_stack.batch.sequences": 1, "embed_stack.batch.tokens": 6}},
		"routing.admit":     {parent: "routing.embed", attrs: map[string]any{"embed_stack.batch.tokens": 31}},
		"routing.normalize": {parent: "routing.embed"},
		"server.encode":     {parent: "POST /v1/embeddings"},
	})
	// Two calls ran in parallel: the short input's under routing.warm, the long
	// one's straight under routing.embed (the backend, here a plain client, owns any
	// further stage); each has its worker span beneath it.
	if len(calls) != 2 || len(embeds) != 2 {
		t.Fatalf("%d worker.call and %d worker.embed spans, want 2 and 2", len(calls), len(embeds))
	}
	parents := map[trace.SpanID]string{
		spans["routing.warm"][0].SpanContext().SpanID():  "routing.warm",
		spans["routing.embed"][0].SpanContext().SpanID(): "routing.embed",
	}
	tokensUnder := map[string]int64{}
	for _, c := range calls {
		v, _ := telemetrytest.Attr(c, "embed_stack.batch.tokens")
		tokensUnder[parents[c.Parent().SpanID()]] = v.AsInt64()
		found := false
		for _, e := range embeds {
			found = found || e.Parent().SpanID() == c.SpanContext().SpanID()
		}
		if !found {
			t.Errorf("no worker.embed under the worker.call of %d tokens", v.AsInt64())
		}
	}
	if tokensUnder["routing.warm"] != 6 || tokensUnder["routing.embed"] != 31 {
		t.Errorf("worker.call tokens by parent %v, want routing.warm:6 routing.embed:31", tokensUnder)
	}
}

func TestTraceFailingRequests(t *testing.T) {
	tooLong := strings.Repeat("y", 70) // 71 tokens > MaxInputTokens 64
	tooLongMsg := "This model's maximum context length is 64 tokens, however you requested 71 tokens (71 in your prompt; 0 for the completion) in input 0. Please reduce your prompt; or completion length."
	tests := []struct {
		name   string
		body   string
		status int
		want   map[string]wantSpan
	}{
		{
			name:   "input too long: decided in routing.tokenize",
			body:   `{"input":["` + tooLong + `"]}`,
			status: 400,
			want: map[string]wantSpan{
				// 4xx leaves the server span's status unset (the client's fault), but it
				// says what went wrong.
				"POST /v1/embeddings": {kind: trace.SpanKindServer, attrs: map[string]any{
					"http.response.status_code": 400, "error.type": "*routing.InputError", "embed_stack.error.code": "context_length_exceeded"}},
				"server.decode":    {parent: "POST /v1/embeddings"},
				"routing.embed":    {parent: "POST /v1/embeddings", status: codes.Error, desc: tooLongMsg, attrs: map[string]any{"error.type": "*routing.InputError"}},
				"routing.wrap":     {parent: "routing.embed"},
				"routing.tokenize": {parent: "routing.embed", status: codes.Error, desc: tooLongMsg, attrs: map[string]any{"error.type": "*routing.InputError"}},
			},
		},
		{
			name:   "engine failure: decided in the worker",
			body:   `{"input":["ok","bad#"]}`,
			status: 500,
			want: map[string]wantSpan{
				"POST /v1/embeddings": {kind: trace.SpanKindServer, status: codes.Error, desc: "", attrs: map[string]any{
					"http.response.status_code": 500, "embed_stack.error.code": "internal_error"}},
				"server.decode":    {parent: "POST /v1/embeddings"},
				"routing.embed":    {parent: "POST /v1/embeddings", status: codes.Error, desc: "warm worker: worker at SOCKET answered 500: engine: fake engine failure"},
				"routing.wrap":     {parent: "routing.embed"},
				"routing.tokenize": {parent: "routing.embed"},
				"routing.route":    {parent: "routing.embed"},
				"routing.warm":     {parent: "routing.embed", status: codes.Error, desc: "worker at SOCKET answered 500: engine: fake engine failure"},
				"worker.call":      {parent: "routing.warm", kind: trace.SpanKindClient, status: codes.Error, desc: "worker at SOCKET answered 500: engine: fake engine failure"},
				"worker.embed": {parent: "worker.call", kind: trace.SpanKindServer, status: codes.Error, desc: "engine: fake engine failure", attrs: map[string]any{
					"http.response.status_code": 500, "error.type": "*backends.workerError"}},
			},
		},
		{
			name:   "malformed JSON: decided in server.decode",
			body:   `{"input":`,
			status: 400,
			want: map[string]wantSpan{
				"POST /v1/embeddings": {kind: trace.SpanKindServer, attrs: map[string]any{"error.type": "*openai.DecodeError"}},
				"server.decode": {parent: "POST /v1/embeddings", status: codes.Error,
					desc:  "We could not parse the JSON body of your request: unexpected end of JSON input.",
					attrs: map[string]any{"error.type": "*openai.DecodeError"}},
			},
		},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := tracedStack(t, &spanEngine{})
			tp, tid, remote := incomingTrace(byte(10 + i))
			w := do(h, "POST", "/v1/embeddings", tt.body, map[string]string{"traceparent": tp})
			if w.Code != tt.status {
				t.Fatalf("status %d, want %d: %s", w.Code, tt.status, w.Body)
			}
			spans := recorder().Trace(tid)
			// The socket path is random; name it SOCKET in the expectations.
			if c := spans["worker.call"]; len(c) == 1 {
				for name, ws := range tt.want {
					ws.desc = strings.ReplaceAll(ws.desc, "SOCKET", socketOf(c[0].Status().Description))
					tt.want[name] = ws
				}
			}
			checkTree(t, spans, remote, tt.want)
		})
	}
}

// socketOf extracts the socket path from "worker at PATH answered ...".
func socketOf(msg string) string {
	rest, ok := strings.CutPrefix(msg, "worker at ")
	if !ok {
		return ""
	}
	path, _, _ := strings.Cut(rest, " ")
	return path
}

func TestMetricsMoveWithRequests(t *testing.T) {
	h := tracedStack(t, &spanEngine{})
	type point struct {
		name  string
		attrs []attribute.KeyValue
	}
	// The model label is the served model's id ("m"), on every series of a
	// request whose model is known.
	model := attribute.String("model", "m")
	route := func(status string) []attribute.KeyValue {
		return []attribute.KeyValue{attribute.String("route", "/v1/embeddings"), attribute.String("code", status), model}
	}
	errorAttrs := func(route, status, code string) []attribute.KeyValue {
		return []attribute.KeyValue{attribute.String("route", route), attribute.String("code", status), attribute.String("error_code", code)}
	}
	stageAttr := func(s string) []attribute.KeyValue { return []attribute.KeyValue{attribute.String("stage", s), model} }
	warm := []attribute.KeyValue{attribute.String("route", "warm"), model}
	eph := []attribute.KeyValue{attribute.String("route", "ephemeral"), model}
	// The worker clients here were not started by a supervisor, so their calls
	// count under route "other".
	other := []attribute.KeyValue{attribute.String("route", "other"), model}
	points := []point{
		{"embed_stack.http.requests", route("200")},
		{"embed_stack.http.requests", route("400")},
		{"embed_stack.http.request.duration", route("200")},
		{"embed_stack.tokens", warm},
		{"embed_stack.tokens", eph},
		{"embed_stack.request.inputs", []attribute.KeyValue{model}},
		{"embed_stack.request.tokens", []attribute.KeyValue{model}},
		{"embed_stack.batch.sequences", other},
		{"embed_stack.batch.tokens", other},
		{"embed_stack.backend.inflight", warm},
		// The body is decoded before the model is known: no model label.
		{"embed_stack.stage.duration", []attribute.KeyValue{attribute.String("stage", "server.decode")}},
		{"embed_stack.stage.duration", stageAttr("routing.tokenize")},
		{"embed_stack.stage.duration", stageAttr("worker.call")},
		// The worker's side has its own context: the label does not cross the
		// worker protocol.
		{"embed_stack.stage.duration", []attribute.KeyValue{attribute.String("stage", "worker.embed")}},
		{"embed_stack.stage.duration", stageAttr("server.encode")},
		{"embed_stack.http.errors", append(errorAttrs("/v1/embeddings", "400", "empty_input"), model)},
		{"embed_stack.http.errors", errorAttrs("/v1/embeddings", "400", "none")},
		{"embed_stack.http.errors", errorAttrs("unmatched", "404", "not_found")},
		{"embed_stack.http.errors", errorAttrs("unmatched", "405", "method_not_allowed")},
		{"embed_stack.http.requests", []attribute.KeyValue{attribute.String("route", "/v1/embeddings"), attribute.String("code", "400")}},
	}
	read := func() [][2]float64 {
		out := make([][2]float64, len(points))
		for i, p := range points {
			out[i][0], out[i][1] = recorder().Metric(t, p.name, p.attrs...)
		}
		return out
	}
	before := read()
	long := strings.Repeat("z", 20) // 21 tokens: ephemeral
	for _, body := range []string{`{"input":["abc","defg","` + long + `"]}`, `{"input":["hi"]}`} {
		if w := do(h, "POST", "/v1/embeddings", body, nil); w.Code != 200 {
			t.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
	if w := do(h, "POST", "/v1/embeddings", `{"input":[""]}`, nil); w.Code != 400 {
		t.Fatalf("empty input: status %d, want 400", w.Code)
	}
	for _, r := range []struct {
		method, path, body string
		status             int
	}{{"POST", "/v1/embeddings", `{"input":`, 400}, {"GET", "/nowhere", "", 404}, {"GET", "/v1/embeddings", "", 405}} {
		if w := do(h, r.method, r.path, r.body, nil); w.Code != r.status {
			t.Fatalf("%s %s: status %d, want %d", r.method, r.path, w.Code, r.status)
		}
	}
	after := read()
	// Request 1: 4+5 warm tokens in one call of 2, 21 ephemeral in a call of its own;
	// request 2: 3 warm tokens in a call of 1; request 3 is refused in routing.wrap;
	// then a body that is not JSON (server.decode fails), an unknown URL and a
	// known one with the wrong method.
	want := [][2]float64{
		{2, 0}, {1, 0}, {2, -1},
		{12, 0}, {21, 0},
		{2, 4}, {2, 33},
		{3, 4}, {3, 33},
		{0, 0},
		{4, -1}, {2, -1}, {3, -1}, {3, -1}, {2, -1},
		{1, 0}, {1, 0}, {1, 0}, {1, 0},
		{1, 0},
	}
	for i, p := range points {
		d := [2]float64{after[i][0] - before[i][0], after[i][1] - before[i][1]}
		if d[0] != want[i][0] || (want[i][1] >= 0 && d[1] != want[i][1]) {
			t.Errorf("%s%v moved by %v, want %v (second: histogram sum; -1: any)", p.name, p.attrs, d, want[i])
		}
	}
}

// BenchmarkEmbeddingsRequest measures one short POST /v1/embeddings through the
// real server, router, worker-protocol client and worker handler (fake engine), so
// that the instrumentation is most of what varies. EMBED_STACK_BENCH_TELEMETRY picks
// the providers, installed before the first request as the command does:
//
//	(unset)  none: every span and instrument is the API's no-op
//	metrics  a meter provider (serve's default, --metrics): tracing off
//	tracing  metrics, and every span recorded and exported by a batch processor
//	         to an exporter that drops them
//
// Run each in its own process (go test -run '^$' -bench EmbeddingsRequest), since
// the globals can be installed only once.
func BenchmarkEmbeddingsRequest(b *testing.B) {
	switch mode := testenv.Get("EMBED_STACK_BENCH_TELEMETRY"); mode {
	case "":
	case "metrics", "tracing":
		otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader())))
		otel.SetTextMapPropagator(propagation.TraceContext{})
		if mode == "tracing" {
			tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
			b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			otel.SetTracerProvider(tp)
		}
	default:
		b.Fatalf("EMBED_STACK_BENCH_TELEMETRY=%q: want metrics, tracing or nothing", mode)
	}
	h := newStack(b, &spanEngine{}, testenv.Get("EMBED_STACK_BENCH_TELEMETRY") == "tracing")
	body := `{"input":["The quick brown fox jumps over the lazy dog"]}`
	b.ReportAllocs()
	for b.Loop() {
		if w := do(h, "POST", "/v1/embeddings", body, nil); w.Code != 200 {
			b.Fatalf("status %d", w.Code)
		}
	}
}

// TestTracingOffCarriesCallerTrace: with Config.Tracing off the server makes no
// span of its own, but a caller's traceparent still reaches the request's log line
// and the worker.
func TestTracingOffCarriesCallerTrace(t *testing.T) {
	recorder()
	engine := &spanEngine{}
	c := serveWorker(t, engine)
	var logs strings.Builder
	s := &Server{
		Config: Config{ModelName: "m", Logger: slog.New(telemetry.NewLogHandler(slog.NewJSONHandler(&logs, nil)))},
		Embedder: &routing.Router{
			Config:    routing.Config{Dim: fakeDim, MinDimensions: 2},
			Tokenizer: byteTokenizer{},
			Warm:      c,
		},
	}
	h := s.Handler()
	tp, tid, _ := incomingTrace(40)
	if w := do(h, "POST", "/v1/embeddings", `{"input":["hello"]}`, map[string]string{"traceparent": tp}); w.Code != 200 {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	if w := do(h, "POST", "/v1/embeddings", `{"input":["no trace"]}`, nil); w.Code != 200 {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	for name := range recorder().Trace(tid) {
		if name == "POST /v1/embeddings" {
			t.Errorf("a server span was made with Config.Tracing off")
		}
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d log lines, want one per request:\n%s", len(lines), logs.String())
	}
	if !strings.Contains(lines[0], `"trace_id":"`+tid.String()+`"`) || !strings.Contains(lines[0], `"route":"/v1/embeddings"`) {
		t.Errorf("log line of the traced request lacks its trace id or route: %s", lines[0])
	}
	if strings.Contains(lines[1], "trace_id") {
		t.Errorf("log line of a request without traceparent has a trace id: %s", lines[1])
	}
	engine.mu.Lock()
	defer engine.mu.Unlock()
	// (The second request's stages still record here, under the test's provider, so
	// it has a trace of its own; only the caller's must not leak into it.)
	if len(engine.spans) != 2 || engine.spans[0].TraceID() != tid || engine.spans[1].TraceID() == tid {
		t.Errorf("the worker saw trace contexts %v; want the caller's trace %s, then another", engine.spans, tid)
	}
}

// TestTokenizeMakesNoStrayTraces: POST /tokenize runs the routing stages through
// Prepare, which has no context; their spans must not start traces of their own.
func TestTokenizeMakesNoStrayTraces(t *testing.T) {
	h := tracedStack(t, &spanEngine{})
	count := func() (n int) {
		for _, s := range recorder().Spans.Ended() {
			if strings.HasPrefix(s.Name(), "routing.") {
				n++
			}
		}
		return n
	}
	before := count()
	tp, tid, remote := incomingTrace(50)
	if w := do(h, "POST", "/tokenize", `{"texts":["hello","world"]}`, map[string]string{"traceparent": tp}); w.Code != 200 {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	if n := count() - before; n != 0 {
		t.Errorf("%d routing spans recorded for POST /tokenize, want none", n)
	}
	checkTree(t, recorder().Trace(tid), remote, map[string]wantSpan{
		"POST /tokenize": {kind: trace.SpanKindServer, attrs: map[string]any{"http.route": "/tokenize", "embed_stack.tokens": 12}},
	})
}
