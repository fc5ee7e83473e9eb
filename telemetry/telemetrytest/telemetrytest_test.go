package telemetrytest

import (
	"context"
	"slices"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// TestInstall: the first Install's providers are the globals, later calls return the
// same Recorder, and the extra reader of the first call sees what the globals record.
func TestInstall(t *testing.T) {
	extra := sdkmetric.NewManualReader()
	r := Install(extra)
	if again := Install(sdkmetric.NewManualReader()); again != r {
		t.Fatal("a second Install returned another Recorder")
	}
	if _, ok := otel.GetTextMapPropagator().(propagation.TraceContext); !ok {
		t.Errorf("propagator %T, want propagation.TraceContext", otel.GetTextMapPropagator())
	}

	ctx, root := r.Tracer.Start(context.Background(), "root")
	_, child := otel.Tracer("other").Start(ctx, "child")
	child.SetAttributes(attribute.Int("n", 7), attribute.String("s", "x"))
	child.End()
	root.End()
	spans := r.Trace(root.SpanContext().TraceID())
	if len(spans) != 2 || len(spans["root"]) != 1 || len(spans["child"]) != 1 {
		t.Fatalf("trace %v, want one root and one child", spans)
	}
	if v, ok := Attr(spans["child"][0], "n"); !ok || v.AsInt64() != 7 {
		t.Errorf("Attr n = %v, %v; want 7", v, ok)
	}
	if _, ok := Attr(spans["child"][0], "missing"); ok {
		t.Error("Attr found a key the span does not have")
	}

	meter := otel.Meter("telemetrytest_test")
	counter, _ := meter.Int64Counter("test.counter")
	hist, _ := meter.Float64Histogram("test.hist")
	a := attribute.String("k", "a")
	counter.Add(context.Background(), 3, metric.WithAttributes(a))
	counter.Add(context.Background(), 4, metric.WithAttributes(a))
	counter.Add(context.Background(), 100) // no attributes: another point
	hist.Record(context.Background(), 0.5, metric.WithAttributes(a))
	hist.Record(context.Background(), 1.5, metric.WithAttributes(a))
	for _, tt := range []struct {
		name       string
		attrs      []attribute.KeyValue
		value, sum float64
	}{
		{"test.counter", []attribute.KeyValue{a}, 7, 0},
		{"test.counter", nil, 100, 0},
		{"test.counter", []attribute.KeyValue{attribute.String("k", "b")}, 0, 0},
		{"test.hist", []attribute.KeyValue{a}, 2, 2},
		{"test.absent", nil, 0, 0},
	} {
		if v, s := r.Metric(t, tt.name, tt.attrs...); v != tt.value || s != tt.sum {
			t.Errorf("Metric(%s, %v) = %v, %v; want %v, %v", tt.name, tt.attrs, v, s, tt.value, tt.sum)
		}
	}
	var fromExtra bool
	var rm metricdata.ResourceMetrics
	if err := extra.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			fromExtra = fromExtra || m.Name == "test.counter"
		}
	}
	if !fromExtra {
		t.Error("the extra reader of the first Install saw no test.counter")
	}
}

func TestSamples(t *testing.T) {
	s := ParseSamples(`# HELP a_total A.
# TYPE a_total counter
a_total{model="x",route="warm"} 3
a_total{route="warm"} 1

b_seconds_sum 0.25
`)
	if len(s) != 3 {
		t.Fatalf("%d sample lines, want 3: %v", len(s), s)
	}
	if !s.Require(t, `a_total{model="x",route="warm"} 3`, `b_seconds_sum 0.25`) {
		t.Error("Require reported a missing line")
	}
	if got := s.Matching(`route="warm"`); !slices.Equal(got, []string{`a_total{model="x",route="warm"} 3`, `a_total{route="warm"} 1`}) {
		t.Errorf("Matching = %q", got)
	}
	for series, want := range map[string]float64{`a_total{route="warm"}`: 1, `b_seconds_sum`: 0.25, `a_total`: -1, `c`: -1} {
		if got := s.Value(series); got != want {
			t.Errorf("Value(%s) = %v, want %v", series, got, want)
		}
	}
}
