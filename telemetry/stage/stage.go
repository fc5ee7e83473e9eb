// Package stage times the stages of a request. A stage is one span and one
// observation of the embed_stack_stage_duration_seconds histogram, labelled with the
// stage's name, so that a trace and the metrics describe the same intervals under
// the same names, and with the model of the request it works for (WithModel).
//
// It uses only the OpenTelemetry API: packages that start stages (server, routing,
// backends, backends/llama) pass their own tracer, and whatever provider the
// embed-stack command installs (package telemetry) receives the data. With no
// provider installed the span is a non-recording one and the histogram a no-op, so
// a stage costs a clock read and a few small allocations. It knows nothing of
// exporters, environment variables or HTTP.
package stage

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Scope is the instrumentation scope of the stage histogram.
const Scope = "github.com/embed-stack/embed-stack/telemetry/stage"

// MetricName is the OpenTelemetry name of the stage histogram; Prometheus shows it
// as embed_stack_stage_duration_seconds.
const MetricName = "embed_stack.stage.duration"

// Buckets are the stage histogram's upper bounds in seconds: from tens of
// microseconds (wrapping, normalisation) to the minutes a 32k-token input may take
// on a small CPU.
var Buckets = []float64{
	0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
	0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300,
}

// duration is created through the global meter provider, which forwards it to the
// provider the command installs later (or keeps it a no-op). The global meter does
// not validate at creation, so the error is always nil; problems surface through
// otel.Handle once a provider is installed.
var duration, _ = otel.Meter(Scope).Float64Histogram(MetricName,
	metric.WithUnit("s"),
	metric.WithDescription("Time spent in each stage of a request (the span of the same name)."),
	metric.WithExplicitBucketBoundaries(Buckets...))

// recordOpts caches the measurement options of each stage name and model:
// building an attribute set sorts and allocates, and so does a variadic argument
// list that is not an existing slice. The names are a small fixed set, the models
// those the server was started with.
var recordOpts sync.Map // stageModel → []metric.RecordOption

type stageModel struct{ name, model string }

func optsFor(name, model string) []metric.RecordOption {
	key := stageModel{name, model}
	if o, ok := recordOpts.Load(key); ok {
		return o.([]metric.RecordOption)
	}
	attrs := []attribute.KeyValue{attribute.String("stage", name)}
	if model != "" {
		attrs = append(attrs, ModelKey.String(model))
	}
	o := []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(attrs...))}
	recordOpts.Store(key, o)
	return o
}

// ModelKey is the model label of the request metrics (issue 17: several models
// per server): the served name of the model a request was resolved to, as GET
// /v1/models lists it, never the name the request gave (an alias, or any string at
// all), so that its values are bounded by the configured models.
const ModelKey = attribute.Key("model")

type modelKey struct{}

// WithModel returns ctx marked as work for the served model name: the stages
// started under it carry it as their histogram's model label. The server marks a
// request once it has resolved its model; work before that (decoding the body),
// and work of no request (a warm worker's own start), has no model label.
func WithModel(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, modelKey{}, name)
}

// Model returns the model name WithModel put in ctx, or "".
func Model(ctx context.Context) string {
	m, _ := ctx.Value(modelKey{}).(string)
	return m
}

// Stage is one running stage. The zero value is not usable; get one from Start.
// End must be called exactly once; the other methods may be called from any
// goroutine until then.
type Stage struct {
	name  string
	model string // Model of Start's ctx
	span  trace.Span
	start time.Time
}

// Start begins the stage name as a child of the span in ctx, returning the context
// for the work inside the stage.
func Start(ctx context.Context, tracer trace.Tracer, name string, opts ...trace.SpanStartOption) (context.Context, Stage) {
	model := Model(ctx)
	ctx, span := tracer.Start(ctx, name, opts...)
	return ctx, Stage{name: name, model: model, span: span, start: time.Now()}
}

// Recording reports whether the span records attributes. Callers check it before
// computing attributes that cost something, so that tracing off costs nothing.
func (s Stage) Recording() bool { return s.span.IsRecording() }

// SetAttributes adds attributes to the span.
func (s Stage) SetAttributes(kv ...attribute.KeyValue) { s.span.SetAttributes(kv...) }

// Model returns the model label of the stage: the model of Start's context.
func (s Stage) Model() string { return s.model }

// Span returns the stage's span.
func (s Stage) Span() trace.Span { return s.span }

// End ends the stage: it records its duration and ends the span. A non-nil err
// marks the span as failed with the error's message and an error.type attribute
// (see ErrorType); it is the stage's own outcome, so a stage that handled an error
// and went on passes nil.
func (s Stage) End(err error) {
	duration.Record(context.Background(), time.Since(s.start).Seconds(), optsFor(s.name, s.model)...)
	if err != nil {
		Fail(s.span, err)
	}
	s.span.End()
}

// maxStatus bounds a span's status description: an error may quote a worker's
// output, which belongs in the log, not in every exported span.
const maxStatus = 512

// Fail marks span as failed by err: status Error with err's message (shortened)
// and the attribute error.type.
func Fail(span trace.Span, err error) {
	if !span.IsRecording() {
		return
	}
	msg := err.Error()
	if len(msg) > maxStatus {
		cut := maxStatus
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		msg = msg[:cut] + "..."
	}
	span.SetStatus(codes.Error, msg)
	span.SetAttributes(attribute.String("error.type", ErrorType(err)))
}

// ErrorType names the kind of err with low cardinality, for the error.type
// attribute: "canceled" and "timeout" for a context's end, otherwise the Go type of
// the outermost error that is not a plain wrapper (fmt.Errorf's %w, errors.Join,
// errors.New), such as "*routing.InputError"; "_OTHER" when there is none.
func ErrorType(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	}
	for e := err; e != nil; e = errors.Unwrap(e) {
		switch t := fmt.Sprintf("%T", e); t {
		case "*fmt.wrapError", "*fmt.wrapErrors", "*errors.joinError", "*errors.errorString":
			continue
		default:
			return t
		}
	}
	return "_OTHER"
}
