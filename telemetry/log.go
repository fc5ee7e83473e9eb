package telemetry

import (
	"context"
	"log/slog"
	"os"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// NewLogHandler wraps h so that every record logged with a context holding a span
// (Logger.InfoContext, Logger.Log) carries trace_id and span_id: a request's log
// line then leads to its trace. Records without one pass through unchanged. Under
// WithGroup the ids land in the group, as any attribute added at Handle time does.
func NewLogHandler(h slog.Handler) slog.Handler { return logHandler{h} }

type logHandler struct{ slog.Handler }

func (h logHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return logHandler{h.Handler.WithAttrs(attrs)}
}

func (h logHandler) WithGroup(name string) slog.Handler {
	return logHandler{h.Handler.WithGroup(name)}
}

// ContextFromEnv returns ctx carrying the trace context that the parent process put
// in this process's environment (TRACEPARENT, TRACESTATE, BAGGAGE: the
// OpenTelemetry convention for environment carriers). A worker uses it to make its
// model-load span a child of the span that spawned it. Without those variables, or
// with no propagator installed, ctx comes back unchanged.
func ContextFromEnv(ctx context.Context) context.Context {
	carrier := propagation.MapCarrier{}
	for _, key := range otel.GetTextMapPropagator().Fields() {
		if v := os.Getenv(strings.ToUpper(key)); v != "" {
			carrier[key] = v
		}
	}
	if len(carrier) == 0 {
		return ctx
	}
	return otel.GetTextMapPropagator().Extract(ctx, carrier)
}
