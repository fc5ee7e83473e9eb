// Package telemetrytest records what the code under test sends to OpenTelemetry, for
// the unit tests of every package that makes spans or metrics (telemetry/stage,
// routing, backends, backends/llama, server): the span recorder and manual metric
// reader that otelgin's own tests use (tracetest.NewSpanRecorder), installed once as
// the globals, and the few lookups those tests make.
//
// Why once per test binary: instruments created at package init (every package's
// meter instruments) forward to the first meter provider installed, so the provider
// cannot be swapped per test. Tests tell their spans apart by trace id and their
// metrics by deltas, or by model names of their own.
//
// It refuses to know any span or metric name: the tests state those.
package telemetrytest

import (
	"context"
	"sync"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// Recorder is what Install installed. Safe for concurrent use.
type Recorder struct {
	// Spans holds every ended span of the test binary.
	Spans *tracetest.SpanRecorder
	// Metrics is the manual reader behind the global meter provider.
	Metrics *sdkmetric.ManualReader
	// Tracer starts the tests' own spans (a request's root, a caller's span).
	Tracer trace.Tracer
}

var (
	installOnce sync.Once
	installed   *Recorder
)

// Install installs recording providers and the W3C trace-context propagator as the
// OpenTelemetry globals, the first time it is called in a test binary, and returns
// them; later calls return the same Recorder. readers (a Prometheus reader behind a
// /metrics handler, say) join the meter provider of the first call and are ignored
// after it.
func Install(readers ...sdkmetric.Reader) *Recorder {
	installOnce.Do(func() {
		r := &Recorder{Spans: tracetest.NewSpanRecorder(), Metrics: sdkmetric.NewManualReader()}
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r.Spans))
		opts := []sdkmetric.Option{sdkmetric.WithReader(r.Metrics)}
		for _, rd := range readers {
			opts = append(opts, sdkmetric.WithReader(rd))
		}
		otel.SetTracerProvider(tp)
		otel.SetMeterProvider(sdkmetric.NewMeterProvider(opts...))
		otel.SetTextMapPropagator(propagation.TraceContext{})
		r.Tracer = tp.Tracer("telemetrytest")
		installed = r
	})
	return installed
}

// Trace returns the ended spans of one trace, by name; a name that occurs more than
// once maps to all of them, in the order they ended.
func (r *Recorder) Trace(id trace.TraceID) map[string][]sdktrace.ReadOnlySpan {
	out := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range r.Spans.Ended() {
		if s.SpanContext().TraceID() == id {
			out[s.Name()] = append(out[s.Name()], s)
		}
	}
	return out
}

// Collect reads every metric now.
func (r *Recorder) Collect(t testing.TB) metricdata.ResourceMetrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Metrics.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	return rm
}

// Metric reads one data point of the metric name whose attributes are exactly attrs:
// a counter's or up-down counter's value (sum 0), or a histogram's count and sum. A
// point not recorded yet reads 0, 0; a metric of another kind fails the test.
func (r *Recorder) Metric(t testing.TB, name string, attrs ...attribute.KeyValue) (value, sum float64) {
	t.Helper()
	want := attribute.NewSet(attrs...)
	rm := r.Collect(t)
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					if dp.Attributes.Equals(&want) {
						return float64(dp.Value), 0
					}
				}
			case metricdata.Sum[float64]:
				for _, dp := range d.DataPoints {
					if dp.Attributes.Equals(&want) {
						return dp.Value, 0
					}
				}
			case metricdata.Histogram[int64]:
				for _, dp := range d.DataPoints {
					if dp.Attributes.Equals(&want) {
						return float64(dp.Count), float64(dp.Sum)
					}
				}
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					if dp.Attributes.Equals(&want) {
						return float64(dp.Count), dp.Sum
					}
				}
			default:
				t.Fatalf("metric %s has unexpected type %T", name, m.Data)
			}
		}
	}
	return 0, 0
}

// Attr returns the attribute key of span s.
func Attr(s sdktrace.ReadOnlySpan, key string) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}
