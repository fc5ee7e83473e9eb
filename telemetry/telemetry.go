// Package telemetry sets up embed-stack's observability for one process: the
// OpenTelemetry SDK (traces, and optionally OTLP metrics) configured by the standard
// OTEL_* environment variables, the W3C trace-context propagator, the Prometheus
// registry behind GET /metrics, the worker gauges read from /proc, and a slog
// handler that stamps log records with the trace they belong to.
//
// It is the only package besides the embed-stack command that reads the
// environment. Everything else instruments itself through the global OpenTelemetry
// API (otel.Tracer, otel.Meter, package telemetry/stage), which stays a no-op until
// Setup installs providers; telemetry in turn knows nothing of requests, routing or
// workers beyond the numbers the command hands it.
//
// Tracing is off unless an exporter is configured: OTEL_TRACES_EXPORTER=otlp or
// console, or an OTLP endpoint (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set. This departs from the OpenTelemetry
// default (otlp to localhost) on purpose: a server nobody asked to trace must not
// pay for spans or try to reach a collector that is not there.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// DefaultServiceName is service.name when OTEL_SERVICE_NAME (or service.name in
// OTEL_RESOURCE_ATTRIBUTES) does not set one.
const DefaultServiceName = "embed-stack"

// RoleKey is the resource attribute telling the API server's spans from its
// workers' ("serve" or "worker"); all share one service.name.
const RoleKey = attribute.Key("embed_stack.role")

// Config says what one process sets up. Zero values mean the documented defaults.
type Config struct {
	// Role is the process's part, "serve" or "worker", recorded as the resource
	// attribute embed_stack.role.
	Role string
	// Version is service.version.
	Version string
	// Prometheus builds the registry MetricsHandler serves. Off in workers, which
	// have no HTTP port of their own.
	Prometheus bool
	// Console receives spans when OTEL_TRACES_EXPORTER names console; nil means
	// os.Stdout.
	Console io.Writer
	// Logger, when set, receives export failures (a collector that is down), which
	// are logged rather than fatal, and a debug line when tracing is on; Stop logs
	// a failed flush there too.
	Logger *slog.Logger
	// FlushTimeout bounds Stop's flush of what is buffered. 0 is the role's
	// budget: 2 s for a worker, whose exit is part of an ephemeral worker's
	// request's latency (and whose supervisor SIGKILLs it after its stop timeout),
	// 5 s otherwise, for a collector that is slow to answer.
	FlushTimeout time.Duration
}

// Flush budgets of Stop by role (Config.FlushTimeout).
const (
	serveFlushTimeout  = 5 * time.Second
	workerFlushTimeout = 2 * time.Second
)

// Telemetry holds one process's providers. Its methods are safe for concurrent use.
type Telemetry struct {
	tracing  bool
	console  bool
	tp       *sdktrace.TracerProvider // nil while tracing is off
	mp       *sdkmetric.MeterProvider // nil when no metric reader is configured
	registry *prometheus.Registry     // nil unless Config.Prometheus
	// flush and logger are Stop's budget and log (Config.FlushTimeout, Logger).
	flush  time.Duration
	logger *slog.Logger
}

// Setup reads the OTEL_* environment, builds the providers and installs them (and
// the propagator) as the OpenTelemetry globals. The W3C tracecontext and baggage
// propagators are installed even while tracing is off, so that a caller's trace id
// still reaches the log lines and the workers.
//
// It fails on a setting it cannot honour, naming the variable to change. Call
// Shutdown before the process exits so that buffered spans are sent.
func Setup(ctx context.Context, cfg Config) (*Telemetry, error) {
	env, err := readEnv(os.Getenv)
	if err != nil {
		return nil, err
	}
	t := &Telemetry{flush: cfg.FlushTimeout, logger: cfg.Logger}
	if t.flush == 0 {
		t.flush = serveFlushTimeout
		if cfg.Role == "worker" {
			t.flush = workerFlushTimeout
		}
	}
	if cfg.Logger != nil {
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
			cfg.Logger.Warn("telemetry", "error", err)
		}))
	}
	otel.SetTextMapPropagator(env.propagator)
	if env.sdkDisabled {
		return t, nil
	}
	res, err := newResource(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if len(env.traceExporters) > 0 {
		opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
		for _, name := range env.traceExporters {
			exp, err := newSpanExporter(ctx, name, env.traceProtocol, cfg.Console)
			if err != nil {
				return nil, err
			}
			// The batch processor reads OTEL_BSP_* (delay, queue and batch sizes);
			// the provider reads OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG.
			opts = append(opts, sdktrace.WithBatcher(exp))
			t.console = t.console || name == exporterConsole
		}
		t.tp = sdktrace.NewTracerProvider(opts...)
		t.tracing = true
		otel.SetTracerProvider(t.tp)
		if cfg.Logger != nil {
			cfg.Logger.Debug("tracing on", "role", cfg.Role)
		}
	}

	var readers []sdkmetric.Option
	if cfg.Prometheus {
		t.registry = prometheus.NewRegistry()
		t.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildInfoCollector())
		exp, err := NewPrometheusReader(t.registry)
		if err != nil {
			return nil, err
		}
		readers = append(readers, sdkmetric.WithReader(exp))
	}
	if env.metricsOTLP {
		exp, err := newMetricExporter(ctx, env.metricProtocol)
		if err != nil {
			return nil, err
		}
		// The periodic reader reads OTEL_METRIC_EXPORT_INTERVAL and _TIMEOUT.
		readers = append(readers, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp)))
	}
	if len(readers) > 0 {
		t.mp = sdkmetric.NewMeterProvider(append(readers, sdkmetric.WithResource(res))...)
		otel.SetMeterProvider(t.mp)
	}
	return t, nil
}

// NewPrometheusReader returns the metric reader behind GET /metrics: it registers
// a collector in reg that writes the meter provider's series under their
// Prometheus names (embed_stack.http.requests as embed_stack_http_requests_total),
// without scope labels or target_info. Setup uses it; tests of the packages that
// record metrics use it to read a scrape's exact lines.
func NewPrometheusReader(reg prometheus.Registerer) (sdkmetric.Reader, error) {
	exp, err := otelprom.New(
		otelprom.WithRegisterer(reg),
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes),
		// The scope and resource are the same for every series of a process;
		// as labels they would only lengthen each line.
		otelprom.WithoutScopeInfo(),
		otelprom.WithoutTargetInfo(),
	)
	if err != nil {
		return nil, fmt.Errorf("telemetry: the Prometheus exporter: %w", err)
	}
	return exp, nil
}

func newResource(ctx context.Context, cfg Config) (*resource.Resource, error) {
	attrs := []attribute.KeyValue{attribute.String("service.name", DefaultServiceName)}
	if cfg.Version != "" {
		attrs = append(attrs, attribute.String("service.version", cfg.Version))
	}
	if cfg.Role != "" {
		attrs = append(attrs, RoleKey.String(cfg.Role))
	}
	// Later options win: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override the
	// defaults above.
	res, err := resource.New(ctx,
		resource.WithAttributes(attrs...),
		resource.WithFromEnv(),
		resource.WithTelemetrySDK(),
		resource.WithProcessPID(),
		resource.WithHost(),
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("telemetry: resource (check OTEL_RESOURCE_ATTRIBUTES): %w", err)
	}
	return res, nil
}

func newSpanExporter(ctx context.Context, name, protocol string, console io.Writer) (sdktrace.SpanExporter, error) {
	switch name {
	case exporterConsole:
		if console == nil {
			console = os.Stdout
		}
		exp, err := stdouttrace.New(stdouttrace.WithWriter(console))
		if err != nil {
			return nil, fmt.Errorf("telemetry: the console span exporter: %w", err)
		}
		return exp, nil
	case exporterOTLP:
		// Endpoint, headers, timeout, compression and TLS come from the
		// OTEL_EXPORTER_OTLP_* variables, which the exporters read themselves.
		var (
			exp sdktrace.SpanExporter
			err error
		)
		if protocol == protocolGRPC {
			exp, err = otlptracegrpc.New(ctx)
		} else {
			exp, err = otlptracehttp.New(ctx)
		}
		if err != nil {
			return nil, fmt.Errorf("telemetry: the OTLP span exporter (%s): %w", protocol, err)
		}
		return exp, nil
	}
	return nil, fmt.Errorf("telemetry: unknown span exporter %q", name)
}

func newMetricExporter(ctx context.Context, protocol string) (sdkmetric.Exporter, error) {
	var (
		exp sdkmetric.Exporter
		err error
	)
	if protocol == protocolGRPC {
		exp, err = otlpmetricgrpc.New(ctx)
	} else {
		exp, err = otlpmetrichttp.New(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("telemetry: the OTLP metric exporter (%s): %w", protocol, err)
	}
	return exp, nil
}

// Tracing reports whether spans are exported.
func (t *Telemetry) Tracing() bool { return t.tracing }

// Console reports whether spans are printed (OTEL_TRACES_EXPORTER=console). The
// command then lets its workers' output through, since that is where their spans
// are printed.
func (t *Telemetry) Console() bool { return t.console }

// MetricsHandler serves the Prometheus registry in the text exposition format, or
// nil when Config.Prometheus was off.
func (t *Telemetry) MetricsHandler() http.Handler {
	if t.registry == nil {
		return nil
	}
	return promhttp.HandlerFor(t.registry, promhttp.HandlerOpts{})
}

// Stop is Shutdown within Config.FlushTimeout, logging a failure to Config.Logger:
// what a process defers once Setup has succeeded.
func (t *Telemetry) Stop() {
	ctx, cancel := context.WithTimeout(context.Background(), t.flush)
	defer cancel()
	if err := t.Shutdown(ctx); err != nil && t.logger != nil {
		t.logger.Warn("telemetry shutdown", "error", err)
	}
}

// Shutdown flushes buffered spans and metrics and stops the exporters. ctx bounds
// the flush: a collector that does not answer costs at most that long.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	var errs []error
	if t.tp != nil {
		if err := t.tp.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("telemetry: flushing spans: %w", err))
		}
	}
	if t.mp != nil {
		if err := t.mp.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("telemetry: flushing metrics: %w", err))
		}
	}
	return errors.Join(errs...)
}
