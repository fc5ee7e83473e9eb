package telemetry

import (
	"context"
	"fmt"
	"io"
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

// NewLogger builds a process's logger from its --log-format (text or json) and
// --log-level, its records carrying trace ids (NewLogHandler).
func NewLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: use debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch strings.ToLower(format) {
	case "text":
		return slog.New(NewLogHandler(slog.NewTextHandler(w, opts))), nil
	case "json":
		opts.ReplaceAttr = durationString
		return slog.New(NewLogHandler(slog.NewJSONHandler(w, opts))), nil
	}
	return nil, fmt.Errorf("--log-format %q: use text or json", format)
}

// durationString writes a duration in JSON logs as the text format writes it, a Go
// duration string ("grace":"30s"), instead of slog's JSON default, an integer of
// nanoseconds ("grace":30000000000) that says neither its unit nor its size at a
// glance.
func durationString(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}
