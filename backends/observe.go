package backends

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/embed-stack/embed-stack/telemetry/stage"
)

// scope is the instrumentation scope of the package's spans and metrics.
const scope = "github.com/embed-stack/embed-stack/backends"

var tracer = otel.Tracer(scope)

// Worker roles, as the role attribute and label say them.
const (
	roleWarm      = "warm"
	roleEphemeral = "ephemeral"
)

// Span attributes.
const (
	attrPID       = attribute.Key("embed_stack.worker.pid")
	attrRole      = attribute.Key("embed_stack.worker.role")
	attrCtx       = attribute.Key("embed_stack.worker.ctx")
	attrSequences = attribute.Key("embed_stack.batch.sequences")
	attrTokens    = attribute.Key("embed_stack.batch.tokens")
)

// The global meter forwards to the provider the command installs and does not
// validate at creation, so these errors are always nil.
var (
	meter          = otel.Meter(scope)
	spawnsTotal, _ = meter.Int64Counter("embed_stack.worker.spawns",
		metric.WithDescription("Worker processes started, by role, outcome (ready, or failed before it was ready) and model."))
	spawnDuration, _ = meter.Float64Histogram("embed_stack.worker.spawn.duration",
		metric.WithUnit("s"),
		metric.WithDescription("Time from starting a worker process to its first ready answer (model load included), by role and model."),
		metric.WithExplicitBucketBoundaries(stage.Buckets...))
	batchSequences, _ = meter.Int64Histogram("embed_stack.batch.sequences",
		metric.WithDescription("Sequences per call to a worker, by route (the worker's role) and model."),
		metric.WithExplicitBucketBoundaries(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048))
	batchTokens, _ = meter.Int64Histogram("embed_stack.batch.tokens",
		metric.WithDescription("Tokens per call to a worker, by route (the worker's role) and model."),
		metric.WithExplicitBucketBoundaries(16, 64, 256, 1024, 2048, 4096, 8192, 16384, 32768))
)

// callOpts caches the measurement options of a call by the worker's role and the
// model of the request (stage.Model of its context; "" for none): an attribute
// set sorts and allocates. The label is route, as on routing's metrics, since the
// role is the route an input took; a client no supervisor started says "other".
var callOpts sync.Map // roleModel → []metric.RecordOption

type roleModel struct{ role, model string }

func callOptsFor(role, model string) []metric.RecordOption {
	key := roleModel{role, model}
	if o, ok := callOpts.Load(key); ok {
		return o.([]metric.RecordOption)
	}
	if role == "" {
		role = "other"
	}
	o := []metric.RecordOption{metric.WithAttributeSet(withModel(model, attribute.String("route", role)))}
	callOpts.Store(key, o)
	return o
}

// withModel is the attribute set of kv and, when model is not "", the model label.
func withModel(model string, kv ...attribute.KeyValue) attribute.Set {
	if model != "" {
		kv = append(kv, stage.ModelKey.String(model))
	}
	return attribute.NewSet(kv...)
}

// startSpawn begins the stage backends.spawn: starting a worker process and
// waiting until it has loaded its model. The context it returns goes to startProc,
// which hands its trace context to the worker in the environment, so the worker's
// own model-load span joins the trace.
func startSpawn(ctx context.Context, role string, nCtx int) (context.Context, stage.Stage) {
	ctx, st := stage.Start(ctx, tracer, "backends.spawn")
	if st.Recording() {
		st.SetAttributes(attrRole.String(role))
		if nCtx > 0 {
			st.SetAttributes(attrCtx.Int(nCtx))
		}
	}
	return ctx, st
}

// endSpawn ends the stage backends.spawn; pid is 0 when the process never started.
func endSpawn(st stage.Stage, role string, pid int, started time.Time, err error) {
	outcome := "ready"
	if err != nil {
		outcome = "failed"
	}
	ctx := context.Background()
	model := st.Model()
	spawnsTotal.Add(ctx, 1, metric.WithAttributeSet(withModel(model, attribute.String("role", role), attribute.String("outcome", outcome))))
	if err == nil {
		spawnDuration.Record(ctx, time.Since(started).Seconds(), metric.WithAttributeSet(withModel(model, attribute.String("role", role))))
	}
	if pid > 0 {
		st.SetAttributes(attrPID.Int(pid))
	}
	st.End(err)
}

// startEphemeral begins the stage backends.ephemeral: one long sequence on a
// worker of its own, from spawn to stop. Ephemeral.Embed adds the worker's role
// and pid once it has started.
func startEphemeral(ctx context.Context, tokens, nCtx int) (context.Context, stage.Stage) {
	ctx, st := stage.Start(ctx, tracer, "backends.ephemeral")
	if st.Recording() {
		st.SetAttributes(attrTokens.Int(tokens), attrCtx.Int(nCtx))
	}
	return ctx, st
}

// traceEnv returns ctx's trace context as environment entries (TRACEPARENT and
// the like: the OpenTelemetry convention for environment carriers) for a worker
// process, or nothing when ctx holds no span or no propagator is installed.
func traceEnv(ctx context.Context) []string {
	carrier := propagation.MapCarrier{}
	otel.GetTextMapPropagator().Inject(ctx, carrier)
	env := make([]string, 0, len(carrier))
	for k, v := range carrier {
		env = append(env, strings.ToUpper(k)+"="+v)
	}
	return env
}

// startCall begins the stage worker.call: one request of the worker protocol, as
// an OpenTelemetry client span; and records the call's size.
func (c *Client) startCall(ctx context.Context, seqs [][]int32) (context.Context, stage.Stage) {
	tokens := 0
	for _, s := range seqs {
		tokens += len(s)
	}
	opts := callOptsFor(c.role, stage.Model(ctx))
	batchSequences.Record(ctx, int64(len(seqs)), opts...)
	batchTokens.Record(ctx, int64(tokens), opts...)
	ctx, st := stage.Start(ctx, tracer, "worker.call", trace.WithSpanKind(trace.SpanKindClient))
	if st.Recording() {
		st.SetAttributes(attrSequences.Int(len(seqs)), attrTokens.Int(tokens))
		if c.pid > 0 {
			st.SetAttributes(attrPID.Int(c.pid), attrRole.String(c.role))
		}
	}
	return ctx, st
}

// injectTrace puts ctx's trace context on a worker request: the W3C traceparent of
// the span in ctx, or else one set with ContextWithTraceparent.
func injectTrace(ctx context.Context, h http.Header) {
	otel.GetTextMapPropagator().Inject(ctx, propagation.HeaderCarrier(h))
	if h.Get("traceparent") == "" {
		if tp := TraceparentFromContext(ctx); tp != "" {
			h.Set("traceparent", tp)
		}
	}
}

// traceEmbed serves POST /embed as the worker-side server span worker.embed, a
// child of the caller's span when the request carries a traceparent. The engine's
// spans are its children.
func (h *workerHandler) traceEmbed(w http.ResponseWriter, r *http.Request) {
	ctx := otel.GetTextMapPropagator().Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	ctx, st := stage.Start(ctx, tracer, "worker.embed", trace.WithSpanKind(trace.SpanKindServer))
	if !st.Recording() {
		st.End(nil)
		if trace.SpanContextFromContext(ctx).IsValid() {
			r = r.WithContext(ctx) // the caller's trace context, for the engine
		}
		h.embed(w, r)
		return
	}
	st.SetAttributes(attrPID.Int(h.pid))
	rec := &statusRecorder{ResponseWriter: w}
	h.embed(rec, r.WithContext(ctx))
	st.SetAttributes(attribute.Int("http.response.status_code", rec.status))
	st.End(rec.err())
}

// annotateEmbed puts the size of a decoded /embed request on the worker.embed span.
func annotateEmbed(ctx context.Context, seqs [][]int32) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	tokens := 0
	for _, s := range seqs {
		tokens += len(s)
	}
	span.SetAttributes(attrSequences.Int(len(seqs)), attrTokens.Int(tokens))
}

// statusRecorder remembers the status of an answer and, for an error, its body,
// whose message the span carries.
type statusRecorder struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer // kept only for status >= 400
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	if s.status >= 400 && s.body.Len() < maxErrorBody {
		s.body.Write(b)
	}
	return s.ResponseWriter.Write(b)
}

// workerError is an error answer of the worker, for the span status.
type workerError struct {
	Status  int
	Message string
}

func (e *workerError) Error() string { return e.Message }

// err returns the answer's error, or nil for a success.
func (s *statusRecorder) err() error {
	if s.status < 400 {
		return nil
	}
	var er errorResponse
	msg := strings.TrimSpace(s.body.String())
	if json.Unmarshal(s.body.Bytes(), &er) == nil && er.Error != "" {
		msg = er.Error
	}
	return &workerError{Status: s.status, Message: msg}
}
