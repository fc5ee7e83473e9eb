package stage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/embed-stack/embed-stack/telemetry/telemetrytest"
)

// rec holds the recording providers, installed by TestMain before any test runs: the
// package's histogram was created at init through the global meter, which forwards
// to the first provider installed.
var rec *telemetrytest.Recorder

func TestMain(m *testing.M) {
	rec = telemetrytest.Install()
	os.Exit(m.Run())
}

// stageCount returns the number of observations of stage name without a model
// label, and their sum.
func stageCount(t *testing.T, name string) (uint64, float64) {
	t.Helper()
	return modelStageCount(t, name, "")
}

// modelStageCount returns the number of observations of stage name with the
// model label model ("" for none), and their sum.
func modelStageCount(t *testing.T, name, model string) (uint64, float64) {
	t.Helper()
	rm := rec.Collect(t)
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != MetricName {
				continue
			}
			if m.Unit != "s" {
				t.Errorf("unit %q, want s", m.Unit)
			}
			h := m.Data.(metricdata.Histogram[float64])
			for _, dp := range h.DataPoints {
				m, hasModel := dp.Attributes.Value(ModelKey)
				if hasModel && m.AsString() == "" {
					t.Errorf("stage %s: an empty model label; leave it out", name)
				}
				if v, _ := dp.Attributes.Value("stage"); v.AsString() == name && m.AsString() == model {
					if len(dp.Bounds) != len(Buckets) {
						t.Errorf("%d bucket bounds, want %d", len(dp.Bounds), len(Buckets))
					}
					return dp.Count, dp.Sum
				}
			}
		}
	}
	return 0, 0
}

func TestStageSpanAndHistogram(t *testing.T) {
	ctx, root := rec.Tracer.Start(context.Background(), "root")
	before, beforeSum := stageCount(t, "test.sleep")

	sctx, st := Start(ctx, rec.Tracer, "test.sleep", trace.WithAttributes(attribute.Int("n", 3)))
	if !st.Recording() {
		t.Fatal("stage span does not record under an SDK provider")
	}
	if got := trace.SpanFromContext(sctx).SpanContext().SpanID(); got != st.Span().SpanContext().SpanID() {
		t.Errorf("the context does not carry the stage's span")
	}
	time.Sleep(20 * time.Millisecond)
	st.End(nil)
	root.End()

	after, afterSum := stageCount(t, "test.sleep")
	if after-before != 1 {
		t.Errorf("histogram count grew by %d, want 1", after-before)
	}
	if d := afterSum - beforeSum; d < 0.020 || d > 1 {
		t.Errorf("recorded %.4fs for a 20ms sleep", d)
	}
	var got sdktrace.ReadOnlySpan
	for _, s := range rec.Spans.Ended() {
		if s.Name() == "test.sleep" && s.SpanContext().TraceID() == root.SpanContext().TraceID() {
			got = s
		}
	}
	if got == nil {
		t.Fatal("no span test.sleep ended")
	}
	if got.Parent().SpanID() != root.SpanContext().SpanID() {
		t.Errorf("parent %s, want the root %s", got.Parent().SpanID(), root.SpanContext().SpanID())
	}
	if got.Status().Code != codes.Unset {
		t.Errorf("status %v, want unset", got.Status())
	}
	if d := got.EndTime().Sub(got.StartTime()); d < 20*time.Millisecond {
		t.Errorf("span lasted %s, want ≥ 20ms", d)
	}
}

// TestStageModelLabel: a stage started under WithModel carries the model label,
// one started without none, and the stages started inside it inherit it.
func TestStageModelLabel(t *testing.T) {
	ctx := WithModel(context.Background(), "small")
	if got := Model(ctx); got != "small" {
		t.Fatalf("Model = %q, want small", got)
	}
	if got := Model(context.Background()); got != "" {
		t.Fatalf("Model of a bare context = %q, want empty", got)
	}
	inner, outer := Start(ctx, rec.Tracer, "test.model.outer")
	_, st := Start(inner, rec.Tracer, "test.model.inner")
	st.End(nil)
	outer.End(nil)
	_, st = Start(WithModel(context.Background(), "big"), rec.Tracer, "test.model.inner")
	st.End(nil)
	_, st = Start(context.Background(), rec.Tracer, "test.model.inner")
	st.End(nil)
	for _, c := range []struct {
		stage, model string
		want         uint64
	}{
		{"test.model.outer", "small", 1},
		{"test.model.outer", "", 0},
		{"test.model.inner", "small", 1},
		{"test.model.inner", "big", 1},
		{"test.model.inner", "", 1},
	} {
		if n, _ := modelStageCount(t, c.stage, c.model); n != c.want {
			t.Errorf("%s{model=%q}: %d observations, want %d", c.stage, c.model, n, c.want)
		}
	}
}

type customErr struct{}

func (customErr) Error() string { return "custom" }

func TestStageError(t *testing.T) {
	long := strings.Repeat("é", 400) // 800 bytes: cut at a rune boundary
	tests := []struct {
		name     string
		err      error
		wantType string
		wantMsg  string
	}{
		{"plain", errors.New("boom"), "_OTHER", "boom"},
		{"typed, wrapped", fmt.Errorf("input 3: %w", customErr{}), "stage.customErr", "input 3: custom"},
		{"pointer type", fmt.Errorf("x: %w", &customPtrErr{}), "*stage.customPtrErr", "x: ptr"},
		{"canceled", fmt.Errorf("worker: %w", context.Canceled), "canceled", "worker: context canceled"},
		{"deadline", context.DeadlineExceeded, "timeout", "context deadline exceeded"},
		{"long message", errors.New(long), "_OTHER", long[:maxStatus] + "..."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, st := Start(context.Background(), rec.Tracer, "test.fail."+tt.name)
			st.End(tt.err)
			span := rec.Spans.Ended()[len(rec.Spans.Ended())-1]
			if span.Name() != "test.fail."+tt.name {
				t.Fatalf("last span %q", span.Name())
			}
			if span.Status().Code != codes.Error || span.Status().Description != tt.wantMsg {
				t.Errorf("status %v %q, want Error %q", span.Status().Code, span.Status().Description, tt.wantMsg)
			}
			var typ string
			for _, kv := range span.Attributes() {
				if kv.Key == "error.type" {
					typ = kv.Value.AsString()
				}
			}
			if typ != tt.wantType {
				t.Errorf("error.type %q, want %q", typ, tt.wantType)
			}
		})
	}
}

type customPtrErr struct{}

func (*customPtrErr) Error() string { return "ptr" }

func TestErrorTypeNil(t *testing.T) {
	if got := ErrorType(nil); got != "" {
		t.Errorf("ErrorType(nil) = %q", got)
	}
}
