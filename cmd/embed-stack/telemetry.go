package main

import (
	"context"
	"log/slog"
	"os"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/embed-stack/embed-stack/backends"
	"github.com/embed-stack/embed-stack/internal/buildinfo"
	"github.com/embed-stack/embed-stack/served"
	"github.com/embed-stack/embed-stack/server"
	"github.com/embed-stack/embed-stack/telemetry"
	"github.com/embed-stack/embed-stack/telemetry/stage"
)

// startTelemetry sets up tracing and metrics from the OTEL_* environment for a
// process of the given role ("serve" or "worker"); prometheus builds the /metrics
// registry. The workers inherit serve's environment (see backends.WorkerSpec.Env),
// so they export through the same configuration. Defer its Stop.
func startTelemetry(role string, prometheus bool, logger *slog.Logger) (*telemetry.Telemetry, error) {
	return telemetry.Setup(context.Background(), telemetry.Config{Role: role, Version: buildinfo.Version, Prometheus: prometheus, Logger: logger})
}

// wireTelemetry connects serve's telemetry to the API and the workers: the request spans,
// GET /metrics, the worker gauges, and, when spans go to the console, the workers'
// output (where their spans are printed) to serve's stderr. The worker gauges are
// per model, labelled with its served name (issue 17), a single model's too; the
// device is the first model's warm worker's.
func wireTelemetry(p *telemetry.Telemetry, api *server.Server, models *served.Models) error {
	api.Config.Tracing = p.Tracing()
	if h := p.MetricsHandler(); h != nil {
		api.Metrics = h
	}
	warm := models.List[0].Warm
	device := func(ctx context.Context) (telemetry.DeviceMemory, bool) {
		// A scrape waits for the worker's answer at most this long.
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		d, ok := warm.Device(ctx)
		return telemetry.DeviceMemory{Name: d.Name, Backend: d.Backend, Used: d.MemoryUsed(), Total: d.MemoryTotal}, ok
	}
	if err := p.ObserveWorkers(telemetry.Workers{Models: models.WarmModels(), Device: device}); err != nil {
		return err
	}
	if p.Console() {
		for _, m := range models.List {
			if m.Run.Warm.Spec.Output == nil {
				m.Run.Warm.Spec.Output = os.Stderr
			}
			if m.Run.Long.Spec.Output == nil {
				m.Run.Long.Spec.Output = os.Stderr
			}
		}
	}
	return nil
}

// traceLoad makes a worker's model load the span worker.load. Its parent is the
// backends.spawn span of the process that started the worker, passed in the
// environment (TRACEPARENT), so a spawn's trace shows the load inside it.
func traceLoad(load func() (backends.Engine, backends.EngineInfo, error)) func() (backends.Engine, backends.EngineInfo, error) {
	return func() (backends.Engine, backends.EngineInfo, error) {
		ctx := telemetry.ContextFromEnv(context.Background())
		_, st := stage.Start(ctx, otel.Tracer("github.com/embed-stack/embed-stack/cmd/embed-stack"), "worker.load",
			trace.WithAttributes(attribute.Int("embed_stack.worker.pid", os.Getpid())))
		e, info, err := load()
		if err == nil && st.Recording() {
			st.SetAttributes(
				attribute.String("embed_stack.model", info.Model),
				attribute.Int("embed_stack.llama.n_embd", info.NEmbd),
				attribute.Int("embed_stack.llama.ctx", info.MaxTokens),
				attribute.Int("embed_stack.llama.batch", info.MaxBatchTokens))
		}
		st.End(err)
		return e, info, err
	}
}
